#!/usr/bin/env python
"""The real-model study (issue 25), end to end: run the sweep (resumable), then write every figure the write-up quotes.

    python scripts/real_study.py                          # sweeps/real-study.yaml; rerun to resume (make study-real)
    python scripts/real_study.py --analyse-only           # no training: re-derive the figures from the kept cells

Writes into --out (default results/real-study): ``tables.md`` (per benchmark and model: every cell's greedy and
sampled pass@1, mean ± sd over seeds, and its paired change from Base), ``claims.md`` (the claims of
``results/real-study/claims.yaml`` as paired per-seed differences with a verdict, per benchmark, from
``corl_bench.report.study``), ``intervals.md`` (the sampling error of one score and of a paired difference on each
suite), ``dynamics.md`` (rollout accuracy against the hidden answers, pseudo-label accuracy and peer agreement over
training, mean over seeds), ``collapse.md`` (the collapse alarm's verdicts and final-below-half-of-base agents),
``micro-vs-real.md`` (each claim's verdict here beside the micro study's), ``walltime.md`` and one training-dynamics
PNG per cell of the first seed. Every number is recomputed from the stored predictions and metrics.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]  # this checkout's corl_bench; alarm_record, collapse_check
BENCHMARKS = ("arith-heldout", "arith-transfer")
METRICS = (("greedy", "greedy"), ("avg_k", "pass@1"))
CURVES = (("reward/true_mean", "rollout accuracy"), ("label/accuracy", "pseudo-label accuracy"),
          ("peer/agreement", "peer agreement"))


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _mean_sd(values: list[float], signed: bool = False) -> str:
    if not values:
        return "–"
    mean = f"{100 * statistics.fmean(values):+.1f}" if signed else f"{100 * statistics.fmean(values):.1f}"
    return mean + (f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else "")


def _label(method: str, cohort: str, tag: str) -> str:
    return f"{method} × {cohort}" + (f" [{tag}]" if tag else "")


def _rows_of(scores: list, cells: list, family: str) -> list[tuple[str, str, str, str | None]]:
    """The table rows of one family: one per cell, or one per agent where a cell has several agents of the family
    (same-family Co-RL: its agents are never pooled)."""
    rows = []
    for method, cohort, tag in cells:
        agents = sorted({s.agent for s in scores if (s.method, s.cohort, s.tag, s.family) == (method, cohort, tag, family)})
        rows += [(method, cohort, tag, a) for a in agents] if len(agents) > 1 else [(method, cohort, tag, None)]
    return rows


def tables(scores_by_bench: dict, base_tag: str = "base") -> str:
    """Per benchmark and family: each cell's final score (mean ± sd over seeds) and its per-seed change from Base;
    a cell with several agents of one family (same-family Co-RL) has one row per agent."""
    out = []
    for bench, scores in scores_by_bench.items():
        families = sorted({s.family for s in scores})
        cells = sorted({(s.method, s.cohort, s.tag) for s in scores}, key=lambda c: (c[2] != base_tag, c))
        for family in families:
            base = {}
            for s in scores:
                if s.family == family and s.tag == base_tag:
                    base.setdefault(s.seed, []).append(s.final)
            lines = [f"**{bench} · {family}** (percent; Δ = change from Base, paired by seed)", "",
                     "| cell | seeds | greedy | Δ greedy | pass@1 | Δ pass@1 |", "|---|---:|---:|---:|---:|---:|"]
            for method, cohort, tag, agent in _rows_of(scores, cells, family):
                per_seed: dict[int, list[dict]] = {}
                for s in scores:
                    if (s.method, s.cohort, s.tag, s.family) == (method, cohort, tag, family) \
                            and agent in (None, s.agent):
                        per_seed.setdefault(s.seed, []).append(s.final)
                if not per_seed:
                    continue
                row = [_label(method, cohort, tag) + (f" ({agent})" if agent else ""), str(len(per_seed))]
                for metric, _ in METRICS:
                    vals = {seed: statistics.fmean(f[metric] for f in fs) for seed, fs in per_seed.items()
                            if all(metric in f for f in fs)}
                    deltas = [v - statistics.fmean(b[metric] for b in base[seed]) for seed, v in vals.items()
                              if seed in base and tag != base_tag]
                    row += [_mean_sd(list(vals.values())), _mean_sd(deltas, signed=True)]
                lines.append("| " + " | ".join(row) + " |")
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _greedy_correct(run, phase: str, agent: str, bench: str) -> dict[str, bool]:
    from corl_bench.report.collect import row_grader_for

    grade = row_grader_for(bench)
    return {r["problem_id"]: grade(r)[1] for r in run.predictions(phase, agent, bench)  # grade: (extracted, correct)
            if r.get("decoding") == "greedy"}


def _run_of(runs_dir: Path, cell, seed: int):
    """The finished run of ``cell`` (method, cohort, tag) with this seed, or None."""
    from corl_bench.results import find_runs

    for run in find_runs(runs_dir):
        r = run.record()
        if r.finished and (r.method, r.cohort, r.tag or "", r.seed) == (cell.method, cell.cohort, cell.tag, seed):
            return run
    return None


def intervals(runs_dir: Path, base_cell, other_cell, seed: int) -> str:
    """95 % half-widths: one score (normal approximation at the Base accuracy) and a paired difference between two
    evaluations of the same items (from the discordant items of ``other_cell``'s final vs Base, greedy, ``seed``)."""
    base, other = _run_of(runs_dir, base_cell, seed), _run_of(runs_dir, other_cell, seed)
    if base is None or other is None:
        return f"Needs the seed-{seed} cells {base_cell.label} and {other_cell.label}.\n"
    lines = [f"| suite | items | model | Base greedy | ±95 % one score | discordant items ({other_cell.label} vs Base) "
             "| ±95 % paired difference |", "|---|---:|---|---:|---:|---:|---:|"]
    families = {a["name"]: a.get("family", "") for a in other.agents()}
    for bench in BENCHMARKS:
        for agent in (a["name"] for a in base.agents()):
            b = _greedy_correct(base, "final", agent, bench)
            c = _greedy_correct(other, "final", agent, bench) if agent in families else {}
            items = sorted(set(b) & set(c))
            if not items:
                continue
            n, p = len(items), statistics.fmean(b[i] for i in items)
            up = sum(c[i] and not b[i] for i in items)
            down = sum(b[i] and not c[i] for i in items)
            se_diff = math.sqrt(max(0.0, (up + down) - (up - down) ** 2 / n)) / n
            lines.append(f"| {bench} | {n} | {agent} | {_pp(p)} | {100 * 1.96 * math.sqrt(p * (1 - p) / n):.1f} | "
                         f"{up + down} ({up} gained, {down} lost) | {100 * 1.96 * se_diff:.1f} |")
    return ("Sampling error of the suites (percentage points). A difference between two cells is outside the "
            "sampling error of one evaluation when it exceeds the paired half-width; seeds add training noise on "
            "top, which the per-seed verdicts in claims.md account for.\n\n" + "\n".join(lines) + "\n")


def dynamics(runs_dir: Path, checkpoints: tuple[int, ...]) -> str:
    """Per cell and agent: each curve at a few steps, mean over seeds (and over the steps' neighbours: +-1)."""
    from corl_bench.results import find_runs

    table: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = {}
    for run in find_runs(runs_dir):
        record = run.record()
        if not record.finished or not record.steps:
            continue
        cell = _label(record.method, record.cohort, record.tag or "")
        for row in run.metrics():
            if "agent" not in row or "step" not in row or row.get("event"):
                continue
            curves = table.setdefault((cell, row["agent"]), {})
            for key, _ in CURVES:
                if row.get(key) is not None:
                    curves.setdefault(key, {}).setdefault(int(row["step"]), []).append(float(row[key]))
    head = " | ".join(f"{name} @ {s}" for _, name in CURVES for s in checkpoints)
    lines = [f"| cell | agent | {head} |", "|---|---|" + "---:|" * (len(CURVES) * len(checkpoints))]
    for (cell, agent), curves in sorted(table.items()):
        cols = []
        for key, _ in CURVES:
            for s in checkpoints:
                window = [v for t in (s - 1, s, s + 1) for v in curves.get(key, {}).get(t, [])]
                cols.append(_pp(statistics.fmean(window)) if window else "–")
        lines.append(f"| {cell} | {agent} | " + " | ".join(cols) + " |")
    return ("Training rollouts scored against the hidden answers (never seen by a label-free reward), percent; each "
            "entry is the mean over seeds and over steps s-1, s, s+1 (8 prompts per step make one step noisy). "
            "Pseudo-label accuracy: the label the method rewarded against, vs the truth (GT-Reward: 100). Peer "
            "agreement: the agent's majority vote equals the other agent's, per prompt (logged for every two-agent run; "
            "only Co-RL's agents are rewarded by it).\n\n" + "\n".join(lines) + "\n")


def collapse(runs_dir: Path, scores_by_bench: dict, micro_dir: Path | None = None) -> str:
    """The alarm per run, the agents below half of Base, and the alarm's precision and recall against the held-out
    truth on this study's runs and (``micro_dir``) the micro study's (scripts/alarm_record.py)."""
    from alarm_record import alarm_markdown

    from corl_bench.report.study import collapse_report
    from corl_bench.results import find_runs

    lines = ["Collapse alarm (corl_bench/train/monitor.py) per run:", ""]
    for run in find_runs(runs_dir):
        record = run.record()
        if record.finished and record.steps:
            alarms = record.collapse_alarms or []
            fired = "; ".join(f"step {a.get('step')} {a.get('agent')}: {', '.join(a.get('symptoms', []))}"
                              for a in alarms) or "silent"
            lines.append(f"- {run.name}: {fired}")
    lines += ["", "Agents whose final pass@1 fell below half of Base's (same seed):", ""]
    found = False
    for bench, scores in scores_by_bench.items():
        base = {(s.family, s.seed): s.final for s in scores if s.tag == "base"}
        paired = [dataclasses.replace(s, base=base.get((s.family, s.seed), {})) for s in scores
                  if s.tag != "base"]
        for c in collapse_report(paired):
            found = True
            lines.append(f"- {bench}: {_label(c['method'], c['cohort'], c['tag'])}, {c['agent']}, seed {c['seed']}: "
                         f"{_pp(c['base'])} → {_pp(c['final'])}")
    if not found:
        lines.append("- none")
    roots = [("real", runs_dir.parent)] + ([("micro", micro_dir)] if micro_dir and (micro_dir / "runs").is_dir() else [])
    lines += ["", "## The alarm's record against the held-out truth", "",
              alarm_markdown(roots, scores_by_bench[BENCHMARKS[0]])]
    return "\n".join(lines)


def _verdicts(comparisons, claim: str, metric: str) -> str:
    got = [f"{c.family}: {c.verdict}" for c in comparisons if c.claim == claim and c.metric == metric]
    return "; ".join(got) or "–"


def micro_vs_real(real: list, micro: list, claims) -> str:
    lines = ["| claim | real: arith-heldout pass@1 | real: arith-heldout greedy | micro study: pass@1 | "
             "micro study: greedy |", "|---|---|---|---|---|"]
    for claim in claims:
        lines.append(f"| {claim.name} | {_verdicts(real, claim.name, 'avg_k')} | {_verdicts(real, claim.name, 'greedy')}"
                     f" | {_verdicts(micro, claim.name, 'avg_k')} | {_verdicts(micro, claim.name, 'greedy')} |")
    return ("Verdicts per backbone (real: smol, gemma3-270m; micro: qwen2-bpe, llama-bpe, neox-bpe). The micro "
            "column is recomputed from results/micro-study/sweep with the micro study's own claims file where a "
            "claim of the same name exists there, and with this study's cells mapped to micro cohorts otherwise "
            "(– = the micro study has no such cell).\n\n" + "\n".join(lines) + "\n")


def _micro_comparisons(claims) -> list:
    """This study's claims on the micro study's kept cells: the micro cohort of the same kind for Co-RL, any cohort
    for the single-agent methods, Co-RL cross-family's base evaluation for Base."""
    from corl_bench.report.study import Cell, Claim, claim_comparisons, load_agent_scores

    micro_dir = REPO / "results" / "micro-study" / "sweep"
    if not micro_dir.is_dir():
        return []
    scores, _ = load_agent_scores(micro_dir)
    cohort = {"smol-cross-family-arith": "cross-family", "smol-same-family-native": "same-family"}

    def cell(c: Cell) -> Cell:
        if c.tag == "base":
            return Cell("corl", "cross-family", "", "base")
        if c.method in ("gt-reward", "ttrl"):  # single-agent methods: whichever cohort the micro grid ran them on
            return Cell(c.method, None, c.tag, c.phase)
        agent = f"{c.agent.split('-')[0]}-qwen2-bpe" if c.agent else None  # a0-smol -> a0-qwen2-bpe (same seed offset)
        return Cell(c.method, cohort.get(c.cohort or "", c.cohort), c.tag, c.phase, agent)

    mapped = [Claim(c.name, cell(c.a), cell(c.b), ("qwen2-bpe", "llama-bpe"), c.margin) for c in claims]
    mapped = [Claim(c.name, c.a, c.b, ("qwen2-bpe",), c.margin) if "same-family" in c.name else c for c in mapped]
    return claim_comparisons(scores, metrics=("avg_k", "greedy"), claims=mapped)


def walltime(runs_dir: Path) -> str:
    from corl_bench.results import find_runs

    per_cell: dict[str, list[float]] = {}
    for run in find_runs(runs_dir):
        record = run.record()
        if record.finished:
            per_cell.setdefault(run.name.rsplit("-s", 1)[0], []).append(float(record.wall_seconds or 0.0))
    total = sum(sum(v) for v in per_cell.values())
    lines = ["| cell | runs | wall s per run (mean) | total s |", "|---|---:|---:|---:|"]
    lines += [f"| {c} | {len(v)} | {statistics.fmean(v):.0f} | {sum(v):.0f} |" for c, v in sorted(per_cell.items())]
    lines.append(f"| **all** | {sum(len(v) for v in per_cell.values())} | | **{total:.0f}** ({total / 3600:.2f} h) |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, default=REPO / "sweeps" / "real-study.yaml")
    ap.add_argument("--out", type=Path, default=Path("results/real-study"))
    ap.add_argument("--claims", type=Path, default=REPO / "results" / "real-study" / "claims.yaml")
    ap.add_argument("--analyse-only", action="store_true", help="do not run the sweep; analyse what is stored")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    from corl_bench.report.plots import plot_run
    from corl_bench.report.study import claim_comparisons, load_agent_scores, load_claims, to_markdown
    from corl_bench.results import RunDir, atomic_write_text
    from corl_bench.train.sweep import describe, load_sweep, run_sweep

    spec = load_sweep(args.sweep)
    if not args.analyse_only:
        for line in describe(run_sweep(spec)):
            logging.warning("sweep %s: %s", spec.name, line)
    sweep_dir, out = spec.results_dir, args.out
    runs_dir = sweep_dir / "runs"
    out.mkdir(parents=True, exist_ok=True)

    claims = load_claims(args.claims)
    scores_by_bench, warnings = {}, []
    for bench in BENCHMARKS:
        scores_by_bench[bench], w = load_agent_scores(sweep_dir, benchmarks=[bench])
        warnings += w
    atomic_write_text(out / "tables.md", tables(scores_by_bench))
    real = {b: claim_comparisons(s, metrics=("avg_k", "greedy"), claims=claims) for b, s in scores_by_bench.items()}
    atomic_write_text(out / "claims.md", "\n".join(f"### {b}\n\n{to_markdown(c)}" for b, c in real.items()))
    vs_base = [c for c in claims if c.b.tag == "base"]  # the paired error of "Co-RL vs Base" (else the first such)
    pair = next((c for c in vs_base if c.a.method == "corl"), vs_base[0] if vs_base else claims[0])
    base_cell, corl_cell = pair.b, pair.a
    atomic_write_text(out / "intervals.md", intervals(runs_dir, base_cell, corl_cell, min(spec.seeds)))
    steps = max((RunDir(d).record().steps or 0 for d in runs_dir.glob("*") if RunDir(d).is_run()), default=0)
    atomic_write_text(out / "dynamics.md", dynamics(runs_dir, tuple(sorted({1, max(1, steps // 2), max(1, steps - 2)}))))
    atomic_write_text(out / "collapse.md", collapse(runs_dir, scores_by_bench, REPO / "results" / "micro-study" / "sweep"))
    atomic_write_text(out / "micro-vs-real.md", micro_vs_real(real[BENCHMARKS[0]], _micro_comparisons(claims), claims))
    atomic_write_text(out / "walltime.md", walltime(runs_dir))
    first_seed = min(spec.seeds)
    for d in sorted(runs_dir.glob(f"*-s{first_seed}")):
        run = RunDir(d)
        if run.is_run() and run.record().finished and run.record().steps:
            plot_run(d, out)
    for w in warnings:
        logging.warning("%s", w)
    logging.warning("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
