"""The two kinds of paper-style table, text and vision-language, and how each meets the paper's numbers.

Public API (no torch):

* :func:`split` ``(results) -> list[(kind, results)]`` - text runs first, then vision-language runs. A run is
  vision-language (:data:`corl_bench.report.cells.VLM`) when one of its benchmarks is (:func:`is_vlm_benchmark`: the
  paper's multimodal suites, or a registered spec with an image ``modality``, e.g. the micro-visual suite); every
  other run is text.
* :func:`bench_key` ``(kind)`` - the column order: the paper's, then by name.
* :func:`shown_benchmarks` ``(kind, benchmarks)`` - the benchmarks a table gets a column for. A vision-language table
  with any of the paper's four multimodal benchmarks shows all four (MathVision, MathVerse, MathVista, We-Math) so it
  reads like the paper's; a column no run has stays empty (–). Text tables show what the runs have.
* :func:`empty_columns_line` - the footer line naming such empty columns.
* :func:`compare` - ``--reference paper``: the paper's rows beside ours where a block's family maps to a paper backbone
  (:data:`corl_bench.report.reference.BACKBONES`) and a benchmark to a paper column, else the paper's tables of that
  kind on their own. A row meets the paper's row of the same label: a run whose cohort names the paper row it
  reproduces (``cohort.paper_row``) is labelled like it ("Co-RL (cross-family)"). Text compares sampled pass@1
  (``avg_k``) with the main LLM table, and a "Co-RL (three agents)" row with the three-agent ring table (``n3``);
  vision-language compares greedy accuracy with the ``vlmSmall`` / ``vlmLarge`` block of the training set our block
  trained on (``data.train`` multimodal-open-r1-8k-verified: open-r1; mmr1: MMR1; the paper never compares the two),
  else the one trained on open-r1 (the training set every paper backbone has), and shows ``vlmSmall``, ``vlmLarge``
  and ``ensVLM`` on their own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from corl_bench.report import reference as ref
from corl_bench.report.cells import BASE_LABEL, TEXT, VLM, Block, Column, Stat, TableRow
from corl_bench.report.collect import AgentResult
from corl_bench.report.footer import spec_info

logger = logging.getLogger(__name__)

__all__ = ["Comparison", "bench_key", "compare", "empty_columns_line", "is_vlm_benchmark", "shown_benchmarks",
           "split"]

#: Spec ``modality`` values that mark a benchmark as vision-language.
IMAGE_MODALITIES = frozenset({"image", "vision", "multimodal", "image-text", "vision-language"})
#: The paper's training set whose blocks stand beside ours (every paper VLM backbone was trained on it).
VLM_DATASET = "open-r1"


@dataclass(frozen=True)
class _Kind:
    """How one kind of table meets the paper."""

    columns: dict[str, str]  # our benchmark -> the paper's column
    order: tuple[str, ...]  # column order
    metric: str  # the metric the paper reports
    metric_name: str
    table_words: str  # "the paper's main LLM table", for the notes
    protocol: str
    why_metric: str
    shown_words: str  # "the paper's main LLM table is shown on its own"
    backbones_words: str  # "paper backbones"


_KINDS: dict[str, _Kind] = {
    TEXT: _Kind(ref.PAPER_BENCHMARKS, tuple(ref.PAPER_BENCHMARKS), "avg_k", "pass@1", "the paper's table",
                ref.PAPER_PROTOCOL, "the paper reports sampled pass@1; add avg_k to --metric to compare",
                "the paper's main LLM table is shown on its own", "paper backbones"),
    VLM: _Kind(ref.PAPER_VLM_BENCHMARKS, ref.VLM_BENCHMARKS, "greedy", "greedy", "the paper's vision-language tables",
               ref.PAPER_VLM_PROTOCOL, "the paper reports greedy accuracy for vision-language models; add greedy "
               "to --metric to compare", "the paper's vision-language tables are shown on their own",
               "paper vision-language backbones"),
}


def is_vlm_benchmark(bench: str) -> bool:
    """Whether ``bench`` belongs in a vision-language table (see the module docstring)."""
    if bench in ref.VLM_BENCHMARKS:
        return True
    spec = spec_info(bench)
    if spec is None:
        return False
    return spec.modality.lower() in IMAGE_MODALITIES


def split(results: Sequence[AgentResult]) -> list[tuple[str, tuple[AgentResult, ...]]]:
    """(kind, results) for each kind that has results, text first; a run's agents stay together."""
    kinds: dict[str, str] = {}
    memo: dict[str, bool] = {}
    for r in results:
        if any(memo.setdefault(b, is_vlm_benchmark(b)) for b in r.final):
            kinds[r.rel] = VLM
        else:
            kinds.setdefault(r.rel, TEXT)
    out = [(kind, tuple(r for r in results if kinds[r.rel] == kind)) for kind in (TEXT, VLM)]
    return [(kind, members) for kind, members in out if members]


