#!/usr/bin/env python
"""Where a CPU decode step goes: one token for B rows at a given context length, DynamicCache against GrowingCache.

    python scripts/bench_decode_step.py                       # smol, 48 rows, contexts 150..600
    python scripts/bench_decode_step.py --rows 8 --contexts 200,1000 --steps 20 --profile

For every context length both caches are filled with the same random prompt (one prefill each), then decode
``--steps`` tokens one at a time, alternating which cache goes first; reported is the median milliseconds per step
and the ratio. ``--profile`` adds the torch profiler's top operators for each cache (the DynamicCache's share of
``aten::cat`` is the point). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smol")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--contexts", default="150,300,600")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    import torch
    from transformers import DynamicCache

    from corl_bench.models.load import load_model
    from corl_bench.rollout.kvcache import growing_cache

    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_model(args.model)
    kw = "cache" if "cache" in __import__("inspect").signature(model.forward).parameters else "past_key_values"
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.get_text_config().vocab_size
    report = {"model": args.model, "rows": args.rows, "threads": torch.get_num_threads(), "contexts": {}}

    @torch.no_grad()
    def run(make_cache, ids, steps, profile=False):
        cache = make_cache()
        att = torch.ones(ids.shape, dtype=torch.long)
        res = model(input_ids=ids, attention_mask=att, use_cache=True, logits_to_keep=1, **{kw: cache})
        cache, times = getattr(res, kw), []
        nxt = torch.randint(0, vocab, (ids.shape[0], 1), generator=gen)

        def step():
            nonlocal att, cache
            att = torch.cat([att, torch.ones((att.shape[0], 1), dtype=att.dtype)], dim=-1)
            r = model(input_ids=nxt, attention_mask=att, use_cache=True, **{kw: cache})
            cache = getattr(r, kw)

        if profile:
            from torch.profiler import ProfilerActivity, profile as prof
            with prof(activities=[ProfilerActivity.CPU]) as p:
                for _ in range(steps):
                    step()
            return p.key_averages().table(sort_by="self_cpu_time_total", row_limit=6)
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    caches = {"dynamic": lambda: DynamicCache(),
              "growing": lambda: growing_cache(model, reserve=64, limit=10**6)}
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = torch.randint(0, vocab, (args.rows, ctx), generator=gen)
        ms: dict[str, float] = {}
        for name in (("dynamic", "growing") if ctx % 2 == 0 else ("growing", "dynamic")):
            ms[name] = run(caches[name], ids, args.steps)
        entry = {"ms_per_step": ms, "dynamic_over_growing": ms["dynamic"] / ms["growing"]}
        report["contexts"][ctx] = entry
        print(f"context {ctx:5d}: dynamic {ms['dynamic']:7.1f} ms/step   growing {ms['growing']:7.1f} ms/step   "
              f"ratio {entry['dynamic_over_growing']:.2f}x", flush=True)
        if args.profile:
            for name, make in caches.items():
                print(f"--- {name}, context {ctx}\n{run(make, ids, max(2, args.steps // 3), profile=True)}")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
