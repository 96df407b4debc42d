#!/usr/bin/env python
"""The optimizer step of a real cohort: ``torch.optim.AdamW`` against ``BlockAdamW``, side by side (issue 41).

    python scripts/bench_adamw.py                                   # SmolLM2-135M + Gemma-3-270M (the real study)
    python scripts/bench_adamw.py --models qwen2.5-coder-0.5b --json results/bench/adamw-qwen05b.json

For each model (its parameter shapes from ``corl_bench.hf.fit.KNOWN``: embeddings, every layer's projections and
norms, an untied head where the model has one), random fp32 weights and ``--steps`` steps of random gradients, in one
process: torch's step (``foreach`` off, what a CPU run used before) and the blocked step alternate, each on its own
copy of the same weights and gradients, one step at a time, so load drifts hit both. Reported per model: the median
seconds of a step for each (the first step, which also allocates AdamW's state, apart), the ratio, and whether the
weights and both moments came out bit-identical after every step. The CPU model, instruction sets and threads are
recorded with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def shapes(name: str) -> list[tuple[int, ...]]:
    """Parameter shapes of a decoder-only LM of ``KNOWN[name]``'s sizes (biases and per-head norms left out)."""
    from corl_bench.hf.fit import KNOWN

    a = KNOWN[name]
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    layer = [(q, a.hidden), (kv, a.hidden), (kv, a.hidden), (a.hidden, q), (a.intermediate, a.hidden),
             (a.intermediate, a.hidden), (a.hidden, a.intermediate), (a.hidden,), (a.hidden,)]
    return [(a.vocab, a.hidden), *layer * a.layers, (a.hidden,), *([] if a.tied else [(a.vocab, a.hidden)])]


def bench(name: str, steps: int, lr: float) -> dict:
    import torch

    from corl_bench.train.optim import BlockAdamW

    torch.manual_seed(0)
    base = [torch.randn(s) * 0.02 for s in shapes(name)]
    sides = {}
    for kind, cls in (("torch", torch.optim.AdamW), ("block", BlockAdamW)):
        params = [torch.nn.Parameter(t.clone()) for t in base]
        opt = cls(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.0, foreach=False)
        sides[kind] = (params, opt, [])
    del base
    gen = torch.Generator().manual_seed(1)
    identical = True
    for _ in range(steps):
        grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in sides["torch"][0]]
        for kind in ("torch", "block"):
            params, opt, times = sides[kind]
            for p, g in zip(params, grads):
                p.grad = g.clone()
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        (pt, ot, _), (pb, ob, _) = sides["torch"], sides["block"]
        identical = identical and all(
            torch.equal(a, b) and torch.equal(ot.state[a]["exp_avg"], ob.state[b]["exp_avg"])
            and torch.equal(ot.state[a]["exp_avg_sq"], ob.state[b]["exp_avg_sq"]) for a, b in zip(pt, pb))
    t, b = sides["torch"][2], sides["block"][2]
    return {"model": name, "parameters": sum(p.numel() for p in sides["torch"][0]), "steps": steps,
            "first_step_s": {"torch": t[0], "block": b[0]},
            "median_step_s": {"torch": statistics.median(t[1:]), "block": statistics.median(b[1:])},
            "ratio": statistics.median(t[1:]) / statistics.median(b[1:]), "bit_identical": identical}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smol,gemma3-270m", help="comma list of corl_bench.hf.fit.KNOWN names")
    ap.add_argument("--steps", type=int, default=6, help="steps per side (the first is reported apart)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    if args.steps < 2:
        raise SystemExit("--steps must be at least 2 (the first step is reported apart); pass --steps 6")
    import torch

    from corl_bench.hf.fit import KNOWN
    from corl_bench.train.precision import machine_facts

    if args.threads:
        torch.set_num_threads(args.threads)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in KNOWN]
    if unknown:
        raise SystemExit(f"unknown model {unknown[0]!r}; pick from {', '.join(KNOWN)}")
    rows = [bench(m, args.steps, args.lr) for m in names]
    out = {"machine": machine_facts(), "rows": rows,
           "command": "python scripts/bench_adamw.py " + " ".join(sys.argv[1:])}
    for r in rows:
        print(f"{r['model']:>20}  {r['parameters'] / 1e6:6.1f} M params  torch {r['median_step_s']['torch']:.3f} s  "
              f"block {r['median_step_s']['block']:.3f} s  {r['ratio']:.2f}x  "
              f"(first step {r['first_step_s']['torch']:.2f} / {r['first_step_s']['block']:.2f} s)  "
              f"bit-identical: {r['bit_identical']}")
    print(f"machine: {out['machine']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
