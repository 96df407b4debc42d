"""Results table: collect finished runs under a results directory, regrade their predictions, tabulate them.

Public API (none of it imports torch or transformers, so tabulating stays cheap):

* :func:`collect` ``(results_dir) -> (list[Row], list[str])`` - one :class:`Row` per (method, cohort, tag, agent),
  aggregated over seeds, plus one-line warnings (damaged runs are skipped and named there).
* :func:`collect_results` ``(results_dir) -> Collected`` - the same data before aggregation: one
  :class:`AgentResult` per (run, agent) and one :class:`RunInfo` per run (eval decoding, steps, benchmark
  versions), which the paper-style layout (:mod:`corl_bench.report.layout`) is built from.
* :func:`html` ``(source, *, metrics=("avg_k",), reference=None, backbone=None) -> str`` - the paper-style table
  of a results directory (or a :class:`Collected`) as a self-contained ``<table>`` fragment; for md / LaTeX /
  CSV / rich use :func:`corl_bench.report.layout.build` + :mod:`corl_bench.report.render`.
* :func:`aggregate` ``(collected) -> (list[Row], list[str])`` - :func:`collect` on an already-read :class:`Collected`.
* :func:`main` - what ``corl-bench table`` does: print the paper-style table, write files.
* :func:`print_wide`, :func:`write_atomic` - helpers shared with other modules.

A run directory holds ``run.json`` (method, cohort, seed, tag, status, agents, steps, ...), ``config.yaml`` and
predictions at ``eval/<phase>/<agent name>/<benchmark>.jsonl``.  Every predictions file is regraded with
:func:`corl_bench.eval.metrics.score_predictions` (stored ``correct`` fields are not trusted).  A :class:`Row` holds
the mean over seeds and the sample standard deviation (n-1) where there are two or more.
"""

from __future__ import annotations

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

from corl_bench.eval.metrics import METRICS, BenchmarkScores, score_predictions
from corl_bench.results import read_jsonl

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_METRICS", "FORMATS", "METRIC_LABELS", "TABLE_METRICS", "AgentResult", "Collected", "Row",
           "RunInfo", "aggregate", "check_metrics", "collect", "collect_results", "find_runs", "html", "main", "print_wide",
           "write_atomic"]

Scores = dict[str, dict[str, Optional[float]]]  # benchmark -> metric -> value (fraction in [0, 1])

RUN_FILE = "run.json"
CONFIG_FILE = "config.yaml"
DEFAULT_METRICS: tuple[str, ...] = ("avg_k",)
TABLE_METRICS: tuple[str, ...] = ("greedy", "avg_k", "maj_k", "pass_k")
FORMATS: tuple[str, ...] = ("md", "latex", "csv", "html")
METRIC_LABELS: dict[str, str] = {
    "greedy": "greedy", "avg_k": "pass@1", "maj_k": "maj@k", "pass_k": "pass@k",
    "extraction_failure": "no-answer", "clipped": "clipped",
}
DECODING_KEYS: tuple[str, ...] = ("samples", "temperature", "top_p", "greedy", "max_new_tokens", "max_problems")


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


def check_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    """The metrics as a tuple; ValueError (one line naming the valid ones) if empty or unknown."""
    metrics = tuple(metrics)
    unknown = [m for m in metrics if m not in TABLE_METRICS]
    if not metrics or unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from "
                         f"{', '.join(TABLE_METRICS)} (comma-separated, e.g. --metric avg_k,greedy)")
    return metrics


