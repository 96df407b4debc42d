#!/usr/bin/env python
"""Estimate the memory one agent needs for the paper's setting, from the model's architecture alone (no weights).

    python scripts/estimate_memory.py                                  # the paper's three models, configs/paper settings
    python scripts/estimate_memory.py --model path/to/config.json --micro-batch 4 --max-batch 64
    python scripts/estimate_memory.py --model smol --new-tokens 256 --prompt-tokens 40 \\
        --micro-batch 8 --logit-chunk 0 --no-checkpointing                      # the shape bench_memory.py measures
    python scripts/estimate_memory.py --model Qwen/Qwen2.5-7B --mixed-precision --ranks 4 --logit-chunk 0 \\
        --micro-batch 1 --engine-share 0.3 --engine-sleeps                # one rank of a sharded agent beside vLLM
    python scripts/estimate_memory.py --config configs/paper/corl-cross-family-7b.yaml   # per GPU, as the config runs
    python scripts/estimate_memory.py --config configs/paper/corl-cross-family-7b.yaml --ranks 8 --gpu-gb 141

An agent holds, during training, its parameters, their gradients and AdamW's two moments (all in ``--dtype``;
16 bytes per parameter in float32), plus the activations of one micro-batch, plus the LM-head logits of one chunk;
during rollouts it holds its parameters plus the KV cache of ``--max-batch`` sequences. The two phases alternate, so
the peak is the larger of the two. Activations: with gradient checkpointing, each decoder layer keeps its input
(micro-batch x tokens x hidden) and one layer is recomputed at a time (its intermediate tensors: ``16 x hidden +
3 x intermediate`` values per token, attention by a fused kernel, i.e. no tokens^2 matrix; the constant is fitted
to scripts/bench_memory.py, whose SmolLM2 rows grow by 0.48 GiB per sequence of ~286 tokens: 58 KiB per token and
layer, the formula gives 54 KiB for SmolLM2); without it every layer keeps those intermediates. Logits:
``logit_chunk`` rows of the vocabulary at a time, three fp32 copies (logits, log-softmax, its gradient); 0 = the
whole micro-batch at once. These are estimates: allocator slack, CUDA context (~0.5-1 GB) and fragmentation come on
top; the checks against measured peaks are in docs/how-to/gpu.md.

``--mixed-precision`` (``memory.autocast=bfloat16``): fp32 weights, gradients and AdamW (16 bytes per parameter),
bf16 matmul outputs and a bf16 head output beside the fp32 log-softmax copies. ``--ranks N`` (FSDP2): 1/N of the
weights, gradients and AdamW per rank, plus the full copy of the weights every rank keeps for rank-0 generation and
what FSDP2 gathers. ``--engine-share U``: a vLLM engine holding U x ``--gpu-gb`` of the GPU (its weights in bf16 and
its KV cache), asleep while training with ``--engine-sleeps``. ``--config``: every agent of a config as it runs
(its ranks, mixed precision, engine options and ``run.placement``; ``--gpus`` = the cluster's GPUs for
``placement: auto``), one row per agent and the peak per GPU.

The estimate itself is :mod:`corl_bench.hf.fit` (the hf profile sizes its defaults and refuses a step that does not
fit with it). Architectures: the paper's models are written there from their published config.json files (hidden size, layers,
heads, KV heads, head dim, intermediate size, vocabulary, tied embeddings); ``--model`` also takes a config.json
path, a model folder or an installed model entry (``smol``, ``gemma3-270m``: read from the dequantised cache).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from corl_bench.hf.fit import KNOWN, Arch, estimate  # noqa: E402  (the library's estimate)

PAPER = {k: v for k, v in KNOWN.items() if "/" in k}
"""The paper's models (published config.json values)."""


#: rollout.max_batch of configs/paper per model (the KV cache of 8-KV-head models is 4x Qwen2.5-3B's per token).
PAPER_MAX_BATCH = {"Qwen/Qwen2.5-3B": 96, "meta-llama/Llama-3.2-3B-Instruct": 32, "Qwen/Qwen3-1.7B-Base": 32,
                   "Qwen/Qwen2.5-7B": 32, "meta-llama/Llama-3.1-8B-Instruct": 32}
COLUMNS = ["params_B", "weights", "full_copy", "grads+adamw", "gathered", "activations", "logits", "casts", "kv_cache",
           "engine", "engine_kv_room", "train_peak", "rollout_peak", "peak"]


def resolve_arch(ref: str) -> Arch:
    from corl_bench.hf.fit import arch_of
    from corl_bench.models.load import default_cache_root

    arch = arch_of(ref, default_cache_root())
    if arch is None:
        raise SystemExit(f"unknown model {ref!r}: pass one of {', '.join(KNOWN)}, a config.json, a folder or a cached "
                         "hub id")
    return arch


