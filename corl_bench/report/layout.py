"""The paper-style layout of the results table: blocks per backbone, rows in the paper's order, marks, footer.

Public API (no torch; rendering is in :mod:`corl_bench.report.render`):

* :func:`build` ``(source, *, metrics=("avg_k",), reference=None, backbone=None) -> PaperTable`` - ``source`` is
  a results directory or a :class:`corl_bench.report.collect.Collected`; every number is recomputed from stored
  predictions.
* :func:`paper_table` ``(backbone=None) -> PaperTable`` - the paper's tables on their own (main LLM table,
  vision-language small and large tiers, vision-language ensemble control; or the blocks of one backbone).
* :func:`corl_bench.report.methods.row_labels` - (method, cohort) -> row label, in row order, as the methods
  declare them (``ROW_LABELS`` here is the same, kept for one release).
* :func:`fmt_pct`, :func:`fmt_signed`, :func:`cell_text` - the display precision that marks are computed at; they and
  the table's data classes live in :mod:`corl_bench.report.cells`, the footer in :mod:`corl_bench.report.footer`,
  text vs vision-language tables and ``--reference paper`` in :mod:`corl_bench.report.kinds` (import them from there).

Rules: one :class:`Block` per agent family (in a vision-language table, per family and paper training set: runs
trained on open-r1 and on MMR1 get a block each, as in the paper). A block starts with Base (the base-phase
evaluation of that family, per seed from the block's first run in row order whose base covers the problems most of
the block's runs were evaluated on), then one row per (method, cohort) in the
order the methods declare (``table_order``, then the order of their ``cohort_labels``), labelled
``Method.row_label(cohort)`` (a run whose cohort names its paper row, run.json ``paper_row``, takes the label of
that row's named cohort: "Co-RL (cross-family)" for ``paper-cross-family``); methods this installation cannot
describe come last under their raw name (:mod:`corl_bench.report.methods`). Methods with ``independent_agents``
train every agent of a cohort on its own, so each of their agents lands in the block of its family; a (label,
family, seed) found in two cohorts is kept once (cohort ``single`` first, then by cohort name) with a warning. A
multi-agent run with several agents of one family gives one row per agent. Tagged runs (run.json ``tag``) get their
own row right after the untagged one. Δ of a row is the mean over its seeds of each run's own Δ (its Avg minus its
own base-phase Avg, where both phases hold the same problem ids); the footer says where Δ is not shown, leaves seeds
out, or where a row's problems differ from its Base row's. Marks: per column, the best label-free mean is
bold ("b"), the second underlined ("u"), compared at display precision (ties share); Base, methods of kind
uses-labels (GT-Reward) or control (Random reward), unknown methods, tagged rows and paper rows are not ranked.
Runs on vision-language benchmarks (the paper's multimodal suites, the micro-visual suite) get a table of their own
in the layout of the paper's vision-language tables (``PaperTable.kind`` "vlm"; beside text runs it follows the text
table as ``PaperTable.also``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from corl_bench.report import kinds
from corl_bench.report import methods as method_views
from corl_bench.report import reference as ref
from corl_bench.report import side
from corl_bench.report.cells import (BASE_LABEL, MISSING, TEXT, VLM, Block, Column, PaperTable, Stat, TableRow, fmt_pct,
                                     fmt_signed, mean_of, stat_of)
from corl_bench.report.collect import (METRIC_LABELS, AgentResult, Collected, check_metrics, collect_results,
                                       items_differ, natural_key)
from corl_bench.report.environments import env_differences
from corl_bench.report.footer import footer as make_footer
from corl_bench.report.methods import UNKNOWN, MethodView

logger = logging.getLogger(__name__)

__all__ = ["build", "check_reference", "paper_table"]

PREFERRED_COHORT = "single"


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


def check_reference(reference: Optional[str], backbone: Optional[str], path: Optional[Path] = None) -> None:
    """ValueError (one line naming the fix) unless ``reference`` is None or "paper" and ``backbone`` is known."""
    if reference not in (None, "paper"):
        raise ValueError(f"unknown reference {reference!r}; the only one is 'paper' (--reference paper)")
    if backbone is not None:
        names = ref.backbones(path) + ref.vlm_backbones(path)
        if backbone not in names:
            raise ValueError(f"unknown backbone {backbone!r}; the paper's are: {', '.join(names)}")


# ------------------------------------------------------------------------------------------ rows and blocks
def _label(view: MethodView, cohort: str, multi_cohort: set[str], paper_row: str = "") -> tuple[tuple[int, int], str]:
    """(order key, base label) of a (method, cohort): ``Method.row_label(cohort)`` (of the paper row's cohort when
    the run names one), plus the cohort for a method with one label that ran in several cohorts with agents that train
    together."""
    order, label = view.row(cohort, paper_row)
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
    dataset: str = ""  # vision-language: the paper training set of its runs (its block is (family, dataset))

    @property
    def sort_key(self) -> tuple[Any, ...]:
        return (self.order, self.label, natural_key(self.agent), self.tag != "", self.tag)

    @property
    def full_label(self) -> str:
        return self.label + (f" {self.agent}" if self.agent else "") + (f" [{self.tag}]" if self.tag else "")


def _who(result: AgentResult) -> str:
    return f"{result.run_id} ({result.agent}, cohort {result.cohort})"


def _dataset(kind: str, result: AgentResult) -> str:
    """The paper training set that, with the family, makes a vision-language run's block ("open-r1", "MMR1"; the
    paper's blocks are per backbone and training set); "" for text runs and for any other training set."""
    return ref.PAPER_VLM_DATASETS.get(result.train_set, "") if kind == VLM else ""


