"""The paper-style layout of the results table: blocks per backbone, rows in the paper's order, marks, footer.

Public API (no torch; rendering is in :mod:`corl_bench.report.render`):

* :func:`build` ``(source, *, metrics=("avg_k",), reference=None, backbone=None) -> PaperTable`` - ``source`` is
  a results directory or a :class:`corl_bench.report.collect.Collected`; every number is recomputed from stored
  predictions.
* :func:`corl_bench.report.methods.row_labels` - (method, cohort) -> row label, in row order, as the methods
  declare them (``ROW_LABELS`` here is the same, kept for one release).
* :func:`fmt_pct`, :func:`fmt_signed`, :func:`cell_text` - the display precision that marks are computed at.

Rules: one :class:`Block` per agent family. A block starts with Base (the base-phase evaluation of that family,
per seed from the block's runs in row order), then one row per (method, cohort) in the order the methods declare
(``table_order``, then the order of their ``cohort_labels``), labelled ``Method.row_label(cohort)``; methods this
installation cannot describe come last under their raw name (:mod:`corl_bench.report.methods`). Methods with
``independent_agents`` train every agent of a cohort on its own, so each of their agents lands in the block of its
family; a (label, family, seed) found in two cohorts is kept once (cohort ``single`` first, then by cohort name)
with a warning. A multi-agent run with several agents of one family gives one row per agent. Tagged runs
(run.json ``tag``) get their own row right after the untagged one. Marks: per column, the best label-free mean is
bold ("b"), the second underlined ("u"), compared at display precision (ties share); Base, methods of kind
uses-labels (GT-Reward) or control (Random reward), unknown methods, tagged rows and paper rows are not ranked.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from corl_bench.report import methods as method_views
from corl_bench.report import reference as ref
from corl_bench.report.collect import (METRIC_LABELS, AgentResult, Collected, RunInfo, check_metrics, collect_results,
                                       natural_key)
from corl_bench.report.methods import ANY, UNKNOWN, MethodView

logger = logging.getLogger(__name__)

__all__ = ["ANY", "BASE_LABEL", "Block", "Column", "PaperTable", "Stat", "TableRow", "build", "cell_text",
           "check_reference", "fmt_pct", "fmt_signed"]

BASE_LABEL = "Base"
PREFERRED_COHORT = "single"
MISSING = "–"


def __getattr__(name: str) -> Any:
    """The constants this module had before methods described themselves, now derived from the registered methods
    on each access (kept for one release): ROW_LABELS, REFERENCE_LABELS, CONTROL_LABELS, SINGLE_AGENT_METHODS."""
    if name == "ROW_LABELS":
        return method_views.row_labels()
    if name in ("REFERENCE_LABELS", "CONTROL_LABELS"):
        refs, controls = method_views.unranked_labels()
        return frozenset(refs if name == "REFERENCE_LABELS" else controls)
    if name == "SINGLE_AGENT_METHODS":
        return frozenset(v.name for v in method_views.registered() if v.independent)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Stat:
    """Mean and sample sd (None with fewer than two values) over ``n`` seeds; fractions in [0, 1]."""

    mean: Optional[float] = None
    sd: Optional[float] = None
    n: int = 0


@dataclass(frozen=True)
class Column:
    """A numeric column: ``kind`` "value" (one benchmark x metric), "avg" or "delta"."""

    kind: str
    metric: str
    benchmark: str
    header: str


@dataclass(frozen=True)
class TableRow:
    """One displayed row. ``kind``: base, reference (uses labels), label-free, control, unknown (a method not
    described here) or paper; only label-free rows are ranked."""

    label: str
    kind: str
    group: str  # the label without agent and tag ("TTRL", "Base"); the paper's rows are looked up by it
    method: str
    cohorts: tuple[str, ...]
    tag: str
    agent: str
    family: str
    seeds: tuple[int, ...]
    run_ids: tuple[str, ...]
    cells: tuple[Stat, ...]  # one per value column, then the Avg
    delta: Optional[float]  # Avg minus the block's Base Avg
    marks: tuple[str, ...] = ()  # "b" / "u" / "" per value column, Avg and delta


@dataclass(frozen=True)
class Block:
    """The rows of one backbone (agent family)."""

    family: str
    backbone: Optional[str]  # the paper backbone it maps to (reference.BACKBONES), if any
    rows: tuple[TableRow, ...]
    base_sources: tuple[tuple[int, str], ...]  # (seed, run id) that supplied Base


@dataclass(frozen=True)
class PaperTable:
    """Everything a renderer needs: columns, blocks, footer lines, reference notes, warnings."""

    metrics: tuple[str, ...]
    benchmarks: tuple[str, ...]
    columns: tuple[Column, ...]  # value columns, then Avg, then Δ
    blocks: tuple[Block, ...]
    footer: tuple[str, ...]
    notes: tuple[str, ...] = ()  # lines about --reference
    warnings: tuple[str, ...] = ()
    paper_blocks: tuple[ref.PaperBlock, ...] = ()  # the paper's tables to show on their own


def fmt_pct(value: Optional[float]) -> str:
    """A fraction as percent with one decimal ("62.3"); "–" for None."""
    return MISSING if value is None else f"{100.0 * value:.1f}"


def fmt_signed(value: Optional[float]) -> str:
    """A fraction as signed percent with one decimal ("+1.2"); "–" for None."""
    return MISSING if value is None else f"{100.0 * value:+.1f}"


def cell_text(stat: Stat) -> str:
    """"mean ± sd" with one decimal (just the mean with fewer than two seeds); "–" when missing."""
    if stat.mean is None:
        return MISSING
    return fmt_pct(stat.mean) + (f" ± {fmt_pct(stat.sd)}" if stat.sd is not None else "")


def _stat(values: Sequence[Optional[float]]) -> Stat:
    vals = [v for v in values if v is not None]
    if not vals:
        return Stat()
    return Stat(sum(vals) / len(vals), statistics.stdev(vals) if len(vals) >= 2 else None, len(vals))


def check_reference(reference: Optional[str], backbone: Optional[str], path: Optional[Path] = None) -> None:
    """ValueError (one line naming the fix) unless ``reference`` is None or "paper" and ``backbone`` is known."""
    if reference not in (None, "paper"):
        raise ValueError(f"unknown reference {reference!r}; the only one is 'paper' (--reference paper)")
    if backbone is not None:
        names = ref.backbones(path)
        if backbone not in names:
            raise ValueError(f"unknown backbone {backbone!r}; the paper's are: {', '.join(names)}")


# ------------------------------------------------------------------------------------------ rows and blocks
def _label(view: MethodView, cohort: str, multi_cohort: set[str]) -> tuple[tuple[int, int], str]:
    """(order key, base label) of a (method, cohort): ``Method.row_label(cohort)``, plus the cohort for a method
    with one label that ran in several cohorts with agents that train together."""
    order, label = view.row(cohort)
    if view.name in multi_cohort:
        label = f"{label} ({cohort})"
    return order, label


@dataclass(frozen=True)
class _Group:
    family: str
    order: tuple[int, int]
    label: str  # base label (no agent, no tag)
    agent: str  # "" unless one row per agent
    tag: str
    members: tuple[AgentResult, ...]  # one per seed, sorted by seed
    kind: str = "label-free"  # the method's kind (corl_bench.method.Method.method_kind, or UNKNOWN)

    @property
    def sort_key(self) -> tuple[Any, ...]:
        return (self.order, self.label, natural_key(self.agent), self.tag != "", self.tag)

    @property
    def full_label(self) -> str:
        return self.label + (f" {self.agent}" if self.agent else "") + (f" [{self.tag}]" if self.tag else "")


def _who(result: AgentResult) -> str:
    return f"{result.run_id} ({result.agent}, cohort {result.cohort})"


def _groups(results: Sequence[AgentResult], warnings: list[str]) -> list[_Group]:
    """Results grouped into display rows, one member per seed (duplicates dropped with a warning)."""
    views = {m: method_views.describe(m) for m in sorted({r.method for r in results})}
    for view in views.values():
        if not view.known:
            warnings.append(method_views.unknown_warning(
                view, sorted({r.run_id for r in results if r.method == view.name})))
    wild: dict[str, set[str]] = {}
    for r in results:
        view = views[r.method]
        if view.known and not view.independent and not view.per_cohort:
            wild.setdefault(r.method, set()).add(r.cohort)
    multi_cohort = {m for m, cohorts in wild.items() if len(cohorts) > 1}
    family_count: dict[tuple[str, str], int] = {}
    for r in results:
        family_count[(r.run_id, r.family)] = family_count.get((r.run_id, r.family), 0) + 1
    per_agent = {(r.method, r.cohort, r.tag, r.family) for r in results
                 if not views[r.method].independent and family_count[(r.run_id, r.family)] > 1}
    buckets: dict[tuple[str, tuple[int, int], str, str, str], list[AgentResult]] = {}
    for r in results:
        order, label = _label(views[r.method], r.cohort, multi_cohort)
        agent = r.agent if (r.method, r.cohort, r.tag, r.family) in per_agent else ""
        buckets.setdefault((r.family, order, label, agent, r.tag), []).append(r)
    groups = []
    for (family, order, label, agent, tag), members in buckets.items():
        by_seed: dict[int, list[AgentResult]] = {}
        for r in members:
            by_seed.setdefault(r.seed, []).append(r)
        kept = []
        for seed in sorted(by_seed):
            candidates = sorted(by_seed[seed], key=lambda r: (r.cohort != PREFERRED_COHORT, r.cohort, r.run_id,
                                                              r.agent_index))
            kept.append(candidates[0])
            if len(candidates) > 1:
                name = label + (f" {agent}" if agent else "") + (f" [{tag}]" if tag else "")
                same = all(c.metrics("final") == candidates[0].metrics("final") for c in candidates[1:])
                warnings.append(f"{family} / {name}: seed {seed} comes from {len(candidates)} places; kept "
                                f"{_who(candidates[0])}, dropped {'; '.join(_who(c) for c in candidates[1:])} "
                                f"({'identical' if same else 'different'} final scores)")
        groups.append(_Group(family, order, label, agent, tag, tuple(kept), views[kept[0].method].kind))
    return sorted(groups, key=lambda g: g.sort_key)


def _kind(group: _Group) -> str:
    """The row kind: reference (uses labels, untagged), control (a control method, or any tagged row), unknown (a
    method not described here) or label-free; only label-free rows are ranked."""
    if group.kind == "uses-labels" and not group.tag:
        return "reference"
    if group.kind == "control" or group.tag:
        return "control"
    return UNKNOWN if group.kind == UNKNOWN else "label-free"


def _columns(metrics: Sequence[str], benchmarks: Sequence[str], results: Sequence[AgentResult]) -> list[Column]:
    def header(metric: str, bench: str) -> str:
        label = METRIC_LABELS[metric]
        if metric in ("maj_k", "pass_k"):
            ks = {r.final[bench].k for r in results if bench in r.final and r.final[bench].k}
            if len(ks) == 1:
                label = label.replace("@k", f"@{ks.pop()}")
        return f"{bench} {label}"

    cols = [Column("value", m, b, header(m, b)) for m in metrics for b in benchmarks]
    avg = "Avg" if len(metrics) == 1 else f"Avg {METRIC_LABELS[metrics[0]]}"
    return cols + [Column("avg", metrics[0], "", avg), Column("delta", metrics[0], "", "Δ")]


def _cells(per_seed: Sequence[dict[str, dict[str, Optional[float]]]], columns: Sequence[Column],
           benchmarks: Sequence[str]) -> tuple[Stat, ...]:
    values = [_stat([s.get(c.benchmark, {}).get(c.metric) for s in per_seed]) for c in columns if c.kind == "value"]
    metric = columns[-1].metric

    def seed_avg(scores: dict[str, dict[str, Optional[float]]]) -> Optional[float]:
        vals = [scores.get(b, {}).get(metric) for b in benchmarks]
        return None if not vals or any(v is None for v in vals) else sum(vals) / len(vals)  # type: ignore[arg-type]

    return tuple(values) + (_stat([seed_avg(s) for s in per_seed]),)


def _marks(rows: Sequence[TableRow], n_columns: int) -> list[tuple[str, ...]]:
    """Per row, "b" / "u" / "" for every value column, the Avg and Δ (ranking label-free rows only)."""
    marks = [[""] * n_columns for _ in rows]
    for j in range(n_columns):
        shown: dict[int, float] = {}
        for i, row in enumerate(rows):
            if row.kind != "label-free":
                continue
            text = fmt_signed(row.delta) if j == n_columns - 1 else fmt_pct(row.cells[j].mean)
            if text != MISSING:
                shown[i] = float(text)
        ranked = sorted(set(shown.values()), reverse=True)
        for i, value in shown.items():
            if value == ranked[0]:
                marks[i][j] = "b"
            elif len(ranked) > 1 and value == ranked[1]:
                marks[i][j] = "u"
    return [tuple(m) for m in marks]


def _block(family: str, groups: Sequence[_Group], columns: Sequence[Column], benchmarks: Sequence[str],
           warnings: list[str]) -> Block:
    base_seeds: dict[int, AgentResult] = {}
    for group in groups:  # row order: GT-Reward first
        for r in group.members:
            if r.base and r.seed not in base_seeds:
                base_seeds[r.seed] = r
    seeds = sorted(base_seeds)
    base: Optional[TableRow] = None
    if seeds:
        srcs = [base_seeds[s] for s in seeds]
        base = TableRow(BASE_LABEL, "base", BASE_LABEL, "", (), "", "", family, tuple(seeds), tuple(r.run_id for r in srcs),
                        _cells([r.metrics("base") for r in srcs], columns, benchmarks), None)
    else:
        warnings.append(f"{family}: no run has base-phase predictions; Base and Δ left empty")
    base_avg = base.cells[-1].mean if base else None
    rows = [base] if base else []
    for g in groups:
        cells = _cells([r.metrics("final") for r in g.members], columns, benchmarks)
        if cells[-1].n < len(g.members):
            warnings.append(f"{family} / {g.full_label}: {len(g.members) - cells[-1].n} seed(s) lack some of "
                            f"{', '.join(benchmarks)}; Avg uses the seeds that have all")
        delta = None if cells[-1].mean is None or base_avg is None else cells[-1].mean - base_avg
        rows.append(TableRow(g.full_label, _kind(g), g.label, g.members[0].method,
                             tuple(sorted({r.cohort for r in g.members})), g.tag, g.agent, family,
                             tuple(r.seed for r in g.members), tuple(r.run_id for r in g.members), cells, delta))
    marks = _marks(rows, len(columns))
    rows = [replace(r, marks=m) for r, m in zip(rows, marks)]
    return Block(family, ref.backbone_for(family), tuple(rows),
                 tuple((s, base_seeds[s].run_id) for s in seeds))


# ------------------------------------------------------------------------------------------ footer
def _decoding_text(decoding: Optional[tuple[tuple[str, Any], ...]]) -> str:
    if decoding is None:
        return "not recorded"
    d = dict(decoding)
    parts = []
    if isinstance(d.get("samples"), str):  # benchmarks of one eval target differ in k
        parts.append(f"k per benchmark ({d['samples']})")
    elif "samples" in d:
        parts.append(f"k={d['samples']} samples")
    if "temperature" in d:
        parts.append(f"temperature {d['temperature']}")
    if "top_p" in d:
        parts.append(f"top-p {d['top_p']}")
    if "greedy" in d:
        parts.append(f"greedy {'yes' if d['greedy'] else 'no'}")
    if "max_new_tokens" in d:
        parts.append(f"max_new_tokens {d['max_new_tokens']}")
    if d.get("max_problems"):
        parts.append(f"first {d['max_problems']} problems")
    return ", ".join(parts) or "not recorded"


def _names(run_ids: Sequence[str], limit: int = 3) -> str:
    run_ids = list(run_ids)
    more = f" and {len(run_ids) - limit} more" if len(run_ids) > limit else ""
    return ", ".join(run_ids[:limit]) + more


def _spec_info(bench: str) -> Optional[dict[str, Any]]:
    try:
        from corl_bench.registries import BENCHMARKS

        if bench not in BENCHMARKS:
            return None
        raw = BENCHMARKS.get(bench)
        return dict(raw) if isinstance(raw, dict) else None
    except Exception:  # noqa: BLE001 - a broken registry entry must not break the table
        logger.debug("cannot read the spec of %s", bench, exc_info=True)
        return None


def _unranked_text(blocks: Sequence[Block]) -> str:
    """"Base, GT-Reward (uses labels), Random reward (control) and tagged rows": what the marks skip, from the
    registered methods' kinds (and the unknown methods shown, if any)."""
    refs, controls = method_views.unranked_labels()
    parts = [BASE_LABEL]
    if refs:
        parts.append(f"{', '.join(refs)} (uses labels)")
    if controls:
        parts.append(f"{', '.join(controls)} (control)")
    if any(row.kind == UNKNOWN for b in blocks for row in b.rows):
        parts.append("methods not registered here")
    return ", ".join(parts) + " and tagged rows"


