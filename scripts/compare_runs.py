#!/usr/bin/env python
"""Are two sets of runs bit-identical? Metrics (timing fields dropped), sample logs, predictions, final weights and
run records (run.json without its times, durations and run id).

    python scripts/compare_runs.py results/before results/after     # pairs runs by directory name
    python scripts/compare_runs.py RUN_A RUN_B                      # two run directories

A folder holding run directories (a ``runs/`` folder or an ``--output-dir``) is compared run by run, matched by
name; exit status 1 if any pair differs or a run is missing on one side. Used to check that a refactor leaves every
result unchanged (the same fingerprint the resume and kill tests compare).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _runs(root: Path) -> dict[str, Path]:
    from corl_bench.results import RunDir, find_runs

    if RunDir(root).is_run():
        return {root.name: root}
    return {rd.name: rd.path for rd in find_runs(root)}


def record_diff(a: Path, b: Path) -> list[str]:
    """``run.json (key, ...)`` naming the run record fields that differ (times, durations and run id aside)."""
    from corl_bench.results import RunDir

    ra, rb = RunDir(a).record().comparable(), RunDir(b).record().comparable()
    keys = [k for k in dict.fromkeys([*ra, *rb]) if ra.get(k) != rb.get(k)]
    return [f"run.json ({', '.join(keys)})"] if keys else []


def main() -> int:
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    runs_a, runs_b = _runs(args.a), _runs(args.b)
    from corl_bench.results import RunDir

    single = len(runs_a) == len(runs_b) == 1 and RunDir(args.a).is_run()
    pairs = [(next(iter(runs_a.values())), next(iter(runs_b.values())))] if single else \
        [(runs_a[n], runs_b.get(n)) for n in sorted(runs_a)] + [(None, runs_b[n]) for n in sorted(set(runs_b) - set(runs_a))]
    bad = 0
    for a, b in pairs:
        if a is None or b is None:
            print(f"MISSING  {(a or b).name}: only in {args.a if b is None else args.b}")
            bad += 1
            continue
        diff = fingerprint_diff(run_fingerprint(a), run_fingerprint(b)) + record_diff(a, b)
        print(f"{'DIFFER ' if diff else 'SAME   '}  {a.name}" + (f": {', '.join(diff)}" if diff else ""))
        bad += bool(diff)
    print(f"{len(pairs) - bad} of {len(pairs)} runs bit-identical (metrics without timings, samples, predictions, "
          "final weights, run.json without times)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