def bench_key(kind: str) -> Callable[[str], tuple[int, str]]:
    """Sort key of a benchmark in a ``kind`` table: the paper's order, then the others by name."""
    order = list(_KINDS[kind].order)

    def key(bench: str) -> tuple[int, str]:
        return (order.index(bench), bench) if bench in order else (len(order), bench)

    return key


_SLOTS = (("mathvision", "mathvision_testmini"), ("mathverse_testmini",), ("mathvista_testmini",),
          ("wemath_testmini",))  # the paper's four columns (MathVision: the full test set or testmini)


def shown_benchmarks(kind: str, benchmarks: Sequence[str]) -> list[str]:
    """The benchmarks a ``kind`` table has a column for: ``benchmarks``, and for a vision-language table with any of
    the paper's multimodal benchmarks, the paper's four columns too (empty where no run has them)."""
    shown = list(benchmarks)
    if kind == VLM and any(b in slot for slot in _SLOTS for b in benchmarks):
        shown += [slot[0] for slot in _SLOTS if not any(b in benchmarks for b in slot)]
    return sorted(shown, key=bench_key(kind))


def empty_columns_line(benchmarks: Sequence[str], shown: Sequence[str]) -> Optional[str]:
    """The footer line naming the columns no run has predictions for (None when there are none)."""
    empty = [b for b in shown if b not in benchmarks]
    if not empty:
        return None
    return (f"No predictions for {', '.join(empty)}: column(s) left empty (–) to keep the paper's layout; Avg is "
            f"over the {len(benchmarks)} benchmark(s) with predictions.")


# ------------------------------------------------------------------------------------------ --reference paper
@dataclass(frozen=True)
class Comparison:
    """What ``--reference paper`` adds to one kind of table."""

    blocks: list[Block]  # with the paper's rows where they overlap
    notes: list[str]
    footer: list[str]
    shown: tuple[ref.PaperBlock, ...]  # the paper's blocks to show on their own
    owns_backbone: bool  # whether --backbone names a backbone of this kind's paper tables


def _paper_rows(block: Block, papers: Sequence[ref.PaperBlock], columns: Sequence[Column],
                benchmarks: Sequence[str], kind: _Kind) -> tuple[TableRow, ...]:
    """The block's rows with the paper's row of a label (from the first of ``papers`` that has it) inserted after the
    last of our rows of that label."""
    full = set(benchmarks) == set(kind.columns)  # the paper's Avg is over exactly its benchmarks
    full = full and columns[-2].metric == kind.metric  # ... in the metric of our Avg column
    out: list[TableRow] = []
    for i, row in enumerate(block.rows):
        out.append(row)
        if i + 1 < len(block.rows) and block.rows[i + 1].group == row.group:
            continue
        paper = next((p for p in papers if p.row(row.group) is not None), None)
        if paper is None:
            continue
        paper_base = paper.value(BASE_LABEL, "Avg")
        cells = []
        for col in columns[:-2]:
            name = kind.columns.get(col.benchmark)
            value = paper.value(row.group, name) if name and col.metric == kind.metric else None
            cells.append(Stat(None if value is None else value / 100.0))
        avg = paper.value(row.group, "Avg") if full else None
        cells.append(Stat(None if avg is None else avg / 100.0))
        delta = (None if avg is None or paper_base is None or row.group == BASE_LABEL
                 else (avg - paper_base) / 100.0)
        out.append(TableRow(f"{row.group} (paper)", "paper", row.group, "", (), "", "", block.family, (), (),
                            tuple(cells), delta, ("",) * len(columns)))
    return tuple(out)


