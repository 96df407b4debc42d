#!/usr/bin/env python
"""What one GRPO training step of a real model costs on this machine: seconds by phase and peak memory (issue 40).

    make qwen                                             # the Qwen2.5-Coder parts (once)
    python scripts/step_costs.py --plan                   # the grid and validate's memory estimate per cell
    python scripts/step_costs.py --run --commit           # run every cell not yet in results/step-costs/cells.json
    python scripts/step_costs.py --run --only qwen05b-full/k4/t32   # one cell (KEY as --plan lists it)
    python scripts/step_costs.py --reestimate             # the current estimate of every measured cell, as it ran
    python scripts/step_costs.py --report                 # results/step-costs.md from the cell records

The grid: Qwen2.5-Coder-0.5B-Instruct fully fine-tuned, Qwen2.5-Coder-0.5B and -1.5B as LoRA adapters (rank 16), at
8 prompts x 4 and x 8 samples and 32, 128 and 256 new tokens. Each cell is one ``corl-bench run`` in a fresh process:
one agent, the TTRL method (a Co-RL step of two agents costs about the sum of its two agents' steps; the local backend
runs them one after the other), GSM8K training prompts, the hf profile's defaults for everything not named here (its
memory fit chooses micro_batch and logit_chunk, recorded per cell), 2 steps, and a 1-problem, 8-token evaluation that
is not counted. The step's phases are the run's own ``time/*`` metrics (rollout = generation, forward = the
log-probs of the sampled tokens, reward, update = backward and optimizer); the table shows the second step (the first
also allocates AdamW's state and is recorded too). Completions stop at EOS, so the mean completion length is
recorded beside the cap. Peak memory is the run process's ``VmHWM`` (peak resident set: weights, AdamW state,
activations, the loaded model's copies, Python and torch), compared with the estimate ``corl-bench validate`` prints
for the same config. A cell whose estimate exceeds this machine's memory is refused by the run in one line, which is
recorded. Timings are only comparable within one machine and load: the CPU, threads and load average are recorded;
a cell record's ``note`` (written by hand, e.g. "other jobs shared the cores mid-run", which the load average at the
cell's start and end does not show) is listed under the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "step-costs"
PAGE = REPO / "results" / "step-costs.md"
MODELS = {  # key: (model entry, LoRA rank or 0 = full fine-tuning)
    "qwen05b-full": ("qwen2.5-coder-0.5b", 0),
    "qwen05b-lora": ("qwen2.5-coder-0.5b", 16),
    "qwen15b-lora": ("qwen2.5-coder-1.5b", 16),
}
SAMPLES = (4, 8)
TOKENS = (32, 128, 256)
PROMPTS = 8
PHASES = ("rollout", "forward", "reward", "update")


def cells() -> list[str]:
    return [f"{m}/k{k}/t{t}" for m in MODELS for k in SAMPLES for t in TOKENS]


LEAN = "+lean"
"""A cell KEY ending in ``+lean`` runs with a lean host allocator: ``memory.keep_host_memory=false`` and glibc's mmap
threshold fixed at 128 KiB (``MALLOC_MMAP_THRESHOLD_``), so every large tensor is returned to the system when it
dies and the process's peak is the peak of its live memory; the plain cell runs the default (freed memory kept in
the heap for reuse, :mod:`corl_bench.hostmem`), whose peak also holds what the heap kept."""
LEAN_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _parse(key: str) -> tuple[str, int, int, int]:
    try:
        m, k, t = key.removesuffix(LEAN).split("/")
        if m not in MODELS:
            raise ValueError(m)
        return MODELS[m][0], MODELS[m][1], int(k[1:]), int(t[1:])
    except ValueError:
        raise SystemExit(f"unknown cell {key!r}; --plan lists them (a KEY may end in {LEAN})") from None


def config(key: str, out: Path, data: str, threads: int) -> dict:
    """The run config of one cell (the YAML a user can rerun with ``corl-bench run --config``)."""
    family, rank, k, t = _parse(key)
    agent = {"name": "a0", "family": family, "seed_offset": 0, **({"lora_rank": rank} if rank else {})}
    return {"model": {"profile": "hf", "threads": threads},
            "cohort": {"name": f"step-cost-{key.split('/')[0]}", "profile": "hf", "agents": [agent]},
            "method": {"name": "ttrl"},
            "rollout": {"prompts_per_step": PROMPTS, "samples_per_prompt": k, "max_new_tokens": t},
            "eval": {"benchmarks": ["gsm8k"], "max_problems": 1, "samples": 0, "greedy": True, "max_new_tokens": 8,
                     "before": False},
            "data": {"train": "gsm8k-train", "data_dir": data},
            **({"memory": {"keep_host_memory": False}} if key.endswith(LEAN) else {}),
            "run": {"steps": 2, "seed": 0, "save_checkpoints": False, "checkpoint_every": 0, "output_dir": str(out),
                    "run_id": "cell"}}


def _cli() -> str:
    return str(Path(sys.executable).with_name("corl-bench"))


def _write_config(cfg: dict, path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def estimate(key: str, data: str, threads: int, memory: dict | None = None) -> tuple[float | None, str]:
    """validate's estimated peak GB for the cell (None + its one-line refusal where it does not fit); ``memory``:
    settings to pin (the micro-batch and logit chunk a cell ran with)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(key, Path(tmp), data, threads)
        if memory:
            cfg["memory"] = {**cfg.get("memory", {}), **memory}
        path = _write_config(cfg, Path(tmp) / "cell.yaml")
        res = subprocess.run([_cli(), "validate", "--config", str(path)], cwd=REPO, capture_output=True, text=True,
                             env=dict(os.environ, COLUMNS="400"))
    text = res.stdout + res.stderr
    m = re.search(r"estimated peak of a training step: ([0-9.]+) GB", text) or \
        re.search(r"one training step needs about ([0-9.]+) GB", text)
    if res.returncode:
        return (float(m.group(1)) if m else None), next((ln for ln in text.splitlines() if "error" in ln), text[-300:])
    return (float(m.group(1)) if m else None), ""


