"""The Co-RL paper's published numbers as data (``corl_bench/report/paper-results.json``, package data), and how they map
onto ours.

Public API (pure Python, no torch):

* :func:`llm_main` ``(path=None) -> tuple[PaperBlock, ...]`` - the paper's main LLM table (``llmMain``): one
  block per backbone, rows in the paper's order, values and bold/underline marks exactly as printed.
* :func:`backbones` ``(path=None) -> tuple[str, ...]`` - the backbone names of that table.
* :func:`backbone_for` ``(name) -> str | None`` - the paper backbone an agent family / model name stands for
  (:data:`BACKBONES`; empty for the micro families, which are not the paper's models).
* :func:`our_label` ``(paper_label, table="llmMain") -> str`` - the paper's row label in our table's words
  (:data:`PAPER_LABELS`; the three-agent table's Co-RL rows are our "Co-RL (three agents)", :data:`TABLE_LABELS`).
* :func:`n3` ``(path=None) -> tuple[PaperBlock, ...]`` - the paper's three-agent ring table (``n3``): one block per
  agent's backbone (Qwen2.5-3B, Llama-3.2-3B-Instruct, Qwen3-1.7B), Base/GT-Reward/TTRL repeated from the main table.
* :data:`PAPER_BENCHMARKS` - our benchmark key -> the paper's column name.
* :func:`vlm_main` ``(path=None) -> tuple[PaperBlock, ...]`` - the paper's vision-language tables (``vlmSmall``, then
  ``vlmLarge``): one block per (backbone, training set), columns ``benchVLM``; :func:`ens_vlm` - its test-time
  ensemble control (``ensVLM``), one block per training set; :func:`vlm_backbones`, :func:`blocks_of`.
* :data:`PAPER_VLM_BENCHMARKS` - our multimodal benchmark key -> the paper's VLM column; :data:`VLM_BENCHMARKS` - every
  benchmark a vision-language table holds, in the paper's column order (the micro-visual suite last).
* :data:`PAPER_VLM_DATASETS` - our ``data.train`` name of a paper VLM training set -> the paper's dataset name of its
  vision-language blocks (open-r1, MMR1).

Values are the strings the paper prints (percent); :attr:`PaperRow.values` holds them as floats (percent).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)

__all__ = ["BACKBONES", "PAPER_BENCHMARKS", "PAPER_ENS_VLM_PROTOCOL", "PAPER_LABELS", "PAPER_PROTOCOL", "PAPER_RESULTS",
           "PAPER_VLM_BENCHMARKS", "PAPER_VLM_DATASETS", "PAPER_VLM_PROTOCOL", "PaperBlock", "PaperRow",
           "VLM_BENCHMARKS", "backbone_for", "backbones", "blocks_of", "ens_vlm", "llm_main", "load_paper", "n3",
           "our_label", "vlm_backbones", "vlm_main"]

#: Where the paper's tables live: package data beside this module, so an installed wheel has them (copied verbatim
#: from the paper's website data; see paper-results.md beside it).
PAPER_RESULTS = Path(__file__).resolve().with_name("paper-results.json")

#: Our benchmark key -> the paper's text-table column.
PAPER_BENCHMARKS: dict[str, str] = {
    "gsm8k": "GSM8K", "math500": "MATH500", "amc83": "AMC", "humaneval": "HumanEval",
    "gpqa_diamond": "GPQA", "mbpp": "MBPP", "livecodebench_v6": "LiveCodeBench",
}

#: Our multimodal benchmark key -> the paper's vision-language column (``benchVLM``): MathVision on its full test set
#: (3040), the other three on testmini. ``mathvision_testmini`` is a different set, so it has no paper column.
PAPER_VLM_BENCHMARKS: dict[str, str] = {
    "mathvision": "MathVision", "mathverse_testmini": "MathVerse", "mathvista_testmini": "MathVista",
    "wemath_testmini": "We-Math",
}

#: Our ``data.train`` name of the paper's vision-language training sets (corl_bench.hf.data.NAMED) -> the dataset of
#: the paper's blocks trained on it. A vision-language run trained on one meets only the paper's block of that set:
#: the paper's open-r1 and MMR1 blocks used different multiple-choice graders and are never compared.
PAPER_VLM_DATASETS: dict[str, str] = {"multimodal-open-r1-8k-verified": "open-r1", "mmr1": "MMR1"}

#: The benchmarks that make a run's table a vision-language one, in the paper's column order (MathVision testmini
#: beside MathVision); the micro-visual world's held-out suite comes last.
VLM_BENCHMARKS: tuple[str, ...] = ("mathvision", "mathvision_testmini", "mathverse_testmini", "mathvista_testmini",
                                   "wemath_testmini", "micro-visual-test")

#: Our agent family or model name -> the paper's backbone (text and vision-language). The micro families (qwen2-bpe,
#: llama-bpe, neox-bpe, qwen2vl-micro, llava-micro) are tiny stand-ins, not the paper's models, so they are absent.
BACKBONES: dict[str, str] = {
    "Qwen/Qwen2.5-3B": "Qwen2.5-3B", "Qwen2.5-3B": "Qwen2.5-3B",
    "meta-llama/Llama-3.2-3B-Instruct": "Llama-3.2-3B-Instruct", "Llama-3.2-3B-Instruct": "Llama-3.2-3B-Instruct",
    "Qwen/Qwen2.5-7B": "Qwen2.5-7B", "Qwen2.5-7B": "Qwen2.5-7B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-1.7B-Base": "Qwen3-1.7B", "Qwen3-1.7B-Base": "Qwen3-1.7B", "Qwen/Qwen3-1.7B": "Qwen3-1.7B",
    "Qwen3-1.7B": "Qwen3-1.7B",  # only in the three-agent table
    # only in the error-overlap probe (decPool)
    "microsoft/Phi-3.5-mini-instruct": "Phi-3.5-mini", "Phi-3.5-mini-instruct": "Phi-3.5-mini",
    "Phi-3.5-mini": "Phi-3.5-mini", "openbmb/MiniCPM3-4B": "MiniCPM3-4B", "MiniCPM3-4B": "MiniCPM3-4B",
    "Qwen/Qwen2.5-VL-3B-Instruct": "Qwen2.5-VL-3B", "Qwen2.5-VL-3B-Instruct": "Qwen2.5-VL-3B",
    "Qwen2.5-VL-3B": "Qwen2.5-VL-3B",
    "OpenGVLab/InternVL3_5-2B": "InternVL-3.5-2B", "OpenGVLab/InternVL3_5-2B-HF": "InternVL-3.5-2B",
    "InternVL3_5-2B": "InternVL-3.5-2B", "InternVL3_5-2B-HF": "InternVL-3.5-2B", "InternVL-3.5-2B": "InternVL-3.5-2B",
    "Qwen/Qwen2.5-VL-7B-Instruct": "Qwen2.5-VL-7B", "Qwen2.5-VL-7B-Instruct": "Qwen2.5-VL-7B",
    "Qwen2.5-VL-7B": "Qwen2.5-VL-7B",
    "OpenGVLab/InternVL3_5-8B": "InternVL-3.5-8B", "OpenGVLab/InternVL3_5-8B-HF": "InternVL-3.5-8B",
    "InternVL3_5-8B": "InternVL-3.5-8B", "InternVL3_5-8B-HF": "InternVL-3.5-8B", "InternVL-3.5-8B": "InternVL-3.5-8B",
    "google/gemma-3-12b-it": "Gemma-3-12B", "gemma-3-12b-it": "Gemma-3-12B", "Gemma-3-12B": "Gemma-3-12B",
}

#: The paper's row labels that differ from ours (every other label is the same in both tables).
PAPER_LABELS: dict[str, str] = {
    "Co-RL (Same family)": "Co-RL (same family)",
    "Co-RL (Different family)": "Co-RL (cross-family)",
    "Co-RL (Different family+)": "Co-RL (cross-family+)",
}

#: Per paper table, row labels that mean something else there: the three-agent table prints its Co-RL rows as
#: "Co-RL (Different family)", which are the rows of our three-agent ring (cohort.paper_row three-agent).
TABLE_LABELS: dict[str, dict[str, str]] = {"n3": {"Co-RL (Different family)": "Co-RL (three agents)"}}

#: How the paper's text numbers were produced (docs: shared/reference/corl-paper-and-code.md, sections 3-5).
PAPER_PROTOCOL = ("paper: sampled at T 0.6, top-p 0.95, one sample per problem (AMC avg@8), 3072-token cap; "
                  "per the released code the text runs keep the checkpoint with the best in-loop MATH-500 "
                  "accuracy (a test set), not the final one")

#: The same for the vision-language tables (docs: shared/reference/corl-paper-and-code.md, sections 2, 4.3, 7).
PAPER_VLM_PROTOCOL = ("paper (vision-language): greedy decoding, 16384-token budget, boxed prompt, rule-based "
                      "mathruler grading; open-r1 and MMR1 blocks used different multiple-choice graders and are not "
                      "comparable with each other; checkpoint best on MathVista-150 (part of the MathVista test set) "
                      "or the endpoint (unverified which)")

#: How the paper's ensemble control was decoded (results.js: "ensemble tables use maj@8 at T=0.6").
PAPER_ENS_VLM_PROTOCOL = ("paper ensemble control (vision-language): maj@8 at T 0.6; an (ensemble) row votes over "
                          "the rollouts of both models of the pair")


@dataclass(frozen=True)
class PaperRow:
    """One printed row: ``label`` as in the paper, ``printed`` values and ``marks`` ("b", "u" or "") per column;
    ``source`` "ours" for a row of ours placed beside the paper's in one of its side tables
    (:mod:`corl_bench.report.side`)."""

    label: str
    printed: tuple[str, ...]
    marks: tuple[str, ...]
    source: str = "paper"

    @property
    def values(self) -> tuple[Optional[float], ...]:
        """The printed values as floats (percent); None where a cell is empty or not a number."""
        out: list[Optional[float]] = []
        for text in self.printed:
            try:
                out.append(float(text))
            except (TypeError, ValueError):
                out.append(None)
        return tuple(out)


@dataclass(frozen=True)
class PaperBlock:
    """One block of a paper table: a backbone of the main LLM table, a (backbone, training set) of a vision-language
    table, or a training set of the ensemble control (``backbone`` "" and a ``heading``)."""

    backbone: str
    tier: str
    columns: tuple[str, ...]  # GSM8K, MATH500, AMC, HumanEval, GPQA, MBPP, LiveCodeBench, Avg (or benchVLM)
    rows: tuple[PaperRow, ...]
    dataset: str = ""  # the training set of a vision-language block (open-r1, MMR1)
    table: str = "llmMain"  # the key of paper-results.json it comes from
    heading: str = ""  # a title of its own (the ensemble control's blocks)

    @property
    def title(self) -> str:
        """How a rendered table heads this block ("Qwen2.5-3B (3B tier)", "Qwen2.5-VL-3B, trained on open-r1
        (small tier)")."""
        if self.heading:
            return self.heading
        return (self.backbone + (f", trained on {self.dataset}" if self.dataset else "")
                + (f" ({self.tier} tier)" if self.tier else ""))

    def row(self, our_row_label: str) -> Optional[PaperRow]:
        """The paper row that our label ``our_row_label`` (e.g. "Co-RL (cross-family)") stands for, if any."""
        for row in self.rows:
            if our_label(row.label, self.table) == our_row_label:
                return row
        return None

    def value(self, our_row_label: str, column: str) -> Optional[float]:
        """The printed value (percent) of our row label in the paper's ``column``; None if the paper has none."""
        row = self.row(our_row_label)
        if row is None or column not in self.columns:
            return None
        return row.values[self.columns.index(column)]


def our_label(paper_label: str, table: str = "llmMain") -> str:
    """The paper's row label in our words ("Co-RL (Different family)" -> "Co-RL (cross-family)"; in the three-agent
    table ``n3``, "Co-RL (three agents)")."""
    label = TABLE_LABELS.get(table, {}).get(paper_label)
    return label if label is not None else PAPER_LABELS.get(paper_label, paper_label)


def backbone_for(name: str) -> Optional[str]:
    """The paper backbone of an agent family or model name (:data:`BACKBONES`); None if it is not a paper model."""
    return BACKBONES.get(name)


def load_paper(path: str | Path | None = None) -> dict[str, Any]:
    """The raw paper-results JSON object; ValueError (one line naming the fix) if missing or malformed."""
    path = Path(path) if path is not None else PAPER_RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"paper results not found at {path}; restore corl_bench/report/paper-results.json "
                         "from git") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path} ({type(exc).__name__}); restore it from git") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object; restore it from git")
    return data


