#!/usr/bin/env python
"""Peak memory and time of ONE full training step (score + update) of one agent, per memory setting (issue 14).

    python scripts/bench_memory.py                      # SmolLM2 grid + one Gemma-3-270M step (~15 min on 2 cores)
    python scripts/bench_memory.py --quick              # a smaller shape, for a smoke test (~2 min)
    python scripts/bench_memory.py --one --model smol --micro-batch 8 --logit-chunk 256   # one setting (a row)

Every setting runs in a fresh subprocess: load the model (fp32, CPU), reset the peak-RSS mark
(``/proc/self/clear_refs``), then one ``Agent.score`` + ``Agent.update`` on 8 prompts x 8 samples x 256 completion
tokens, and read the process's ``VmHWM``. The step peak therefore includes everything resident during the step:
weights, gradients, AdamW state (allocated by this first step), activations and logits. The completions are
synthetic (fixed random token ids, never EOS, exactly 256 tokens each) so that generation does not dominate the
time and every setting trains on exactly the same tensors; prompts are short math questions (~30 tokens). The
parent watches each child's RSS and stops it above ``--cap-gb`` (reported as "> cap"), so the full-batch row cannot
take the machine down. Results go to ``results/bench/memory-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()


def _status_gb(pid: int | str, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20  # kB -> GiB
    return float("nan")


# ------------------------------------------------------------------------------------------- one setting (child)
def one(args: argparse.Namespace) -> dict:
    import torch

    from corl_bench.config import AgentSpec, GRPOConfig, MemoryConfig
    from corl_bench.models.load import load_model
    from corl_bench.rollout import Completion
    from corl_bench.advantages import group_advantages
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    t0 = time.perf_counter()
    model, tok = load_model(args.model, device="cpu", dtype="float32")
    load_s = time.perf_counter() - t0
    load_peak = _status_gb("self", "VmHWM")
    questions = [f"Natalia sold clips to {12 + 7 * i} of her friends in April, and then she sold half as many clips "
                 f"in May. How many clips did Natalia sell altogether in April and May?" for i in range(args.prompts)]
    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    special = set(tok.all_special_ids)
    samples = []
    for q in questions:
        for _ in range(args.samples):
            ids = [int(t) for t in torch.randint(1000, min(vocab, 40_000), (args.tokens,), generator=g)]
            ids = [t if t not in special else 1001 for t in ids]
            samples.append(TrainSample(q, Completion(tuple(ids), (), "", False)))
    mem = MemoryConfig(micro_batch=args.micro_batch, logit_chunk=args.logit_chunk,
                       gradient_checkpointing=args.checkpointing, lora_rank=args.lora_rank)
    agent = Agent(AgentSpec(name="bench", family=args.model), model, tok, GRPOConfig(lr=1e-6), temperature=1.0,
                  memory=mem)
    rewards = torch.rand(args.prompts, args.samples, generator=g)
    adv = group_advantages(rewards).reshape(-1).tolist()
    import gc

    gc.collect()
    from corl_bench.hostmem import keep_host_memory

    keep = keep_host_memory(args.keep_host_memory)  # a training run's default (memory.keep_host_memory)
    keep.__enter__()
    before = _status_gb("self", "VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on is the step's
    t1, c1 = time.perf_counter(), time.process_time()
    agent.score(samples)
    t2 = time.perf_counter()
    score_peak = _status_gb("self", "VmHWM")
    Path("/proc/self/clear_refs").write_text("5")  # the update's own peak (the step's is the larger of the two)
    upd = agent.update(adv, max_len=args.tokens)
    t3, c3 = time.perf_counter(), time.process_time()
    update_peak = _status_gb("self", "VmHWM")
    keep.__exit__(None, None, None)
    prompt_tokens = [len(tok(q).input_ids) for q in questions]
    return {"model": args.model, "micro_batch": args.micro_batch, "logit_chunk": args.logit_chunk,
            "gradient_checkpointing": args.checkpointing, "lora_rank": args.lora_rank,
            "shape": [args.prompts, args.samples, args.tokens], "threads": torch.get_num_threads(),
            "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1), "vocab": vocab,
            "load_s": round(load_s, 1), "load_peak_gb": round(load_peak, 2), "rss_before_step_gb": round(before, 2),
            "step_peak_gb": round(max(score_peak, update_peak), 2), "keep_host_memory": args.keep_host_memory,
            "score_peak_gb": round(score_peak, 2), "update_peak_gb": round(update_peak, 2),
            "prompt_tokens": [min(prompt_tokens), max(prompt_tokens)], "score_s": round(t2 - t1, 1),
            "update_s": round(t3 - t2, 1), "step_s": round(t3 - t1, 1), "step_cpu_s": round(c3 - c1, 1),
            "loadavg": os.getloadavg()[0], "loss": upd.loss,
            "grad_norm": upd.grad_norm, "n_tokens": upd.n_tokens}


# ------------------------------------------------------------------------------------------- the grid (parent)
def _command(model: str, mb: int, chunk: int, ckpt: bool, shape: tuple[int, int, int], threads: int) -> list[str]:
    cmd = [sys.executable, str(SCRIPT.relative_to(REPO)), "--one", "--model", model, "--micro-batch", str(mb),
           "--logit-chunk", str(chunk), "--prompts", str(shape[0]), "--samples", str(shape[1]), "--tokens",
           str(shape[2]), "--threads", str(threads)]
    return cmd + (["--checkpointing"] if ckpt else [])


def _shown(cmd: list[str]) -> str:
    """The command line to reproduce a row (from the repository root, in the project's environment)."""
    return shlex.join(["python", *cmd[1:]])


def _run(cmd: list[str], cap_gb: float, timeout: float) -> dict:
    """Run one child; stop it above cap_gb of RSS or after timeout seconds."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start, peak_seen, why = time.time(), 0.0, None
    while proc.poll() is None:
        try:
            rss = _status_gb(proc.pid, "VmRSS")
            peak_seen = max(peak_seen, rss)
        except (FileNotFoundError, ProcessLookupError):
            break
        if rss > cap_gb:
            why = f"> {cap_gb:g} GB (stopped)"
        elif time.time() - start > timeout:
            why = f"> {timeout:g} s (stopped)"
        if why:
            proc.kill()
            break
        time.sleep(0.05)
    out, err = proc.communicate()
    if why:
        return {"error": why, "rss_seen_gb": round(peak_seen, 2)}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}"}
    return json.loads(lines[-1])


def grid(args: argparse.Namespace) -> int:
    shape = (2, 4, 64) if args.quick else (args.prompts, args.samples, args.tokens)
    n = shape[0] * shape[1]
    micro = [n, n // 4, n // 8, n // 16] if not args.quick else [n, 2]
    rows: list[tuple[str, dict, list[str]]] = []
    settings = [("smol", mb, chunk, False) for mb in micro for chunk in (0, args.chunk)]
    for model, mb, chunk, ckpt in settings:
        cmd = _command(model, mb, chunk, ckpt, shape, args.threads)
        print("$", _shown(cmd), flush=True)
        res = _run(cmd, args.cap_gb, args.timeout)
        print("  ", json.dumps(res), flush=True)
        rows.append((model, {"micro_batch": mb, "logit_chunk": chunk, "gradient_checkpointing": ckpt, **res}, cmd))
    if not args.no_gemma:
        from corl_bench.models.entries import ENTRIES

        if "gemma3-270m" not in ENTRIES:
            print("gemma3-270m: no such model entry in corl_bench.models.entries yet; skipped")
        else:
            prep = [sys.executable, "-c", "from corl_bench.models.load import load_model; load_model('gemma3-270m')"]
            print("$", shlex.join(prep), "   # dequantise + cache once (not measured)", flush=True)
            subprocess.run(prep, cwd=REPO, check=False, stdout=subprocess.DEVNULL)
            for mb, chunk, ckpt in args.gemma:
                cmd = _command("gemma3-270m", mb, chunk, ckpt, shape, args.threads)
                print("$", _shown(cmd), flush=True)
                res = _run(cmd, args.cap_gb, args.timeout)
                print("  ", json.dumps(res), flush=True)
                rows.append(("gemma3-270m", {"micro_batch": mb, "logit_chunk": chunk,
                                             "gradient_checkpointing": ckpt, **res}, cmd))
    print()
    print(_table(rows, shape))
    if not args.quick:
        out = Path(args.out or REPO / f"results/bench/memory-{datetime.date.today():%Y%m%d}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"shape": {"prompts": shape[0], "samples": shape[1], "tokens": shape[2]},
                                   "cap_gb": args.cap_gb, "host": os.uname().nodename,
                                   "cpus": os.cpu_count(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                                   "rows": [{**r, "command": _shown(c)} for _, r, c in rows]}, indent=1))
        print(f"\nwrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


def _table(rows, shape) -> str:
    """One table: the memory options side by side; ratios are to each model's first row that finished (the
    whole-batch default when it fits under the cap)."""
    ref: dict[str, dict] = {}
    for model, r, _ in rows:
        if "error" not in r:
            ref.setdefault(model, r)
    head = (f"{'model':<12} {'micro_batch':>11} {'logit_chunk':>11} {'ckpt':>4} {'peak GB':>8} {'growth GB':>9} "
            f"{'x ref':>6} {'step s':>7} {'cpu s':>7} {'x ref':>6}")
    lines = [f"one training step (score + update), {shape[0]} prompts x {shape[1]} samples x {shape[2]} tokens, fp32, "
             "CPU; growth = step peak RSS - RSS before the step (weights resident); cpu s = process CPU time", head,
             "-" * len(head)]
    for model, r, _ in rows:
        ck = "yes" if r["gradient_checkpointing"] else ""
        if "error" in r:
            lines.append(f"{model:<12} {r['micro_batch']:>11} {r['logit_chunk']:>11} {ck:>4} {r['error']}")
            continue
        b = ref[model]
        grow, grow_b = r["step_peak_gb"] - r["rss_before_step_gb"], b["step_peak_gb"] - b["rss_before_step_gb"]
        lines.append(f"{model:<12} {r['micro_batch']:>11} {r['logit_chunk']:>11} {ck:>4} {r['step_peak_gb']:>8.2f} "
                     f"{grow:>9.2f} {grow / grow_b:>6.2f} {r['step_s']:>7.1f} {r['step_cpu_s']:>7.1f} "
                     f"{r['step_cpu_s'] / b['step_cpu_s']:>6.2f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", action="store_true", help="run one setting in this process and print a JSON line")
    ap.add_argument("--model", default="smol")
    ap.add_argument("--micro-batch", type=int, default=0)
    ap.add_argument("--logit-chunk", type=int, default=0)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--keep-host-memory", action="store_true", help="the step inside memory.keep_host_memory (a run's "
                    "default: freed host memory stays in the heap)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=256, help="logit_chunk of the 'on' rows")
    ap.add_argument("--gemma", type=lambda s: tuple(int(x) for x in s.split(",")), nargs="*",
                    default=[(8, 256, 0)], help="Gemma-3-270M rows as micro_batch,logit_chunk,checkpointing(0/1)")
    ap.add_argument("--no-gemma", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cap-gb", type=float, default=14.0, help="stop a setting whose RSS passes this")
    ap.add_argument("--timeout", type=float, default=3600.0, help="stop a setting after this many seconds")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args)), flush=True)
        return 0
    args.gemma = [(mb, chunk, bool(ck)) for mb, chunk, ck in args.gemma]
    return grid(args)


if __name__ == "__main__":
    sys.exit(main())
