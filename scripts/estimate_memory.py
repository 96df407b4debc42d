#!/usr/bin/env python
"""Estimate the memory one agent needs for the paper's setting, from the model's architecture alone (no weights).

    python scripts/estimate_memory.py                                  # the paper's three models, configs/paper settings
    python scripts/estimate_memory.py --model path/to/config.json --micro-batch 4 --max-batch 64
    python scripts/estimate_memory.py --model smol --new-tokens 256 --prompt-tokens 40 \\
        --micro-batch 8 --logit-chunk 0 --no-checkpointing                      # the shape bench_memory.py measures

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
top; the checks against measured peaks are in the README.

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
PAPER_MAX_BATCH = {"Qwen/Qwen2.5-3B": 96, "meta-llama/Llama-3.2-3B-Instruct": 32, "Qwen/Qwen3-1.7B-Base": 32}


def resolve_arch(ref: str) -> Arch:
    from corl_bench.hf.fit import arch_of
    from corl_bench.models.load import default_cache_root

    arch = arch_of(ref, default_cache_root())
    if arch is None:
        raise SystemExit(f"unknown model {ref!r}: pass one of {', '.join(KNOWN)}, a config.json, a folder or a cached "
                         "hub id")
    return arch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="repeatable; default: the paper's three models")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
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
    rows = []
    for ref in args.model or list(PAPER):
        a = resolve_arch(ref)
        est = estimate(a, dtype_bytes=4 if args.dtype == "float32" else 2, prompt_tokens=args.prompt_tokens,
                       new_tokens=args.new_tokens, micro_batch=args.micro_batch, logit_chunk=args.logit_chunk,
                       checkpointing=not args.no_checkpointing, max_batch=args.max_batch or PAPER_MAX_BATCH.get(ref, 96))
        rows.append({"model": a.name, "max_batch": args.max_batch or PAPER_MAX_BATCH.get(ref, 96),
                     **{k: round(v, 2) for k, v in est.items()}})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"# {args.dtype}, micro-batch {args.micro_batch} x ({args.prompt_tokens} + {args.new_tokens}) tokens, "
          f"logit chunk {args.logit_chunk or 'none'}, checkpointing {'off' if args.no_checkpointing else 'on'}, "
          f"rollout max_batch {args.max_batch or 'per model'}; GB = 1e9 bytes")
    cols = ["max_batch", "params_B", "weights", "grads+adamw", "activations", "logits", "kv_cache", "train_peak", "rollout_peak",
            "peak"]
    print("| model | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for r in rows:
        print(f"| {r['model']} | " + " | ".join(str(r[c]) if c == "max_batch" else f"{r[c]:.2f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
