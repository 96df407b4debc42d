"""Answer extraction, normalisation, equivalence and plurality voting for math completions (moved from
``corl_bench.eval.verifier``, issue 23; training, evaluation and the micro warm start all grade with it).

Extraction (:func:`extract_answer`) follows the Qwen2.5-Math parser used by the reference Co-RL
code and tries, in order:

1. the Minerva form ``final answer is $...$. I hope`` (the text between the dollars);
2. the content of the LAST ``\\boxed`` / ``\\fbox`` (brace-matched, nested braces allowed; ``\\boxed 9``
   without braces takes the next whitespace-delimited token);
3. the text after the last ``he answer is`` ("The answer is" / "the answer is"), up to the end of
   the sentence or line;
4. the text after the last ``final answer is``, same cut;
5. the text after the last ``答案是``, same cut (``。`` also ends the sentence);
6. otherwise the LAST number in the text (integer, decimal, negative, ``3/4``, ``1,000``).

A last ``\\boxed{`` whose braces never close (a truncated completion such as ``\\boxed{12``), or an
empty ``\\boxed{}``, is treated as absent: extraction falls through to steps 3-6, so ``\\boxed{12``
yields ``12`` by the last-number rule.  This never raises.

The "no answer" rule: a completion without ``\\boxed{}`` still gets an answer from the fallbacks
(ultimately the last number), so the only "no answer" (``None``) cases are an empty string and
text containing no number and no boxed/phrase answer.  A ``None`` answer never votes in
:func:`plurality_vote` and never earns reward 1 (:func:`is_equivalent` is False when either side is
``None``).

:func:`normalize_answer` is a Hendrycks-MATH style normaliser; :func:`is_equivalent` compares
normalised strings first, then numbers exactly (int / decimal / fraction), and only then falls back
to ``math_verify`` (imported lazily so that importing this module stays cheap).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

logger = logging.getLogger(__name__)

NO_ANSWER = None

__all__ = [
    "NO_ANSWER", "Vote", "extract_answer", "extract_normalized", "grade", "is_correct", "is_equivalent",
    "normalize_answer", "percent_equivalent", "plurality_vote", "harmonic_vote", "vote_margin",
]

# ----------------------------------------------------------------------------------------------
# Extraction
# ----------------------------------------------------------------------------------------------

_MINERVA_START = "final answer is $"
_MINERVA_END = "$. I hope"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_PHRASES = ("he answer is", "final answer is", "答案是")
# End of the phrase answer: newline, "。", a period followed by whitespace/end, or ", <word>".
_SENTENCE_END_RE = re.compile(r"\n|。|\.(?=\s|$)|,\s+(?=[A-Za-z]{2,}\b)")
# Numbers: optional sign (not after a word char or closing bracket, so "5-3" gives "3"),
# integers with optional thousands groups, decimals, ".5", and simple fractions "3/4".
_NUMBER_RE = re.compile(
    r"(?:(?<![\w)}\]])-)?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:/\d+(?:\.\d+)?)?"
)


def _match_braces(text: str, open_idx: int) -> Optional[str]:
    """Content between ``text[open_idx] == '{'`` and its matching ``}``; None if unbalanced."""
    depth = 0
    for i in range(open_idx, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_idx + 1 : i]
    return None


def _extract_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed``/``\\fbox``; None if absent, empty or unbalanced."""
    idx, cmd_len = -1, 0
    for cmd in _BOX_COMMANDS:
        pos = text.rfind(cmd)
        if pos > idx:
            idx, cmd_len = pos, len(cmd)
    if idx < 0:
        return None
    start = idx + cmd_len
    rest = text[start:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        content = _match_braces(text, start + (len(rest) - len(stripped)))
    elif rest[:1].isspace():  # "\boxed 9"
        tokens = stripped.split("$", 1)[0].split()
        content = tokens[0] if tokens else None
    else:  # "\boxedfoo": not a box command
        return None
    if content is None or not content.strip():
        return None
    return content.strip()


def has_boxed(text: str) -> bool:
    """True when ``text`` ends its working with a non-empty, balanced ``\\boxed{}``/``\\fbox{}`` answer."""
    return _extract_boxed(text) is not None


def _extract_after_phrase(text: str, phrase: str) -> Optional[str]:
    """Text after the last ``phrase`` up to the end of its sentence/line; None if absent/empty."""
    pos = text.rfind(phrase)
    if pos < 0:
        return None
    rest = text[pos + len(phrase) :].lstrip(" \t:：")
    match = _SENTENCE_END_RE.search(rest)
    if match is not None:
        rest = rest[: match.start()]
    rest = rest.strip()
    return rest or None


def extract_answer(text: str) -> Optional[str]:
    """Raw answer string extracted from a completion (before normalisation); None if nothing."""
    if not text:
        return NO_ANSWER
    text = str(text)
    # 1. Minerva format.
    end = text.rfind(_MINERVA_END)
    if end >= 0:
        start = text.rfind(_MINERVA_START, 0, end)
        if start >= 0:
            content = text[start + len(_MINERVA_START) : end].strip()
            if content:
                return content
    # 2. Last \boxed / \fbox.
    boxed = _extract_boxed(text)
    if boxed is not None:
        return boxed
    # 3-5. Answer phrases.
    for phrase in _PHRASES:
        found = _extract_after_phrase(text, phrase)
        if found is not None:
            return found
    # 6. Last number.
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return last.group(0) if last is not None else NO_ANSWER


# ----------------------------------------------------------------------------------------------
# Normalisation
# ----------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"-?\d+")
_PLAIN_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")  # already normal: skip the slow normaliser
_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|textrm|mbox|mathrm|mathbf)\s*\{([^{}]*)\}")
_TRAILING_TEXT_UNIT_RE = re.compile(r"^(.+?)\s*\\(?:text|mbox|mathrm)\s*\{\s*([A-Za-z][A-Za-z .]*)\}$")
_UNIT_WORDS = (
    "degrees?|deg|cm|mm|km|meters?|metres?|inch(?:es)?|feet|foot|ft|yards?|miles?|units?|square units|"
    "sq units|cubic units|dollars?|cents?|percent|hours?|hrs?|minutes?|mins?|seconds?|secs?|days?|"
    "weeks?|months?|years?|kg|grams?|pounds?|lbs?|liters?|litres?|mph|km/h|ways|people|students"
)
_TRAILING_WORD_UNIT_RE = re.compile(r"^(.*[\d}])\s+(?:" + _UNIT_WORDS + r")\.?$")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_ASSIGN_LHS_RE = re.compile(r"^(?:[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+)$")
_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SIMPLE_SLASH_RE = re.compile(r"^(-?)(\d+)/(\d+)$")
_SQRT_RE = re.compile(r"\\sqrt(\w)")
_CHOICE_RE = re.compile(r"^\(([A-Ea-e])\)$")
_TRAILING_JUNK_RE = re.compile(r"(?:\\\\|,|\.|\\)+$")


