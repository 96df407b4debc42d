#!/usr/bin/env python
"""Run every method on its cohorts for one seed and summarise each run: before/after accuracy, the last steps'
pseudo-label accuracy and entropy, and wall time.

    python scripts/methods_matrix.py --out results/matrix              # the default cells, one after another
    python scripts/methods_matrix.py --out results/matrix --cells corl:three-agent comas:cross-family
    python scripts/methods_matrix.py --out results/matrix --summarise  # only re-read finished runs

Each cell is one ``corl-bench run`` subprocess (so its wall time is its own); cells already finished under --out are
skipped. The summary (markdown) goes to stdout and to ``<out>/summary.md``; ``corl-bench table --results <out>``
gives the full table from the same predictions.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

DEFAULT_CELLS = (
    "gt-reward:single", "ttrl:single", "rent:single", "intuitor:single", "co-rewarding-ii:single",
    "random-reward:single", "corl:same-family", "corl:cross-family", "corl:cross-family-rephrased",
    "corl:three-agent", "corl-peer-majority:three-agent", "comas:cross-family", "ttrl:cross-family",
    "maporl:cross-family", "maporl-gt:cross-family", "maca:same-family", "corl-frozen-peer:cross-family",
    "empo:single", "srt:single", "format-reward:single", "incorrect-label:single",
)
LAST_FRACTION = 0.2  # "final" training diagnostics: mean over the last 20 % of steps
Z95 = 1.959964


def paired_verdict(base_rows: list[dict], final_rows: list[dict]) -> tuple[float | None, str]:
    """(mean paired change of per-problem sampled pass@1, verdict) between two phases' prediction rows of one agent:
    each problem's pass@1 is the share of its sampled rows graded correct (regraded from the completion), the
    change is averaged over the problems both phases hold, and the verdict is ``gain`` / ``loss`` when the 95 %
    normal interval of that mean (sd of the per-problem changes / sqrt(problems)) excludes 0, else
    ``inconclusive``. One seed: a verdict about this run, not about the method."""
    from corl_bench.grading.verifier import grade

    def per_problem(rows: list[dict]) -> dict[str, float]:
        hits: dict[str, list[bool]] = {}
        for r in rows:
            if r.get("decoding") == "sampled":
                hits.setdefault(str(r["problem_id"]), []).append(grade(r["completion"], str(r["gold"]))[1])
        return {pid: sum(h) / len(h) for pid, h in hits.items()}

    a, b = per_problem(base_rows), per_problem(final_rows)
    diffs = [b[pid] - a[pid] for pid in a if pid in b]
    if len(diffs) < 2:
        return None, "–"
    mean = sum(diffs) / len(diffs)
    sd = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5
    half = Z95 * sd / len(diffs) ** 0.5
    return mean, "gain" if mean - half > 0 else "loss" if mean + half < 0 else "inconclusive"


def finished_runs(out: Path) -> dict[tuple[str, str], Path]:
    from corl_bench.results import find_runs

    runs = {}
    for run in find_runs(out / "runs"):
        record = run.record()
        if record.finished:
            runs[(record.method, record.cohort)] = run.path
    return runs


def summarise(run_dir: Path) -> list[dict]:
    from corl_bench.report.collect import collect
    from corl_bench.results import RunDir

    run = RunDir(run_dir)
    record = run.record()
    rows = run.metrics()
    steps = max(r["step"] for r in rows) + 1
    tail = [r for r in rows if r["step"] >= steps * (1 - LAST_FRACTION)]
    table_rows, _ = collect(run_dir.parent.parent)
    out = []
    for tr in (t for t in table_rows if record.run_id in t.run_ids):
        mine = [r for r in tail if r["agent"] == tr.agent]

        def last(key: str) -> float | None:
            vals = [r[key] for r in mine if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        base, final = tr.base.get("micro-test", {}), tr.scores.get("micro-test", {})
        from corl_bench.results import read_jsonl

        rows_of = {phase: read_jsonl(run.predictions_path(phase, tr.agent, "micro-test")) for phase in ("base", "final")}
        change, verdict = paired_verdict(rows_of["base"], rows_of["final"])
        out.append({"method": record.method, "cohort": record.cohort, "agent": tr.agent, "family": tr.family,
                    "change": change, "verdict": verdict,
                    **{f"{m}_base": base.get(m) for m in ("greedy", "avg_k", "maj_k")},
                    **{f"{m}_final": final.get(m) for m in ("greedy", "avg_k", "maj_k")},
                    "label_acc": last("label/accuracy"), "reward_acc": last("reward/accuracy"),
                    "entropy": last("policy/entropy"), "wall_s": record.wall_seconds})
    return out


def to_markdown(rows: list[dict]) -> str:
    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.1f}"

    def num(x: float | None, fmt: str = ".2f") -> str:
        return "–" if x is None else format(x, fmt)

    lines = ["| method | cohort | agent | greedy | pass@1 | maj@8 | pass@1 verdict | label acc. | reward acc. | "
             "entropy | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{pct(r[m + '_base'])} → {pct(r[m + '_final'])}" for m in ("greedy", "avg_k", "maj_k")]
        change = "" if r.get("change") is None else f" ({100 * r['change']:+.1f})"
        lines.append(f"| {r['method']} | {r['cohort']} | {r['family']} | " + " | ".join(cells) +
                     f" | {r.get('verdict', '–')}{change} | {num(r['label_acc'])} | {num(r['reward_acc'])} | "
                     f"{num(r['entropy'])} | {num(r['wall_s'], '.0f')} |")
    return "\n".join(lines) + (f"\n\nTraining diagnostics are means over the last {LAST_FRACTION:.0%} of steps; "
                               "accuracy is on micro-test (300 problems), base → final. Verdict: the paired change "
                               "of per-problem sampled pass@1 (points), gain / loss when its 95 % interval excludes "
                               "0, else inconclusive (one seed: about this run, not the method).\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="results directory for the runs")
    ap.add_argument("--cells", nargs="*", default=list(DEFAULT_CELLS), help="method:cohort pairs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--summarise", action="store_true", help="do not run; summarise what is there")
    ap.add_argument("extra", nargs="*", help="after --: extra arguments for every `corl-bench run`")
    args = ap.parse_args()
    cli = str(Path(sys.executable).parent / "corl-bench")
    for cell in ([] if args.summarise else args.cells):
        if ":" not in cell:
            ap.error(f"cell {cell!r} is not method:cohort")
        method, cohort = cell.split(":", 1)
        if (method, cohort) in finished_runs(args.out):
            print(f"skip {cell}: finished", file=sys.stderr)
            continue
        print(f"run {cell}", file=sys.stderr, flush=True)
        subprocess.run([cli, "run", "--method", method, "--cohort", cohort, "--seed", str(args.seed),
                        "--output-dir", str(args.out / "runs"), *args.extra], check=True, stdout=subprocess.DEVNULL)
    rows = [r for key, run_dir in sorted(finished_runs(args.out).items()) for r in summarise(run_dir)]
    text = to_markdown(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    from corl_bench.results import atomic_write_text

    atomic_write_text(args.out / "summary.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