def selection_text(rule: str, benchmark: str) -> str:
    """How a table footer states an ``eval.select`` rule (the test-oracle one in bold: it is optimistic)."""
    if rule == "dev":
        return f"selected on {benchmark} (labelled, disjoint from test)"
    if rule == "label-free":
        return (f"selected label-free by peer agreement on {benchmark} (majority answers, labels unread; phases "
                "before a collapse alarm)")
    if rule == "test-oracle":
        return f"**selected on the test set (test-oracle): optimistic** (best {benchmark} pass@1)"
    return f"selected by {rule} on {benchmark}"


def _checkpoint_lines(runs: Sequence[RunInfo], warnings: list[str]) -> list[str]:
    """The footer's checkpoint rule: final (steps, mixed or not), or each eval.select rule and its runs; runs that
    stopped early on the collapse alarm are named."""
    lines = []
    final_runs = [r for r in runs if r.selection is None]
    chosen: dict[tuple[str, str], list[str]] = {}
    for r in runs:
        if r.selection is not None:
            chosen.setdefault(r.selection, []).append(r.run_id)
    steps = sorted({r.steps for r in final_runs if r.steps is not None})
    of = f" in {_names([r.run_id for r in final_runs])}" if chosen and final_runs else ""
    if final_runs and len(steps) > 1:
        lines.append(f"Checkpoint: final checkpoint after mixed steps ({', '.join(map(str, steps))}), no selection "
                     f"on test data{of}.")
        warnings.append("runs differ in training steps: " + "; ".join(
            f"{s} steps in {_names([r.run_id for r in final_runs if r.steps == s])}" for s in steps))
    elif final_runs:
        after = f" after {steps[0]} steps" if steps else " (steps not recorded)"
        lines.append(f"Checkpoint: final checkpoint{after}, no selection on test data{of}.")
    for (rule, bench), ids in chosen.items():
        lines.append(f"Checkpoint: {selection_text(rule, bench)}, among the eval.every phases and final, in "
                     f"{_names(ids)}.")
        if rule == "test-oracle":
            warnings.append(f"{_names(ids)} selected their checkpoint on the test set {bench} (eval.select="
                            "test-oracle): their numbers are optimistic")
    stopped = [r for r in runs if r.stopped_after is not None]
    if stopped:
        lines.append("Stopped early by the collapse alarm (run.stop_on_collapse): " + ", ".join(
            f"{r.run_id} after {r.stopped_after} steps" for r in stopped) + ".")
    return lines