def _fix_fracs(string: str) -> str:
    """Hendrycks ``_fix_fracs``: ``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{2}`` -> ``\\frac{1}{2}``."""
    substrs = string.split("\\frac")
    new_str = substrs[0]
    for substr in substrs[1:]:
        new_str += "\\frac"
        if not substr or substr[0] == "{":
            new_str += substr
            continue
        if len(substr) < 2:
            return string
        a, b = substr[0], substr[1]
        if b != "{":
            new_str += "{" + a + "}{" + b + "}" + substr[2:]
        else:
            new_str += "{" + a + "}" + substr[1:]
    return new_str


def _normalize_slow(s: str) -> str:
    """Full Hendrycks/Qwen-style normalisation of a non-trivial answer string."""
    s = s.replace("\n", " ").strip()
    # Enclosing math delimiters.
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            s = s[len(left) : len(s) - len(right)].strip()
    s = s.rstrip(".").strip()
    for spacing in ("\\!", "\\,", "\\;", "\\:", "\\ ", "~", "\\displaystyle"):
        s = s.replace(spacing, " " if spacing in ("\\ ", "~") else "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = _LEFT_RIGHT_RE.sub("", s)
    # Degrees and units.
    for deg in ("^{\\circ}", "^\\circ", "^{\\circ }", "°"):
        s = s.replace(deg, "")
    match = _TRAILING_TEXT_UNIT_RE.match(s)
    if match is not None and match.group(1).strip():
        s = match.group(1).strip()
    match = _TRAILING_WORD_UNIT_RE.match(s)
    if match is not None:
        s = match.group(1).strip()
    # Currency / percent / remaining dollars.
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\%", "").replace("%", "")
    # Unwrap \text{...} (repeat for nesting such as \textbf{\text{A}}).
    for _ in range(3):
        new = _TEXT_WRAP_RE.sub(r"\1", s)
        if new == s:
            break
        s = new
    s = s.strip()
    choice = _CHOICE_RE.match(s.replace(" ", ""))
    if choice is not None:
        return choice.group(1).upper()
    # Leading single-variable assignment "x = 5", "\theta = 3".
    parts = s.split("=")
    if len(parts) == 2 and _ASSIGN_LHS_RE.match(parts[0].strip()) and parts[1].strip():
        s = parts[1].strip()
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    elif s.startswith("-."):
        s = "-0" + s[1:]
    s = _SQRT_RE.sub(r"\\sqrt{\1}", s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    match = _SIMPLE_SLASH_RE.match(s)
    if match is not None:
        s = f"{match.group(1)}\\frac{{{match.group(2)}}}{{{match.group(3)}}}"
    s = _TRAILING_JUNK_RE.sub("", s)
    if s.startswith("+") and len(s) > 1:
        s = s[1:]
    return s


@functools.lru_cache(maxsize=1 << 16)
def _normalize_cached(answer: str) -> Optional[str]:
    s = answer.strip()
    if not s:
        return NO_ANSWER
    if _PLAIN_NUMBER_RE.fullmatch(s):
        return s
    return _normalize_slow(s) or NO_ANSWER


def normalize_answer(answer: Optional[str]) -> Optional[str]:
    """Hendrycks-MATH style normalisation; None or an empty result gives None."""
    if answer is None:
        return NO_ANSWER
    return _normalize_cached(str(answer))


def extract_normalized(text: str) -> Optional[str]:
    """``normalize_answer(extract_answer(text))``."""
    return normalize_answer(extract_answer(text))


# ----------------------------------------------------------------------------------------------
# Equivalence
# ----------------------------------------------------------------------------------------------

_DECIMAL_RE = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_SLASH_NUM_RE = re.compile(r"([+-]?\d+)/(\d+)")
_FRAC_NUM_RE = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}")
_REL_TOL = 1e-9


def _as_number(s: str) -> Optional[int | float | Fraction]:
    """Value of an int / decimal / ``a/b`` / ``\\frac{a}{b}`` string (int, float, Fraction), else None."""
    try:
        if _INT_RE.fullmatch(s):
            return int(s)
        if _DECIMAL_RE.fullmatch(s):
            return float(s)
        match = _SLASH_NUM_RE.fullmatch(s)
        if match is not None and int(match.group(2)) != 0:
            return Fraction(int(match.group(1)), int(match.group(2)))
        match = _FRAC_NUM_RE.fullmatch(s)
        if match is not None and int(match.group(3)) != 0:
            value = Fraction(int(match.group(2)), int(match.group(3)))
            return -value if match.group(1) else value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _int_equal(a: str, b: str) -> bool:
    """Equality of two integer strings; beyond Python's int-conversion digit limit, by canonical digits."""
    try:
        return int(a) == int(b)
    except ValueError:
        def canon(x: str) -> str:
            sign, digits = ("-", x[1:]) if x.startswith("-") else ("", x.lstrip("+"))
            digits = digits.lstrip("0") or "0"
            return digits if digits == "0" else sign + digits
        return canon(a) == canon(b)


def _numbers_close(a: int | float | Fraction, b: int | float | Fraction) -> bool:
    """Exact for two integers, otherwise equal within a 1e-9 relative tolerance."""
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    try:
        return math.isclose(float(a), float(b), rel_tol=_REL_TOL, abs_tol=0.0)
    except OverflowError:
        return False


def _math_verify_equal(pred: str, gold: str) -> bool:
    """Slow path: ``verify(parse('$gold$'), parse('$pred$'))``; any exception gives False."""
    try:
        from math_verify import parse, verify  # lazy: heavy import (sympy, latex2sympy2)

        in_main = threading.current_thread() is threading.main_thread()
        parse_timeout = 5 if in_main else None
        verify_timeout = 5 if in_main else None
        gold_parsed = parse(f"${gold}$", parsing_timeout=parse_timeout)
        pred_parsed = parse(f"${pred}$", parsing_timeout=parse_timeout)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=verify_timeout))
    except Exception as exc:  # noqa: BLE001 - math_verify may raise anything (sympy, timeouts)
        logger.debug("math_verify failed on pred=%r gold=%r: %s", pred, gold, exc)
        return False


