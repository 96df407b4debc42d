#!/usr/bin/env python
"""Evaluator speed: corl-bench's engine against lm-eval's HF backend, same model, benchmark and decoding.

    python scripts/bench_eval.py                                  # smol on 16 GSM8K problems, k=4, 128 tokens
    python scripts/bench_eval.py --model smol --benchmark math500 --problems 32 --samples 4 --max-new-tokens 256
    python scripts/bench_eval.py --json out.json

Both engines get the same prompts (the spec's template with the model's chat template, rendered once) and the same
decoding (temperature, top-p, k, max new tokens). Reported: wall time of generation + scoring per engine, the ratio,
and the scores. lm-eval's completions are then re-scored with corl-bench's scorer: on identical completions the two
must agree exactly (the script exits 1 if they do not). Run it on an otherwise idle machine; the order of the two
engines alternates over --repeats so that warm caches do not favour one of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smol")
    ap.add_argument("--benchmark", default="gsm8k")
    ap.add_argument("--data-dir", default=os.environ.get("CORL_BENCH_DATA") or
                    str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64, help="lm-eval HFLM batch size (ours batches all k)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    os.environ.setdefault("HF_DATASETS_CACHE", str(Path(tempfile.gettempdir()) / "corl-bench-bench-hf-datasets"))
    from lm_eval.models.huggingface import HFLM

    from corl_bench.bench import build_items
    from corl_bench.benchspec import get_spec
    from corl_bench.data import load_rows
    from corl_bench.evaluator import evaluate_spec, row_grader, with_overrides
    from corl_bench.lmeval_bridge import rows_from_samples, run_lm_eval
    from corl_bench.metrics import score_predictions
    from corl_bench.models import load_model

    spec = get_spec(args.benchmark)
    dec = with_overrides(spec.decoding, samples=args.samples, max_new_tokens=args.max_new_tokens, greedy=False)
    items = build_items(spec, load_rows(spec, args.data_dir))[: args.problems]
    model, tok = load_model(args.model)
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=args.batch_size)
    times: dict[str, list[float]] = {"ours": [], "lm-eval": []}
    scores: dict[str, object] = {}
    agree = True
    for rep in range(args.repeats):
        order = ("ours", "lm-eval") if rep % 2 == 0 else ("lm-eval", "ours")
        for engine in order:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                if engine == "ours":
                    s = evaluate_spec(model, tok, spec, items, out_path=Path(tmp) / "p.jsonl", seed=rep,
                                      decoding=dec, chunk=len(items))
                    times[engine].append(time.perf_counter() - t0)
                    scores[engine] = s
                else:
                    metrics, samples = run_lm_eval(lm, spec, items, Path(tmp), tokenizer=tok, decoding=dec, seed=rep)
                    times[engine].append(time.perf_counter() - t0)
                    rescored = score_predictions(rows_from_samples(spec, samples, dec), row_grader(spec))
                    scores[engine] = metrics
                    same = abs(metrics["avg_k"] - rescored.avg_k) < 1e-12 and \
                        ("maj_k" not in metrics or abs(metrics["maj_k"] - rescored.maj_k) < 1e-12)
                    agree = agree and same
    best = {k: min(v) for k, v in times.items()}
    report = {"model": args.model, "benchmark": spec.key, "problems": len(items), "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "seconds": times, "best_seconds": best,
              "speedup_ours_over_lm_eval": best["lm-eval"] / best["ours"],
              "ours": {"avg_k": scores["ours"].avg_k, "maj_k": scores["ours"].maj_k},
              "lm_eval": scores["lm-eval"], "identical_scoring_on_identical_completions": agree,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}
    print(json.dumps(report, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