def _footer(metrics: Sequence[str], benchmarks: Sequence[str], blocks: Sequence[Block], runs: Sequence[RunInfo],
            warnings: list[str]) -> list[str]:
    first = METRIC_LABELS[metrics[0]]
    names = ", ".join(METRIC_LABELS[m] for m in metrics)
    groups = " (one column group per metric)" if len(metrics) > 1 else ""
    lines = [f"Values: {names} in percent{groups}, mean ± sample sd over seeds (n = seeds); "
             f"Avg = mean of {first} over the {len(benchmarks)} benchmark(s); Δ = Avg − Base Avg.",
             "Bold = best label-free mean in a column, underline = second (compared at display precision, ties "
             f"share a mark); {_unranked_text(blocks)} are not ranked."]
    used = {rid for b in blocks for row in b.rows for rid in row.run_ids}
    runs = [r for r in runs if r.run_id in used]
    decodings: dict[Optional[tuple[tuple[str, Any], ...]], list[str]] = {}
    for r in runs:
        decodings.setdefault(r.decoding, []).append(r.run_id)
    known = {d: ids for d, ids in decodings.items() if d is not None}
    if len(known) > 1:
        lines.append("Evaluation decoding: mixed (see warnings).")
        warnings.append("runs differ in eval decoding: " + "; ".join(
            f"{_decoding_text(d)} in {_names(ids)}" for d, ids in known.items()))
    else:
        text = _decoding_text(next(iter(known))) if known else "not recorded"
        missing = decodings.get(None, [])
        lines.append(f"Evaluation decoding: {text}" + (f" (not recorded for {_names(missing)})" if missing and known
                                                         else "") + ".")
    bench_parts = []
    for bench in benchmarks:
        versions = sorted({v for r in runs for b, v in r.versions if b == bench})
        spec = _spec_info(bench)
        text = bench + (f" v{versions[0]}" if len(versions) == 1 else
                        f" v{', v'.join(versions)} (mixed)" if versions else " (version not recorded)")
        if len(versions) > 1:
            warnings.append(f"{bench}: predictions come from versions {', '.join(versions)} of the benchmark")
        if spec is not None:
            text += f" (extractor {spec.get('extractor')}, grader {spec.get('grader')})"
            current = str(spec.get("version"))
            if versions and any(v != current for v in versions):
                warnings.append(f"{bench}: stored predictions are version {', '.join(versions)} but the registered "
                                f"spec is version {current}; regraded with the current extractor and grader")
        else:
            text += " (not a registered benchmark: default math grading)"
        bench_parts.append(text)
    lines.append("Benchmarks: " + "; ".join(bench_parts) + ".")
    lines += _checkpoint_lines(runs, warnings)
    seeds = sorted({s for b in blocks for row in b.rows for s in row.seeds})
    lines.append(f"Seeds: {', '.join(map(str, seeds))}.")
    sources = []
    for b in blocks:
        if b.base_sources:
            sources.append(f"{b.family} from " + ", ".join(f"{rid} (seed {s})" for s, rid in b.base_sources))
    if sources:
        lines.append("Base (base-phase evaluation, per seed from the block's first run in row order): "
                     + "; ".join(sources) + ".")
    return lines