@functools.lru_cache(maxsize=1 << 18)
def is_equivalent(pred: Optional[str], gold: Optional[str]) -> bool:
    """Whether ``pred`` and ``gold`` (normalised answers, or raw gold strings) are equivalent.

    False if either is None.  Fast path: equal strings / equal normalised strings -> True; both
    numbers (int / decimal / fraction) -> numeric compare (exact for two integers, else 1e-9
    relative tolerance), never reaching math_verify.  Otherwise ``math_verify``
    (``verify(parse('$'+gold+'$'), parse('$'+pred+'$'))``), with its ``signal.alarm`` timeouts
    disabled outside the main thread; any exception -> False.  Results are cached with
    ``functools.lru_cache`` (inputs are strings).
    """
    if pred is None or gold is None:
        return False
    pred, gold = str(pred), str(gold)
    if pred == gold:
        return True
    if _INT_RE.fullmatch(pred) and _INT_RE.fullmatch(gold):  # hot path: short integer answers
        return _int_equal(pred, gold)
    if _PLAIN_NUMBER_RE.fullmatch(pred) and _PLAIN_NUMBER_RE.fullmatch(gold):  # plain decimals
        return _numbers_close(float(pred), float(gold))
    p, g = _normalize_cached(pred), _normalize_cached(gold)
    if p is None or g is None:
        return False
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is not None and gn is not None:
        return _numbers_close(pn, gn)
    return _math_verify_equal(p, g)