@dataclass(frozen=True)
class Row:
    """One (method, cohort, tag, agent) aggregated over the seeds it was run with."""

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
    tag: str = ""  # run.json "tag" (a variant such as "budget-matched"); "" = none
    base_per_seed: tuple[Scores, ...] = ()  # base-phase scores of each run ({} where absent)

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
class AgentResult:
    """Regraded scores of one agent of one run."""

    run_id: str
    rel: str  # the run directory relative to the results directory
    method: str
    cohort: str
    tag: str
    agent: str
    agent_index: int  # position in run.json agents (the cohort's ring order)
    family: str
    seed: int
    profile: str
    final: dict[str, BenchmarkScores]
    base: dict[str, BenchmarkScores]

    def metrics(self, phase: str = "final") -> Scores:
        """benchmark -> metric -> value for ``phase`` ("final" or "base")."""
        return {b: s.metrics() for b, s in getattr(self, phase).items()}


@dataclass(frozen=True)
class RunInfo:
    """What a run says about its protocol (for the table footer)."""

    run_id: str
    rel: str
    method: str
    cohort: str
    tag: str
    seed: int
    steps: Optional[int]  # run.json "steps" (else config run.steps); None if unknown
    decoding: Optional[tuple[tuple[str, Any], ...]]  # config.yaml eval: (key, value) for DECODING_KEYS; None if unread
    versions: tuple[tuple[str, str], ...]  # (benchmark, benchmark_version) pairs seen in its predictions


@dataclass(frozen=True)
class Collected:
    """Everything :func:`collect_results` read: per-agent results, per-run protocol info, warnings."""

    results: tuple[AgentResult, ...]
    runs: tuple[RunInfo, ...]
    warnings: tuple[str, ...]


def find_runs(results_dir: Path) -> list[Path]:
    """Every directory under ``results_dir`` (recursively, itself included) that holds a run.json."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return []
    return sorted({p.parent for p in results_dir.rglob(RUN_FILE) if p.is_file()})


def rel_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` for messages (its name if it is ``root``; as given if outside it)."""
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
    from corl_bench.eval.specs import get_spec
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.registries import BENCHMARKS

    if benchmark not in BENCHMARKS:
        return None
    return row_grader(get_spec(benchmark))


def _load_phase(agent_dir: Path, run_dir: Path, rel: str, warnings: list[str],
                versions: dict[str, set[str]]) -> dict[str, BenchmarkScores]:
    """benchmark -> scores for every ``<benchmark>.jsonl`` in ``agent_dir`` ({} if absent); collects versions."""
    if not agent_dir.is_dir():
        return {}
    out = {}
    for path in sorted(agent_dir.glob("*.jsonl")):
        name = rel_path(path, run_dir)
        rows = _read_jsonl(path, name)
        if not rows:
            warnings.append(f"{rel}: {name} is empty; ignored")
            continue
        try:
            out[path.stem] = score_predictions(rows, row_grader_for(path.stem))
        except ValueError as exc:
            raise DamagedRun(f"{name}: {exc}") from exc
        versions.setdefault(path.stem, set()).update(
            str(r["benchmark_version"]) for r in rows if r.get("benchmark_version") is not None)
    return out