# ------------------------------------------------------------------------------------------ reference
def _paper_rows(block: Block, paper: ref.PaperBlock, columns: Sequence[Column],
                benchmarks: Sequence[str]) -> tuple[TableRow, ...]:
    """The block's rows with the paper's row of a label inserted after the last of our rows of that label."""
    full = set(benchmarks) == set(ref.PAPER_BENCHMARKS)  # the paper's Avg is over exactly its 7 benchmarks
    paper_base = paper.value(BASE_LABEL, "Avg")
    out: list[TableRow] = []
    for i, row in enumerate(block.rows):
        out.append(row)
        if i + 1 < len(block.rows) and block.rows[i + 1].group == row.group:
            continue
        if paper.row(row.group) is None:
            continue
        cells = []
        for col in columns[:-2]:
            name = ref.PAPER_BENCHMARKS.get(col.benchmark)
            value = paper.value(row.group, name) if name and col.metric == "avg_k" else None
            cells.append(Stat(None if value is None else value / 100.0))
        avg = paper.value(row.group, "Avg") if full else None
        cells.append(Stat(None if avg is None else avg / 100.0))
        delta = (None if avg is None or paper_base is None or row.group == BASE_LABEL
                 else (avg - paper_base) / 100.0)
        out.append(TableRow(f"{row.group} (paper)", "paper", row.group, "", (), "", "", block.family, (), (),
                            tuple(cells), delta, ("",) * len(columns)))
    return tuple(out)


