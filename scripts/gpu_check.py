#!/usr/bin/env python
"""The one GPU check: every stage a first GPU machine should run, within 10 minutes on one GPU, into ONE JSON.

    bash scripts/gpu_check.sh --out gpu-check.json             # on a CUDA machine (make install; pip install vllm trl)
    bash scripts/gpu_check.sh --dry-run --out dry.json          # anywhere: every stage on the CPU at the tiniest size

Stages, each in its own subprocess (its own GPU memory, its own peak counters) under its own time budget; a stage
that fails or runs out of time is recorded as such and the next one runs:

* ``corl_bf16`` (150 s): a 2-agent Co-RL cell trained in bf16 — smol-cross-family (SmolLM2-135M-Instruct x
  Gemma-3-270M, the installable real models), 2 steps of 8 prompts x 8 samples x 256 tokens, the default rollout
  engine — through ``corl_bench.train.runner.run``, the code path of ``corl-bench run``. Recorded per step: the time
  parts; per agent: loss, reward, completion length, the engine-vs-trainer log-prob gap (``engine/logp_gap_*``),
  whether the weights moved, and peak memory (below).
* ``vllm_timeshare`` (180 s): the same cell, 3 steps, ``rollout.backend=vllm`` with ``run.placement=timeshare`` on
  Ray (``run.backend=ray``, one actor per agent, each reserving half of the one GPU; ``corl_bench/placement.py``):
  each agent's ``vllm.LLM`` lives in its own actor, sleeps (level 1) while its agent trains and wakes for the weight
  sync (``gpu_memory_utilization`` 0.20 per agent). The weight sync is checked by the log-prob gap: after step 0
  the engine samples from weights synced after a wake, so a gap above 10x the first step's (and 1e-3 nats) — the
  agent's own stale-weights warning — fails the check. Per-agent peak memory is not metered in this stage (the agents
  live in Ray actors; ``corl_bf16`` meters it); the device's peak is. Skipped, with the reason, where ``import
  vllm`` or ``import ray`` fails; the placement it would use is recorded all the same.
* ``trl_compare`` (2 x 110 s): one GRPO step of corl-bench against TRL ``GRPOTrainer`` at equal work (SmolLM2, the
  same 8 prompts x 8 samples x 256 tokens, lr, T = 1, no KL, token-mean loss, bf16; 1 warm-up + 2 timed steps each;
  ``scripts/bench_suite.py``'s workers), both with vLLM colocated at ``gpu_memory_utilization`` 0.20 where vLLM
  imports (TRL ``vllm_mode=colocate``), else both with their transformers-based rollouts. Skipped where ``import
  trl`` fails.

Peak memory per agent: CUDA — ``torch.cuda.max_memory_allocated`` over the agent's own ``generate``/``score``/
``update`` calls (counters reset before each call; the two agents share the device, so the other agent's resident
weights and optimizer state are in it); CPU — no per-call counter exists, so ``peak_gib`` is null with the reason,
the process's peak RSS is given per stage. Both modes also give each agent's resident bytes (parameters, gradients
and AdamW state, counted from the tensors).

``--dry-run`` runs the same stages on the CPU: tiny random micro models (2 warm-start steps), 1 training step of
4 prompts x 2 samples x 8 tokens, bf16 all the same; vLLM stages skip where vLLM is absent. Only the device, the
models and the sizes differ from the GPU mode. ``tests/test_gpu_check_on_cpu.py`` runs it. Exit status: 0 when
every stage that ran is ok, 1 otherwise, 2 (one line) without ``--dry-run`` on a machine without CUDA.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "corl-bench/gpu-check/1"
TOTAL_BUDGET_S = 600
BUDGETS = {"corl_bf16": 150, "vllm_timeshare": 180, "trl_compare": 220}
"""seconds per stage (``trl_compare``: both of its sides); the sum plus start-up stays under TOTAL_BUDGET_S"""
VLLM_MEMORY = 0.2
SIZES = {"gpu": dict(prompts=8, k=8, tokens=256, steps=2, vllm_steps=3, trl_steps=2, eval_problems=4,
                     eval_tokens=64),
         "dry-run": dict(prompts=4, k=2, tokens=8, steps=1, vllm_steps=2, trl_steps=1, eval_problems=2,
                         eval_tokens=8)}
TINY = ("qwen2-bpe", "llama-bpe")  # two architectures vLLM loads (its CPU build breaks neox training here)
log = logging.getLogger("gpu_check")


# ---------------------------------------------------------------------------------------------- helpers
def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _register_tiny(cache: Path) -> list[str]:
    """Tiny random micro families for the dry run (hidden 64, one layer, 2 warm-start steps)."""
    import dataclasses

    from corl_bench.micro.families import BUILTIN_FAMILIES
    from corl_bench.registries import FAMILIES

    # heads of 64 / 2 = 32 dimensions: vLLM's CPU attention needs at least 32
    small = {"hidden_size": 64, "n_embd": 64, "intermediate_size": 128, "n_inner": 128, "num_hidden_layers": 1,
             "n_layer": 1, "num_attention_heads": 2, "n_head": 2, "num_key_value_heads": 1}
    names = []
    for base in TINY:
        fam = BUILTIN_FAMILIES[base]
        kwargs = tuple((k, small.get(k, v)) for k, v in fam.model_kwargs)
        tiny = dataclasses.replace(fam, name=f"gpucheck-tiny-{base}", model_kwargs=kwargs, warmstart_steps=2,
                                   warmstart_batch=16)
        if tiny.name not in FAMILIES:
            FAMILIES.register(tiny.name, tiny)
        names.append(tiny.name)
    return names


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


class AgentMeter:
    """Per-agent peak memory and weight movement, by wrapping ``Agent.generate``/``score``/``update`` (the run's own
    calls, unchanged) for the duration of a stage."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.peak: dict[str, float] = {}
        self.first_abs: dict[str, float] = {}
        self.last_abs: dict[str, float] = {}
        self.resident: dict[str, float] = {}
        self.updates: dict[str, int] = {}
        self.where: dict[str, dict[str, str]] = {}
        self._saved: dict[str, Any] = {}

    @staticmethod
    def _abs_sum(agent: Any) -> float:
        import torch

        with torch.no_grad():
            return float(sum(p.detach().float().abs().sum().item() for p in agent.model.parameters()))

    @staticmethod
    def _resident(agent: Any) -> float:
        tensors = [p for p in agent.model.parameters()] + [p.grad for p in agent.model.parameters()
                                                            if p.grad is not None]
        for state in agent.optimizer.state.values():
            tensors += [v for v in state.values() if hasattr(v, "element_size")]
        return sum(t.numel() * t.element_size() for t in tensors) / 2**30

    def __enter__(self) -> "AgentMeter":
        from corl_bench.train.agent import Agent

        meter = self
        for name in ("generate", "score", "update"):
            original = getattr(Agent, name)
            self._saved[name] = original

            def wrapped(agent, *a, __orig=original, __name=name, **k):
                import torch

                if agent.name not in meter.first_abs:
                    meter.first_abs[agent.name] = meter._abs_sum(agent)
                p0 = next(agent.model.parameters())
                meter.where[agent.name] = {"param_dtype": str(p0.dtype).replace("torch.", ""),
                                           "param_device": str(p0.device)}
                if meter.cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                out = __orig(agent, *a, **k)
                if meter.cuda:
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() / 2**30
                    meter.peak[agent.name] = max(meter.peak.get(agent.name, 0.0), peak)
                if __name == "update":
                    meter.updates[agent.name] = meter.updates.get(agent.name, 0) + 1
                    meter.last_abs[agent.name] = meter._abs_sum(agent)
                    meter.resident[agent.name] = max(meter.resident.get(agent.name, 0.0), meter._resident(agent))
                return out

            setattr(Agent, name, wrapped)
        return self

    def __exit__(self, *exc: Any) -> None:
        from corl_bench.train.agent import Agent

        for name, original in self._saved.items():
            setattr(Agent, name, original)

    def agents(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name in sorted(self.first_abs):
            row: dict[str, Any] = {"resident_gib": self.resident.get(name),
                                   "optimizer_steps": self.updates.get(name, 0), **self.where.get(name, {}),
                                   "weights_changed": (name in self.last_abs
                                                       and self.last_abs[name] != self.first_abs[name])}
            if self.cuda:
                row.update(peak_gib=self.peak.get(name), peak_source="torch.cuda.max_memory_allocated over the "
                           "agent's generate/score/update calls (the device is shared: the other agent's resident "
                           "weights and optimizer state are included)")
            else:
                row.update(peak_gib=None, peak_source="CPU: no per-call peak counter; see the stage's peak_rss_gib")
            out[name] = row
        return out


# ---------------------------------------------------------------------------------------------- stages
def _timeshare_sets(mode: str) -> list[str]:
    """The settings that put the cell's two vLLM agents on Ray, sharing one GPU (``run.placement=timeshare``)."""
    return ["run.backend=ray", "run.placement=timeshare", f"run.gpus_per_agent={1 if mode == 'gpu' else 0}",
            "run.cpus_per_agent=1", "model.threads=1"]


def _cell(mode: str, work: Path, backend: str | None, steps: int, extra: list[str] | None = None) -> dict[str, Any]:
    """Train the 2-agent Co-RL cell through ``run`` (``corl-bench run``'s path) and read its metrics back."""
    import torch

    from corl_bench.config import load_config
    from corl_bench.results import RunDir
    from corl_bench.train.runner import run

    s = SIZES[mode]
    gpu = mode == "gpu"
    sets = ["method.name=corl", "model.dtype=bfloat16", f"model.device={'cuda' if gpu else 'cpu'}",
            f"run.steps={steps}", f"run.output_dir={work / 'runs'}", "run.checkpoint_every=0",
            "run.save_checkpoints=false", f"rollout.prompts_per_step={s['prompts']}",
            f"rollout.samples_per_prompt={s['k']}", f"rollout.max_new_tokens={s['tokens']}", "eval.before=false",
            f"eval.max_problems={s['eval_problems']}", "eval.samples=1", "eval.greedy=false",
            f"eval.max_new_tokens={s['eval_tokens']}"]
    if gpu:
        data_dir = next((d for d in (os.environ.get("CORL_BENCH_DATA", ""), str(ROOT.parent / "shared" / "data"))
                         if d and (Path(d) / "gsm8k").is_dir()), str(ROOT / "tests" / "fixtures" / "hf"))
        sets += ["cohort.name=smol-cross-family", "data.train=gsm8k-train", f"data.data_dir={data_dir}",
                 "eval.benchmarks=[gsm8k]"]
    else:
        a0, a1 = _register_tiny(work / "cache")
        sets += [f"model.cache_dir={work / 'cache'}", "cohort.name=gpucheck-tiny-cross",
                 f"cohort.agents=[{{name: a0, family: {a0}}}, {{name: a1, family: {a1}, seed_offset: 1}}]",
                 "eval.benchmarks=[micro-test]"]
    if backend:
        sets += [f"rollout.backend={backend}"]
        if backend == "vllm":
            sets += [f"rollout.engine_options={{gpu_memory_utilization: {VLLM_MEMORY}}}"]
    cfg = load_config(None, sets + list(extra or ()))
    stale: list[str] = []

    class Stale(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "look stale" in record.getMessage():
                stale.append(record.getMessage())

    handler = Stale()
    logging.getLogger("corl_bench.train.agent").addHandler(handler)
    t0 = time.perf_counter()
    try:
        with AgentMeter(cuda=gpu) as meter:
            run_dir = run(cfg)
    finally:
        logging.getLogger("corl_bench.train.agent").removeHandler(handler)
    wall = time.perf_counter() - t0
    rows = [r for r in RunDir(run_dir).metrics() if "event" not in r]
    steps_out = []
    for step in sorted({r["step"] for r in rows}):
        mine = [r for r in rows if r["step"] == step]
        steps_out.append({"step": step, "seconds": {k[5:]: v for k, v in mine[0].items() if k.startswith("time/")},
                          "agents": {r["agent"]: {"loss": r.get("loss"), "reward_mean": r.get("reward/mean"),
                                                  "len_mean": r.get("len/mean"),
                                                  "grad_norm": r.get("policy/grad_norm"),
                                                  "zero_std_fraction": r.get("adv/zero_std_fraction"),
                                                  "logp_gap_mean": r.get("engine/logp_gap_mean"),
                                                  "logp_gap_max": r.get("engine/logp_gap_max")} for r in mine}})
    agents = meter.agents()
    if cfg.run.backend == "ray":  # the agents lived in Ray actors: what the meter cannot see comes from metrics.jsonl
        agents = {a.name: {"optimizer_steps": sum(1 for r in rows if r["agent"] == a.name and _finite(r.get("loss"))),
                           "weights_changed": None, "peak_gib": None,
                           "peak_source": "agents in Ray actors: not metered per agent (see corl_bf16)"}
                  for a in cfg.cohort.agents}
    for name, row in agents.items():
        gaps = [st["agents"].get(name, {}).get("logp_gap_max") for st in steps_out]
        row["logp_gap_max"] = max((g for g in gaps if _finite(g)), default=None)
        mine = [st["agents"].get(name, {}) for st in steps_out]
        row["trained_steps"] = sum(1 for m in mine if _finite(m.get("loss")) and _finite(m.get("logp_gap_max")))
        # all-equal rewards in every group (tiny random models rarely agree) give no gradient: unchanged weights are
        # then expected, and the check asks only that the updates ran
        row["had_signal"] = any(_finite(m.get("zero_std_fraction")) and m["zero_std_fraction"] < 1 for m in mine)
    out: dict[str, Any] = {
        "wall_s": wall, "run_dir": str(run_dir), "cohort": cfg.cohort.name,
        "families": [a.family for a in cfg.cohort.agents], "dtype": cfg.model.dtype, "device": cfg.model.device,
        "rollout_backend": cfg.rollout.backend, "settings": {"prompts": s["prompts"], "samples": s["k"],
                                                             "max_new_tokens": s["tokens"], "steps": steps},
        "steps": steps_out, "agents": agents, "stale_weight_warnings": stale}
    out["peak_rss_gib"] = _rss_gib()
    if gpu:
        out["device_peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["device_peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    out["ok"] = len(agents) == 2 and len(steps_out) == steps and all(
        r["trained_steps"] == steps and r["optimizer_steps"] == steps
        and (r["weights_changed"] is not False or not r["had_signal"])
        for r in agents.values())
    return out


def stage_corl_bf16(mode: str, work: Path) -> dict[str, Any]:
    return _cell(mode, work, None, SIZES[mode]["steps"])


def stage_vllm_timeshare(mode: str, work: Path) -> dict[str, Any]:
    from corl_bench.config import load_config
    from corl_bench import placement

    sets = _timeshare_sets(mode)
    from corl_bench.registries import COHORTS

    cfg = load_config(None, ["rollout.backend=vllm", *sets,
                             f"rollout.engine_options={{gpu_memory_utilization: {VLLM_MEMORY}}}"])
    cfg = cfg.replace(cohort=COHORTS.get("smol-cross-family"))  # the GPU cell's two agents
    planned = placement.resolve(cfg, 1.0 if mode == "gpu" else 0.0)
    plan = {"placement": planned.kind, "gpus_per_agent": list(planned.gpus),
            "engine_options": placement.engine_options(cfg, planned)}
    missing = [m for m in ("vllm", "ray") if not _importable(m)]
    if missing:
        return {"status": "skipped", "reason": f"{' and '.join(missing)} not importable here (pip install vllm "
                "'ray[default]' on a CUDA machine)", "planned": plan}
    out = _cell(mode, work, "vllm", SIZES[mode]["vllm_steps"], extra=sets)
    gaps = {a: [st["agents"][a]["logp_gap_mean"] for st in out["steps"] if a in st["agents"]] for a in out["agents"]}
    first = {a: g[0] for a, g in gaps.items() if g and _finite(g[0])}
    jumped = {a: [x for x in g[1:] if _finite(x) and x > max(10 * first.get(a, 0.0), 1e-3)] for a, g in gaps.items()}
    sync_ok = all(first.get(a) is not None for a in gaps) and not any(jumped.values()) \
        and not out["stale_weight_warnings"]
    out.update(placement=plan, placement_note=(
        f"each agent's vllm.LLM (gpu_memory_utilization {VLLM_MEMORY}) in its own Ray actor, the two actors on "
        "one GPU; each engine sleeps while its agent trains and wakes for the weight sync"),
        sync={"ok": sync_ok, "criterion": "logp_gap_mean after step 0 stays <= max(10 x step 0's, 1e-3 nats)",
              "logp_gap_mean_per_step": gaps})
    out["ok"] = out["ok"] and sync_ok
    return out


def stage_trl_compare(mode: str, work: Path) -> dict[str, Any]:
    """corl-bench and TRL GRPOTrainer, one model, equal work, each side in its own worker process."""
    if not _importable("trl"):
        return {"status": "skipped", "reason": "trl is not importable here (pip install trl)"}
    s = SIZES[mode]
    with_vllm = _importable("vllm")
    gpu = mode == "gpu"
    sets = ["model.dtype=bfloat16", f"model.device={'cuda' if gpu else 'cpu'}",
            f"rollout.prompts_per_step={s['prompts']}", f"rollout.samples_per_prompt={s['k']}",
            f"rollout.max_new_tokens={s['tokens']}"]
    if with_vllm:
        sets += [f"rollout.engine_options={{gpu_memory_utilization: {VLLM_MEMORY}}}"]
    if not gpu:
        (fam,) = _register_tiny(work / "cache")[:1]
        sets += [f"model.cache_dir={work / 'cache'}", f"cohort.agents=[{{name: a0, family: {fam}}}]"]
    sides = {}
    for side in ("corl", "trl"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--trl-side", side, "--mode", mode, "--work",
               str(work), "--steps", str(s["trl_steps"])] + (["--with-vllm"] if with_vllm else [])
        for item in sets:
            cmd += ["--set", item]
        res = _subprocess(cmd, BUDGETS["trl_compare"] // 2, work / f"trl-{side}.json", work / f"trl-{side}.log")
        sides[side] = res
        if res.get("status") != "ok":
            return {"status": res.get("status", "failed"), "reason": f"{side} side: {res.get('reason')}",
                    "sides": sides}
    corl, trl = sides["corl"]["result"], sides["trl"]["result"]
    per_tok = None
    if corl.get("mean_completion_tokens") and trl.get("mean_completion_tokens"):
        per_tok = (trl["median_s"] / trl["mean_completion_tokens"]) / (corl["median_s"] /
                                                                       corl["mean_completion_tokens"])
    return {"ok": True, "rollouts": "vllm colocated (gpu_memory_utilization %.2f) on both sides" % VLLM_MEMORY
            if with_vllm else "transformers-based on both sides (no vllm here)",
            "equal_work": {"model": "smol" if gpu else "tiny micro qwen2-bpe", "prompts": s["prompts"],
                           "samples": s["k"], "max_new_tokens": s["tokens"], "timed_steps": s["trl_steps"],
                           "dtype": "bfloat16"},
            "corl_step_s": corl["median_s"], "trl_step_s": trl["median_s"],
            "ratio_trl_over_corl": trl["median_s"] / corl["median_s"], "ratio_per_completion_token": per_tok,
            "corl": corl, "trl": trl}


def _trl_worker(args: argparse.Namespace) -> dict[str, Any]:
    """One side of ``trl_compare``: ``scripts/bench_suite.py``'s step worker (1 warm-up + ``--steps`` timed)."""
    spec = importlib.util.spec_from_file_location("bench_suite", ROOT / "scripts" / "bench_suite.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    if args.mode != "gpu":
        _register_tiny(Path(args.work) / "cache")
    ns = argparse.Namespace(model="smol" if args.mode == "gpu" else "micro", threads=max(1, os.cpu_count() or 1),
                            backend=("vllm" if args.with_vllm else "fast"), set=list(args.set), side=args.trl_side,
                            steps=args.steps, tmp=str(Path(args.work) / f"trl-{args.trl_side}"),
                            trl_vllm=VLLM_MEMORY if args.with_vllm else 0.0)
    if args.mode != "gpu":
        ns.threads = 1
    out = bench.worker_step(ns)
    out["ok"] = bool(out.get("step_seconds")) and all(_finite(t) for t in out["step_seconds"])
    return out


STAGES = {"corl_bf16": stage_corl_bf16, "vllm_timeshare": stage_vllm_timeshare, "trl_compare": stage_trl_compare}


# ---------------------------------------------------------------------------------------------- driver
def _subprocess(cmd: list[str], budget: float, result: Path, logfile: Path) -> dict[str, Any]:
    """Run a stage worker in its own session under ``budget`` seconds; its JSON result, or why there is none."""
    t0 = time.perf_counter()
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    with open(logfile, "w") as log_f:
        proc = subprocess.Popen(cmd + ["--result", str(result)], stdout=log_f, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session: it and whatever it started
            proc.wait()
            return {"status": "timeout", "reason": f"over its {budget:.0f} s budget", "wall_s": budget,
                    "log": str(logfile)}
    wall = time.perf_counter() - t0
    tail = logfile.read_text(errors="replace").strip().splitlines()[-15:]
    if rc != 0 or not result.is_file():
        return {"status": "failed", "reason": f"exit status {rc}", "wall_s": wall, "log": str(logfile),
                "log_tail": tail}
    data = json.loads(result.read_text())
    if data.get("status") == "skipped":
        return {**data, "wall_s": wall}
    return {"status": "ok" if data.get("ok") else "failed", "wall_s": wall, "log": str(logfile), "result": data,
            **({} if data.get("ok") else {"reason": "its checks failed (see result)", "log_tail": tail})}


def _environment(mode: str) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": _version("transformers"),
            "trl": _version("trl"), "vllm": _version("vllm"), "cuda_available": cuda,
            "device_name": torch.cuda.get_device_name(0) if cuda else None,
            "cuda": torch.version.cuda, "cpus": os.cpu_count(), "mode": mode}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="every stage on the CPU at the tiniest size")
    ap.add_argument("--out", type=Path, default=Path("gpu-check.json"), help="the one JSON written")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"a subset of {', '.join(STAGES)}")
    ap.add_argument("--work", default="", help="where runs and logs go (default: a new temporary directory)")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="gpu", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--trl-side", help=argparse.SUPPRESS)
    ap.add_argument("--with-vllm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.stage or args.trl_side:  # a worker: one stage (or one side of trl_compare) into --result
        work = Path(args.work)
        out = _trl_worker(args) if args.trl_side else STAGES[args.stage](args.mode, work)
        args.result.write_text(json.dumps(out, default=str))
        return 0
    mode = "dry-run" if args.dry_run else "gpu"
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}")
    env = _environment(mode)
    if mode == "gpu" and not env["cuda_available"]:
        print("gpu_check: no CUDA device visible; run this on a GPU machine, or --dry-run", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="corl-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report: dict[str, Any] = {"schema": SCHEMA, "mode": mode, "budget_s": TOTAL_BUDGET_S, "environment": env,
                              "work": str(work), "stages": {}}
    for name in stages:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--mode", mode, "--work",
               str(work / name)]
        (work / name).mkdir(exist_ok=True)
        res = _subprocess(cmd, BUDGETS[name], work / f"{name}.json", work / f"{name}.log")
        res["budget_s"] = BUDGETS[name]
        report["stages"][name] = res
        print(f"gpu_check: {name}: {res['status']}" + (f" ({res.get('reason')})" if res.get("reason") else "")
              + f" in {res.get('wall_s', 0):.0f} s", file=sys.stderr, flush=True)
    report["wall_s"] = time.perf_counter() - t0
    report["ok"] = all(s["status"] in ("ok", "skipped") for s in report["stages"].values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"gpu_check: {'ok' if report['ok'] else 'NOT ok'} in {report['wall_s']:.0f} s; {args.out}", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
