"""The data a paper-style table is made of (what :mod:`corl_bench.report.layout` builds and
:mod:`corl_bench.report.render` draws), and the display precision that marks are computed at.

Public API (no torch): :class:`Stat`, :class:`Column`, :class:`TableRow`, :class:`Block`, :class:`PaperTable`;
:func:`fmt_pct`, :func:`fmt_signed`, :func:`cell_text`, :func:`stat_of`; :data:`BASE_LABEL`, :data:`MISSING`,
:data:`TEXT` and :data:`VLM` (the two kinds of table). Import them from here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from corl_bench.report import reference as ref

__all__ = ["BASE_LABEL", "MISSING", "TEXT", "VLM", "Block", "Column", "PaperTable", "Stat", "TableRow", "cell_text",
           "fmt_pct", "fmt_signed", "mean_of", "stat_of"]

BASE_LABEL = "Base"
MISSING = "–"
TEXT = "text"  # a table in the layout of the paper's main LLM table
VLM = "vlm"  # a table in the layout of the paper's vision-language tables


@dataclass(frozen=True)
class Stat:
    """Mean and sample sd (None with fewer than two values) over ``n`` seeds; fractions in [0, 1]. ``se``: the
    evaluation's standard error (sd over problems / sqrt(problems)) averaged over the seeds; ``clipped``: the share
    of the cell's completions cut at the token cap, averaged over the seeds (None where not known)."""

    mean: Optional[float] = None
    sd: Optional[float] = None
    n: int = 0
    se: Optional[float] = None
    clipped: Optional[float] = None


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
    delta: Optional[float]  # mean over seeds of each run's Avg minus its own base Avg (same problems)
    marks: tuple[str, ...] = ()  # "b" / "u" / "" per value column, Avg and delta


@dataclass(frozen=True)
class Block:
    """The rows of one backbone (agent family); in a vision-language table, of one (family, paper training set)."""

    family: str
    backbone: Optional[str]  # the paper backbone it maps to (reference.BACKBONES), if any
    rows: tuple[TableRow, ...]
    base_sources: tuple[tuple[int, str], ...]  # (seed, run id) that supplied Base
    dataset: str = ""  # vision-language: the paper training set its runs trained on (reference.PAPER_VLM_DATASETS)

    @property
    def name(self) -> str:
        """The family, and the training set where blocks are per set: "Qwen/Qwen2.5-VL-3B-Instruct, trained on MMR1"."""
        return self.family + (f", trained on {self.dataset}" if self.dataset else "")

    @property
    def title(self) -> str:
        """How a rendered table heads it: its name, then the paper backbone it maps to."""
        return self.name + (f" (paper backbone {self.backbone})" if self.backbone else "")


@dataclass(frozen=True)
class PaperTable:
    """Everything a renderer needs: columns, blocks, footer lines, reference notes, warnings.

    ``kind`` says whose layout the table follows: :data:`TEXT` (the paper's main LLM table) or :data:`VLM` (its
    vision-language tables). Runs of both kinds under one results directory give one table each: the first holds
    the other in ``also`` (rendered after it) and carries every warning."""

    metrics: tuple[str, ...]
    benchmarks: tuple[str, ...]  # the benchmarks with predictions (the Avg is over them)
    columns: tuple[Column, ...]  # value columns, then Avg, then Δ
    blocks: tuple[Block, ...]
    footer: tuple[str, ...]
    notes: tuple[str, ...] = ()  # lines about --reference
    warnings: tuple[str, ...] = ()
    paper_blocks: tuple[ref.PaperBlock, ...] = ()  # the paper's tables to show on their own
    kind: str = TEXT
    also: tuple["PaperTable", ...] = ()  # tables of another kind from the same results, rendered after this one
    side: tuple[ref.PaperBlock, ...] = ()  # the paper's side tables (n3, comas, ensLLM, decPool), ours beside
    side_notes: tuple[tuple[str, str], ...] = ()  # (paper table key, footer line) about our rows in a side table
    show_se: bool = False  # text formats print each cell's evaluation standard error ("62.3 ± 1.2 [se 0.8]")
    notices: tuple[str, ...] = ()  # warnings that say a run was set aside for another (also in ``warnings``)


def fmt_pct(value: Optional[float]) -> str:
    """A fraction as percent with one decimal ("62.3"); "–" for None."""
    return MISSING if value is None else f"{100.0 * value:.1f}"


def fmt_signed(value: Optional[float]) -> str:
    """A fraction as signed percent with one decimal ("+1.2"); "–" for None."""
    return MISSING if value is None else f"{100.0 * value:+.1f}"


def cell_text(stat: Stat, se: bool = False) -> str:
    """"mean ± sd" with one decimal (just the mean with fewer than two seeds); "–" when missing; with ``se``, the
    evaluation's standard error after it ("62.3 ± 1.2 [se 0.8]") where known."""
    if stat.mean is None:
        return MISSING
    text = fmt_pct(stat.mean) + (f" ± {fmt_pct(stat.sd)}" if stat.sd is not None else "")
    return text + (f" [se {fmt_pct(stat.se)}]" if se and stat.se is not None else "")


def mean_of(values: Sequence[Optional[float]]) -> Optional[float]:
    """The mean of the values that are not None (None when there are none)."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def stat_of(values: Sequence[Optional[float]]) -> Stat:
    """Mean, sample sd and count of the values that are not None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return Stat()
    return Stat(sum(vals) / len(vals), statistics.stdev(vals) if len(vals) >= 2 else None, len(vals))