def _reference(blocks: list[Block], columns: Sequence[Column], metrics: Sequence[str], benchmarks: Sequence[str],
               backbone: Optional[str], path: Optional[Path]) -> tuple[list[Block], list[str], list[str],
                                                                       tuple[ref.PaperBlock, ...]]:
    """(blocks with paper rows, notes, footer lines, paper blocks to show on their own)."""
    paper = {b.backbone: b for b in ref.llm_main(path)}
    mapped = [b for b in blocks if b.backbone in paper]
    benches = [b for b in benchmarks if b in ref.PAPER_BENCHMARKS]
    notes: list[str] = []
    if mapped and benches and "avg_k" in metrics:
        blocks = [Block(b.family, b.backbone, _paper_rows(b, paper[b.backbone], columns, benchmarks),
                        b.base_sources) if b.backbone in paper else b for b in blocks]
        notes.append(f"--reference paper: rows marked (paper) hold the paper's printed values for "
                     f"{', '.join(sorted({b.backbone or '' for b in mapped}))} on "
                     f"{', '.join(ref.PAPER_BENCHMARKS[b] for b in benches)} (pass@1 columns only; not ranked).")
        shown = (paper[backbone],) if backbone else ()
        return blocks, notes, [ref.PAPER_PROTOCOL + "."], shown
    if not mapped:
        why = (f"none of our backbones ({', '.join(b.family for b in blocks)}) is a paper backbone "
               "(mapping: corl_bench.report.reference.BACKBONES)")
    elif not benches:
        why = (f"none of our benchmarks ({', '.join(benchmarks)}) is in the paper's table "
               f"({', '.join(ref.PAPER_BENCHMARKS)})")
    else:
        why = "the paper reports sampled pass@1; add avg_k to --metric to compare"
    notes.append(f"--reference paper: nothing to compare, {why}; the paper's main LLM table is shown on its own.")
    if backbone is None:
        notes.append(f"paper backbones: {', '.join(paper)}; pick one with --backbone NAME.")
        shown = tuple(paper.values())
    else:
        shown = (paper[backbone],)
    return blocks, notes, [], shown  # the paper's table carries its own protocol line