def _paper(kind: str, path: Optional[Path]) -> tuple[dict[str, tuple[ref.PaperBlock, ...]],
                                                   tuple[ref.PaperBlock, ...]]:
    """(backbone -> the blocks our rows may meet, every block shown on its own)."""
    if kind == TEXT:
        blocks = ref.llm_main(path)
        mapping = {b.backbone: (b,) for b in blocks}
        for b in ref.n3(path):  # the three-agent ring's rows (Qwen3-1.7B is only there)
            mapping[b.backbone] = mapping.get(b.backbone, ()) + (b,)
        return mapping, blocks
    blocks = ref.vlm_main(path)
    mapping = {}
    for b in blocks:  # every training set of a backbone (open-r1, MMR1), one of them per block of ours (_meets)
        mapping[b.backbone] = mapping.get(b.backbone, ()) + (b,)
    return mapping, blocks + ref.ens_vlm(path)


def _meets(kind: str, block: Block, papers: Sequence[ref.PaperBlock]) -> tuple[ref.PaperBlock, ...]:
    """The paper blocks ``block`` meets: text, all of them (main table, then the three-agent ring); vision-language,
    the one trained on the block's paper training set, else on open-r1 (never the other set: see the module
    docstring)."""
    if kind == TEXT:
        return tuple(papers)
    return tuple(p for p in papers if p.dataset == (block.dataset or VLM_DATASET))


def compare(kind: str, blocks: list[Block], columns: Sequence[Column], metrics: Sequence[str],
            benchmarks: Sequence[str], backbone: Optional[str], path: Optional[Path]) -> Comparison:
    """``--reference paper`` for one kind of table (see the module docstring); ``benchmarks`` are those with
    predictions (the Avg is over them), ``columns`` may show more."""
    spec = _KINDS[kind]
    paper, everything = _paper(kind, path)
    owns = backbone is not None and backbone in paper
    own_blocks = tuple(b for b in everything if b.backbone == backbone) if owns else ()
    mapped = [b for b in blocks if b.backbone in paper]
    shown_benches = list(dict.fromkeys(c.benchmark for c in columns if c.kind == "value"))
    benches = [b for b in shown_benches if b in spec.columns]
    notes: list[str] = []
    if mapped and benches and spec.metric in metrics:
        met = [_meets(kind, b, paper[b.backbone]) if b.backbone in paper else () for b in blocks]
        blocks = [replace(b, rows=_paper_rows(b, m, columns, benchmarks, spec)) if m else b
                  for b, m in zip(blocks, met)]
        ring = any(r.kind == "paper" and next(p for p in m if p.row(r.group)).table == "n3"
                   for b, m in zip(blocks, met) for r in b.rows)
        sets = list(dict.fromkeys(p.dataset for m in met for p in m if p.dataset))
        trained = f" (trained on {', '.join(sets)})" if sets else ""
        if len(sets) > 1:
            trained = trained[:-1] + "; each block beside the paper's block of its own training set)"
        notes.append(f"--reference paper: rows marked (paper) hold the paper's printed values for "
                     f"{', '.join(sorted({b.backbone or '' for b in mapped}))}{trained} on "
                     f"{', '.join(spec.columns[b] for b in benches)} ({spec.metric_name} columns only; not ranked)"
                     + ("; three-agent rows from the paper's three-agent ring table." if ring else "."))
        return Comparison(blocks, notes, [spec.protocol + "."], own_blocks, owns)
    if not mapped:
        why = (f"none of our backbones ({', '.join(b.family for b in blocks)}) is a paper backbone "
               "(mapping: corl_bench.report.reference.BACKBONES)")
    elif not benches:
        why = (f"none of our benchmarks ({', '.join(benchmarks)}) is in {spec.table_words} "
               f"({', '.join(spec.columns)})")
    else:
        why = spec.why_metric
    shown_words = spec.shown_words
    if backbone is not None and not owns:
        shown_words = f"the paper's {backbone} blocks are shown on their own"
    notes.append(f"--reference paper: nothing to compare, {why}; {shown_words}.")
    if backbone is None:
        names = dict.fromkeys(b.backbone for b in everything if b.backbone)  # what --backbone accepts
        notes.append(f"{spec.backbones_words}: {', '.join(names)}; pick one with --backbone NAME.")
        return Comparison(blocks, notes, [], everything, owns)
    return Comparison(blocks, notes, [], own_blocks, owns)  # the paper's table carries its own protocol line
