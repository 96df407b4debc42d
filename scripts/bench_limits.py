#!/usr/bin/env python
"""How close to the machine's limits a model's training pass and decode step run (issue 41, item 5).

    python scripts/bench_limits.py                                   # micro, smol, qwen2.5-coder-0.5b at 2 threads
    python scripts/bench_limits.py --models smol --threads 1 --json results/bench/limits.json

Per model, each in its own process, at the real study's step shape (8 prompts x 4 samples = 32 rows, ``--tokens``
64 tokens a row: a ~32-token prompt and 32 new tokens) in fp32:

* **Training forward+backward**: the model's forward on 32 x 64 random token ids, the log-probability of the next
  token, backward (what the GRPO update computes per micro-batch), median of ``--repeats`` timed passes after a
  warm-up. Its FLOPs are counted the usual way (6 x the weights of every matrix product, LM head included, x tokens,
  plus the attention scores and mixing: 12 x layers x rows x tokens^2 x width); achieved GFLOP/s is divided by the
  **peak**: the best fp32 rate of a plain matrix product at this model's own training shapes (tokens x hidden x
  intermediate, tokens x hidden x vocabulary), measured in the same process.
* **Decode step**: 32 rows at a 48-token context (a prefill, then ``--decode-steps`` single-token steps through the
  fast engine's growing KV cache), tokens/s = rows / median step seconds. Two bounds: memory bandwidth (each step
  reads every matrix-product weight once and the KV cache: rows / (bytes / measured read bandwidth)) and compute
  (the peak above over 2 x weights FLOPs per token). The lower bound is the one that binds: at 32 rows a 2-core
  CPU's decode step is compute-bound, not bandwidth-bound, for every model here (the script prints which).
* **Read bandwidth**: ``x.sum()`` over a 1 GiB fp32 tensor on the same threads (GB/s, the best of three reads of
  each of four fresh tensors).

The CPU model, instruction sets, threads and load are recorded with every model's figures. Random token ids give the
same FLOPs and memory traffic as text; nothing here depends on the weights' values.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"micro": "qwen2-bpe", "smol": "smol", "qwen2.5-0.5b": "qwen2.5-coder-0.5b"}


def read_bandwidth(gib: float = 1.0, tensors: int = 4, repeats: int = 3) -> float:
    """Best GB/s of summing a ``gib`` GiB fp32 tensor (a streaming read) on this process's threads, over ``tensors``
    fresh allocations of ``repeats`` reads each (one allocation can read ~40 % slower than another here: where its
    pages landed)."""
    import torch

    best = float("inf")
    for _ in range(tensors):
        x = torch.ones(int(gib * 2**30) // 4)
        x.sum()
        for _ in range(repeats):
            t0 = time.perf_counter()
            x.sum()
            best = min(best, time.perf_counter() - t0)
        del x
    return int(gib * 2**30) // 4 * 4 / best / 1e9


def matmul_weights(model) -> int:
    """Weights that take part in a matrix product per token: every Linear (the LM head included, tied or not)."""
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _shape(model) -> dict:
    c = model.config.get_text_config()
    heads = c.num_attention_heads
    return {"layers": c.num_hidden_layers, "hidden": c.hidden_size, "intermediate": c.intermediate_size,
            "vocab": c.vocab_size, "kv_heads": getattr(c, "num_key_value_heads", heads) or heads,
            "head_dim": getattr(c, "head_dim", None) or c.hidden_size // heads, "heads": heads}


def worker(args: argparse.Namespace) -> dict:
    import torch

    from corl_bench.models.load import load_model
    from corl_bench.rollout.kvcache import growing_cache
    from corl_bench.train.precision import machine_facts, matmul_rate

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, _ = load_model(MODELS[args.model])
    model.float()
    s, n_w = _shape(model), matmul_weights(model)
    rows, tokens = args.rows, args.tokens
    n = rows * tokens
    peak = max(matmul_rate("float32", (n, s["hidden"], k), seconds=0.5) for k in (s["intermediate"], s["vocab"]))
    bw = read_bandwidth()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, s["vocab"], (rows, tokens), generator=gen)

    def train_pass() -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).mean()
        logp.backward()
        return time.perf_counter() - t0

    model.train()
    train_pass()
    train_s = statistics.median(train_pass() for _ in range(args.repeats))
    attn = 12 * s["layers"] * rows * tokens ** 2 * s["heads"] * s["head_dim"]
    train_flops = 6 * n_w * n + attn
    model.zero_grad(set_to_none=True)
    model.eval()

    ctx = args.context
    kw = "cache" if "cache" in __import__("inspect").signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        prompt = torch.randint(0, s["vocab"], (rows, ctx), generator=gen)
        att = torch.ones(prompt.shape, dtype=torch.long)
        res = model(input_ids=prompt, attention_mask=att, use_cache=True, logits_to_keep=1,
                    **{kw: growing_cache(model, reserve=args.decode_steps + 2, limit=ctx + args.decode_steps + 2)})
        cache, times = getattr(res, kw), []
        nxt = torch.randint(0, s["vocab"], (rows, 1), generator=gen)
        for i in range(args.decode_steps + 1):
            att = torch.cat([att, torch.ones((rows, 1), dtype=att.dtype)], dim=-1)
            t0 = time.perf_counter()
            r = model(input_ids=nxt, attention_mask=att, use_cache=True, logits_to_keep=1, **{kw: cache})
            nxt = r.logits[:, -1].argmax(-1, keepdim=True)
            if i:
                times.append(time.perf_counter() - t0)
            cache = getattr(r, kw)
    step_s = statistics.median(times)
    kv_bytes = 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * (ctx + args.decode_steps // 2) * rows * 4
    step_bytes = 4 * n_w + kv_bytes
    bw_bound = rows / (step_bytes / (bw * 1e9))
    compute_bound = peak * 1e9 / (2 * n_w)
    decode = rows / step_s
    return {"model": args.model, "entry": MODELS[args.model], "matmul_weights": n_w, "shape": s,
            "rows": rows, "tokens": tokens, "peak_gflops": peak, "read_gb_s": bw,
            "train": {"seconds": train_s, "gflop": train_flops / 1e9, "gflops": train_flops / train_s / 1e9,
                      "fraction_of_peak": train_flops / train_s / 1e9 / peak},
            "decode": {"context": ctx, "step_ms": step_s * 1000, "tokens_per_s": decode,
                       "bandwidth_bound_tokens_per_s": bw_bound, "compute_bound_tokens_per_s": compute_bound,
                       "bytes_per_step": step_bytes, "fraction_of_bandwidth_bound": decode / bw_bound,
                       "fraction_of_compute_bound": decode / compute_bound,
                       "binding": "bandwidth" if bw_bound < compute_bound else "compute",
                       "fraction_of_binding_bound": decode / min(bw_bound, compute_bound)},
            "machine": machine_facts()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--rows", type=int, default=32, help="sequences (8 prompts x 4 samples)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens a training row holds")
    ap.add_argument("--context", type=int, default=48, help="KV context a decode step attends to")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.model = args.worker
        print(json.dumps(worker(args)))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error(f"unknown model {bad[0]!r}; models: {', '.join(MODELS)}")
    out = []
    passed = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("threads", "rows", "tokens", "context",
                                                                     "repeats", "decode_steps")]
    for m in models:
        proc = subprocess.run([sys.executable, __file__, "--worker", m, *passed], capture_output=True, text=True,
                              cwd=ROOT, env=dict(os.environ, PYTHONWARNINGS="ignore"))
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode or not lines:
            raise SystemExit(f"{m} failed:\n{proc.stderr[-3000:]}")
        out.append(json.loads(lines[-1]))
        r = out[-1]
        print(f"{m}: train fwd+bwd {r['train']['gflops']:.0f} GFLOP/s = {100 * r['train']['fraction_of_peak']:.0f} % of "
              f"{r['peak_gflops']:.0f} (fp32 peak at its shapes); decode {r['decode']['tokens_per_s']:.0f} tok/s at "
              f"{r['rows']} rows = {100 * r['decode']['fraction_of_bandwidth_bound']:.0f} % of the bandwidth bound "
              f"({r['decode']['bandwidth_bound_tokens_per_s']:.0f}, {r['read_gb_s']:.1f} GB/s), "
              f"{100 * r['decode']['fraction_of_compute_bound']:.0f} % of the compute bound "
              f"({r['decode']['compute_bound_tokens_per_s']:.0f}); binding: {r['decode']['binding']}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": "python scripts/bench_limits.py " + " ".join(
            [f"--models {','.join(models)}", *passed]), "models": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