def _groups(results: Sequence[AgentResult], warnings: list[str], kind: str = TEXT,
            notices: Optional[list[str]] = None) -> list[_Group]:
    """Results grouped into display rows, one member per seed (duplicates dropped with a warning, also added to
    ``notices``)."""
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
    buckets: dict[tuple[str, str, tuple[int, int], str, str, str], list[AgentResult]] = {}
    for r in results:
        order, label = _label(views[r.method], r.cohort, multi_cohort, r.paper_row)
        agent = r.agent if (r.method, r.cohort, r.tag, r.family) in per_agent else ""
        buckets.setdefault((r.family, _dataset(kind, r), order, label, agent, r.tag), []).append(r)
    groups = []
    for (family, dataset, order, label, agent, tag), members in buckets.items():
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
                where = family + (f", trained on {dataset}" if dataset else "")
                line = (f"{where} / {name}: seed {seed} comes from {len(candidates)} places; kept "
                        f"{_who(candidates[0])}, dropped {'; '.join(_who(c) for c in candidates[1:])} "
                        f"({'identical' if same else 'different'} final scores)")
                warnings.append(line)
                if notices is not None:
                    notices.append(line)
        groups.append(_Group(family, order, label, agent, tag, tuple(kept), views[kept[0].method].kind, dataset))
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


Scores = dict[str, dict[str, Optional[float]]]  # benchmark -> metric -> value


def _evaluation(results: Sequence[AgentResult], phase: str) -> list[Scores]:
    """Per result, benchmark -> metric -> the evaluation's standard error, plus "clipped" (its truncation share)."""
    return [{b: {**s.standard_errors(), "clipped": s.clipped} for b, s in getattr(r, phase).items()}
            for r in results]


