#!/usr/bin/env python
"""Wall time of one study cell at two commits (or two settings), side by side on one machine, alternating.

    python scripts/cell_speed.py --old 5262e23 --new HEAD                       # corl x smol-cross-family-arith, s0
    python scripts/cell_speed.py --old 5262e23 --new HEAD --new-set memory.autocast=auto --repeats 2
    python scripts/cell_speed.py --cell ttrl:smol-cross-family-arith --seed 1 --json results/bench/cell-speed.json

A cell is a (method, cohort, seed) of a sweep file (default ``sweeps/real-study.yaml``): its ``set:`` items and the
cell's own, exactly as the sweep runs it, plus ``--old-set`` / ``--new-set`` for one side. Each commit is checked out
into a temporary git worktree and run there with ``python -m corl_bench run`` in its own process; the sides
alternate (old, new, new, old, ...) so drift on a noisy machine hits both. Reported per side: the wall time of the
process, the run's own phase times (models, train, eval) and its mean step seconds by phase; then whether the two
sides' results are bit-identical (``scripts/compare_runs.py``'s fingerprint: metrics without timings, predictions,
run record) and, where they are not, every agent's greedy and sampled accuracy on both sides. The machine's CPU, its
instruction sets, threads and load averages are recorded with the figures (``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cell_args(sweep: Path, method: str, cohort: str, tag: str) -> list[str]:
    """``--set`` items of the sweep's common settings and of the cell (method, cohort, tag), written as the sweep
    itself passes them (:func:`corl_bench.train.sweep.cell_config`)."""
    from corl_bench.train.sweep import load_sweep

    spec = load_sweep(sweep)
    cells = [c for c in spec.cells if c.get("method") == method and c.get("cohort") == cohort
             and str(c.get("tag") or "") == tag]
    if not cells:
        raise SystemExit(f"{sweep} has no cell {method}:{cohort}{':' + tag if tag else ''}; see its cells: list")
    items = [*spec.set.items(), *(cells[0].get("set") or {}).items()] + ([("run.tag", tag)] if tag else [])
    return [x for k, v in items for x in ("--set", f"{k}={v}")]


def worktree(commit: str, where: Path) -> Path:
    """A detached checkout of ``commit`` at ``where`` that imports its own package (the product-card folders linked
    into it, as the editable install maps them)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), commit], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name in ("trainers", "baselines", "benchmarks"):
        link = where / "corl_bench" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)
    return where


def run_cell(tree: Path, out: Path, method: str, cohort: str, seed: int, sets: list[str]) -> dict:
    """Run the cell in ``tree`` into ``out``; its wall time, phase times and mean step seconds by phase."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "corl_bench", "run", "--method", method, "--cohort", cohort,
           "--set", f"run.seed={seed}", *sets, "--output-dir", str(out)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    run = next(p for p in out.iterdir() if (p / "run.json").exists())
    record = json.loads((run / "run.json").read_text())
    steps: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        steps[row["step"]] = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("time/")}
    phases = sorted({k for s in steps.values() for k in s})
    mean = {k: sum(s.get(k, 0.0) for s in steps.values()) / max(1, len(steps)) for k in phases}
    return {"wall_s": wall, "phases_s": record.get("timings", {}), "step_mean_s": mean, "steps": len(steps),
            "load_before": load, "load_after": os.getloadavg()[0], "run_dir": str(run)}


def accuracies(run_dir: Path) -> dict[str, float]:
    """``agent/benchmark/decoding`` -> accuracy (%) of the final evaluation's predictions."""
    out = {}
    for path in sorted((run_dir / "eval").glob("final/*/*.jsonl")):
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        for decoding in ("greedy", "sampled"):
            got = [bool(r["correct"]) for r in rows if r["decoding"] == decoding]
            if got:
                out[f"{path.parent.name}/{path.stem}/{decoding}"] = round(100.0 * sum(got) / len(got), 2)
    return out


def identical(a: Path, b: Path) -> tuple[bool, list[str]]:
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint

    diff = fingerprint_diff(run_fingerprint(a), run_fingerprint(b))
    return not diff, diff[:8]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="commit (or ref) of the old side")
    ap.add_argument("--new", default="HEAD", help="commit of the new side (default HEAD; WORKTREE: this checkout)")
    ap.add_argument("--cell", default="corl:smol-cross-family-arith", help="METHOD:COHORT[:TAG] of the sweep")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "real-study.yaml")
    ap.add_argument("--old-set", action="append", default=[], help="KEY=VALUE for the old side only")
    ap.add_argument("--new-set", action="append", default=[], help="KEY=VALUE for the new side only")
    ap.add_argument("--repeats", type=int, default=1, help="runs per side (alternating)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here (default: discard)")
    args = ap.parse_args()
    from corl_bench.train.precision import machine_facts

    method, cohort, *tag = args.cell.split(":")
    common = cell_args(args.sweep, method, cohort, tag[0] if tag else "")
    sides = {"old": (args.old, [x for kv in args.old_set for x in ("--set", kv)]),
             "new": (args.new, [x for kv in args.new_set for x in ("--set", kv)])}
    tmp = Path(tempfile.mkdtemp(prefix="corl-bench-cell-speed-"))
    trees: dict[str, Path] = {}
    results: dict[str, list[dict]] = {"old": [], "new": []}
    try:
        for side, (commit, _) in sides.items():
            trees[side] = ROOT if commit == "WORKTREE" else worktree(commit, tmp / f"tree-{side}")
        commits = {side: subprocess.run(["git", "-C", str(trees[side]), "rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=True).stdout.strip() for side in sides}
        for r in range(args.repeats):
            for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                out = (args.keep or tmp) / f"{side}-{r}"
                res = run_cell(trees[side], out, method, cohort, args.seed, [*common, *sides[side][1]])
                results[side].append(res)
                print(f"{side} #{r}: {res['wall_s']:.0f} s (phases {json.dumps(res['phases_s'])})", flush=True)
        same, diff = identical(Path(results["old"][0]["run_dir"]), Path(results["new"][0]["run_dir"]))
        best = {side: min(x["wall_s"] for x in rows) for side, rows in results.items()}
        report = {"cell": args.cell, "seed": args.seed, "sweep": str(args.sweep.relative_to(ROOT)),
                  "commits": commits, "extra_set": {s: sides[s][1][1::2] for s in sides},
                  "machine": machine_facts(), "runs": results, "best_wall_s": best,
                  "speedup": best["old"] / best["new"], "bit_identical": same, "differences": diff,
                  "accuracy": {s: accuracies(Path(results[s][0]["run_dir"])) for s in sides}}
        print(f"old {best['old']:.0f} s, new {best['new']:.0f} s: {report['speedup']:.2f}x; "
              f"{'bit-identical' if same else 'results differ: ' + '; '.join(diff[:3])}")
        if not same:
            for key in report["accuracy"]["old"]:
                print(f"  {key}: {report['accuracy']['old'][key]} -> {report['accuracy']['new'].get(key)}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        for side, tree in trees.items():
            if tree != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
