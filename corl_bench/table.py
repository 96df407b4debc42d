"""Results table: collect finished runs under a results directory and tabulate their eval scores.

A run directory holds ``run.json`` (method, cohort, seed, status, agents, ...) and predictions at
``eval/<phase>/<agent name>/<benchmark>.jsonl``.  Every predictions file is regraded with
:func:`corl_bench.metrics.score_predictions` (stored ``correct`` fields are not trusted).  Runs of
the same (method, cohort, agent name) with different seeds form one table row: mean over seeds,
``± sd`` (sample standard deviation, n-1) when there are two or more.  ``avg`` is the mean over the
table's benchmarks of the first chosen metric; ``Δ base`` is that average minus the same average
over the ``base`` phase of the same runs.  A damaged run is skipped and named in the warnings.

This module never imports torch, transformers or the training code, so tabulating is cheap.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

from corl_bench.metrics import METRICS, BenchmarkScores, score_predictions
from corl_bench.results import read_jsonl

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_METRICS", "METRIC_LABELS", "Row", "collect", "find_runs", "main", "render",
           "to_csv", "to_markdown"]

Scores = dict[str, dict[str, Optional[float]]]  # benchmark -> metric -> value (fraction in [0, 1])

RUN_FILE = "run.json"
DEFAULT_METRICS: tuple[str, ...] = ("avg_k", "greedy", "maj_k")
METRIC_LABELS: dict[str, str] = {
    "greedy": "greedy", "avg_k": "pass@1", "maj_k": "maj@k", "pass_k": "pass@k",
    "extraction_failure": "no-answer", "clipped": "clipped",
}
MISSING = "–"


class DamagedRun(Exception):
    """A run directory that cannot be read; ``str(e)`` says what is wrong."""


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _sd(values: Sequence[float]) -> Optional[float]:
    return statistics.stdev(values) if len(values) >= 2 else None


def _bench_avg(scores: Scores, metric: str, benchmarks: Sequence[str]) -> Optional[float]:
    """Mean of ``metric`` over ``benchmarks``; None if any benchmark lacks a value."""
    values = [scores.get(bench, {}).get(metric) for bench in benchmarks]
    if not values or any(v is None for v in values):
        return None
    return _mean(values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    """One table row: an agent of a (method, cohort), aggregated over the seeds it was run with."""

    method: str
    cohort: str
    agent: str
    family: str
    seeds: tuple[int, ...]
    scores: Scores  # benchmark -> metric -> mean over seeds (final phase)
    base: Scores = field(default_factory=dict)  # the same for the base phase ({} if never evaluated)
    scores_sd: Scores = field(default_factory=dict)  # sample sd over seeds; None with < 2 values
    per_seed: tuple[Scores, ...] = ()  # final-phase scores of each run, in the order of ``seeds``
    ks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # benchmark -> samples/problem seen
    run_ids: tuple[str, ...] = ()

    def avg(self, metric: str, benchmarks: Sequence[str]) -> tuple[Optional[float], Optional[float]]:
        """(mean, sd over seeds) of the mean of ``metric`` over ``benchmarks``; None where missing."""
        per_seed = [_bench_avg(scores, metric, benchmarks) for scores in self.per_seed]
        sd = _sd(per_seed) if per_seed and all(v is not None for v in per_seed) else None  # type: ignore[arg-type]
        return _bench_avg(self.scores, metric, benchmarks), sd

    def delta(self, metric: str, benchmarks: Sequence[str]) -> Optional[float]:
        """``avg`` of the final phase minus the same average over the base phase; None if missing."""
        final, base = self.avg(metric, benchmarks)[0], _bench_avg(self.base, metric, benchmarks)
        return None if final is None or base is None else final - base


@dataclass(frozen=True)
class _AgentResult:
    """Scores of one agent of one run."""

    run_id: str
    method: str
    cohort: str
    agent: str
    family: str
    seed: int
    profile: str
    final: dict[str, BenchmarkScores]
    base: dict[str, BenchmarkScores]


def find_runs(results_dir: Path) -> list[Path]:
    """Every directory under ``results_dir`` (recursively, itself included) that holds a run.json."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return []
    return sorted({p.parent for p in results_dir.rglob(RUN_FILE) if p.is_file()})