def percent_equivalent(pred: Optional[str], gold: Optional[str]) -> bool:
    """The Qwen2.5-Math evaluation grader's percent rule (``math_equal(..., include_percentage=True)``).

    A numeric prediction p is also right when it equals gold/100 or gold x 100, so ``5\\%`` (normalised to
    ``5``) matches a gold ``0.05`` and ``0.05`` matches a gold ``5\\%``. The normaliser strips ``%`` / ``\\%``
    before this sees either side, so the sign is not required (as in Qwen's grader). One deviation: when both
    sides are integers the rule is not applied (Qwen's would accept ``500`` for a gold ``5``); an integer answer
    off by a factor of 100 is a wrong answer, and this keeps every integer-answer grade unchanged. Values are
    compared like :func:`is_equivalent` (1e-9 relative tolerance; Qwen: 1e-4).
    """
    if pred is None or gold is None:
        return False
    p, g = _normalize_cached(str(pred)), _normalize_cached(str(gold))
    if p is None or g is None:
        return False
    pn, gn = _as_number(p), _as_number(g)
    if pn is None or gn is None or (isinstance(pn, int) and isinstance(gn, int)):
        return False
    scaled = (Fraction(gn) / 100, Fraction(gn) * 100) if not isinstance(gn, float) else (gn / 100, gn * 100)
    return any(_numbers_close(pn, s) for s in scaled)


