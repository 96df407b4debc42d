"""Pre-RL error-overlap probe (the paper's ``decPool`` / ``decAnchor`` tables): how differently two models fail.

Pure functions over per-problem outcomes ``(extracted answer, correct)`` of two models on the same problems:

* **kappa** - Cohen's kappa of the two right/wrong vectors: ``(p_o - p_e) / (1 - p_e)`` with ``p_o`` the share of
  problems where both are right or both wrong and ``p_e = p_A p_B + (1 - p_A)(1 - p_B)``. When ``p_e == 1`` (both
  models right on every problem, or both wrong on every problem) kappa is 0/0: it is reported as None with a reason.
* **c** (complementarity) - share of problems where exactly one model is right.
* **w** (wrong-agreement) - share of problems where both are wrong *with the same answer*; "same" is the benchmark's
  answer equivalence (:func:`corl_bench.grading.verifier.is_equivalent` for math, so ``0.5`` and ``1/2`` agree). A missing
  answer (None) never agrees with anything.
* **u** - the paper does not define u. Our reading: the share where **at least one** model is right (the union,
  ``1 - both wrong`` = pass@2 of the pair). This is the only reading consistent with the paper's own rows: for its
  seed-only pairs (equal accuracies by construction) kappa recomputed from c and u with u = union reproduces the
  printed kappa (Qwen2.5-3B x itself: c = 22.0, u = 62.6 -> kappa 0.56; Qwen2.5-7B: 19.0, 74.6 -> 0.58), while
  u = both-right gives 0.43 and 0.25. The both-right share is reported separately as ``both_right``.

All shares are fractions in [0, 1] (tables print percents, as the paper does). The paper's protocol is one sampled
completion per problem at T = 0.8; with ``k`` samples per problem, :func:`mean_overlap` averages the statistics of
the ``k`` paired draws (sample ``i`` of A against sample ``i`` of B). This module never imports torch.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from corl_bench.config import ConfigError
from corl_bench.grading.verifier import grade, is_equivalent

log = logging.getLogger(__name__)

Outcome = tuple[Optional[str], bool]
"""(extracted answer or None, correct) of one completion"""
Equivalence = Callable[[Optional[str], Optional[str]], bool]
RowGrader = Callable[[Mapping[str, Any]], Outcome]

#: What every statistic means (written into probe.json and probe.md).
DEFINITIONS: dict[str, str] = {
    "kappa": "Cohen's kappa of the two right/wrong vectors (None when both models are constant and equal)",
    "c": "complementarity: share of problems where exactly one model is right",
    "w": "wrong-agreement: share where both are wrong with equivalent answers (benchmark grader; no answer never "
         "agrees)",
    "u": "our reading (the paper does not define u): share where at least one model is right = 1 - both wrong; "
         "the only reading that reproduces the paper's kappa from its c and u on the seed-only rows",
    "both_right": "share where both models are right",
    "acc_a / acc_b": "accuracy of each model on the probed problems",
}


@dataclass(frozen=True)
class Overlap:
    """Error overlap of models A and B on ``n`` problems (shares are fractions in [0, 1])."""

    a: str
    b: str
    n: int
    acc_a: float
    acc_b: float
    kappa: float | None
    """Cohen's kappa on right/wrong; None when undefined (see ``kappa_note``)"""
    kappa_note: str | None
    c: float
    """exactly one right"""
    w: float | None
    """both wrong with equivalent answers (None when answers are not comparable, e.g. code)"""
    u: float
    """at least one right (our reading of the paper's u)"""
    both_right: float
    both_wrong: float
    draws: int = 1
    """paired draws averaged (1 = the paper's single sample)"""


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> tuple[float | None, str | None]:
    """Cohen's kappa of two equally long right/wrong vectors: ``(kappa, None)`` or ``(None, reason)``.

    Undefined (``None``) only when the chance agreement ``p_e`` is 1, i.e. both vectors are constant and equal
    (both always right, or both always wrong). One constant vector against a varying one gives 0.0 (agreement is
    exactly chance). ValueError on empty or unequal inputs.
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: vectors differ in length ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        raise ValueError("cohen_kappa: no problems")
    pa = sum(1 for x in a if x) / n
    pb = sum(1 for x in b if x) / n
    po = sum(1 for x, y in zip(a, b) if bool(x) == bool(y)) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    if pe >= 1.0 - 1e-12:
        which = "right" if pa == 1.0 else "wrong"
        return None, f"undefined: both models are {which} on all {n} problems (chance agreement is 1)"
    return (po - pe) / (1 - pe), None


def pair_overlap(correct_a: Sequence[bool], correct_b: Sequence[bool],
                 answers_a: Sequence[Optional[str]] | None = None, answers_b: Sequence[Optional[str]] | None = None,
                 *, equivalent: Equivalence | None = is_equivalent, a: str = "A", b: str = "B") -> Overlap:
    """kappa, c, w, u, both-right and accuracies of two models from per-problem correctness (same problem order).

    ``answers_*`` are the extracted answers (None = no answer); w is None when they, or ``equivalent``, are not
    given. ValueError on empty or unequal inputs.
    """
    n = len(correct_a)
    if n == 0:
        raise ValueError("pair_overlap: no problems")
    if len(correct_b) != n:
        raise ValueError(f"pair_overlap: {a} has {n} problems, {b} has {len(correct_b)}")
    if answers_a is not None and answers_b is not None and not (len(answers_a) == len(answers_b) == n):
        raise ValueError("pair_overlap: the answers must be as long as the correctness vectors")
    kappa, note = cohen_kappa(correct_a, correct_b)
    one = sum(1 for x, y in zip(correct_a, correct_b) if bool(x) != bool(y))
    both = sum(1 for x, y in zip(correct_a, correct_b) if x and y)
    neither = n - one - both
    w: float | None = None
    if answers_a is not None and answers_b is not None and equivalent is not None:
        same = sum(1 for x, y, ax, ay in zip(correct_a, correct_b, answers_a, answers_b)
                   if not x and not y and ax is not None and ay is not None and equivalent(ax, ay))
        w = same / n
    return Overlap(a=a, b=b, n=n, acc_a=sum(1 for x in correct_a if x) / n, acc_b=sum(1 for x in correct_b if x) / n,
                   kappa=kappa, kappa_note=note, c=one / n, w=w, u=(n - neither) / n, both_right=both / n,
                   both_wrong=neither / n)


def mean_overlap(draws: Sequence[Overlap]) -> Overlap:
    """The mean of several paired draws of the same pair on the same problems (kappa: mean of the defined ones)."""
    if not draws:
        raise ValueError("mean_overlap: no draws")
    if len(draws) == 1:
        return draws[0]
    first = draws[0]

    def mean(name: str) -> float:
        return sum(getattr(d, name) for d in draws) / len(draws)

    kappas = [d.kappa for d in draws if d.kappa is not None]
    if not kappas:
        kappa, note = None, first.kappa_note
    else:
        kappa = sum(kappas) / len(kappas)
        note = None if len(kappas) == len(draws) else f"mean over the {len(kappas)} of {len(draws)} draws where " \
                                                      "kappa is defined"
    ws = [d.w for d in draws]
    return Overlap(a=first.a, b=first.b, n=first.n, acc_a=mean("acc_a"), acc_b=mean("acc_b"), kappa=kappa,
                   kappa_note=note, c=mean("c"), w=None if any(x is None for x in ws) else mean("w"), u=mean("u"),
                   both_right=mean("both_right"), both_wrong=mean("both_wrong"), draws=len(draws))


def default_row_grader(row: Mapping[str, Any]) -> Outcome:
    """(extracted, correct) of a predictions row regraded from its completion by :func:`corl_bench.grading.verifier.grade`."""
    return grade(str(row.get("completion") or ""), str(row["gold"]))


def outcomes_from_rows(rows: Iterable[Mapping[str, Any]], *, decoding: str = "sampled", sample_index: int = 0,
                       grade_row: RowGrader | None = None, name: str = "predictions") -> dict[str, Outcome]:
    """problem id -> (extracted, correct) of the row with this decoding and sample index, regraded by
    ``grade_row`` (default :func:`corl_bench.grading.verifier.grade`; stored ``extracted`` / ``correct`` are not trusted).
    A problem with several such rows keeps the first. ConfigError if no row matches."""
    grader = grade_row or default_row_grader
    out: dict[str, Outcome] = {}
    for row in rows:
        if row.get("decoding") != decoding or int(row.get("sample_index", 0)) != sample_index:
            continue
        pid = str(row["problem_id"])
        if pid not in out:
            extracted, correct = grader(row)
            out[pid] = (extracted, bool(correct))
    if not out:
        raise ConfigError(f"{name}: no {decoding} rows with sample_index {sample_index}; "
                          + ("use --greedy for greedy-only predictions" if decoding == "sampled" else
                             "drop --greedy to use the sampled rows"))
    return out


def aligned(a: Mapping[str, Any], b: Mapping[str, Any], name_a: str = "A", name_b: str = "B") -> list[str]:
    """The problem ids both mappings hold, in A's order; ConfigError naming the mismatch if they differ."""
    only_a = [p for p in a if p not in b]
    only_b = [p for p in b if p not in a]
    if only_a or only_b:
        def some(ids: list[str]) -> str:
            return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        parts = ([f"{len(only_a)} only in {name_a} ({some(only_a)})"] if only_a else []) + \
                ([f"{len(only_b)} only in {name_b} ({some(only_b)})"] if only_b else [])
        raise ConfigError(f"{name_a} and {name_b} cover different problems: {'; '.join(parts)}; evaluate both on the "
                          "same problems (same benchmark version and --max-problems)")
    return list(a)


