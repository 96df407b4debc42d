#!/usr/bin/env python
"""Estimate the memory one agent needs for the paper's setting, from the model's architecture alone (no weights).

    python scripts/estimate_memory.py                                  # the paper's three models, configs/paper settings
    python scripts/estimate_memory.py --model path/to/config.json --micro-batch 4 --max-batch 64
    python scripts/estimate_memory.py --model smol --prompts 8 --samples 8 --new-tokens 256 --prompt-tokens 40 \\
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

Architectures: the paper's models are written here from their published config.json files (hidden size, layers,
heads, KV heads, head dim, intermediate size, vocabulary, tied embeddings); ``--model`` also takes a config.json
path, a model folder or an installed model entry (``smol``, ``gemma3-270m``: read from the dequantised cache).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Arch:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @property
    def params(self) -> int:
        """Decoder parameters: attention (q, k, v, o; biases ignored), gated MLP (3 matrices), norms, embeddings."""
        attn = self.hidden * self.head_dim * (self.heads * 2 + self.kv_heads * 2)
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + emb + self.hidden

    def kv_bytes_per_token(self, bytes_per_value: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * bytes_per_value


#: From the published config.json of each model (huggingface.co/<id>/blob/main/config.json).
PAPER = {
    "Qwen/Qwen2.5-3B": Arch("Qwen/Qwen2.5-3B", 2048, 36, 16, 2, 128, 11008, 151936, True),
    "meta-llama/Llama-3.2-3B-Instruct": Arch("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256,
                                             True),
    "Qwen/Qwen3-1.7B-Base": Arch("Qwen/Qwen3-1.7B-Base", 2048, 28, 16, 8, 128, 6144, 151936, True),
}


#: rollout.max_batch of configs/paper per model (the KV cache of 8-KV-head models is 4x Qwen2.5-3B's per token).
PAPER_MAX_BATCH = {"Qwen/Qwen2.5-3B": 96, "meta-llama/Llama-3.2-3B-Instruct": 32, "Qwen/Qwen3-1.7B-Base": 32}


def from_config(path: Path, name: str) -> Arch:
    c = json.loads(path.read_text(encoding="utf-8"))
    c = c.get("text_config", c)
    hidden = c["hidden_size"]
    heads = c["num_attention_heads"]
    return Arch(name, hidden, c["num_hidden_layers"], heads, c.get("num_key_value_heads", heads),
                c.get("head_dim") or hidden // heads, c["intermediate_size"], c["vocab_size"],
                bool(c.get("tie_word_embeddings", True)))


def resolve_arch(ref: str) -> Arch:
    if ref in PAPER:
        return PAPER[ref]
    path = Path(ref)
    if path.is_file():
        return from_config(path, path.parent.name)
    if (path / "config.json").is_file():
        return from_config(path / "config.json", path.name)
    from corl_bench.eval.models import ENTRIES, entry_dir
    from corl_bench.micro.profile import default_cache_root

    if ref in ENTRIES:
        folder = entry_dir(ref, default_cache_root())
        if (folder / "config.json").is_file():
            return from_config(folder / "config.json", ref)
        raise SystemExit(f"{ref}: not dequantised yet; run `corl-bench eval {ref} -b gsm8k --max-problems 1` once")
    raise SystemExit(f"unknown model {ref!r}: pass one of {', '.join(PAPER)}, a config.json, a folder or a model entry")


def estimate(a: Arch, *, dtype_bytes: int, prompt_tokens: int, new_tokens: int, micro_batch: int, logit_chunk: int,
             checkpointing: bool, max_batch: int) -> dict[str, float]:
    gb = 1e9
    n = a.params
    tokens = prompt_tokens + new_tokens
    weights = n * dtype_bytes
    train_state = n * dtype_bytes * 3  # gradients + AdamW exp_avg + exp_avg_sq, in the parameter dtype
    per_token_layer = (16 * a.hidden + 3 * a.intermediate) * dtype_bytes  # one layer's saved intermediates per token
    rows = micro_batch * tokens
    if checkpointing:
        acts = rows * a.hidden * dtype_bytes * a.layers + rows * per_token_layer
    else:
        acts = rows * per_token_layer * a.layers
    logit_rows = logit_chunk if logit_chunk > 0 else micro_batch * new_tokens
    logits = logit_rows * a.vocab * 4 * 3
    kv = max_batch * tokens * a.kv_bytes_per_token(dtype_bytes)
    train_peak = weights + train_state + acts + logits
    rollout_peak = weights + train_state + kv  # optimiser state stays resident while the agent generates
    return {"params_B": n / 1e9, "weights": weights / gb, "grads+adamw": train_state / gb, "activations": acts / gb,
            "logits": logits / gb, "kv_cache": kv / gb, "train_peak": train_peak / gb, "rollout_peak": rollout_peak / gb,
            "peak": max(train_peak, rollout_peak) / gb}


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
