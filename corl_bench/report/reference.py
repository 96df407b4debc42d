"""The Co-RL paper's published numbers as data (``results/reference/paper-results.json``), and how they map onto ours.

Public API (pure Python, no torch):

* :func:`llm_main` ``(path=None) -> tuple[PaperBlock, ...]`` - the paper's main LLM table (``llmMain``): one
  block per backbone, rows in the paper's order, values and bold/underline marks exactly as printed.
* :func:`backbones` ``(path=None) -> tuple[str, ...]`` - the backbone names of that table.
* :func:`backbone_for` ``(name) -> str | None`` - the paper backbone an agent family / model name stands for
  (:data:`BACKBONES`; empty for the micro families, which are not the paper's models).
* :func:`our_label` ``(paper_label) -> str`` - the paper's row label in our table's words (:data:`PAPER_LABELS`).
* :data:`PAPER_BENCHMARKS` - our benchmark key -> the paper's column name.

Values are the strings the paper prints (percent); :attr:`PaperRow.values` holds them as floats (percent).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)

__all__ = ["BACKBONES", "PAPER_BENCHMARKS", "PAPER_LABELS", "PAPER_PROTOCOL", "PAPER_RESULTS", "PaperBlock",
           "PaperRow", "backbone_for", "backbones", "llm_main", "load_paper", "our_label"]

#: Where the paper's tables live (copied verbatim from the paper's website data; see results/reference/README.md).
PAPER_RESULTS = Path(__file__).resolve().parents[2] / "results" / "reference" / "paper-results.json"

#: Our benchmark key -> the paper's text-table column.
PAPER_BENCHMARKS: dict[str, str] = {
    "gsm8k": "GSM8K", "math500": "MATH500", "amc83": "AMC", "humaneval": "HumanEval",
    "gpqa_diamond": "GPQA", "mbpp": "MBPP", "livecodebench_v6": "LiveCodeBench",
}

#: Our agent family or model name -> the paper's backbone. The micro families (qwen2-bpe, llama-bpe, neox-bpe) are
#: tiny stand-ins, not the paper's models, so they are deliberately absent.
BACKBONES: dict[str, str] = {
    "Qwen/Qwen2.5-3B": "Qwen2.5-3B", "Qwen2.5-3B": "Qwen2.5-3B",
    "meta-llama/Llama-3.2-3B-Instruct": "Llama-3.2-3B-Instruct", "Llama-3.2-3B-Instruct": "Llama-3.2-3B-Instruct",
    "Qwen/Qwen2.5-7B": "Qwen2.5-7B", "Qwen2.5-7B": "Qwen2.5-7B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct",
}

#: The paper's row labels that differ from ours (every other label is the same in both tables).
PAPER_LABELS: dict[str, str] = {
    "Co-RL (Same family)": "Co-RL (same family)",
    "Co-RL (Different family)": "Co-RL (cross-family)",
    "Co-RL (Different family+)": "Co-RL (cross-family+)",
}

#: How the paper's text numbers were produced (docs: shared/reference/corl-paper-and-code.md, sections 3-5).
PAPER_PROTOCOL = ("paper: sampled at T 0.6, top-p 0.95, one sample per problem (AMC avg@8), 3072-token cap; "
                  "per the released code the text runs keep the checkpoint with the best in-loop MATH-500 "
                  "accuracy (a test set), not the final one")


@dataclass(frozen=True)
class PaperRow:
    """One printed row: ``label`` as in the paper, ``printed`` values and ``marks`` ("b", "u" or "") per column."""

    label: str
    printed: tuple[str, ...]
    marks: tuple[str, ...]

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
    """One backbone of the paper's main LLM table."""

    backbone: str
    tier: str
    columns: tuple[str, ...]  # GSM8K, MATH500, AMC, HumanEval, GPQA, MBPP, LiveCodeBench, Avg
    rows: tuple[PaperRow, ...]

    def row(self, our_row_label: str) -> Optional[PaperRow]:
        """The paper row that our label ``our_row_label`` (e.g. "Co-RL (cross-family)") stands for, if any."""
        for row in self.rows:
            if our_label(row.label) == our_row_label:
                return row
        return None

    def value(self, our_row_label: str, column: str) -> Optional[float]:
        """The printed value (percent) of our row label in the paper's ``column``; None if the paper has none."""
        row = self.row(our_row_label)
        if row is None or column not in self.columns:
            return None
        return row.values[self.columns.index(column)]


def our_label(paper_label: str) -> str:
    """The paper's row label in our words ("Co-RL (Different family)" -> "Co-RL (cross-family)")."""
    return PAPER_LABELS.get(paper_label, paper_label)


def backbone_for(name: str) -> Optional[str]:
    """The paper backbone of an agent family or model name (:data:`BACKBONES`); None if it is not a paper model."""
    return BACKBONES.get(name)


def load_paper(path: str | Path | None = None) -> dict[str, Any]:
    """The raw paper-results JSON object; ValueError (one line naming the fix) if missing or malformed."""
    path = Path(path) if path is not None else PAPER_RESULTS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"paper results not found at {path}; restore results/reference/paper-results.json "
                         "from git") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path} ({type(exc).__name__}); restore it from git") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object; restore it from git")
    return data


def llm_main(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's main LLM table as blocks (one per backbone, paper order); ValueError if the data is malformed."""
    data = load_paper(path)
    try:
        columns = tuple(str(c) for c in data["benchText"])
        blocks = []
        for block in data["llmMain"]:
            rows = tuple(PaperRow(str(r["method"]), tuple(str(v) for v in r["vals"]),
                                  tuple(str(m or "") for m in r.get("marks") or [""] * len(r["vals"])))
                         for r in block["rows"])
            if any(len(r.printed) != len(columns) or len(r.marks) != len(columns) for r in rows):
                raise ValueError("a row's length differs from benchText")
            blocks.append(PaperBlock(str(block["backbone"]), str(block.get("tier", "")), columns, rows))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper results: llmMain is malformed ({exc}); restore "
                         "results/reference/paper-results.json from git") from None
    return tuple(blocks)


def backbones(path: str | Path | None = None) -> tuple[str, ...]:
    """The backbone names of the paper's main LLM table, in the paper's order."""
    return tuple(block.backbone for block in llm_main(path))
