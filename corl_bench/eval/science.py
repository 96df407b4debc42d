"""MMLU and SciBench, the two benchmarks of the paper's CoMAS comparison that its own suite lacks: their hub rows in the
project's schema (the ``mmlu`` and ``scibench`` data converters) and the CoMAS protocol's extraction and grading.

Reference. The CoMAS-protocol table (``corl-paper-and-code.md`` 4.2 and 5.5: GSM8K, MATH-500, HumanEval, MBPP, MMLU,
GPQA, SciBench) uses "CoMAS's own setup, official implementation and evaluation protocol". CoMAS (Xue et al. 2025,
arXiv:2510.08529, github.com/xxyQwQ/CoMAS) evaluates with MASLab: ``scripts/evaluate_model.sh`` serves the model with
vLLM's OpenAI server and runs ``maslab/inference.py --method_name vanilla --model_temperature 0.7`` (the ``vanilla``
method, ``maslab/methods/mas_base/mas_base.py``: the query as one user turn, no system prompt, no shots, one sample,
``max_tokens`` 2048, top_p the server's default 1.0), then ``maslab/evaluation.py`` scores accuracy:

* MMLU: the query is the question, a blank line, ``(A) text`` lines, then "Provide your step-by-step solution to the
  problem. The final answer should be either A, B, C, or D enclosed within \\boxed{}, e.g. \\boxed{A}."; the answer
  is the last ``\\boxed{X}`` with X in A-D, case-insensitive (:func:`extract_boxed_abcd`), right iff it equals the
  gold letter (the ``letter`` grader);
* SciBench: the query is the problem text, " The unit of the answer should be {unit}." when the row has a unit, then
  "Provide your step-by-step solution to the problem. The final answer should be a decimal number enclosed within
  \\boxed{}, ..."; the answer is the first value ``math_verify.parse`` finds in the whole completion, as a float
  (:func:`extract_math_verify_number`); the gold is ``answer_number`` without a leading "+", parsed the same way;
  right iff ``math.isclose(answer, gold, rel_tol=0.05)`` (:func:`rel_tol_5pct`). That 5 % relative tolerance is also
  the SciBench paper's own (Wang et al. 2023, arXiv:2307.10635; ``eval/eval_zero.py::equiv`` of
  github.com/mandyyyyii/scibench at e14e0ca, where an earlier revision used abs_tol 0.1 for answers >= 1 and
  rel_tol 0.1 below). The unit is the row's as written: a unit such as "$10^{-17} \\mathrm{~J}$" means the gold is
  in those units.

Checked: MASLab's SciBench queries equal ``problem_text`` verbatim + the unit sentence for all 424 of its 499 rows
whose problem is in the SciBench GitHub release (the other 75 are not in that release's 580 rows).

Deviations (say them when comparing with the CoMAS table):

* data: MASLab's ``datasets/MMLU.json`` (500 questions) and ``SciBench.json`` (499) are fixed subsets whose selection
  is not recorded; the specs here read the whole hub sets (``cais/mmlu`` ``all``/``test``: 14,042 questions;
  ``xw27/scibench`` ``train``). So their scores are the same protocol on a larger population, not the table's
  numbers. (CoMAS's ``GPQA.json`` has 448 questions: GPQA *main*, not the Diamond set of ``gpqa_diamond``.)
* MMLU question text is stripped of surrounding whitespace, as every multiple-choice item here is
  (:func:`corl_bench.eval.items.build_items`); MASLab keeps a trailing newline that a few questions have.
"""

from __future__ import annotations

import math
import re
import threading
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from corl_bench.config import ConfigError

if TYPE_CHECKING:
    from corl_bench.eval.specs import BenchmarkSpec

__all__ = ["MMLU_REPO", "REL_TOL", "SCIBENCH_REPO", "extract_boxed_abcd", "extract_math_verify_number",
           "mmlu_rows", "rel_tol_5pct", "scibench_rows"]

MMLU_REPO = "cais/mmlu"
SCIBENCH_REPO = "xw27/scibench"
MMLU_FIELDS = ("question", "choices", "answer")
SCIBENCH_FIELDS = ("problem_text", "answer_number", "unit")
SCIBENCH_META = ("source", "problemid", "answer_latex", "comment")
"""hub columns carried along when present (metadata; not used for scoring)"""
REL_TOL = 0.05
"""SciBench's relative tolerance (CoMAS ``maslab/evaluation.py``; the SciBench paper's ``equiv``)"""
_BOXED_ABCD = re.compile(r"\\boxed\{([A-D])\}", re.IGNORECASE)


def _refuse(name: str, local: str, repo: str, column: str) -> ConfigError:
    return ConfigError(f"benchmark {name}: the hub rows have no {column!r} column (another layout than {repo}); use "
                       f"the hub dataset {repo} or a local copy: --data-dir DIR (or $CORL_BENCH_DATA) with DIR/{local}")