def _cells(per_seed: Sequence[Scores], columns: Sequence[Column], benchmarks: Sequence[str],
           evaluation: Sequence[Scores] = ()) -> tuple[Stat, ...]:
    """Per value column and the Avg: mean and sd over seeds, and (from ``evaluation``, per seed as
    :func:`_evaluation` gives it) the mean standard error and truncation share. The Avg's standard error is that of a
    mean of independent benchmarks, sqrt(sum se^2) / benchmarks, per seed."""
    ev = list(evaluation) or [{} for _ in per_seed]

    def extra(bench: str, key: str) -> Optional[float]:
        return mean_of([e.get(bench, {}).get(key) for e in ev])

    values = [replace(stat_of([s.get(c.benchmark, {}).get(c.metric) for s in per_seed]),
                      se=extra(c.benchmark, c.metric), clipped=extra(c.benchmark, "clipped"))
              for c in columns if c.kind == "value"]
    metric = columns[-1].metric

    def seed_avg(scores: Scores) -> Optional[float]:
        vals = [scores.get(b, {}).get(metric) for b in benchmarks]
        return None if not vals or any(v is None for v in vals) else sum(vals) / len(vals)  # type: ignore[arg-type]

    def seed_se(e: Scores) -> Optional[float]:
        ses = [e.get(b, {}).get(metric) for b in benchmarks]
        if not ses or any(v is None for v in ses):
            return None
        return sum(v * v for v in ses) ** 0.5 / len(ses)  # type: ignore[operator]

    avg = stat_of([seed_avg(s) for s in per_seed])
    return tuple(values) + (replace(avg, se=mean_of([seed_se(e) for e in ev]) if evaluation else None),)


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


def _reference_items(groups: Sequence[_Group], benchmarks: Sequence[str]) -> dict[str, frozenset[str]]:
    """Per benchmark, the problem ids most of the block's runs were evaluated on in their reported phase (ties: the
    first in row order): the items the block's Base row must cover."""
    out = {}
    for bench in benchmarks:
        counts: dict[frozenset[str], int] = {}
        for r in (r for g in groups for r in g.members):
            if bench in r.final_items:
                counts[r.final_items[bench]] = counts.get(r.final_items[bench], 0) + 1
        if counts:
            out[bench] = max(counts, key=lambda items: counts[items])  # the first of the most common
    return out


def _on_items(r: AgentResult, items: dict[str, frozenset[str]], phase: str) -> str:
    """"" when ``r``'s ``phase`` evaluation covers the block's items on every benchmark both have; else why not."""
    have = r.base_items if phase == "base" else r.final_items
    for bench in sorted(set(have) & set(items)):
        why = items_differ(items[bench], have[bench], "the Base row", "this row" if phase == "final" else "its base")
        if why:
            return f"{bench}: {why}"
    return ""


def _row_delta(where: str, g: _Group, metric: str, benchmarks: Sequence[str], has_base: bool,
               notes: list[str]) -> Optional[float]:
    """Mean over the row's seeds of each run's own Δ (:meth:`AgentResult.own_delta`); a note says where it is not
    shown or leaves seeds out (not for a block without any base-phase evaluation, nor for a seed without an Avg:
    their warnings say so)."""
    deltas = {r.seed: r.own_delta(metric, benchmarks) for r in g.members}
    shown = [d for d, _ in deltas.values() if d is not None]
    missing = {s: why for s, (d, why) in deltas.items() if d is None and not why.startswith("no final-phase")}
    if missing and (has_base or any(why != "no base-phase evaluation" for why in missing.values())):
        reasons: dict[str, list[int]] = {}
        for seed, why in missing.items():
            reasons.setdefault(why, []).append(seed)
        why = "; ".join(f"{text} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})"
                        for text, seeds in reasons.items())
        if shown:
            kept = ", ".join(str(s) for s, (d, _) in deltas.items() if d is not None)
            notes.append(f"{where} / {g.full_label}: Δ over seed(s) {kept} only; {why}.")
        else:
            notes.append(f"{where} / {g.full_label}: Δ not shown: {why}.")
    return sum(shown) / len(shown) if shown else None