def _field(meta: Mapping[str, Any], key: str, kind: type) -> Any:
    value = meta.get(key)
    if value is None:
        raise DamagedRun(f"run.json has no {key!r}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DamagedRun(f"run.json field {key!r} should be {kind.__name__} (got {value!r})")
    return value


def _read_config(run_dir: Path, rel: str, warnings: list[str]) -> Optional[Mapping[str, Any]]:
    """config.yaml as a mapping; None (with a warning) when it is missing or unreadable."""
    import yaml

    path = run_dir / CONFIG_FILE
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        warnings.append(f"{rel} has no {CONFIG_FILE}; its eval decoding is not in the footer")
        return None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        warnings.append(f"{rel}: cannot read {CONFIG_FILE} ({type(exc).__name__}); its eval decoding is not in "
                        "the footer")
        return None
    return cfg if isinstance(cfg, Mapping) else None


def _manifest_decoding(run_dir: Path) -> Optional[tuple[tuple[str, Any], ...]]:
    """For a ``corl-bench eval`` target (no config.yaml): the decoding its ``eval_manifest.json`` files record.
    A key on which the benchmarks differ (k: 8 for AMC, 1 for GSM8K) becomes the text ``"amc83 8, gsm8k 1"``."""
    per: dict[str, Mapping[str, Any]] = {}
    for path in sorted(run_dir.glob("eval/*/*/eval_manifest.json")):
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        for bench, entry in (manifest.items() if isinstance(manifest, dict) else ()):
            if isinstance(entry, dict) and isinstance(entry.get("decoding"), dict):
                per[bench] = entry["decoding"]
    if not per:
        return None
    out = []
    for key in DECODING_KEYS:
        values = {b: d[key] for b, d in sorted(per.items()) if key in d}
        if values:
            distinct = {json.dumps(v, sort_keys=True) for v in values.values()}
            out.append((key, next(iter(values.values())) if len(distinct) == 1 else
                        ", ".join(f"{b} {v}" for b, v in values.items())))
    return tuple(out)


def _run_info(run_dir: Path, rel: str, meta: Mapping[str, Any], versions: dict[str, set[str]],
              warnings: list[str]) -> RunInfo:
    manifest_decoding = None if (run_dir / CONFIG_FILE).exists() else _manifest_decoding(run_dir)
    cfg = _read_config(run_dir, rel, [] if manifest_decoding else warnings)
    ev = cfg.get("eval") if cfg else None
    decoding = (tuple((k, ev[k]) for k in DECODING_KEYS if k in ev) if isinstance(ev, Mapping) else
                manifest_decoding)
    steps = meta.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        run_cfg = cfg.get("run") if cfg else None
        steps = run_cfg.get("steps") if isinstance(run_cfg, Mapping) else None
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    return RunInfo(str(meta.get("run_id") or run_dir.name), rel, meta["method"], meta["cohort"],
                   str(meta.get("tag") or ""), meta["seed"], steps, decoding,
                   tuple((b, v) for b in sorted(versions) for v in sorted(versions[b])))


def _load_run(run_dir: Path, rel: str, phase: str,
              base_phase: str) -> tuple[list[AgentResult], Optional[RunInfo], list[str]]:
    """Scores of every agent of one run, its RunInfo (None if it has no results) and warnings; raises DamagedRun."""
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
    tag = meta.get("tag") or ""
    if not isinstance(tag, str):
        raise DamagedRun(f"run.json field 'tag' should be str (got {tag!r})")
    run_id, profile = str(meta.get("run_id") or run_dir.name), str(meta.get("profile", ""))
    warnings: list[str] = []
    versions: dict[str, set[str]] = {}
    results, missing = [], []
    for index, agent in enumerate(agents):
        name = agent["name"]
        final = _load_phase(run_dir / "eval" / phase / name, run_dir, rel, warnings, versions)
        base = _load_phase(run_dir / "eval" / base_phase / name, run_dir, rel, warnings, versions)
        if not final:
            missing.append(name)
            continue
        results.append(AgentResult(run_id, rel, method, cohort, tag, name, index, str(agent.get("family", "")),
                                   seed, profile, final, base))
    if not results:
        suffix = "" if status == "finished" else f" (status {status!r})"
        return [], None, warnings + [f"{rel} has no predictions for phase {phase}{suffix}; skipped"]
    if missing:
        warnings.append(f"{rel}: agent(s) {', '.join(missing)} have no predictions for phase {phase}")
    if status != "finished":
        warnings.append(f"{rel} has status {status!r}; showing its {phase} predictions as they are")
    if not any(r.base for r in results):
        warnings.append(f"{rel} has no predictions for phase {base_phase}; Δ base left empty")
    return results, _run_info(run_dir, rel, meta, versions, warnings), warnings


def natural_key(text: str) -> list[Any]:
    """Sort key that orders "a2" before "a10"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def collect_results(results_dir: Path, *, phase: str = "final", base_phase: str = "base") -> Collected:
    """Every readable run under ``results_dir``: per-agent results, run infos (in run order) and warnings."""
    results_dir = Path(results_dir)
    warnings: list[str] = []
    results: list[AgentResult] = []
    runs: list[RunInfo] = []
    for run_dir in find_runs(results_dir):
        rel = rel_path(run_dir, results_dir)
        try:
            run_results, info, run_warnings = _load_run(run_dir, rel, phase, base_phase)
        except DamagedRun as exc:
            warnings.append(f"skipping {rel}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one bad run must never break the table
            logger.debug("unexpected error reading %s", run_dir, exc_info=True)
            warnings.append(f"skipping {rel}: unexpected {type(exc).__name__}: {exc}")
            continue
        warnings.extend(run_warnings)
        results.extend(run_results)
        if info is not None:
            runs.append(info)
    return Collected(tuple(results), tuple(runs), tuple(warnings))


def pool_scores(per_seed: Sequence[Scores]) -> tuple[Scores, Scores]:
    """(mean, sample sd) over seeds for every benchmark and metric; a missing value is left out of both."""
    mean: Scores = {}
    sd: Scores = {}
    for bench in sorted({b for scores in per_seed for b in scores}):
        mean[bench], sd[bench] = {}, {}
        for metric in METRICS:
            values = [s[bench][metric] for s in per_seed if s.get(bench, {}).get(metric) is not None]
            mean[bench][metric], sd[bench][metric] = _mean(values), _sd(values)  # type: ignore[arg-type]
    return mean, sd


def _aggregate(members: list[AgentResult], warnings: list[str]) -> Row:
    """One Row from the runs (seeds) of one (method, cohort, tag, agent)."""
    members = sorted(members, key=lambda r: (r.seed, r.run_id))
    first = members[0]
    label = f"{first.method}/{first.cohort}" + (f"[{first.tag}]" if first.tag else "") + f"/{first.agent}"
    seeds = tuple(r.seed for r in members)
    if len(set(seeds)) < len(seeds):
        warnings.append(f"{label}: a seed appears in several runs ({', '.join(r.run_id for r in members)})")
    if len({r.profile for r in members}) > 1:
        warnings.append(f"{label}: runs mix profiles {sorted({r.profile for r in members})}")
    if len({r.family for r in members}) > 1:
        warnings.append(f"{label}: runs disagree on the agent family; showing {first.family!r}")
    per_seed = tuple(r.metrics("final") for r in members)
    base_per_seed = tuple(r.metrics("base") for r in members)
    scores, scores_sd = pool_scores(per_seed)
    base = pool_scores(base_per_seed)[0]
    ks = {b: tuple(sorted({r.final[b].k for r in members if b in r.final and r.final[b].k})) for b in scores}
    return Row(first.method, first.cohort, first.agent, first.family, seeds, scores, base, scores_sd, per_seed,
               ks, tuple(r.run_id for r in members), first.tag, base_per_seed)


def aggregate(collected: Collected) -> tuple[list[Row], list[str]]:
    """Rows (sorted by method, cohort, tag, agent) of what :func:`collect_results` read, and all warnings."""
    warnings = list(collected.warnings)
    groups: dict[tuple[str, str, str, str], list[AgentResult]] = {}
    for result in collected.results:
        groups.setdefault((result.method, result.cohort, result.tag, result.agent), []).append(result)
    keys = sorted(groups, key=lambda k: (k[0], k[1], k[2], natural_key(k[3])))
    return [_aggregate(groups[key], warnings) for key in keys], warnings


def collect(results_dir: Path, *, phase: str = "final", base_phase: str = "base") -> tuple[list[Row], list[str]]:
    """Rows (sorted by method, cohort, tag, agent) and one-line warnings for every run under ``results_dir``."""
    return aggregate(collect_results(results_dir, phase=phase, base_phase=base_phase))


def html(source: str | Path | Collected, *, metrics: Sequence[str] = DEFAULT_METRICS,
         reference: Optional[str] = None, backbone: Optional[str] = None) -> str:
    """The paper-style table of every run under a results directory (or of what :func:`collect_results` returned,
    to avoid regrading twice) as a self-contained HTML ``<table>`` fragment, with the paper's table appended as a
    second ``<table>`` when ``reference="paper"`` finds nothing to compare; ValueError (one line) on a bad metric,
    reference or backbone. Its warnings are logged."""
    from corl_bench.report.layout import build
    from corl_bench.report.render import render_text

    table = build(source, metrics=metrics, reference=reference, backbone=backbone)
    for warning in table.warnings:
        logger.warning("%s", warning)
    return render_text(table, "html")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``path``, then ``os.replace`` it into place."""
    path = Path(path)
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


_write_atomic = write_atomic  # old private name


def print_wide(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width even on a narrow console: numbers are never cut to "…"."""
    width = max(console.width, Measurement.get(console, console.options.update_width(10_000), table).maximum)
    lines = console.render_lines(table, console.options.update_width(width), pad=False, new_lines=True)
    console.print(Segments([seg for line in lines for seg in line]), crop=False, soft_wrap=True, end="")


def _say(console: Console, text: str, style: Optional[str] = None) -> None:
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def main(
    results_dir: str | Path = "results",
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    out_dir: str | Path | None = None,
    fmt: Optional[str] = None,
    out: str | Path | None = None,
    reference: Optional[str] = None,
    backbone: Optional[str] = None,
    console: Optional[Console] = None,
    err_console: Optional[Console] = None,
) -> list[Row]:
    """``corl-bench table``: print the paper-style table (rich, or ``fmt`` text when ``fmt`` is given without
    ``out``), its footer and the warnings; write ``out`` in ``fmt`` (default: from its suffix, else md)
    atomically, or else ``table.md`` and ``table.csv`` into ``out_dir`` (default: the results dir). Warnings and
    "wrote" lines go to ``err_console`` (default: ``console``).
    Returns the aggregated rows of :func:`collect` ([] when there is nothing to show); ValueError (one line)
    on a bad metric, format, reference or backbone."""
    from corl_bench.report.layout import build, check_reference
    from corl_bench.report.render import FORMAT_SUFFIXES, print_rich, render_text

    console = console or Console()
    err = err_console or console
    metrics = check_metrics(metrics)
    check_reference(reference, backbone)
    if out is not None and fmt is None:
        fmt = FORMAT_SUFFIXES.get(Path(out).suffix.lower(), "md")
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)} (e.g. --format md)")
    results_dir = Path(results_dir)
    if not find_runs(results_dir):
        _say(console, f"No runs found under {results_dir}; start one with `corl-bench run`.")
        return []
    collected = collect_results(results_dir)
    table = build(collected, metrics=metrics, reference=reference, backbone=backbone)
    if not table.blocks:
        for warning in table.warnings:
            _say(err, f"warning: {warning}", "yellow")
        _say(console, f"No usable results under {results_dir} (see the warnings above).")
        return []
    if fmt is not None and out is None:
        console.out(render_text(table, fmt), highlight=False, end="")
    else:
        print_rich(console, table)
    for warning in table.warnings:
        _say(err, f"warning: {warning}", "yellow")
    if out is not None:
        targets = [(Path(out), fmt or "md")]
    else:
        where = Path(out_dir) if out_dir is not None else results_dir
        targets = [(where / "table.md", "md"), (where / "table.csv", "csv")]
    for path, kind in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, render_text(table, kind))
        except OSError as exc:
            _say(err, f"warning: cannot write {path} ({exc.strerror or exc}); choose another place with "
                 "--out FILE or --out-dir DIR", "yellow")
            continue
        _say(err, f"wrote {path}")
    return aggregate(collected)[0]
