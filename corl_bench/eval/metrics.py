"""Evaluation metrics for math benchmarks: pass@k, avg@k, maj@k, bootstrap CIs, per-benchmark scores.

Definitions (``k`` = sampled completions per problem):

* **greedy** - greedy pass@1: share of problems whose greedy completion is correct.
* **avg@k** ("sampled pass@1") - per problem, the share of its ``k`` samples that are correct;
  averaged over problems.
* **maj@k** - per problem, the plurality answer of its ``k`` samples (ties go to the answer seen
  first; samples without an answer do not vote) graded against the gold answer; averaged.
* **pass@k** - the unbiased Codex estimator ``1 - C(n-c, k) / C(n, k)`` from ``n`` samples of which
  ``c`` are correct, evaluated in the numerically stable product form.
* **standard error** (per metric, :meth:`BenchmarkScores.standard_errors`) - the evaluation's: sample sd of the
  per-problem scores over sqrt(problems), the sampling error of the benchmark mean (not the spread over seeds).

:func:`score_predictions` regrades every predictions row from its ``completion`` and ``gold`` with
:func:`corl_bench.grading.verifier.grade`; the stored ``extracted`` / ``correct`` fields are never trusted,
so a verifier fix re-scores old predictions.  This module never imports torch.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from corl_bench.grading.verifier import grade, is_correct, plurality_vote

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS", "BenchmarkScores", "avg_at_k", "bootstrap_ci", "maj_at_k", "pass_at_k",
    "score_predictions", "standard_error",
]

#: Every metric name :class:`BenchmarkScores` reports (the keys of :meth:`BenchmarkScores.metrics`).
METRICS: tuple[str, ...] = ("greedy", "avg_k", "maj_k", "pass_k", "extraction_failure", "clipped")

#: Predictions-row keys :func:`score_predictions` requires (``finished`` is optional, default True).
REQUIRED_ROW_KEYS: tuple[str, ...] = ("problem_id", "decoding", "completion", "gold")
DECODINGS: tuple[str, ...] = ("greedy", "sampled")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021).

    ``n`` samples, ``c`` of them correct, ``k`` the budget.  Computed as
    ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which never forms a large binomial; when fewer than ``k``
    samples are wrong (``n - c < k``) every ``k``-subset holds a correct one and the result is 1.0.
    Raises ValueError unless ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"pass_at_k: {name} must be an int (got {value!r})")
    if n < 1:
        raise ValueError(f"pass_at_k: n must be >= 1 (got n={n})")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: c must be in [0, n] (got c={c}, n={n})")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k must be in [1, n] (got k={k}, n={n})")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def avg_at_k(correct: Sequence[bool]) -> float:
    """Mean correctness over the ``k`` samples of one problem (avg@k); ValueError if empty."""
    if len(correct) == 0:
        raise ValueError("avg_at_k: no samples")
    return sum(1.0 for c in correct if c) / len(correct)


def maj_at_k(answers: Sequence[Optional[str]], gold: str) -> bool:
    """Whether the plurality answer of ``answers`` is equivalent to ``gold``.

    ``answers`` are normalised extracted answers (:func:`corl_bench.grading.verifier.extract_normalized`),
    None for "no answer".  Votes are by exact string equality via
    :func:`corl_bench.grading.verifier.plurality_vote` (None never votes, ties go to the first seen); the
    winner is graded with :func:`corl_bench.grading.verifier.is_correct`.  No valid answer -> False.
    """
    vote = plurality_vote(list(answers))
    if vote.label is None:
        return False
    return is_correct(vote.label, gold)


def bootstrap_ci(
    per_problem: Sequence[float], *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap ``(1 - alpha)`` confidence interval of the mean over problems.

    Resamples problems with replacement ``n_boot`` times using ``numpy.random.default_rng(seed)``,
    so the same inputs always give the same interval.  ValueError on empty input, ``n_boot < 1`` or
    ``alpha`` outside (0, 1).
    """
    values = np.asarray(list(per_problem), dtype=np.float64)
    if values.size == 0:
        raise ValueError("bootstrap_ci: no values")
    if n_boot < 1:
        raise ValueError(f"bootstrap_ci: n_boot must be >= 1 (got {n_boot})")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"bootstrap_ci: alpha must be in (0, 1) (got {alpha})")
    rng = np.random.default_rng(seed)
    n = values.size
    means = np.empty(n_boot, dtype=np.float64)
    chunk = max(1, (1 << 22) // n)  # bound the index matrix to ~4M entries
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


@dataclass(frozen=True)
class BenchmarkScores:
    """Scores of one agent on one benchmark (fractions in [0, 1]; None where not measured)."""

    n_problems: int
    greedy: float | None
    """mean greedy pass@1 over problems with a greedy row (None if there are no greedy rows)"""
    avg_k: float | None
    """sampled pass@1: mean over problems of avg@k"""
    maj_k: float | None
    """mean over problems of maj@k"""
    pass_k: float | None
    """mean over problems of the unbiased pass@n, n = that problem's sample count"""
    k: int
    """samples per problem (the minimum if problems differ; 0 if there are no sampled rows)"""
    extraction_failure: float
    """share of all rows (greedy + sampled) with no extracted answer"""
    clipped: float
    """share of all rows with ``finished == False`` (the completion hit the token cap)"""
    greedy_se: float | None = None
    """the evaluation's standard error of ``greedy``: sample sd over problems / sqrt(problems) (None below two)"""
    avg_k_se: float | None = None
    """the same for ``avg_k`` (over the problems' avg@k values)"""
    maj_k_se: float | None = None
    pass_k_se: float | None = None

    def metrics(self) -> dict[str, float | None]:
        """The metric values keyed by the names in :data:`METRICS`."""
        data = asdict(self)
        return {name: data[name] for name in METRICS}

    def standard_errors(self) -> dict[str, float | None]:
        """metric -> the evaluation's standard error over problems (greedy, avg_k, maj_k, pass_k; None where the
        metric has fewer than two problems)."""
        return {"greedy": self.greedy_se, "avg_k": self.avg_k_se, "maj_k": self.maj_k_se, "pass_k": self.pass_k_se}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def standard_error(values: Sequence[float]) -> float | None:
    """Sample sd (n - 1) of per-problem scores over sqrt(n): the evaluation's standard error of their mean (as
    lm-eval's ``stderr``); None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    return float(np.std(np.asarray(values, dtype=np.float64), ddof=1) / np.sqrt(n))


RowGrader = Callable[[Mapping[str, Any]], "tuple[Optional[str], bool]"]


def score_predictions(rows: Iterable[Mapping[str, Any]], grade_row: RowGrader | None = None) -> BenchmarkScores:
    """Score the predictions rows of one benchmark (one agent, one phase).

    Every row needs ``problem_id``, ``decoding`` (``"greedy"`` or ``"sampled"``), ``completion`` and
    ``gold``; ``finished`` is optional (absent counts as finished).  Correctness and the extracted
    answer are recomputed from the completion by ``grade_row`` (default: :func:`corl_bench.grading.verifier.grade`
    against ``gold``; :func:`corl_bench.eval.evaluator.row_grader` gives a benchmark spec's extractor and grader, and
    for code the stored execution result).  Rows are grouped by
    ``problem_id``; a problem with several greedy rows scores their mean.  Means are over the
    problems that have rows of the decoding in question.  Raises ValueError on a malformed row.
    """
    greedy: dict[str, list[bool]] = {}
    sampled: dict[str, list[tuple[Optional[str], bool]]] = {}
    gold_of: dict[str, str] = {}
    problems: dict[str, None] = {}
    n_rows = n_failed = n_clipped = 0
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"row {i}: expected an object, got {type(row).__name__}")
        missing = [key for key in REQUIRED_ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"row {i}: missing key(s) {', '.join(missing)}")
        pid, decoding = str(row["problem_id"]), row["decoding"]
        if decoding not in DECODINGS:
            raise ValueError(f"row {i}: decoding must be 'greedy' or 'sampled' (got {decoding!r})")
        gold = str(row["gold"])
        if gold_of.setdefault(pid, gold) != gold:
            logger.warning("problem %s has two gold answers (%r, %r); grading each row with its own",
                           pid, gold_of[pid], gold)
        if grade_row is not None:
            extracted, correct = grade_row(row)
        else:
            completion = row["completion"]
            extracted, correct = grade("" if completion is None else str(completion), gold)
        problems[pid] = None
        n_rows += 1
        n_failed += extracted is None
        n_clipped += row.get("finished", True) is False
        if decoding == "greedy":
            greedy.setdefault(pid, []).append(correct)
        else:
            sampled.setdefault(pid, []).append((extracted, correct))

    greedy_scores = [avg_at_k(flags) for flags in greedy.values()]
    avg_scores, maj_scores, pass_scores, ks = [], [], [], []
    for pid, samples in sampled.items():
        flags = [correct for _, correct in samples]
        n = len(flags)
        ks.append(n)
        avg_scores.append(avg_at_k(flags))
        maj_scores.append(1.0 if maj_at_k([answer for answer, _ in samples], gold_of[pid]) else 0.0)
        pass_scores.append(pass_at_k(n, sum(flags), n))
    if ks and min(ks) != max(ks):
        logger.warning("problems have different sample counts (%d..%d); k reported as %d",
                       min(ks), max(ks), min(ks))
    return BenchmarkScores(
        n_problems=len(problems),
        greedy=_mean(greedy_scores),
        avg_k=_mean(avg_scores),
        maj_k=_mean(maj_scores),
        pass_k=_mean(pass_scores),
        k=min(ks) if ks else 0,
        extraction_failure=n_failed / n_rows if n_rows else 0.0,
        clipped=n_clipped / n_rows if n_rows else 0.0,
        greedy_se=standard_error(greedy_scores),
        avg_k_se=standard_error(avg_scores),
        maj_k_se=standard_error(maj_scores),
        pass_k_se=standard_error(pass_scores),
    )
