#!/usr/bin/env python
"""Evaluator speed: corl-bench's engine against lm-eval's HF backend, same model, benchmark and decoding.

    python scripts/bench_eval.py                                  # smol on 16 GSM8K problems, k=4, 128 tokens
    python scripts/bench_eval.py --model smol --benchmark math500 --problems 32 --samples 4 --max-new-tokens 256
    python scripts/bench_eval.py --json out.json

Both engines get the same prompts (the spec's template with the model's chat template, rendered once) and the same
decoding (temperature, top-p, k, max new tokens). Reported: wall time of generation + scoring per engine, the ratio
of total times (repeat r samples with seed r in every engine, so the per-repeat ratios are paired too), and the
scores. lm-eval's completions are then re-scored with corl-bench's scorer: on identical completions the two
must agree exactly (the script exits 1 if they do not). Run it on an otherwise idle machine; the order of the
engines rotates over --repeats so that warm caches do not favour one of them.

``--ablate`` adds a third engine, ours with transformers' ``DynamicCache`` instead of the in-place growing KV cache
(``corl_bench/rollout/kvcache.py``), so the report separates what the cache buys from what prefill sharing and
batch compaction buy. Beside the times, each engine's generations are summarised (accuracy, mean tokens, clipped
and no-answer shares): on real generations the engines draw different random streams, so these agree only in
distribution.
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
    ap.add_argument("--problems", type=int, default=16, help="the first N problems")
    ap.add_argument("--problem-ids", default=None, help="comma list of problem ids instead of the first N")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64, help="lm-eval HFLM batch size (ours batches all k)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ablate", action="store_true", help="also time ours with DynamicCache (no growing KV cache)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_DATASETS_CACHE", str(Path(tempfile.gettempdir()) / "corl-bench-bench-hf-datasets"))
    from lm_eval.models.huggingface import HFLM

    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.evaluator import evaluate_spec, row_grader, with_overrides
    from corl_bench.eval.lmeval_bridge import rows_from_samples, run_lm_eval
    from corl_bench.eval.metrics import score_predictions
    from corl_bench.models.load import load_model
    from corl_bench.results import read_complete_rows

    spec = get_spec(args.benchmark)
    dec = with_overrides(spec.decoding, samples=args.samples, max_new_tokens=args.max_new_tokens, greedy=False)
    items = build_items(spec, load_rows(spec, args.data_dir))
    if args.problem_ids:
        wanted = args.problem_ids.split(",")
        items = [it for it in items if it.id in wanted]
        if len(items) != len(wanted):
            ap.error(f"--problem-ids: {len(wanted) - len(items)} of the ids are not in {spec.key}")
    else:
        items = items[: args.problems]
    model, tok = load_model(args.model)
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=args.batch_size)
    engines = ["ours", "lm-eval"] + (["ours-dynamic-cache"] if args.ablate else [])
    times: dict[str, list[float]] = {e: [] for e in engines}
    rows: dict[str, list[dict]] = {e: [] for e in engines}
    agree = True
    for rep in range(args.repeats):
        for engine in engines[rep % len(engines):] + engines[: rep % len(engines)]:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                if engine != "lm-eval":
                    evaluate_spec(model, tok, spec, items, out_path=Path(tmp) / "p.jsonl", seed=rep, decoding=dec,
                                  chunk=len(items), engine_kwargs={"grow_cache": engine == "ours"})
                    times[engine].append(time.perf_counter() - t0)
                    rows[engine].extend(read_complete_rows(Path(tmp) / "p.jsonl")[0])
                else:
                    metrics, samples = run_lm_eval(lm, spec, items, Path(tmp), tokenizer=tok, decoding=dec, seed=rep)
                    times[engine].append(time.perf_counter() - t0)
                    theirs = rows_from_samples(spec, samples, dec, tok)
                    rescored = score_predictions(theirs, row_grader(spec))
                    rows[engine].extend(theirs)
                    same = abs(metrics["avg_k"] - rescored.avg_k) < 1e-12 and \
                        ("maj_k" not in metrics or abs(metrics["maj_k"] - rescored.maj_k) < 1e-12)
                    agree = agree and same
    best = {k: min(v) for k, v in times.items()}
    report = {"model": args.model, "benchmark": spec.key, "problems": len(items), "samples": args.samples,
              "max_new_tokens": args.max_new_tokens, "threads": torch.get_num_threads(), "seconds": times,
              "best_seconds": best,
              # the headline: total time over all repeats (each repeat is one seed for every engine)
              "speedup_ours_over_lm_eval": sum(times["lm-eval"]) / sum(times["ours"]),
              "generations": {e: summarise(r, args.max_new_tokens, row_grader(spec)) for e, r in rows.items()},
              "same_distribution": same_distribution(rows["ours"], rows["lm-eval"]),
              "identical_scoring_on_identical_completions": agree,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}
    # repeat r runs every engine with sampling seed r: the per-repeat ratios are paired (same seed, same prompts)
    report["speedup_per_repeat"] = [t / o for t, o in zip(times["lm-eval"], times["ours"])]
    if args.ablate:
        report["speedup_ours_over_ours_dynamic_cache"] = sum(times["ours-dynamic-cache"]) / sum(times["ours"])
        report["cache_speedup_per_repeat"] = [t / o for t, o in zip(times["ours-dynamic-cache"], times["ours"])]
    print(json.dumps(report, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if agree else 1


def summarise(rows: list[dict], max_new_tokens: int, grader) -> dict:
    """Accuracy, mean generated tokens and clipped / no-answer shares of one engine's rows (all repeats)."""
    from corl_bench.eval.metrics import score_predictions

    scores = score_predictions(rows, grader)
    toks = [r["n_tokens"] for r in rows if r.get("n_tokens") is not None]
    # ours records whether a row finished; lm-eval does not, so its rows count as clipped at the token cap
    # (its n_tokens re-tokenise the returned text, which has no EOS token)
    clipped = [not r["finished"] if "finished" in r else r.get("n_tokens", 0) >= max_new_tokens for r in rows]
    return {"samples": len(rows), "accuracy": scores.avg_k,
            "mean_tokens": sum(toks) / len(toks) if toks else None,
            "clipped_share": sum(clipped) / len(rows),
            "no_answer_share": scores.extraction_failure}


def same_distribution(a: list[dict], b: list[dict]) -> dict:
    """Per-problem correct counts of two engines and a Cochran-Mantel-Haenszel test stratified by problem (no
    continuity correction): do the engines solve the same problems at the same rates? A small p says they differ."""
    import math
    from collections import Counter

    def counts(rows):
        return Counter(str(r["problem_id"]) for r in rows if r["correct"]), Counter(str(r["problem_id"]) for r in rows)

    (ca, na), (cb, nb) = counts(a), counts(b)
    dev = var = 0.0
    per = {}
    for pid in sorted(set(na) & set(nb)):
        x, m, y, n = ca[pid], na[pid], cb[pid], nb[pid]
        per[pid] = {"ours": [x, m], "lm-eval": [y, n]}
        total, right = m + n, x + y
        if total > 1:
            dev += x - m * right / total
            var += m * n * right * (total - right) / (total ** 2 * (total - 1))
    chi2 = dev ** 2 / var if var > 0 else 0.0
    return {"per_problem": per, "cmh_chi2": chi2, "cmh_p": math.erfc(math.sqrt(chi2 / 2)) if var > 0 else 1.0}


if __name__ == "__main__":
    sys.exit(main())
