"""Extractors and graders named by benchmark specs: how a completion becomes an answer, and whether it is right.

Extractors (completion -> answer string or None):

    qwen       the Qwen2.5-Math chain of the training reward (minerva, last \\boxed, "the answer is", last number),
               Hendrycks-normalised — :func:`corl_bench.grading.verifier.extract_normalized`
    boxed      only the last \\boxed{...} (the paper's MATH-500/AMC evaluation); None without one
    flexible   lm-eval GSM8K ``flexible-extract``: the last number in the text ($ and thousands commas dropped)
    letter     the last \\boxed{A-J} letter, else "answer is (X)" / "answer: X" (GPQA, boxed protocol)
    first_letter
               the first option letter A-D written as a word of its own ("(B)", "B)", "B.", "B"), the answer of a base
               model asked ``...Answer:`` (GPQA native completion prompt, :mod:`corl_bench.eval.native`)
    code       the last fenced code block (```python ... ```), else the completion itself (a continuation)
    answer_tag the content of the LAST complete ``<answer>...</answer>`` tag (case-insensitive, spanning lines), the
               paper's VLM answer format (R1-V; ``mllm/trainers/verifiers/math_verify_wrapper.py::extract_answer_tag``);
               NO fallback: without a tag (or with an empty one) the answer is None. A content that is exactly one
               ``\\boxed{...}`` is unwrapped; the result is Hendrycks-normalised like ``boxed``'s
    boxed_abcd the letter of the last ``\\boxed{X}``, X in A-D (case-insensitive), nothing else: CoMAS's (MASLab's)
               MMLU/GPQA extraction (:mod:`corl_bench.eval.science`)
    math_verify_number
               the first value ``math_verify.parse`` finds in the completion, as a float: CoMAS's SciBench extraction

Graders (answer, gold -> bool): ``math`` (:func:`corl_bench.grading.verifier.is_correct`: exact, numeric, then
math-verify, then the Qwen evaluation grader's percent rule), ``exact`` (string equality after stripping), ``letter`` (case-insensitive letter equality),
``rel_tol_5pct`` (numbers within 5 % of each other: SciBench, :mod:`corl_bench.eval.science`),
``tests`` (code: the program must pass the benchmark's tests in the sandbox; graded by :mod:`corl_bench.eval.codeexec`,
not here) and ``mc_letter_or_value`` (the multimodal benchmarks' multiple-choice fix, :func:`mc_letter_or_value`: it
also receives the item's option texts, ``choices``, which prediction rows store so that ``corl-bench table`` re-grades
them; graders in :data:`USES_CHOICES`, or with an attribute ``uses_choices = True``, get them from :func:`grade_text`).

Both are :class:`corl_bench.registries.Registry` objects (:data:`~corl_bench.registries.EXTRACTORS`,
:data:`~corl_bench.registries.GRADERS`): the built-ins above are registered lazily by name, and a package adds its own
through the entry-point groups ``corl_bench.extractors`` / ``corl_bench.graders``::

    [project.entry-points."corl_bench.graders"]
    my_grader = "my_pkg.grading:my_grader"      # (answer, gold) -> bool

Look one up with ``EXTRACTORS.get(name)``; an unknown name is the registry's one-line error (valid names, a "did
you mean").
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from corl_bench.grading.verifier import _extract_boxed, is_correct, normalize_answer
from corl_bench.registries import EXTRACTORS, GRADERS

__all__ = ["LETTERS", "USES_CHOICES", "answer_tag_content", "extract_answer_tag", "extract_boxed", "extract_code",
           "extract_first_letter", "extract_flexible", "extract_letter", "gold_index", "grade_text",
           "mc_letter_or_value", "option_letter"]

_NUMBER = re.compile(r"-?[$0-9.,]{2,}|-?[0-9]+")
_LETTER_BOX = re.compile(r"\\boxed\s*\{\s*(?:\\text\{)?\s*\(?([A-Ja-j])\)?\s*\}?\s*\}")
_LETTER_PHRASE = re.compile(r"answer\s*(?:is|:)\s*\(?([A-J])\)?(?![A-Za-z])", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
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


_FIRST_LETTER = re.compile(r"(?<![A-Za-z])\(?([A-D])(?:\)|\.|:|(?![A-Za-z']))")


def extract_first_letter(text: str) -> Optional[str]:
    found = _FIRST_LETTER.search(text or "")
    return found.group(1) if found else None


def extract_code(text: str) -> Optional[str]:
    text = text or ""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    return text if text.strip() else None


def answer_tag_content(text: str) -> Optional[str]:
    """The raw (stripped) content of the last complete ``<answer>...</answer>`` tag; None without one."""
    found = _ANSWER_TAG.findall(text or "")
    return found[-1].strip() if found else None


def extract_answer_tag(text: str) -> Optional[str]:
    """The content of the last complete ``<answer>...</answer>`` tag, normalised; None without one (no fallback)."""
    content = answer_tag_content(text)
    if content is None:
        return None
    inner = _extract_boxed(content) if content.startswith(("\\boxed", "\\fbox")) else None
    if inner is not None and content.endswith("}") and content.count("\\boxed") + content.count("\\fbox") == 1:
        content = inner
    return normalize_answer(content) if content else None




def _exact(pred: Optional[str], gold: Optional[str]) -> bool:
    return pred is not None and gold is not None and pred.strip() == str(gold).strip()


def _letter(pred: Optional[str], gold: Optional[str]) -> bool:
    return pred is not None and gold is not None and pred.strip().upper() == str(gold).strip().upper()


def _tests(pred: Optional[str], gold: Optional[str]) -> bool:
    raise RuntimeError("code answers are graded by executing tests (corl_bench.eval.codeexec), not by string comparison")


LETTERS = "ABCDEFGHIJ"
# "B", "(B)", "B.", "B:", "B)", "B: text", "(B) text" (spaces are already gone after normalisation: "B:60").
_MC_LETTER = re.compile(r"^\(?([A-J])\)?(?:[.:)]|$)")
_MC_SPACE = re.compile(r"\s+")


def option_letter(answer: Optional[str], n_options: int = len(LETTERS)) -> Optional[str]:
    """The option letter an answer names ("B", "(B)", "B.", "B: text", "\\text{(B)}" ...), or None when it names
    none (or a letter beyond the ``n_options`` options). Only capital letters count: a lone "b" may be a value."""
    if answer is None:
        return None
    s = normalize_answer(answer)
    if s is None:
        return None
    m = _MC_LETTER.match(s)
    if m is None or LETTERS.index(m.group(1)) >= n_options:
        return None
    return m.group(1)


def _same_text(a: str, b: str) -> bool:
    return _MC_SPACE.sub(" ", a).strip().lower() == _MC_SPACE.sub(" ", b).strip().lower()


def gold_index(gold: Optional[str], choices: Optional[Sequence[str]]) -> Optional[int]:
    """Which option is right: the gold letter's position ("B", also "(B)" as 4 MathVerse golds are written), else (a
    gold written as an option's text: MathVista, 4 MathVerse items) the option whose text equals it; None when
    neither (e.g. MathVerse's two "C\\nD" golds that name two options)."""
    if gold is None or not choices:
        return None
    g = str(gold).strip()
    if len(g) == 1 and g.upper() in LETTERS[:len(choices)]:
        return LETTERS.index(g.upper())
    letter = option_letter(g, len(choices))
    if letter is not None and len(g) <= 4:  # "(B)", "B.", "B:" — not an option text that starts with a letter
        return LETTERS.index(letter)
    for i, c in enumerate(choices):
        if _same_text(str(c), g):
            return i
    return None


def mc_letter_or_value(pred: Optional[str], gold: Optional[str], choices: Optional[Sequence[str]] = None) -> bool:
    """The paper's multiple-choice letter-or-value fix (``mllm/eval/grade.py``): an answer to a multiple-choice item
    is right when it names the gold option's letter ("B", "(B)", "B.", "B: text") or equals the gold option's text or
    value (string equality ignoring case and spacing, else :func:`corl_bench.grading.verifier.is_correct`: numbers,
    LaTeX, math-verify). An answer that names a letter is judged by the letter alone ("B: 60" with gold C is wrong
    even when C's text is 60). Without options (a free-form item) it is the ``math`` grader; with options whose gold
    is neither a letter nor an option text, the answer must equal the gold (``math``) or name a letter equal to it."""
    if pred is None or gold is None:
        return False
    gold = str(gold).strip()
    if not choices:
        letter = option_letter(pred)
        if letter is not None and len(gold) == 1 and gold.upper() in LETTERS:
            return letter == gold.upper()
        return is_correct(pred, gold)
    choices = [str(c) for c in choices]
    idx = gold_index(gold, choices)
    letter = option_letter(pred, len(choices))
    if letter is not None:
        return idx is not None and LETTERS.index(letter) == idx
    if idx is None:
        return is_correct(pred, gold)
    value = choices[idx].strip()
    return _same_text(pred, value) or is_correct(pred, value)


USES_CHOICES = frozenset({"mc_letter_or_value"})
"""Graders called with the item's options as a third argument (``choices``; None for a free-form item); a plugin
grader asks for them with an attribute ``uses_choices = True``."""


def grade_text(completion: str, gold: str, extractor: str = "qwen", grader: str = "math",
               choices: Optional[Sequence[str]] = None) -> tuple[Optional[str], bool]:
    """(extracted answer, correct) of a non-code completion under a spec's extractor and grader; ``choices`` (the
    item's option texts, in letter order) reach the graders of :data:`USES_CHOICES` and are ignored by the others."""
    answer = EXTRACTORS.get(extractor)(completion or "")
    if answer is None:
        return None, False
    grade = GRADERS.get(grader)
    if grader in USES_CHOICES or getattr(grade, "uses_choices", False):
        return answer, bool(grade(answer, gold, list(choices) if choices else None))
    return answer, bool(grade(answer, gold))
