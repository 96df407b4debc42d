"""Collect finished runs under a results directory and regrade their predictions (the bottom of the table stack).

Public API (no torch or transformers; layout, render and table build on it, nothing here imports them):

* :func:`collect_results` ``(results_dir) -> Collected`` - one :class:`AgentResult` per (run, agent) and one
  :class:`RunProtocol` per run (its run record, eval decoding, steps, benchmark versions), plus one-line warnings
  (damaged runs are skipped and named there).
* :func:`collect` ``(results_dir) -> (list[Row], list[str])`` - the same aggregated over seeds: one :class:`Row`
  per (method, cohort, tag, agent); :func:`aggregate` does it on an already-read :class:`Collected`.
* :func:`check_metrics`, :data:`METRIC_LABELS`, :func:`natural_key`, :func:`rel_path`, :func:`row_grader_for`,
  :func:`items_differ` (why two evaluations do not cover the same problems).

Δ is taken per run against its own base-phase evaluation, and only where both phases hold the same problem ids
(:meth:`AgentResult.own_delta`, :meth:`Row.delta`). Two runs of the same cell are never pooled: the newer is kept
(:func:`collect_results` says which one it set aside; :mod:`corl_bench.report.duplicates`).

Run directories are read through :class:`corl_bench.results.RunDir` (``run.json`` as a
:class:`corl_bench.record.RunRecord`: method, cohort, paper_row, seed, tag, status, agents, steps, ...;
``config.yaml``; predictions at ``eval/<phase>/<agent name>/<benchmark>.jsonl``). Every
predictions file is regraded with :func:`corl_bench.eval.metrics.score_predictions` (stored ``correct`` fields are
not trusted). A :class:`Row` holds the mean over seeds and the sample standard deviation (n-1) where there are two
or more.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from corl_bench.config import PAPER_ROWS
from corl_bench.eval.metrics import METRICS, BenchmarkScores, score_predictions
from corl_bench.record import RunRecord
from corl_bench.report.duplicates import newest_of_each_cell
from corl_bench.results import CONFIG, RunDir, read_jsonl
from corl_bench.results import find_runs as find_run_dirs

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_METRICS", "ENV_KEYS", "FORMATS", "METRIC_LABELS", "TABLE_METRICS", "AgentResult", "Collected",
           "DamagedRun", "Row", "RunProtocol", "aggregate", "check_metrics", "collect", "collect_results", "find_runs",
           "items_differ", "natural_key", "pool_scores", "rel_path", "row_grader_for"]

Scores = dict[str, dict[str, Optional[float]]]  # benchmark -> metric -> value (fraction in [0, 1])

DEFAULT_METRICS: tuple[str, ...] = ("avg_k",)
TABLE_METRICS: tuple[str, ...] = ("greedy", "avg_k", "maj_k", "pass_k")
FORMATS: tuple[str, ...] = ("md", "latex", "csv", "html")
METRIC_LABELS: dict[str, str] = {
    "greedy": "greedy", "avg_k": "pass@1", "maj_k": "maj@k", "pass_k": "pass@k",
    "extraction_failure": "no-answer", "clipped": "clipped",
}
DECODING_KEYS: tuple[str, ...] = ("samples", "temperature", "top_p", "greedy", "max_new_tokens", "max_problems")
#: env.json keys besides ``packages`` that tables compare between runs (seed, argv and created_at differ by design).
ENV_KEYS: tuple[str, ...] = ("python", "platform", "machine", "git_commit")


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
    base_matches: tuple[frozenset[str], ...] = ()  # per run: benchmarks whose base and final items are the same

    def avg(self, metric: str, benchmarks: Sequence[str]) -> tuple[Optional[float], Optional[float]]:
        """(mean, sd over seeds) of the mean of ``metric`` over ``benchmarks``; None where missing."""
        per_seed = [_bench_avg(scores, metric, benchmarks) for scores in self.per_seed]
        sd = _sd(per_seed) if per_seed and all(v is not None for v in per_seed) else None  # type: ignore[arg-type]
        return _bench_avg(self.scores, metric, benchmarks), sd

    def delta(self, metric: str, benchmarks: Sequence[str]) -> Optional[float]:
        """Mean over seeds of each run's own Δ: its final average of ``metric`` over ``benchmarks`` minus its own
        base-phase average, over the seeds whose base was evaluated on the same problems as their final phase
        (``base_matches``); None where no seed has one. A Row built without per-seed scores compares the pooled
        means."""
        if not self.per_seed or len(self.base_per_seed) != len(self.per_seed):
            final, base = self.avg(metric, benchmarks)[0], _bench_avg(self.base, metric, benchmarks)
            return None if final is None or base is None else final - base
        deltas = []
        for i, (final_scores, base_scores) in enumerate(zip(self.per_seed, self.base_per_seed)):
            if self.base_matches and not set(benchmarks) <= self.base_matches[i]:
                continue
            final, base = _bench_avg(final_scores, metric, benchmarks), _bench_avg(base_scores, metric, benchmarks)
            if final is not None and base is not None:
                deltas.append(final - base)
        return _mean(deltas)


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
    final: dict[str, BenchmarkScores]  # the reported phase: final, or the one eval.select chose (``phase``)
    base: dict[str, BenchmarkScores]
    phase: str = "final"  # which evaluation phase ``final`` holds (run.json ``selection``, else "final")
    paper_row: str = ""  # the paper row its cohort reproduces (run.json ``paper_row``; "" in runs written before it)
    train_set: str = ""  # the run's training set (config.yaml ``data.train``; "" when unset or unreadable)
    final_items: Mapping[str, frozenset[str]] = field(default_factory=dict)  # benchmark -> problem ids of ``final``
    base_items: Mapping[str, frozenset[str]] = field(default_factory=dict)  # benchmark -> problem ids of ``base``

    def metrics(self, phase: str = "final") -> Scores:
        """benchmark -> metric -> value for ``phase`` ("final": the reported checkpoint, or "base")."""
        return {b: s.metrics() for b, s in getattr(self, phase).items()}

    def base_matches(self, benchmarks: Optional[Sequence[str]] = None) -> frozenset[str]:
        """The benchmarks (of ``benchmarks``, default all of the final phase) whose base-phase predictions cover
        exactly the problems of the final phase (its own Δ can be taken there)."""
        names = self.final if benchmarks is None else benchmarks
        return frozenset(b for b in names if b in self.final and b in self.base
                         and self.final_items.get(b) == self.base_items.get(b))

    def own_delta(self, metric: str, benchmarks: Sequence[str]) -> tuple[Optional[float], str]:
        """(its final average of ``metric`` over ``benchmarks`` minus its own base-phase average, "") when both
        phases were evaluated on the same problems; else (None, why not in a few words)."""
        missing = [b for b in benchmarks if b not in self.final]
        if missing:
            return None, f"no final-phase evaluation of {', '.join(missing)}"
        if not self.base:
            return None, "no base-phase evaluation"
        for bench in benchmarks:
            if bench not in self.base:
                return None, f"no base-phase evaluation of {bench}"
            why = items_differ(self.base_items.get(bench), self.final_items.get(bench))
            if why:
                return None, f"{bench}: {why}"
        final = _bench_avg(self.metrics("final"), metric, benchmarks)
        base = _bench_avg(self.metrics("base"), metric, benchmarks)
        if final is None or base is None:
            return None, f"no {METRIC_LABELS.get(metric, metric)} value in one of the phases"
        return final - base, ""


def items_differ(base: Optional[frozenset[str]], final: Optional[frozenset[str]], first: str = "base",
                 second: str = "final") -> str:
    """"" when two evaluations cover the same problems; else why not, in a few words ("base on 300 items, final on
    60"; "base and final on different items (60 each)")."""
    if base == final:
        return ""
    if base is None or final is None:
        return f"{first if base is None else second} items not recorded"
    if len(base) != len(final):
        return f"{first} on {len(base)} items, {second} on {len(final)}"
    return f"{first} and {second} on different items ({len(base)} each, {len(base & final)} shared)"


@dataclass(frozen=True)
class RunProtocol:
    """What a run says about its protocol (for the table footer): its run record and what the footer derives from
    its files."""

    record: RunRecord  # run.json
    rel: str
    steps: Optional[int]  # run.json "steps" (else config run.steps); None if unknown
    decoding: Optional[tuple[tuple[str, Any], ...]]  # config.yaml eval: (key, value) for DECODING_KEYS; None if unread
    versions: tuple[tuple[str, str], ...]  # (benchmark, benchmark_version) pairs seen in its predictions
    selection: Optional[tuple[str, str]] = None  # (eval.select rule, its benchmark) when a phase was selected
    run_id: str = ""  # run.json "run_id", else the directory name
    engine: Optional[str] = None  # config.yaml rollout.backend (the engine that generated its evaluations); None: unknown
    packages: tuple[tuple[str, str], ...] = ()  # env.json "packages": (name, version); () when unrecorded
    environment: Optional[tuple[tuple[str, str], ...]] = None  # env.json ENV_KEYS as (key, value); None: no env.json

    @property
    def stopped_after(self) -> Optional[int]:
        """Steps trained when run.stop_on_collapse ended the run early; None when it ran to the end."""
        return self.record.stopped_after_step if self.record.stopped == "collapse" else None


@dataclass(frozen=True)
class Collected:
    """Everything :func:`collect_results` read: per-agent results, per-run protocol info, warnings."""

    results: tuple[AgentResult, ...]
    runs: tuple[RunProtocol, ...]
    warnings: tuple[str, ...]
    duplicates: tuple[str, ...] = ()  # one line per run set aside for a newer one of the same cell (also in warnings)


def find_runs(results_dir: Path) -> list[Path]:
    """Every directory under ``results_dir`` (recursively, itself included) that holds a run.json, as paths
    (:func:`corl_bench.results.find_runs` gives them as :class:`~corl_bench.results.RunDir`)."""
    return [run.path for run in find_run_dirs(results_dir)]


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


def _load_phase(run: RunDir, phase: str, agent: str, rel: str, warnings: list[str],
                versions: dict[str, set[str]], items: dict[str, frozenset[str]]) -> dict[str, BenchmarkScores]:
    """benchmark -> scores for every predictions file of ``agent`` in ``phase`` ({} if none); collects versions and
    each benchmark's problem ids into ``items``."""
    out = {}
    for bench in run.benchmarks(phase, agent):
        name = rel_path(run.predictions_path(phase, agent, bench), run.path)
        rows = _read_jsonl(run.predictions_path(phase, agent, bench), name)
        if not rows:
            warnings.append(f"{rel}: {name} is empty; ignored")
            continue
        try:
            out[bench] = score_predictions(rows, row_grader_for(bench))
        except ValueError as exc:
            raise DamagedRun(f"{name}: {exc}") from exc
        items[bench] = frozenset(str(r["problem_id"]) for r in rows)
        versions.setdefault(bench, set()).update(
            str(r["benchmark_version"]) for r in rows if r.get("benchmark_version") is not None)
    return out


def _required(record: RunRecord, key: str) -> Any:
    """A field the table cannot do without; DamagedRun naming it when it is missing or of the wrong type."""
    problem = record.problem(key)
    if problem is not None:
        raise DamagedRun(f"run.json {problem}")
    return getattr(record, key)


def _read_config(run: RunDir, rel: str, warnings: list[str]) -> Optional[Mapping[str, Any]]:
    """config.yaml as a mapping; None (with a warning) when it is missing or unreadable."""
    import yaml

    try:
        return run.config()
    except FileNotFoundError:
        warnings.append(f"{rel} has no {CONFIG}; its eval decoding is not in the footer")
        return None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        warnings.append(f"{rel}: cannot read {CONFIG} ({type(exc).__name__}); its eval decoding is not in "
                        "the footer")
        return None
    except ValueError:  # not a mapping
        return None


def _train_set(run: RunDir) -> str:
    """config.yaml ``data.train`` ("" when the run has none or its config cannot be read: _protocol warns about
    that)."""
    import yaml

    try:
        data = run.config().get("data")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
        return ""
    train = data.get("train") if isinstance(data, Mapping) else None
    return train if isinstance(train, str) else ""


def _manifest_decoding(run: RunDir) -> Optional[tuple[tuple[str, Any], ...]]:
    """For a ``corl-bench eval`` target (no config.yaml): the decoding its ``eval_manifest.json`` files record.
    A key on which the benchmarks differ (k: 8 for AMC, 1 for GSM8K) becomes the text ``"amc83 8, gsm8k 1"``."""
    per: dict[str, Mapping[str, Any]] = {}
    for path in run.manifest_paths():
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


def _protocol(run: RunDir, rel: str, record: RunRecord, versions: dict[str, set[str]],
              warnings: list[str]) -> RunProtocol:
    manifest_decoding = None if run.config_path.exists() else _manifest_decoding(run)
    cfg = _read_config(run, rel, [] if manifest_decoding else warnings)
    ev = cfg.get("eval") if cfg else None
    decoding = (tuple((k, ev[k]) for k in DECODING_KEYS if k in ev) if isinstance(ev, Mapping) else
                manifest_decoding)
    steps = record.steps
    if steps is None:
        run_cfg = cfg.get("run") if cfg else None
        steps = run_cfg.get("steps") if isinstance(run_cfg, Mapping) else None
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    seen = tuple((b, v) for b in sorted(versions) for v in sorted(versions[b]))
    rollout = cfg.get("rollout") if cfg else None
    engine = rollout.get("backend", "hf") if isinstance(rollout, Mapping) else None  # hf: RolloutConfig's default
    packages, environment = _environment(run)
    return RunProtocol(record, rel, steps, decoding, seen, run_id=record.run_id or run.name,
                       engine=engine if isinstance(engine, str) else None, packages=packages,
                       environment=environment)


def _environment(run: RunDir) -> tuple[tuple[tuple[str, str], ...], Optional[tuple[tuple[str, str], ...]]]:
    """env.json's package versions, sorted (() when unrecorded), and its :data:`ENV_KEYS` as (key, value) (None when
    the file is missing or unreadable)."""
    try:
        env = run.env()
    except (OSError, UnicodeDecodeError, ValueError):
        return (), None
    if not isinstance(env, Mapping):
        return (), None
    packages = env.get("packages")
    packs = (tuple(sorted((str(k), str(v)) for k, v in packages.items() if v is not None))
             if isinstance(packages, Mapping) else ())
    return packs, tuple((key, str(env[key])) for key in ENV_KEYS if env.get(key) is not None)


def selected_phases(record: RunRecord) -> tuple[Optional[tuple[str, str]], dict[str, str]]:
    """(rule, benchmark) and agent -> phase of the run record's ``selection`` (eval.select); (None, {}) when the run
    reports its final checkpoint or the record is unreadable."""
    sel = record.selection
    if not isinstance(sel, Mapping) or not isinstance(sel.get("rule"), str) or sel.get("rule") == "final":
        return None, {}
    agents = sel.get("agents") if isinstance(sel.get("agents"), Mapping) else {}
    phases = {str(a): c["phase"] for a, c in agents.items()
              if isinstance(c, Mapping) and isinstance(c.get("phase"), str) and re.fullmatch(r"[\w.-]+", c["phase"])}
    return (sel["rule"], str(sel.get("benchmark") or "")), phases


def _load_run(run: RunDir, rel: str, phase: str, base_phase: str,
              selected: bool = True) -> tuple[list[AgentResult], Optional[RunProtocol], list[str]]:
    """Scores of every agent of one run, its RunProtocol (None if it has no results) and warnings; raises DamagedRun.

    ``phase`` "final" with ``selected``: each agent's phase that run.json's ``selection`` names (eval.select)."""
    try:
        record = run.record()
    except json.JSONDecodeError as exc:
        raise DamagedRun("run.json is not valid JSON") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedRun(f"cannot read run.json ({exc})") from exc
    except ValueError as exc:
        raise DamagedRun("run.json is not a JSON object") from exc
    method, cohort = _required(record, "method"), _required(record, "cohort")
    seed, status = _required(record, "seed"), _required(record, "status")
    if isinstance(record.invalid.get("agents"), list) or record.agents == ():
        raise DamagedRun("run.json 'agents' must be a non-empty list of objects with a 'name'")
    agents = _required(record, "agents")  # missing, or not a list
    if "tag" in record.invalid:
        raise DamagedRun(f"run.json field 'tag' should be str (got {record.invalid['tag']!r})")
    tag = record.tag or ""
    run_id, profile = record.run_id or run.name, record.profile or ""
    warnings: list[str] = []
    paper_row = record.paper_row or ""
    if paper_row not in ("", *PAPER_ROWS):
        warnings.append(f"{rel}: run.json paper_row {paper_row!r} is not one of {', '.join(PAPER_ROWS)}; labelled by "
                        f"its cohort {cohort!r}")
        paper_row = ""
    versions: dict[str, set[str]] = {}
    results, missing, train_set = [], [], _train_set(run)
    selection, chosen = selected_phases(record) if selected and phase == "final" else (None, {})
    for index, agent in enumerate(agents):
        name = agent.name
        use = chosen.get(name, phase)
        if use != phase and not run.benchmarks(use, name):
            warnings.append(f"{rel}: {name}'s selected phase {use} has no predictions; showing {phase}")
            use = phase
        final_items: dict[str, frozenset[str]] = {}
        base_items: dict[str, frozenset[str]] = {}
        final = _load_phase(run, use, name, rel, warnings, versions, final_items)
        base = _load_phase(run, base_phase, name, rel, warnings, versions, base_items)
        if not final:
            missing.append(name)
            continue
        results.append(AgentResult(run_id, rel, method, cohort, tag, name, index, agent.family or "",
                                   seed, profile, final, base, use, paper_row, train_set, final_items, base_items))
    if not results:
        suffix = "" if status == "finished" else f" (status {status!r})"
        return [], None, warnings + [f"{rel} has no predictions for phase {phase}{suffix}; skipped"]
    if missing:
        warnings.append(f"{rel}: agent(s) {', '.join(missing)} have no predictions for phase {phase}")
    if status != "finished":
        warnings.append(f"{rel} has status {status!r}; showing its {phase} predictions as they are")
    if not any(r.base for r in results):
        warnings.append(f"{rel} has no predictions for phase {base_phase}; Δ base left empty")
    return results, replace(_protocol(run, rel, record, versions, warnings), selection=selection), warnings


def natural_key(text: str) -> list[Any]:
    """Sort key that orders "a2" before "a10"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def collect_results(results_dir: Path, *, phase: str = "final", base_phase: str = "base",
                    selected: bool = True) -> Collected:
    """Every readable run under ``results_dir``: per-agent results, run infos (in run order) and warnings.

    ``phase`` "final" reports each agent's selected checkpoint where run.json records an ``eval.select`` choice
    (``selected=False``: always the final one). Two runs of the same cell (method, cohort, tag, seed, evaluated model
    and agents) are never pooled: the newer (run.json ``started_at``, else the file's time) is kept and a line in
    ``duplicates`` (and ``warnings``) names both and how to see the other."""
    results_dir = Path(results_dir)
    warnings: list[str] = []
    loaded: list[tuple[RunDir, list[AgentResult], RunProtocol]] = []
    for run in find_run_dirs(results_dir):
        rel = rel_path(run.path, results_dir)
        try:
            run_results, info, run_warnings = _load_run(run, rel, phase, base_phase, selected)
        except DamagedRun as exc:
            warnings.append(f"skipping {rel}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one bad run must never break the table
            logger.debug("unexpected error reading %s", run, exc_info=True)
            warnings.append(f"skipping {rel}: unexpected {type(exc).__name__}: {exc}")
            continue
        warnings.extend(run_warnings)
        if info is not None:
            loaded.append((run, run_results, info))
    kept, duplicates = newest_of_each_cell(loaded)
    warnings.extend(duplicates)
    return Collected(tuple(r for _, run_results, _ in kept for r in run_results),
                     tuple(info for _, _, info in kept), tuple(warnings), tuple(duplicates))


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
               ks, tuple(r.run_id for r in members), first.tag, base_per_seed,
               tuple(r.base_matches() for r in members))


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