def overlap_of(a: Mapping[str, Outcome], b: Mapping[str, Outcome], *, name_a: str = "A", name_b: str = "B",
               equivalent: Equivalence | None = is_equivalent) -> Overlap:
    """:func:`pair_overlap` of two problem id -> outcome mappings, aligned by problem id."""
    ids = aligned(a, b, name_a, name_b)
    return pair_overlap([a[i][1] for i in ids], [b[i][1] for i in ids], [a[i][0] for i in ids],
                        [b[i][0] for i in ids], equivalent=equivalent, a=name_a, b=name_b)


def probe_pairs(models: Mapping[str, Sequence[Mapping[str, Outcome]]], *,
                equivalent: Equivalence | None = is_equivalent) -> list[Overlap]:
    """Every pair (in the given order) of ``label -> draws`` (one problem id -> outcome mapping per draw); draws are
    paired by position and averaged (:func:`mean_overlap`). All models need the same number of draws."""
    counts = {label: len(d) for label, d in models.items()}
    if len(set(counts.values())) > 1:
        raise ConfigError(f"models have different numbers of draws ({counts}); use the same --samples for all")
    pairs = []
    for (la, da), (lb, db) in itertools.combinations(models.items(), 2):
        pairs.append(mean_overlap([overlap_of(x, y, name_a=la, name_b=lb, equivalent=equivalent)
                                   for x, y in zip(da, db)]))
    return pairs


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percent string; "-" for None."""
    return "-" if x is None else f"{100 * x:.{digits}f}"


def markdown(pairs: Sequence[Overlap], header: str = "") -> str:
    """probe.md: the pair table (percents, like the paper) and the definitions."""
    lines = [header.rstrip(), ""] if header else []
    lines += ["| A | B | n | kappa | c | w | u | both right | acc A | acc B |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        kappa = "-" if p.kappa is None else f"{p.kappa:.2f}"
        lines.append(f"| {p.a} | {p.b} | {p.n} | {kappa} | {pct(p.c)} | {pct(p.w)} | {pct(p.u)} | "
                     f"{pct(p.both_right)} | {pct(p.acc_a)} | {pct(p.acc_b)} |")
    notes = [f"{p.a} x {p.b}: kappa {p.kappa_note}" for p in pairs if p.kappa_note]
    lines += [""] + [f"- **{k}**: {v}" for k, v in DEFINITIONS.items()] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