def _watch(proc: subprocess.Popen) -> float:
    """The process's peak resident set (GB, its VmHWM) read until it exits."""
    peak = 0.0
    while proc.poll() is None:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024 / 1e9)
        except OSError:
            break
        time.sleep(0.2)
    return peak


def as_run(rec: dict) -> dict:
    """The memory settings a cell's run resolved (its micro-batch and logit chunk), to pin when re-estimating it."""
    line = next((ln for ln in rec.get("resolved", []) if "memory.micro_batch=" in ln), "")
    return {k.split(".")[1]: int(v) for k, v in re.findall(r"(memory\.(?:micro_batch|logit_chunk))=(\d+)", line)}


REFUSED = (("qwen05b-full/k8/t256", {"micro_batch": 64, "logit_chunk": 0}),
           ("qwen15b-lora/k8/t256", {"micro_batch": 64, "logit_chunk": 256}),
           ("qwen05b-full/k8/t256", {"micro_batch": 16, "logit_chunk": 256}))
"""cells with the micro-batch written out (not fitted): what ``validate`` says of settings that do not fit this machine"""


def refusals(data: str, threads: int) -> dict:
    """validate's estimate and one-line answer for each of :data:`REFUSED` on this machine."""
    head = _git("rev-parse", "HEAD")
    out = {}
    for key, memory in REFUSED:
        est, refusal = estimate(key, data, threads, memory)
        label = key + " " + " ".join(f"memory.{k}={v}" for k, v in memory.items())
        out[label] = {"estimate_gb": est, "refusal": refusal, "commit": head}
    return out