def is_correct(pred: Optional[str], gold: Optional[str]) -> bool:
    """Evaluation grading of a normalised answer against a gold answer: :func:`is_equivalent`, then the Qwen
    evaluation grader's percent rule (:func:`percent_equivalent`). Training rewards use :func:`is_equivalent`
    alone, like the reference code's prm800k-style reward grader, which has no percent rule."""
    return is_equivalent(pred, gold) or percent_equivalent(pred, gold)


# ----------------------------------------------------------------------------------------------
# Voting and grading
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vote:
    """Result of a plurality vote over a group of answers."""

    label: Optional[str]  # the plurality answer, None if no valid answer (or below threshold)
    count: int  # votes for label (0 when label is None)
    n_valid: int  # number of non-None answers
    n_total: int  # number of answers including None

    @property
    def ratio(self) -> float:
        """``count / n_total`` (TTRL's majority_ratio); 0.0 if ``n_total == 0``."""
        return self.count / self.n_total if self.n_total else 0.0


def plurality_vote(answers: Sequence[Optional[str]], threshold: float = 0.0,
                   margin: Optional[float] = None) -> Vote:
    """Plurality vote by exact string equality over the non-None answers.

    Ties go to the answer seen first in input order (``Counter.most_common`` is stable).  If the
    winner's share of the valid answers ``count / n_valid`` is below ``threshold``, or (``margin``
    given) its lead over the second answer (:func:`vote_margin`) is not above ``margin``, the label is
    None and the count 0; ``n_valid`` and ``n_total`` are always reported.
    """
    n_total = len(answers)
    valid = [a for a in answers if a is not None]
    n_valid = len(valid)
    if not valid:
        return Vote(label=None, count=0, n_valid=0, n_total=n_total)
    label, count = Counter(valid).most_common(1)[0]
    if count / n_valid < threshold or (margin is not None and vote_margin(answers) <= margin):
        return Vote(label=None, count=0, n_valid=n_valid, n_total=n_total)
    return Vote(label=label, count=count, n_valid=n_valid, n_total=n_total)


def vote_margin(answers: Sequence[Optional[str]]) -> float:
    """The top answer's share minus the second answer's, both over **all** answers (``None`` included in the
    denominator, as SCRL's ``determine_pseudo_labels`` counts them); answers grouped by exact string as
    :func:`plurality_vote`. A single distinct answer has margin = its share; no answer, 0.0.

    SCRL's selective positive (arXiv 2603.19880) labels a prompt only when the top share is >= 0.5 and this margin
    is > 0.15: "no label when no answer has a clear majority"."""
    if not answers:
        return 0.0
    counts = [c for _, c in Counter(a for a in answers if a is not None).most_common(2)]
    if not counts:
        return 0.0
    return (counts[0] - (counts[1] if len(counts) > 1 else 0)) / len(answers)


def harmonic_vote(anchor: Sequence[Optional[str]], explorer: Sequence[Optional[str]]) -> Optional[str]:
    """Dual consensus (DCRL, arXiv 2603.16223; v0yager33/DualConsensus ``dcrl_utils.py::_harmonic_vote``): the
    answer with the largest harmonic mean ``2 p0 p1 / (p0 + p1)`` of its shares in the two pools, each share over
    **all** of its pool's answers (``None`` in the denominator); only answers present in both pools compete. None
    when no answer is in both (the caller's fallback: DCRL takes the anchor pool's plurality). Ties go to the answer
    the anchor pool names first in :func:`plurality_vote` order (the release breaks them by set order)."""
    if not anchor or not explorer:
        return None
    c0, c1 = Counter(a for a in anchor if a is not None), Counter(a for a in explorer if a is not None)
    best, best_hm = None, 0.0
    for a, n0 in c0.most_common():
        if c1[a]:
            p0, p1 = n0 / len(anchor), c1[a] / len(explorer)
            hm = 2 * p0 * p1 / (p0 + p1)
            if hm > best_hm:
                best, best_hm = a, hm
    return best


def grade(completion: str, gold: str) -> tuple[Optional[str], bool]:
    """Extract and normalise the completion's answer and grade it against ``gold`` (:func:`is_correct`)."""
    pred = extract_normalized(completion)
    return pred, is_correct(pred, gold)
