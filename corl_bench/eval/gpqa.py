"""GPQA's hub rows (``Idavidrein/gpqa``, gated) in the local copy's schema, with the paper's choice order: the
``gpqa`` data converter (:mod:`corl_bench.eval.converters`)."""

from __future__ import annotations

import random
from typing import Any, Iterable, Mapping

from corl_bench.config import ConfigError

__all__ = ["GPQA_FIELDS", "GPQA_META", "GPQA_OPTIONS", "GPQA_REPO", "gpqa_rows"]

GPQA_REPO = "Idavidrein/gpqa"
GPQA_OPTIONS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
GPQA_FIELDS = ("Record ID", "Question") + GPQA_OPTIONS
"""hub columns the paper's GPQA conversion needs"""
GPQA_META = {"domain": "High-level domain", "subdomain": "Subdomain", "explanation": "Explanation",
             "writer_difficulty": "Writer's Difficulty Estimate", "canary": "Canary String",
             "expert_validator_accuracy": "Expert Validator Accuracy",
             "non_expert_validator_accuracy": "Non-Expert Validator Accuracy"}
"""local field -> hub column, carried along when the hub rows have it (metadata; not used for scoring)"""


def _gpqa_clean(text: Any) -> str:
    """Co-RL ``process_docs_gpqa``'s ``_preprocess`` (the paper's option text)."""
    if text is None:
        return " "
    return str(text).strip().replace(" [title]", ". ").replace("  ", " ")


def _text(value: Any) -> Any:
    """Hub metadata as the local copy's strings (the CSV loader reads accuracies as floats); missing stays None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value if isinstance(value, str) else str(value)


def gpqa_rows(records: Iterable[Mapping[str, Any]], name: str = "gpqa_diamond",
              local: str = "gpqa_diamond_orig/test.jsonl") -> list[dict[str, Any]]:
    """Hub GPQA rows (``Idavidrein/gpqa`` layout) -> the local copy's schema, options in the paper's order.

    The order is Co-RL's ``process_docs_gpqa``: the options [Incorrect 1, 2, 3, Correct], each cleaned
    (:func:`_gpqa_clean`), shuffled with ``random.Random(row_index)`` where ``row_index`` is the row's position in
    the split; the gold letter is where the cleaned correct answer lands. ``question`` and ``choices`` ([Correct,
    Incorrect 1, 2, 3]) are kept verbatim, as in the local copy. Rows without the needed columns (another layout)
    are refused with a one-line ConfigError naming the local copy.
    """
    rows = []
    for i, rec in enumerate(records):
        missing = [k for k in GPQA_FIELDS if k not in rec]
        if missing:
            raise ConfigError(f"benchmark {name}: the hub rows have no {missing[0]!r} column (another layout than "
                              f"{GPQA_REPO}), so the paper's choice order cannot be rebuilt; use the local copy: "
                              f"--data-dir DIR (or $CORL_BENCH_DATA) with DIR/{local}")
        options = [_gpqa_clean(rec[k]) for k in GPQA_OPTIONS[1:] + GPQA_OPTIONS[:1]]
        random.Random(i).shuffle(options)
        gold = chr(65 + options.index(_gpqa_clean(rec["Correct Answer"])))
        row: dict[str, Any] = {"id": str(rec["Record ID"]), "row_index": i, "question": rec["Question"],
                               "choices": [rec[k] for k in GPQA_OPTIONS], "answer_index": 0, "answer_letter": "A"}
        row.update({dst: _text(rec[src]) for dst, src in GPQA_META.items() if src in rec})
        row.update({"corl_choices": options, "corl_answer_letter": gold})
        rows.append(row)
    return rows