def reestimate(data: str) -> None:
    """Record, per measured cell, the current code's estimate for the settings the cell ran with
    (``estimate_head_gb``, with the commit): the estimate is judged on every cell, also those measured before it
    changed."""
    recs = _records()
    head = _git("rev-parse", "HEAD")
    for key, rec in recs.items():
        if "steps" in rec:
            rec["estimate_head_gb"], _ = estimate(key, data, rec["threads"], as_run(rec))
            rec["estimate_head_commit"] = head
    (OUT / "cells.json").write_text(json.dumps(recs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (OUT / "refusals.json").write_text(json.dumps(refusals(data, 2), indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")


MEMORY_REFUSAL = "one training step needs about"
"""The words of validate's memory refusal: the one failure a cell records (as refused) instead of raising."""


def refused(key: str, returncode: int, stderr: str) -> str:
    """The one-line refusal of a cell whose run exited with ``returncode``; any other failure (an import error, a
    crash) raises, so it is never recorded as a cell that does not fit."""
    last = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    message = last[-1] if last else f"exit {returncode}"
    if MEMORY_REFUSAL not in message:
        raise RuntimeError(f"{key}: the run failed and nothing was recorded (not a memory refusal): {message}")
    return message


def measure(key: str, data: str, threads: int) -> dict:
    """Run one cell and return its record."""
    from corl_bench.results import RunDir, read_jsonl

    est, refusal = estimate(key, data, threads)
    rec: dict = {"estimate_gb": est, "threads": threads, "cpu": _cpu(), "loadavg_start": round(os.getloadavg()[0], 2),
                 "commit": _git("rev-parse", "HEAD")}
    with tempfile.TemporaryDirectory() as tmp:
        path = _write_config(config(key, Path(tmp), data, threads), Path(tmp) / "cell.yaml")
        t0 = time.perf_counter()
        env = dict(os.environ, **(LEAN_ENV if key.endswith(LEAN) else {}))
        proc = subprocess.Popen([_cli(), "run", "--config", str(path)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env)
        peak = _watch(proc)
        err = proc.stderr.read() if proc.stderr else ""
        proc.wait()
        rec.update(wall_s=round(time.perf_counter() - t0, 1), loadavg_end=round(os.getloadavg()[0], 2))
        if proc.returncode:
            rec.update(refused=refused(key, proc.returncode, err), validate=refusal)
            return rec
        rd = RunDir(Path(tmp) / "cell")
        rows = [r for r in read_jsonl(rd.metrics_path) if "reward/mean" in r]
        rec.update(peak_gb=round(peak, 2), resolved=list(rd.record().resolved or ()),
                   steps=[{**{p: round(r.get(f"time/{p}", 0.0), 2) for p in PHASES},
                           "mean_length": round(r.get("len/mean", float("nan")), 1),
                           "clipped": round(r.get("len/clipped_ratio", float("nan")), 2)}
                          for r in sorted(rows, key=lambda r: r["step"])])
    return rec


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""the instruction-set flags that decide CPU matmul speed here (bf16 in hardware: avx512_bf16 or AMX)"""


def _cpu() -> str:
    """The CPU's model name, core count and which of :data:`ISA` it has (timings are only comparable within one)."""
    from corl_bench.train.precision import cpu_flags, cpu_model

    flags = cpu_flags()
    return f"{cpu_model()} x{os.cpu_count()} ({', '.join(f for f in ISA if f in flags) or 'none of ' + '/'.join(ISA)})"


def _records() -> dict:
    path = OUT / "cells.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def run(keys: list[str], data: str, threads: int, commit: bool) -> None:
    for key in keys:
        if key in _records():
            print(f"{key}: done (in {OUT / 'cells.json'})", flush=True)
            continue
        print(f"{key}: running", flush=True)
        rec = measure(key, data, threads)
        recs = _records()
        recs[key] = rec
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "cells.json").write_text(json.dumps(recs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{key}: {_summary(rec)}", flush=True)
        if commit:
            subprocess.run(["git", "add", "--", str(OUT / "cells.json")], cwd=REPO, check=True)
            subprocess.run(["git", "commit", "-q", "-m", f"step costs: cell {key} ({_summary(rec)})", "--",
                            str(OUT / "cells.json")], cwd=REPO, check=False)


def _summary(rec: dict) -> str:
    if "refused" in rec:
        return f"refused: {rec['refused'][:160]}"
    s = rec["steps"][-1]
    return (f"step {sum(s[p] for p in PHASES):.0f} s (" + ", ".join(f"{p} {s[p]:.0f}" for p in PHASES) +
            f"), peak {rec['peak_gb']:.1f} GB, estimate {rec['estimate_gb']} GB")


def report() -> str:
    recs = _records()
    lines = ["# What a training step of a Qwen2.5-Coder model costs on a CPU", "",
             "Generated by `python scripts/step_costs.py --report` from `results/step-costs/cells.json` (issue 40, "
             "item 4). Do not edit by hand. How each cell is measured: the docstring of `scripts/step_costs.py`.", "",
             f"{PROMPTS} prompts per step, one agent, TTRL, GSM8K training prompts. Seconds of the **second** step by "
             "phase; peak = the run process's peak resident set; estimate = `corl-bench validate`'s estimated peak for "
             "the settings the cell ran with (its micro-batch and logit chunk pinned), by the code at the commit "
             "named below the table (`--reestimate`), so cells measured before the estimate changed are judged by "
             "the current one; ratio = estimate / peak; threads = the run's torch threads, with the 1-minute load average at the "
             "cell's start and end (seconds compare only at one thread count and load). \"–\" = not measured yet.", "",
             "| model | samples | new tokens | mean length | rollout s | forward s | update s | step s | first step s "
             "| peak GB | estimate GB | ratio | micro_batch / logit_chunk | threads (load) |", "|" + "---|" * 14]
    for key in cells() + sorted(k for k in recs if k.endswith(LEAN)):
        m, k, t = key.split("/")
        rec = recs.get(key)
        head = f"| {m} | {k[1:]} | {t[1:].replace(LEAN, ' (lean allocator)')} |"
        if rec is None:
            lines.append(head + " – |" * 11)
            continue
        if "refused" in rec:
            lines.append(head + f" refused: {rec['refused']} |" + " |" * 10)
            continue
        s, first = rec["steps"][-1], rec["steps"][0]
        fit = next((ln.split(" (")[0].split(": ")[-1].strip() for ln in rec.get("resolved", [])
                    if "memory.micro_batch=" in ln), "")
        est = rec.get("estimate_head_gb") or rec.get("estimate_gb")
        ratio = f"{est / rec['peak_gb']:.2f}" if est else "–"
        lines.append(head + f" {s['mean_length']} | {s['rollout']:.0f} | {s['forward']:.0f} | {s['update']:.0f} | "
                     f"{sum(s[p] for p in PHASES):.0f} | {sum(first[p] for p in PHASES):.0f} | {rec['peak_gb']:.1f} | "
                     f"{est} | {ratio} | {fit} | {rec['threads']} ({rec.get('loadavg_start', '?')}–"
                     f"{rec.get('loadavg_end', '?')}) |")
    lines += ["", "A *lean allocator* row is its cell run again with `memory.keep_host_memory=false` and glibc's mmap "
              "threshold fixed at 128 KiB: its peak is the run's live memory, which is what the estimate models; the "
              "plain row's peak also holds the freed memory glibc's heap keeps for reuse (`corl_bench/hostmem.py`)."]
    done = [r for r in recs.values() if "steps" in r]
    if done:
        cpus = sorted({r["cpu"] for r in done})
        loads = [r[x] for r in done for x in ("loadavg_start", "loadavg_end")]
        lines += ["", f"Measured on {', '.join(cpus)} with {sorted({r['threads'] for r in done})} torch thread(s); "
                  f"1-minute load average {min(loads):.1f}–{max(loads):.1f} at the cells' start and end; commits "
                  f"{', '.join(sorted({r['commit'][:7] for r in done}))}; estimates by "
                  f"{', '.join(sorted({r.get('estimate_head_commit', r['commit'])[:7] for r in done}))}."]
        notes = [f"- {key}: {r['note']}" for key, r in recs.items() if r.get("note")]
        if notes:  # what the load average at a cell's start and end does not show
            lines += ["", "Notes on single cells:", "", *notes]
        ratios = [(r.get("estimate_head_gb") or r["estimate_gb"]) / r["peak_gb"] for r in done if r.get("estimate_gb")]
        inside = sum(0.85 <= x <= 1.15 for x in ratios)
        lines += ["", f"Estimate within 15 % of the measured peak in {inside} of {len(ratios)} measured cells (ratios "
                  f"{min(ratios):.2f}-{max(ratios):.2f})."]
    path = OUT / "refusals.json"
    if path.is_file():
        lines += ["", "## What does not fit", "", "`corl-bench validate` on this machine for cells whose micro-batch is "
                  "written out rather than fitted (`--reestimate` records them):", ""]
        for label, r in json.loads(path.read_text(encoding="utf-8")).items():
            lines.append(f"- `{label}` (estimate {r['estimate_gb']} GB): " +
                         (f"`{r['refusal']}`" if r["refusal"] else "fits, runs"))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", action="store_true", help="list the cells with validate's estimate")
    ap.add_argument("--run", action="store_true", help="run the cells not yet recorded")
    ap.add_argument("--report", action="store_true", help=f"write {PAGE.relative_to(REPO)}")
    ap.add_argument("--reestimate", action="store_true",
                    help="record the current code's estimate of every measured cell (as it ran) in cells.json")
    ap.add_argument("--only", action="append", default=[], help="a cell KEY (repeatable); default: every cell")
    ap.add_argument("--data", default=os.environ.get("CORL_BENCH_DATA", str(REPO.parent / "shared" / "data")),
                    help="where gsm8k-train is (default: $CORL_BENCH_DATA, else ../shared/data)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of each run")
    ap.add_argument("--commit", action="store_true", help="git-commit the cell records after each cell")
    args = ap.parse_args()
    keys = args.only or cells()
    for key in keys:
        _parse(key)
    if args.plan:
        for key in keys:
            est, refusal = estimate(key, args.data, args.threads)
            print(f"{key}: estimate {est} GB" + (f"; refused: {refusal}" if refusal else ""), flush=True)
    if args.run:
        run(keys, args.data, args.threads, args.commit)
    if args.reestimate:
        reestimate(args.data)
    if args.report:
        PAGE.write_text(report(), encoding="utf-8")
        print(f"wrote {PAGE.relative_to(REPO)}")
    if not (args.plan or args.run or args.report or args.reestimate):
        ap.error("say --plan, --run, --reestimate or --report")


if __name__ == "__main__":
    main()
