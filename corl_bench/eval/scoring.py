"""Extractors and graders named by benchmark specs: how a completion becomes an answer, and whether it is right.

Extractors (completion -> answer string or None):

    qwen       the Qwen2.5-Math chain of the training reward (minerva, last \\boxed, "the answer is", last number),
               Hendrycks-normalised — :func:`corl_bench.eval.verifier.extract_normalized`
    boxed      only the last \\boxed{...} (the paper's MATH-500/AMC evaluation); None without one
    flexible   lm-eval GSM8K ``flexible-extract``: the last number in the text ($ and thousands commas dropped)
    letter     the last \\boxed{A-J} letter, else "answer is (X)" / "answer: X" (GPQA, boxed protocol)
    code       the last fenced code block (```python ... ```), else the completion itself (a continuation)

Graders (answer, gold -> bool): ``math`` (:func:`corl_bench.eval.verifier.is_correct`: exact, numeric, then
math-verify, then the Qwen evaluation grader's percent rule), ``exact`` (string equality after stripping), ``letter`` (case-insensitive letter equality) and
``tests`` (code: the program must pass the benchmark's tests in the sandbox; graded by :mod:`corl_bench.eval.codeexec`,
not here).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from corl_bench.eval.verifier import _extract_boxed, extract_normalized, is_correct, normalize_answer

_NUMBER = re.compile(r"-?[$0-9.,]{2,}|-?[0-9]+")
_LETTER_BOX = re.compile(r"\\boxed\s*\{\s*(?:\\text\{)?\s*\(?([A-Ja-j])\)?\s*\}?\s*\}")
_LETTER_PHRASE = re.compile(r"answer\s*(?:is|:)\s*\(?([A-J])\)?(?![A-Za-z])", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:python|py|Python3?|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_boxed(text: str) -> Optional[str]:
    inner = _extract_boxed(text or "")
    return normalize_answer(inner) if inner is not None else None


def extract_flexible(text: str) -> Optional[str]:
    found = _NUMBER.findall(text or "")
    for raw in reversed(found):
        cleaned = raw.replace("$", "").replace(",", "").rstrip(".")
        if re.fullmatch(r"-?\d+(\.\d+)?", cleaned):
            return cleaned
    return None


def extract_letter(text: str) -> Optional[str]:
    text = text or ""
    boxed = _LETTER_BOX.findall(text)
    if boxed:
        return boxed[-1].upper()
    phrase = _LETTER_PHRASE.findall(text)
    return phrase[-1].upper() if phrase else None


def extract_code(text: str) -> Optional[str]:
    text = text or ""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    return text if text.strip() else None


EXTRACTORS: dict[str, Callable[[str], Optional[str]]] = {
    "qwen": extract_normalized, "boxed": extract_boxed, "flexible": extract_flexible, "letter": extract_letter,
    "code": extract_code,
}


def _exact(pred: Optional[str], gold: Optional[str]) -> bool:
    return pred is not None and gold is not None and pred.strip() == str(gold).strip()


def _letter(pred: Optional[str], gold: Optional[str]) -> bool:
    return pred is not None and gold is not None and pred.strip().upper() == str(gold).strip().upper()


def _tests(pred: Optional[str], gold: Optional[str]) -> bool:
    raise RuntimeError("code answers are graded by executing tests (corl_bench.eval.codeexec), not by string comparison")


GRADERS: dict[str, Callable[[Optional[str], Optional[str]], bool]] = {
    "math": is_correct, "exact": _exact, "letter": _letter, "tests": _tests,
}


def grade_text(completion: str, gold: str, extractor: str = "qwen", grader: str = "math") -> tuple[Optional[str], bool]:
    """(extracted answer, correct) of a non-code completion under a spec's extractor and grader."""
    answer = EXTRACTORS[extractor](completion or "")
    return answer, bool(answer is not None and GRADERS[grader](answer, gold))