def config_rows(args: argparse.Namespace) -> tuple[str, list[dict], dict[str, float]]:
    """(placement, one row per agent, peak GB per GPU) of ``--config`` as it runs (``--ranks``, ``--mixed-precision``
    and ``--set`` override it)."""
    from corl_bench.config import load_config
    from corl_bench.hf import fit
    from corl_bench.hf.profile import HFProfile
    from corl_bench.registries import METHODS

    sets = list(args.set or [])
    if args.ranks:
        sets += [f"run.gpus_per_agent={args.ranks}", f"run.ranks_per_agent={args.ranks}"]
    if args.mixed_precision:
        sets += ["memory.autocast=bfloat16", "model.dtype=float32"]
    cfg = load_config(args.config, sets)
    archs = [resolve_arch(a.family) for a in cfg.cohort.agents]
    copies = HFProfile.copies(cfg, METHODS.get(cfg.method.name))
    db = 2 if cfg.model.dtype == "bfloat16" else 4
    kw = dict(gpu_gb=args.gpu_gb, cluster_gpus=args.gpus)
    kind, ests = fit.agent_estimates(cfg, archs, copies, db, **kw)
    from corl_bench.config import agent_resources

    rows = [{"model": f"{agent.name} ({agent.family})", "ranks": agent_resources(agent, cfg.run)[0],
             "max_batch": min(cfg.rollout.max_batch or 10**9, cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt),
             **{k: round(v, 2) for k, v in est.items()}} for agent, _, est in ests]
    peaks = {d: round(p, 2) for d, p in fit.device_peaks(cfg, archs, copies, db, **kw).items()}
    head = (f"{args.config}: placement {kind}, {cfg.memory.autocast if cfg.memory.autocast != 'off' else cfg.model.dtype}"
            f"{' (fp32 master weights)' if cfg.memory.autocast != 'off' else ''}, micro-batch {cfg.memory.micro_batch} "
            f"(per rank), logit chunk {cfg.memory.logit_chunk or 'none'}, rollout {cfg.rollout.backend} "
            f"{dict(cfg.rollout.engine_options) or ''}, GPU {args.gpu_gb or fit.ASSUMED_GPU_GB:g} GB")
    return head, rows, peaks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="repeatable; default: the paper's three models")
    ap.add_argument("--config", help="a config (configs/paper/*.yaml): its agents as they run, and the peak per GPU")
    ap.add_argument("--set", action="append", help="with --config: an override, e.g. --set memory.micro_batch=2")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--mixed-precision", action="store_true", help="memory.autocast=bfloat16 over fp32 weights")
    ap.add_argument("--ranks", type=int, default=0, help="FSDP2 ranks per agent, one GPU each (0: as configured / 1)")
    ap.add_argument("--engine-share", type=float, default=0.0,
                    help="a vLLM engine's gpu_memory_utilization (0: the in-process engine, its KV cache counted)")
    ap.add_argument("--engine-sleeps", action="store_true", help="the vLLM engine sleeps while its agent trains")
    ap.add_argument("--gpu-gb", type=float, default=None, help="GB of one GPU (default 80) for the engine's share")
    ap.add_argument("--gpus", type=float, default=None, help="with --config: the cluster's GPUs (placement auto)")
    ap.add_argument("--prompt-tokens", type=int, default=200, help="prompt length (MATH problems in a chat template)")
    ap.add_argument("--new-tokens", type=int, default=3072)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--logit-chunk", type=int, default=1024)
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="rollout.max_batch: sequences decoded at once (default: as configs/paper sets it per model: "
                         "96 for Qwen2.5-3B, 32 for the 8-KV-head models; 96 for others)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.config:
        head, rows, peaks = config_rows(args)
        if args.json:
            print(json.dumps({"config": args.config, "agents": rows, "per_gpu": peaks}, indent=1))
            return
        print(f"# {head}; GB = 1e9 bytes")
        _table(rows, ["ranks", "max_batch", *COLUMNS])
        print()
        print("| GPU | estimated peak (GB) |\n|---|---|")
        for device, peak in peaks.items():
            print(f"| {device} | {peak:.1f} |")
        return
    from corl_bench.hf.fit import ASSUMED_GPU_GB

    rows = []
    for ref in args.model or list(PAPER):
        a = resolve_arch(ref)
        est = estimate(a, dtype_bytes=4 if args.dtype == "float32" or args.mixed_precision else 2,
                       prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens, micro_batch=args.micro_batch,
                       logit_chunk=args.logit_chunk, checkpointing=not args.no_checkpointing,
                       max_batch=args.max_batch or PAPER_MAX_BATCH.get(ref, 96), mixed_precision=args.mixed_precision,
                       ranks=max(args.ranks, 1), engine_gb=args.engine_share * (args.gpu_gb or ASSUMED_GPU_GB),
                       engine_sleeps=args.engine_sleeps)
        rows.append({"model": a.name, "max_batch": args.max_batch or PAPER_MAX_BATCH.get(ref, 96),
                     **{k: round(v, 2) for k, v in est.items()}})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"# {'bf16 autocast over fp32 weights' if args.mixed_precision else args.dtype}, ranks {max(args.ranks, 1)}, "
          f"micro-batch {args.micro_batch} x ({args.prompt_tokens} + {args.new_tokens}) tokens, "
          f"logit chunk {args.logit_chunk or 'none'}, checkpointing {'off' if args.no_checkpointing else 'on'}, "
          f"rollout max_batch {args.max_batch or 'per model'}, vLLM share {args.engine_share or 'none'}; GB = 1e9 bytes")
    _table(rows, ["max_batch", *COLUMNS])


def _table(rows: list[dict], cols: list[str]) -> None:
    print("| model | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for r in rows:
        print(f"| {r['model']} | " + " | ".join(str(r[c]) if c in ("max_batch", "ranks") else f"{r[c]:.2f}"
                                                for c in cols) + " |")


if __name__ == "__main__":
    main()