def _row(raw: dict[str, Any], label_key: str, columns: tuple[str, ...], columns_key: str) -> PaperRow:
    row = PaperRow(str(raw[label_key]), tuple(str(v) for v in raw["vals"]),
                   tuple(str(m or "") for m in raw.get("marks") or [""] * len(raw["vals"])))
    if len(row.printed) != len(columns) or len(row.marks) != len(columns):
        raise ValueError(f"a row's length differs from {columns_key}")
    return row


def _malformed(key: str, exc: Exception) -> ValueError:
    return ValueError(f"paper results: {key} is malformed ({exc}); restore corl_bench/report/paper-results.json "
                      "from git")


def llm_main(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's main LLM table as blocks (one per backbone, paper order); ValueError if the data is malformed."""
    data = load_paper(path)
    try:
        columns = tuple(str(c) for c in data["benchText"])
        blocks = []
        for block in data["llmMain"]:
            rows = tuple(_row(r, "method", columns, "benchText") for r in block["rows"])
            blocks.append(PaperBlock(str(block["backbone"]), str(block.get("tier", "")), columns, rows))
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("llmMain", exc) from None
    return tuple(blocks)


def n3(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's three-agent ring table as blocks (one per agent's backbone, paper order, columns ``benchText``);
    ValueError if the data is malformed."""
    data = load_paper(path)
    try:
        columns = tuple(str(c) for c in data["benchText"])
        return tuple(PaperBlock(str(block["model"]), "", columns,
                                tuple(_row(r, "method", columns, "benchText") for r in block["rows"]), table="n3",
                                heading=f"{block['model']}, three-agent ring")
                     for block in data["n3"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("n3", exc) from None


#: The paper's vision-language tables: key in paper-results.json -> tier.
VLM_TABLES: dict[str, str] = {"vlmSmall": "small", "vlmLarge": "large"}


def vlm_main(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's vision-language tables as blocks, ``vlmSmall`` then ``vlmLarge``, one per (backbone, training
    set) in the paper's order, columns ``benchVLM``; ValueError if the data is malformed."""
    data = load_paper(path)
    blocks = []
    for key, tier in VLM_TABLES.items():
        try:
            columns = tuple(str(c) for c in data["benchVLM"])
            for block in data[key]:
                rows = tuple(_row(r, "method", columns, "benchVLM") for r in block["rows"])
                blocks.append(PaperBlock(str(block["backbone"]), tier, columns, rows,
                                         str(block.get("dataset") or ""), key))
        except (KeyError, TypeError, ValueError) as exc:
            raise _malformed(key, exc) from None
    return tuple(blocks)


def ens_vlm(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's vision-language test-time ensemble control (``ensVLM``): one block per training set, rows the
    printed settings ("TTRL (Qwen2.5-VL)", "Co-RL (ensemble)", ...); ValueError if the data is malformed."""
    data = load_paper(path)
    try:
        columns = tuple(str(c) for c in data["benchVLM"])
        groups: dict[str, list[PaperRow]] = {}
        for raw in data["ensVLM"]:
            groups.setdefault(str(raw["group"]), []).append(_row(raw, "setting", columns, "benchVLM"))
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("ensVLM", exc) from None
    return tuple(PaperBlock("", "", columns, tuple(rows), group, "ensVLM", f"Ensemble control, trained on {group}")
                 for group, rows in groups.items())


def backbones(path: str | Path | None = None) -> tuple[str, ...]:
    """The backbone names of the paper's main LLM table, in the paper's order."""
    return tuple(block.backbone for block in llm_main(path))


def vlm_backbones(path: str | Path | None = None) -> tuple[str, ...]:
    """The backbone names of the paper's vision-language tables, in the paper's order (each once)."""
    return tuple(dict.fromkeys(block.backbone for block in vlm_main(path)))


def blocks_of(backbone: str, path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """Every block of ``backbone`` in the paper's main LLM and vision-language tables (a VLM backbone has one per
    training set); () for a name the paper does not have."""
    return tuple(b for b in llm_main(path) + vlm_main(path) if b.backbone == backbone)
