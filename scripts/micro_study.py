#!/usr/bin/env python
"""The micro study, end to end: run the sweep (resumable), then write every figure the write-up quotes.

    python scripts/micro_study.py                         # the quick grid (sweeps/micro-study-quick.yaml), ~1.5-2 h
    python scripts/micro_study.py --sweep sweeps/micro-study.yaml --out results/micro-study-full
    python scripts/micro_study.py --analyse-only          # no training: re-derive the figures from stored runs

Writes into --out (default results/micro-study): ``tables.md`` (paper-style tables for pass@1, greedy and maj@k),
``claims.md`` (every claim as paired per-seed differences with a verdict, from ``corl_bench.report.study``),
``collapse.md``, ``probe.md`` (error overlap of the base models from the runs' stored base evaluations),
``controls.md`` (test-time ensembles, per seed), ``walltime.md``, ``gains.png`` and one training-dynamics PNG per
Co-RL/TTRL cross-family run of the first seed, plus ``report.html`` for the whole sweep. Every number is recomputed
from the stored predictions; nothing here is typed in by hand.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    sd = f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else ""
    return f"{100 * statistics.fmean(values):.1f}{sd}"


def _runs(runs_dir: Path, prefix: str) -> dict[int, Path]:
    """seed -> the finished run directory named ``<prefix>-s<seed>``."""
    from corl_bench.results import RunDir

    out = {}
    for d in sorted(runs_dir.glob(f"{prefix}-s*")):
        tail, run = d.name[len(prefix) + 2:], RunDir(d)
        if tail.isdigit() and run.is_run() and run.record().finished:
            out[int(tail)] = d
    return out


def tables(sweep_dir: Path) -> str:
    from corl_bench.report.collect import collect_results
    from corl_bench.report.layout import build
    from corl_bench.report.render import render_text

    collected = collect_results(sweep_dir)  # regrade the predictions once for the three tables
    return "\n\n".join(render_text(build(collected, metrics=(metric,)), "md") for metric in ("avg_k", "greedy", "maj_k"))


def probe(runs_dir: Path, benchmark: str) -> str:
    """Error overlap of the base models: three-agent runs (cross-family pairs) and same-family runs (seed only)."""
    from corl_bench.report.probe import probe_from_predictions

    lines = ["| pair | level | seeds | kappa | c (%) | w (%) | u (%) | acc A (%) | acc B (%) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str, str], list] = {}
    for prefix, level in (("corl-three-agent", "different family"), ("corl-same-family", "seed only")):
        for seed, run in _runs(runs_dir, prefix).items():
            rep = probe_from_predictions([str(run)], benchmark, phase="base")
            for p in rep.pairs:
                groups.setdefault((p.a, p.b, level), []).append(p)
    for (a, b, level), pairs in groups.items():
        kappas = [p.kappa for p in pairs if p.kappa is not None]
        lines.append(f"| {a} × {b} | {level} | {len(pairs)} | "
                     f"{statistics.fmean(kappas):.2f}" + (f" ± {statistics.stdev(kappas):.2f}" if len(kappas) > 1 else "")
                     + f" | {_mean_sd([p.c for p in pairs])} | {_mean_sd([p.w for p in pairs if p.w is not None])} | "
                     f"{_mean_sd([p.u for p in pairs])} | {_mean_sd([p.acc_a for p in pairs])} | "
                     f"{_mean_sd([p.acc_b for p in pairs])} |")
    return ("Base models (before training), sample 0 of each problem at the runs' evaluation temperature; "
            "mean ± sd over seeds (the evaluation sampling seed differs per seed).\n\n" + "\n".join(lines) + "\n")


def controls(runs_dir: Path, benchmark: str) -> str:
    """Test-time ensembles (4 + 4 samples, maj@8) of the two agents of TTRL and Co-RL cross-family runs."""
    from corl_bench.report.probe import ensemble_from_runs

    lines = ["| run | seeds | A own maj@8 | B own maj@8 | ensemble maj@8 (4 + 4) | ensemble − best own |",
             "|---|---:|---:|---:|---:|---:|"]
    for prefix, label in (("ttrl-cross-family", "TTRL (ensemble)"), ("corl-cross-family", "Co-RL (ensemble)"),
                          ("ttrl-cross-family-budget-matched", "TTRL budget-matched (ensemble)")):
        rows = []
        for seed, run in sorted(_runs(runs_dir, prefix).items()):
            scores, _ = ensemble_from_runs([str(run)], benchmark, phase="final", per_model=4)
            rows.append(scores)
        if not rows:
            continue
        gap = [s.ensemble_maj - max(s.maj_a, s.maj_b) for s in rows]
        lines.append(f"| {label} | {len(rows)} | {_mean_sd([s.maj_a for s in rows])} | "
                     f"{_mean_sd([s.maj_b for s in rows])} | {_mean_sd([s.ensemble_maj for s in rows])} | "
                     f"{_mean_sd(gap)} |")
    return ("Final checkpoints; A = the qwen2-bpe agent, B = the llama-bpe agent; own maj@8 = each model's own first "
            "8 samples; mean ± sd over seeds, percent.\n\n" + "\n".join(lines) + "\n")


def walltime(runs_dir: Path) -> tuple[str, float]:
    from corl_bench.results import find_runs

    per_cell: dict[str, list[float]] = {}
    for run in find_runs(runs_dir):
        record = run.record()
        if record.finished:
            cell = run.name.rsplit("-s", 1)[0]
            per_cell.setdefault(cell, []).append(float(record.wall_seconds or 0.0))
    total = sum(sum(v) for v in per_cell.values())
    lines = ["| cell | runs | wall s per run (mean) | total s |", "|---|---:|---:|---:|"]
    lines += [f"| {c} | {len(v)} | {statistics.fmean(v):.0f} | {sum(v):.0f} |" for c, v in per_cell.items()]
    lines.append(f"| **all** | {sum(len(v) for v in per_cell.values())} | | **{total:.0f}** ({total / 3600:.2f} h) |")
    return "\n".join(lines) + "\n", total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "micro-study-quick.yaml")
    ap.add_argument("--out", type=Path, default=Path("results/micro-study"))
    ap.add_argument("--benchmark", default="micro-test")
    ap.add_argument("--analyse-only", action="store_true", help="do not run the sweep; analyse what is stored")
    ap.add_argument("--runs-from", type=Path, default=None, help="analyse this sweep directory instead of the "
                    "YAML's output_dir (implies --analyse-only)")
    ap.add_argument("--claims", type=Path, default=None, help="claims file (the layout of "
                    "corl_bench/report/claims.yaml, which is the default)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    from corl_bench.report.plots import plot_gains, plot_run
    from corl_bench.report.html import build_report
    from corl_bench.results import atomic_write_text
    from corl_bench.report.study import claim_comparisons, collapse_report, load_agent_scores, load_claims, to_markdown
    from corl_bench.train.sweep import describe, load_sweep, run_sweep

    spec = load_sweep(args.sweep)
    if not (args.analyse_only or args.runs_from):
        for line in describe(run_sweep(spec)):
            logging.warning("sweep %s: %s", spec.name, line)
    sweep_dir, out = args.runs_from or spec.results_dir, args.out  # the kept cells when the sweep keeps them
    runs_dir = sweep_dir / "runs"
    out.mkdir(parents=True, exist_ok=True)

    atomic_write_text(out / "tables.md", tables(sweep_dir))
    scores, warnings = load_agent_scores(sweep_dir)
    atomic_write_text(out / "claims.md", to_markdown(claim_comparisons(scores, claims=load_claims(args.claims))))
    collapsed = collapse_report(scores)
    atomic_write_text(out / "collapse.md", "Agents whose final pass@1 fell below half of their base pass@1:\n\n"
                      + ("\n".join(f"- {c['method']} × {c['cohort']}{' [' + c['tag'] + ']' if c['tag'] else ''}, "
                                   f"{c['agent']}, seed {c['seed']}: {_pp(c['base'])} → {_pp(c['final'])}"
                                   for c in collapsed) or "- none") + "\n")
    atomic_write_text(out / "probe.md", probe(runs_dir, args.benchmark))
    atomic_write_text(out / "controls.md", controls(runs_dir, args.benchmark))
    text, total = walltime(runs_dir)
    atomic_write_text(out / "walltime.md", text)
    plot_gains(sweep_dir, out / "gains.png", title=f"{spec.name}: gains over Base, pass@1")
    first_seed = min(spec.seeds)
    for prefix in ("corl-cross-family", "ttrl-cross-family", "corl-three-agent"):
        run = _runs(runs_dir, prefix).get(first_seed)
        if run is not None:
            plot_run(run, out)
    build_report(sweep_dir, out / "report.html")
    for w in warnings:
        logging.warning("%s", w)
    logging.warning("wrote %s (runs' total wall time %.2f h)", out, total / 3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