def _block(family: str, groups: Sequence[_Group], columns: Sequence[Column], benchmarks: Sequence[str],
           warnings: list[str], dataset: str = "", notes: Optional[list[str]] = None) -> Block:
    """One block: Base (per seed, the base-phase evaluation of the first run in row order that covers the problems
    most of the block's runs were evaluated on), then the groups' rows with Δ against each run's own base; ``notes``
    collects one line per row whose Δ is not shown or whose problems differ from the Base row's."""
    notes = [] if notes is None else notes
    where = family + (f", trained on {dataset}" if dataset else "")
    items = _reference_items(groups, benchmarks)
    base_seeds: dict[int, AgentResult] = {}
    other_items: dict[int, str] = {}
    for group in groups:  # row order: GT-Reward first
        for r in group.members:
            if not r.base or r.seed in base_seeds:
                continue
            why = _on_items(r, items, "base")
            if why:
                other_items.setdefault(r.seed, f"{r.run_id}, {why}")
            else:
                base_seeds[r.seed] = r
    seeds = sorted(base_seeds)
    for seed in sorted(set(other_items) - set(seeds)):
        notes.append(f"{where} / Base: seed {seed} left out: no run evaluated its base on the block's problems "
                     f"({other_items[seed]}).")
    base: Optional[TableRow] = None
    if seeds:
        srcs = [base_seeds[s] for s in seeds]
        base = TableRow(BASE_LABEL, "base", BASE_LABEL, "", (), "", "", family, tuple(seeds), tuple(r.run_id for r in srcs),
                        _cells([r.metrics("base") for r in srcs], columns, benchmarks, _evaluation(srcs, "base")),
                        None)
    elif not other_items:
        warnings.append(f"{where}: no run has base-phase predictions; Base and Δ left empty")
    rows = [base] if base else []
    metric = columns[-1].metric
    for g in groups:
        cells = _cells([r.metrics("final") for r in g.members], columns, benchmarks,
                       _evaluation(g.members, "final"))
        if cells[-1].n < len(g.members):
            warnings.append(f"{where} / {g.full_label}: {len(g.members) - cells[-1].n} seed(s) lack some of "
                            f"{', '.join(benchmarks)}; Avg uses the seeds that have all")
        if base is not None:
            differs = sorted({why for why in (_on_items(r, items, "final") for r in g.members) if why})
            if differs:
                notes.append(f"{where} / {g.full_label}: evaluated on other problems than the Base row "
                             f"({'; '.join(differs)}); its Δ is against its own base on its own problems.")
        delta = _row_delta(where, g, metric, benchmarks, bool(base_seeds or other_items), notes)
        rows.append(TableRow(g.full_label, _kind(g), g.label, g.members[0].method,
                             tuple(sorted({r.cohort for r in g.members})), g.tag, g.agent, family,
                             tuple(r.seed for r in g.members), tuple(r.run_id for r in g.members), cells, delta))
    marks = _marks(rows, len(columns))
    rows = [replace(r, marks=m) for r, m in zip(rows, marks)]
    return Block(family, ref.backbone_for(family), tuple(rows),
                 tuple((s, base_seeds[s].run_id) for s in seeds), dataset)


# ------------------------------------------------------------------------------------------ build
def _shares_line(groups: Sequence[_Group]) -> Optional[str]:
    shares = [(s["extraction_failure"], s["clipped"]) for g in groups for r in g.members
              for s in r.metrics("final").values()]
    if not shares:
        return None
    (nf_lo, cl_lo), (nf_hi, cl_hi) = map(min, zip(*shares)), map(max, zip(*shares))
    return (f"Final-checkpoint samples without an extractable answer: {fmt_pct(nf_lo)}–{fmt_pct(nf_hi)} % "
            f"per (row, benchmark, seed); cut at the token cap: {fmt_pct(cl_lo)}–{fmt_pct(cl_hi)} %.")