def mmlu_rows(records: Iterable[Mapping[str, Any]], name: str = "mmlu",
              local: str = "mmlu/test.jsonl") -> list[dict[str, Any]]:
    """``cais/mmlu`` rows (``question``, ``subject``, ``choices``: 4 texts, ``answer``: the right option's index) ->
    the local schema: ``id`` (the row's position in the split), ``question``, ``subject``, ``choices`` and ``answer``
    = the gold letter. A row in another layout, or whose answer index is not one of its options, is refused in one
    line."""
    rows = []
    for i, rec in enumerate(records):
        missing = [k for k in MMLU_FIELDS if k not in rec]
        if missing:
            raise _refuse(name, local, MMLU_REPO, missing[0])
        choices, answer = [str(c) for c in rec["choices"]], rec["answer"]
        if isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().upper() in "ABCDEFGHIJ":
            answer = "ABCDEFGHIJ".index(answer.strip().upper())  # already a letter (a frozen or hand-made copy)
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
            raise ConfigError(f"benchmark {name}: row {i} has answer {rec['answer']!r}, not the index of one of its "
                              f"{len(choices)} choices; fix the data (the {MMLU_REPO} answer is a 0-based index)")
        rows.append({"id": str(rec.get("id", i)), "question": rec["question"], "subject": rec.get("subject"),
                     "choices": choices, "answer": "ABCDEFGHIJ"[answer]})
    return rows


def scibench_problem(problem_text: str, unit: Optional[str]) -> str:
    """MASLab's SciBench question: the problem text verbatim, then " The unit of the answer should be {unit}." when
    the row has a unit (blank units say none)."""
    unit = (unit or "").strip()
    return f"{problem_text} The unit of the answer should be {unit}." if unit else str(problem_text)


def scibench_rows(records: Iterable[Mapping[str, Any]], name: str = "scibench",
                  local: str = "scibench/test.jsonl") -> list[dict[str, Any]]:
    """``xw27/scibench`` rows (``problem_text``, ``answer_number``, ``unit``, ``source``, ``problemid`` ...) -> the
    local schema: ``id`` (the row's position in the split), ``problem`` (:func:`scibench_problem`), ``answer`` (the
    ``answer_number`` string, stripped), ``unit`` and the metadata columns present. Another layout is refused in one
    line."""
    rows = []
    for i, rec in enumerate(records):
        missing = [k for k in SCIBENCH_FIELDS if k not in rec]
        if missing:
            raise _refuse(name, local, SCIBENCH_REPO, missing[0])
        row: dict[str, Any] = {"id": str(rec.get("id", i)), "problem": scibench_problem(rec["problem_text"],
                                                                                        rec["unit"]),
                               "answer": str(rec["answer_number"]).strip(), "unit": str(rec["unit"] or "").strip()}
        row.update({k: (str(rec[k]).strip() if rec[k] is not None else None) for k in SCIBENCH_META if k in rec})
        rows.append(row)
    return rows


def convert_mmlu(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return mmlu_rows(records, spec.name, spec.source.local or "mmlu/test.jsonl")


def convert_scibench(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return scibench_rows(records, spec.name, spec.source.local or "scibench/test.jsonl")


# ------------------------------------------------------------------------------------------------ extraction, grading
def extract_boxed_abcd(text: str) -> Optional[str]:
    """The letter of the last ``\\boxed{X}`` with X one of A-D (case-insensitive, upper-cased), else None: MASLab's
    choice extraction (``maslab/evaluation.py``). Stricter than the ``letter`` extractor: no spaces or parentheses
    inside the box, no "answer is X" fallback."""
    found = _BOXED_ABCD.findall(text or "")
    return found[-1].upper() if found else None


def _first_value(text: str) -> Optional[float]:
    """``float(math_verify.parse(text)[0])``, or None (nothing parsed, not a number, or math-verify failed)."""
    try:
        from math_verify import parse  # lazy: heavy import (sympy, latex2sympy2)

        timeout = 5 if threading.current_thread() is threading.main_thread() else None  # signal.alarm: main only
        parsed = parse(text, parsing_timeout=timeout)
        value = float(parsed[0]) if parsed else None
    except Exception:  # noqa: BLE001 - math_verify may raise anything (sympy, timeouts); CoMAS counts it wrong
        return None
    return value if value is not None and math.isfinite(value) else None


def extract_math_verify_number(text: str) -> Optional[str]:
    """The first value ``math_verify.parse`` finds in the completion (its last ``\\boxed{}`` first, else the last
    LaTeX or plain expression), as a float's ``repr``; None when there is none or it is not a number. MASLab's
    SciBench extraction (``maslab/evaluation.py``), quirks included: math-verify reads "3.1e-3" as 3.1."""
    value = _first_value(text or "")
    return repr(value) if value is not None else None


def rel_tol_5pct(pred: Optional[str], gold: Optional[str]) -> bool:
    """``math.isclose(pred, gold, rel_tol=0.05)`` (5 % of the larger of the two) over the numbers the two strings
    hold: a float literal, else the first value ``math_verify.parse`` finds; a gold's leading "+" is dropped first
    (as MASLab does). Not numbers: wrong."""
    if pred is None or gold is None:
        return False
    values = []
    for s in (str(pred).strip(), str(gold).strip().lstrip("+")):
        try:
            values.append(float(s.replace(",", "")))
        except ValueError:
            values.append(_first_value(s))
    p, g = values
    return p is not None and g is not None and math.isfinite(p) and math.isclose(p, g, rel_tol=REL_TOL)