# ------------------------------------------------------------------------------------------ build
def _bench_order(bench: str) -> tuple[int, str]:
    keys = list(ref.PAPER_BENCHMARKS)
    return (keys.index(bench), bench) if bench in keys else (len(keys), bench)


def build(source: str | Path | Collected, *, metrics: Sequence[str] = ("avg_k",), reference: Optional[str] = None,
          backbone: Optional[str] = None, paper_path: Optional[Path] = None) -> PaperTable:
    """The paper-style table of ``source`` (a results directory or what :func:`collect_results` returned).

    ``backbone`` implies ``reference="paper"``. Returns a :class:`PaperTable` (no blocks when nothing is usable;
    its warnings say why); ValueError (one line) on an unknown metric, reference or backbone."""
    metrics = check_metrics(metrics)
    if backbone is not None:
        reference = reference or "paper"
    check_reference(reference, backbone, paper_path)
    collected = source if isinstance(source, Collected) else collect_results(Path(source))
    warnings = list(collected.warnings)
    results = collected.results
    benchmarks = sorted({b for r in results for b in r.final}, key=_bench_order)
    columns = _columns(metrics, benchmarks, results)
    groups = _groups(results, warnings)
    first_index: dict[str, int] = {}
    for r in results:
        first_index[r.family] = min(first_index.get(r.family, r.agent_index), r.agent_index)
    families = sorted(first_index, key=lambda f: (first_index[f], f))
    blocks = [_block(f, [g for g in groups if g.family == f], columns, benchmarks, warnings) for f in families]
    footer = _footer(metrics, benchmarks, blocks, collected.runs, warnings) if blocks else []
    shares = [(s["extraction_failure"], s["clipped"]) for g in groups for r in g.members
              for s in r.metrics("final").values()]
    if shares:
        (nf_lo, cl_lo), (nf_hi, cl_hi) = map(min, zip(*shares)), map(max, zip(*shares))
        footer.append(f"Final-checkpoint samples without an extractable answer: {fmt_pct(nf_lo)}–{fmt_pct(nf_hi)} % "
                      f"per (row, benchmark, seed); cut at the token cap: {fmt_pct(cl_lo)}–{fmt_pct(cl_hi)} %.")
    notes: list[str] = []
    paper_blocks: tuple[ref.PaperBlock, ...] = ()
    if reference == "paper" and blocks:
        blocks, notes, more, paper_blocks = _reference(blocks, columns, metrics, benchmarks, backbone, paper_path)
        footer += more
    return PaperTable(metrics, tuple(benchmarks), tuple(columns), tuple(blocks), tuple(footer), tuple(notes),
                      tuple(warnings), paper_blocks)