def _se_line(blocks: Sequence[Block], columns: Sequence[Column]) -> Optional[str]:
    """The footer line giving the range of the cells' evaluation standard errors, per metric."""
    parts = []
    for metric in dict.fromkeys(c.metric for c in columns if c.kind == "value"):
        ses = [stat.se for b in blocks for row in b.rows for c, stat in zip(columns, row.cells)
               if c.kind == "value" and c.metric == metric and stat.se is not None]
        if ses:
            parts.append(f"{fmt_pct(min(ses))}–{fmt_pct(max(ses))} pp for {METRIC_LABELS[metric]}")
    if not parts:
        return None
    return ("Evaluation standard error per cell (sample sd over problems / √problems, mean over seeds; the sampling "
            f"error of the benchmark, not the spread over seeds): {'; '.join(parts)}; per cell with --se and in the "
            "CSV (\"se\" columns, with each cell's share cut at the token cap under \"clipped\").")


def _no_values_warning(kind: str, metrics: Sequence[str], blocks: Sequence[Block],
                       results: Sequence[AgentResult]) -> Optional[str]:
    """A vision-language table whose metric has no value anywhere while greedy has (the paper scores VLMs greedy)."""
    if kind != VLM or "greedy" in metrics or any(c.mean is not None for b in blocks for r in b.rows
                                                 for c in r.cells):
        return None
    if not any(s.greedy is not None for r in results for s in r.final.values()):
        return None
    return (f"the vision-language predictions have no {', '.join(METRIC_LABELS[m] for m in metrics)} values but "
            "have greedy ones (the paper's protocol); add greedy to --metric")


def _build_kind(kind: str, results: Sequence[AgentResult], collected: Collected, metrics: tuple[str, ...],
                reference: Optional[str], backbone: Optional[str], paper_path: Optional[Path]) -> tuple[PaperTable,
                                                                                                       bool]:
    """The table of one kind (its warnings only), and whether its paper tables own ``backbone``."""
    warnings: list[str] = []
    benchmarks = sorted({b for r in results for b in r.final}, key=kinds.bench_key(kind))
    shown = kinds.shown_benchmarks(kind, benchmarks)
    columns = _columns(metrics, shown, results)
    notices: list[str] = []
    groups = _groups(results, warnings, kind, notices)
    first_index: dict[str, int] = {}
    for r in results:
        first_index[r.family] = min(first_index.get(r.family, r.agent_index), r.agent_index)
    paper_sets = ("", *ref.PAPER_VLM_DATASETS.values())  # a family's blocks in the paper's order: open-r1, MMR1
    keys = sorted({(r.family, _dataset(kind, r)) for r in results},
                  key=lambda k: (first_index[k[0]], k[0], paper_sets.index(k[1])))
    delta_notes: list[str] = []  # where Δ is not shown or a row's problems differ from its Base row's
    blocks = [_block(f, [g for g in groups if (g.family, g.dataset) == (f, d)], columns, benchmarks, warnings, d,
                     delta_notes) for f, d in keys]
    ks = {b: {r.final[b].k for r in results if b in r.final and r.final[b].k} for b in benchmarks}
    footer = make_footer(metrics, benchmarks, blocks, collected.runs, warnings, ks) if blocks else []
    footer += delta_notes
    used = {rid for b in blocks for row in b.rows for rid in row.run_ids}
    env_line, env_details = env_differences([r for r in collected.runs if r.run_id in used])
    if env_line:
        footer.append(env_line)
        warnings.extend(env_details)
    empty = kinds.empty_columns_line(benchmarks, shown)
    if empty and footer:
        at = next((i + 1 for i, line in enumerate(footer) if line.startswith("Benchmarks: ")), len(footer))
        footer.insert(at, empty)
    shares = _shares_line(groups)
    if shares:
        footer.append(shares)
    se_line = _se_line(blocks, columns) if blocks else None
    if se_line:
        footer.append(se_line)
    silent = _no_values_warning(kind, metrics, blocks, results)
    if silent:
        warnings.append(silent)
    notes: list[str] = []
    paper_blocks: tuple[ref.PaperBlock, ...] = ()
    owns = False
    if reference == "paper" and blocks:
        cmp = kinds.compare(kind, blocks, columns, metrics, benchmarks, backbone, paper_path)
        blocks, notes, paper_blocks, owns = cmp.blocks, cmp.notes, cmp.shown, cmp.owns_backbone
        footer += cmp.footer
    table = PaperTable(metrics, tuple(benchmarks), tuple(columns), tuple(blocks), tuple(footer), tuple(notes),
                       tuple(warnings), paper_blocks, kind, notices=tuple(notices))
    return table, owns