def _rel(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
    return path.name if rel == "." else rel


def _read_jsonl(path: Path, name: str) -> list[dict[str, Any]]:
    try:
        return read_jsonl(path, DamagedRun, name)
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedRun(f"cannot read {name} ({exc})") from exc


def row_grader_for(benchmark: str) -> Any:
    """The registered spec's grader for a benchmark's rows; None (the default math grading) if unregistered."""
    from corl_bench.benchspec import get_spec
    from corl_bench.evaluator import row_grader
    from corl_bench.registries import BENCHMARKS

    if benchmark not in BENCHMARKS:
        return None
    return row_grader(get_spec(benchmark))


def _load_phase(agent_dir: Path, run_dir: Path, rel: str, warnings: list[str]) -> dict[str, BenchmarkScores]:
    """benchmark -> scores for every ``<benchmark>.jsonl`` in ``agent_dir`` ({} if absent)."""
    if not agent_dir.is_dir():
        return {}
    out = {}
    for path in sorted(agent_dir.glob("*.jsonl")):
        name = _rel(path, run_dir)
        rows = _read_jsonl(path, name)
        if not rows:
            warnings.append(f"{rel}: {name} is empty; ignored")
            continue
        try:
            out[path.stem] = score_predictions(rows, row_grader_for(path.stem))
        except ValueError as exc:
            raise DamagedRun(f"{name}: {exc}") from exc
    return out


def _field(meta: Mapping[str, Any], key: str, kind: type) -> Any:
    value = meta.get(key)
    if value is None:
        raise DamagedRun(f"run.json has no {key!r}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DamagedRun(f"run.json field {key!r} should be {kind.__name__} (got {value!r})")
    return value


def _load_run(run_dir: Path, rel: str, phase: str, base_phase: str) -> tuple[list[_AgentResult], list[str]]:
    """Scores of every agent of one run plus warnings; raises DamagedRun."""
    try:
        meta = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DamagedRun("run.json is not valid JSON") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedRun(f"cannot read run.json ({exc})") from exc
    if not isinstance(meta, dict):
        raise DamagedRun("run.json is not a JSON object")
    method, cohort = _field(meta, "method", str), _field(meta, "cohort", str)
    seed, status = _field(meta, "seed", int), _field(meta, "status", str)
    agents = _field(meta, "agents", list)
    if not agents or not all(isinstance(a, dict) and isinstance(a.get("name"), str) and a["name"]
                             for a in agents):
        raise DamagedRun("run.json 'agents' must be a non-empty list of objects with a 'name'")
    run_id, profile = str(meta.get("run_id") or run_dir.name), str(meta.get("profile", ""))
    warnings: list[str] = []
    results, missing = [], []
    for agent in agents:
        name = agent["name"]
        final = _load_phase(run_dir / "eval" / phase / name, run_dir, rel, warnings)
        base = _load_phase(run_dir / "eval" / base_phase / name, run_dir, rel, warnings)
        if not final:
            missing.append(name)
            continue
        results.append(_AgentResult(run_id, method, cohort, name, str(agent.get("family", "")), seed,
                                    profile, final, base))
    if not results:
        suffix = "" if status == "finished" else f" (status {status!r})"
        return [], warnings + [f"{rel} has no predictions for phase {phase}{suffix}; skipped"]
    if missing:
        warnings.append(f"{rel}: agent(s) {', '.join(missing)} have no predictions for phase {phase}")
    if status != "finished":
        warnings.append(f"{rel} has status {status!r}; showing its {phase} predictions as they are")
    if not any(r.base for r in results):
        warnings.append(f"{rel} has no predictions for phase {base_phase}; Δ base left empty")
    return results, warnings


def _natural_key(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _aggregate(members: list[_AgentResult], warnings: list[str]) -> Row:
    """One Row from the runs (seeds) of one (method, cohort, agent)."""
    members = sorted(members, key=lambda r: (r.seed, r.run_id))
    first = members[0]
    label = f"{first.method}/{first.cohort}/{first.agent}"
    seeds = tuple(r.seed for r in members)
    if len(set(seeds)) < len(seeds):
        warnings.append(f"{label}: a seed appears in several runs ({', '.join(r.run_id for r in members)})")
    if len({r.profile for r in members}) > 1:
        warnings.append(f"{label}: runs mix profiles {sorted({r.profile for r in members})}")
    if len({r.family for r in members}) > 1:
        warnings.append(f"{label}: runs disagree on the agent family; showing {first.family!r}")

    def pool(phase: str) -> tuple[Scores, Scores, tuple[Scores, ...]]:
        per_seed = tuple({b: s.metrics() for b, s in getattr(r, phase).items()} for r in members)
        mean: Scores = {}
        sd: Scores = {}
        for bench in sorted({b for scores in per_seed for b in scores}):
            mean[bench], sd[bench] = {}, {}
            for metric in METRICS:
                values = [s[bench][metric] for s in per_seed if s.get(bench, {}).get(metric) is not None]
                mean[bench][metric], sd[bench][metric] = _mean(values), _sd(values)
        return mean, sd, per_seed

    scores, scores_sd, per_seed = pool("final")
    base = pool("base")[0]
    ks = {b: tuple(sorted({r.final[b].k for r in members if b in r.final and r.final[b].k}))
          for b in scores}
    return Row(first.method, first.cohort, first.agent, first.family, seeds, scores, base, scores_sd,
               per_seed, ks, tuple(r.run_id for r in members))


def collect(results_dir: Path, *, phase: str = "final", base_phase: str = "base") -> tuple[list[Row], list[str]]:
    """Rows (sorted by method, cohort, agent) and one-line warnings for every run under ``results_dir``."""
    results_dir = Path(results_dir)
    warnings: list[str] = []
    groups: dict[tuple[str, str, str], list[_AgentResult]] = {}
    for run_dir in find_runs(results_dir):
        rel = _rel(run_dir, results_dir)
        try:
            results, run_warnings = _load_run(run_dir, rel, phase, base_phase)
        except DamagedRun as exc:
            warnings.append(f"skipping {rel}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one bad run must never break the table
            logger.debug("unexpected error reading %s", run_dir, exc_info=True)
            warnings.append(f"skipping {rel}: unexpected {type(exc).__name__}: {exc}")
            continue
        warnings.extend(run_warnings)
        for result in results:
            groups.setdefault((result.method, result.cohort, result.agent), []).append(result)
    keys = sorted(groups, key=lambda k: (k[0], k[1], _natural_key(k[2])))
    return [_aggregate(groups[key], warnings) for key in keys], warnings


def _check_metrics(metrics: Sequence[str]) -> list[str]:
    metrics = list(metrics)
    unknown = [m for m in metrics if m not in METRIC_LABELS]
    if not metrics or unknown:
        raise ValueError(f"unknown or no metric(s) {unknown}; choose from {', '.join(METRIC_LABELS)}")
    return metrics


def _benchmarks(rows: Sequence[Row]) -> list[str]:
    return sorted({bench for row in rows for bench in row.scores})


def _metric_label(metric: str, bench: str, rows: Sequence[Row]) -> str:
    """Header label; ``maj@k`` / ``pass@k`` carry the real k when it is the same for every row."""
    label = METRIC_LABELS[metric]
    if metric in ("maj_k", "pass_k"):
        ks = {k for row in rows for k in row.ks.get(bench, ())}
        if len(ks) == 1:
            label = label.replace("@k", f"@{ks.pop()}")
    return label


def _pct(value: Optional[float], signed: bool = False) -> str:
    if value is None:
        return ""
    return f"{100.0 * value:+.1f}" if signed else f"{100.0 * value:.1f}"


def _cell(mean: Optional[float], sd: Optional[float]) -> str:
    if mean is None:
        return MISSING
    return f"{_pct(mean)} ± {_pct(sd)}" if sd is not None else _pct(mean)


_TEXT_HEADERS = ("method", "cohort", "agent", "family", "seeds")
Values = tuple[list[tuple[Optional[float], Optional[float]]], Optional[float]]  # (mean, sd) per column, Δ


def _grid(rows: Sequence[Row], metrics: Sequence[str]) -> tuple[list[tuple[str, str]], list[Values]]:
    """Numeric column headers as (benchmark, label) and, per row, (mean, sd) per column then avg; Δ base."""
    metrics = _check_metrics(metrics)
    benchmarks = _benchmarks(rows)
    labels = [(b, _metric_label(m, b, rows)) for b in benchmarks for m in metrics]
    data: list[Values] = []
    for row in rows:
        values = [(row.scores.get(b, {}).get(m), row.scores_sd.get(b, {}).get(m))
                  for b in benchmarks for m in metrics]
        data.append((values + [row.avg(metrics[0], benchmarks)], row.delta(metrics[0], benchmarks)))
    return labels, data


def _table_data(rows: Sequence[Row], metrics: Sequence[str]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """Headers as (benchmark or "", label) pairs and display cells (mean ± sd in percent)."""
    labels, data = _grid(rows, metrics)
    headers = [("", h) for h in _TEXT_HEADERS] + labels + [("", "avg"), ("", "Δ base")]
    body = [[row.method, row.cohort, row.agent, row.family or MISSING, str(len(row.seeds))]
            + [_cell(mean, sd) for mean, sd in values] + [_pct(delta, signed=True) or MISSING]
            for row, (values, delta) in zip(rows, data)]
    return headers, body


def _caption(metrics: Sequence[str]) -> str:
    return (f"percent; avg = mean over benchmarks of {METRIC_LABELS[metrics[0]]}; Δ base = avg minus the "
            "same average before training; ± = sample sd over seeds")


def render(rows: Sequence[Row], *, metrics: Sequence[str] = DEFAULT_METRICS) -> Table:
    """A rich Table of ``rows``: one column per benchmark × metric, then avg and Δ base."""
    headers, body = _table_data(rows, metrics)
    table = Table(title="corl-bench results", caption=_caption(metrics))
    for i, (bench, label) in enumerate(headers):
        table.add_column(f"{bench}\n{label}" if bench else label, justify="right" if i >= 4 else "left",
                         no_wrap=True)
    for cells in body:
        table.add_row(*cells)
    return table


def to_markdown(rows: Sequence[Row], metrics: Sequence[str] = DEFAULT_METRICS) -> str:
    """A GitHub-flavoured markdown table (cells as in :func:`render`) followed by a one-line note."""
    headers, body = _table_data(rows, metrics)

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line([f"{b} {label}" if b else label for b, label in headers]),
           "|" + "|".join("---" if i < 4 else "---:" for i in range(len(headers))) + "|"]
    out += [line(cells) for cells in body]
    return "\n".join(out) + f"\n\n_{_caption(metrics)}._\n"


def to_csv(rows: Sequence[Row], metrics: Sequence[str] = DEFAULT_METRICS) -> str:
    """CSV with one value per cell: mean and sd in separate columns, percent with one decimal, empty if missing."""
    labels, data = _grid(rows, metrics)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    names = [f"{bench} {label}" for bench, label in labels] + ["avg"]
    writer.writerow([*_TEXT_HEADERS, *(col for name in names for col in (name, f"{name} sd")), "Δ base"])
    for row, (values, delta) in zip(rows, data):
        writer.writerow([row.method, row.cohort, row.agent, row.family, str(len(row.seeds)),
                         *(_pct(v) for pair in values for v in pair), _pct(delta, signed=True)])
    return buf.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``path``, then ``os.replace`` it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def print_wide(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width even on a narrow console: numbers are never cut to "…"."""
    width = max(console.width, Measurement.get(console, console.options.update_width(10_000), table).maximum)
    lines = console.render_lines(table, console.options.update_width(width), pad=False, new_lines=True)
    console.print(Segments([seg for line in lines for seg in line]), crop=False, soft_wrap=True, end="")


def main(
    results_dir: str | Path = "results",
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    out_dir: str | Path | None = None,
    console: Optional[Console] = None,
) -> list[Row]:
    """Print the results table and warnings, write ``table.md`` and ``table.csv``; return the rows."""
    console = console or Console()
    metrics = _check_metrics(metrics)
    results_dir = Path(results_dir)
    if not find_runs(results_dir):
        console.print(f"No runs found under {results_dir}; start one with `corl-bench run`.",
                      markup=False, highlight=False)
        return []
    rows, warnings = collect(results_dir)
    if rows:
        print_wide(console, render(rows, metrics=metrics))
    for warning in warnings:
        console.print(f"warning: {warning}", style="yellow", markup=False, highlight=False)
    if not rows:
        console.print(f"No usable results under {results_dir} (see the warnings above).",
                      markup=False, highlight=False)
        return []
    out = Path(out_dir) if out_dir is not None else results_dir
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("table.md", to_markdown(rows, metrics)), ("table.csv", to_csv(rows, metrics))):
        _write_atomic(out / name, text)
        console.print(f"wrote {out / name}", markup=False, highlight=False)
    return rows