def build(source: str | Path | Collected, *, metrics: Sequence[str] = ("avg_k",), reference: Optional[str] = None,
          backbone: Optional[str] = None, paper_path: Optional[Path] = None,
          root: Optional[Path] = None, se: bool = False) -> PaperTable:
    """The paper-style table of ``source`` (a results directory or what :func:`collect_results` returned).

    ``backbone`` implies ``reference="paper"``. Returns a :class:`PaperTable` (no blocks when nothing is usable;
    its warnings say why): text runs and vision-language runs (:func:`corl_bench.report.kinds.split`) each get a
    table; with both, the text table holds the other in ``also`` and carries every warning. ValueError (one line) on
    an unknown metric, reference or backbone.

    With ``reference="paper"`` and text runs, the paper's side tables (:func:`corl_bench.report.side.side_blocks`: three-agent ring,
    CoMAS, text ensemble control, error-overlap probe) follow, with our rows beside the paper's where backbones match,
    read from the runs and ``probe.json`` files under ``root`` (default: ``source`` when it is a directory).
    ``se``: text formats print each cell's evaluation standard error (the CSV always has it)."""
    metrics = check_metrics(metrics)
    if backbone is not None:
        reference = reference or "paper"
    check_reference(reference, backbone, paper_path)
    collected = source if isinstance(source, Collected) else collect_results(Path(source))
    parts = kinds.split(collected.results) or [(TEXT, ())]
    built = [_build_kind(kind, members, collected, metrics, reference, backbone, paper_path)
             for kind, members in parts]
    tables = [replace(t, show_se=se) for t, _ in built]
    if reference == "paper" and backbone is not None and tables[0].blocks and not any(owns for _, owns in built):
        # --backbone names a paper backbone of another kind than our runs: show its blocks all the same
        tables[0] = replace(tables[0], paper_blocks=ref.blocks_of(backbone, paper_path))
    warnings = list(collected.warnings) + [w for t in tables for w in t.warnings]
    if reference == "paper" and tables[0].blocks and tables[0].kind == TEXT:  # the side tables are text tables
        root = root if root is not None else (None if isinstance(source, Collected) else Path(source))
        shown, notes, more = side.with_ours(side.side_blocks(backbone, paper_path), root, collected.results)
        tables[0] = replace(tables[0], side=shown, side_notes=tuple(notes))
        warnings += more
    notices = collected.duplicates + tuple(n for t in tables for n in t.notices)
    return replace(tables[0], warnings=tuple(warnings), also=tuple(tables[1:]), notices=notices)


def paper_table(backbone: Optional[str] = None, paper_path: Optional[Path] = None,
                root: Optional[Path] = None) -> PaperTable:
    """The paper's tables on their own, values as printed (``corl-bench table --reference paper`` without runs):
    the main LLM table, the vision-language tables (small and large tier) and the vision-language ensemble control,
    then its side tables (three-agent ring, CoMAS, text ensemble control, error-overlap probe, with the rows of any
    ``probe.json`` under ``root`` beside the probe's); or every block of ``backbone``; ValueError (one line) on an
    unknown backbone."""
    check_reference("paper", backbone, paper_path)
    if backbone is not None:
        shown = ref.blocks_of(backbone, paper_path)
    else:
        shown = ref.llm_main(paper_path) + ref.vlm_main(paper_path) + ref.ens_vlm(paper_path)
    extra, notes, warnings = side.with_ours(side.side_blocks(backbone, paper_path), root, ())
    return PaperTable((), (), (), (), (), warnings=tuple(warnings), paper_blocks=shown, side=extra,
                      side_notes=tuple(notes))
