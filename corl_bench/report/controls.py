"""Test-time controls: is a trained pair better than simply pooling two models at test time?

The paper's ``ensLLM`` control (maj@8 at T = 0.6, the ensemble pooling 4 rollouts from each of the two models):
:func:`ensemble_majority` votes, per problem, over the first ``per_model`` sampled completions of each model (by
``sample_index``) and grades the plurality answer exactly as :func:`corl_bench.eval.metrics.maj_at_k` does (votes by
exact normalised-string equality, no-answer samples do not vote, ties go to the answer seen first). The pool is A's
samples followed by B's, so an exact tie between an answer of A and one of B goes to A; the number of tied pools is
reported (``ties``). For reference it also reports each model's own maj@(2 * per_model) over its own first
2 * per_model samples. Never imports torch.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from corl_bench.config import ConfigError
from corl_bench.eval.metrics import avg_at_k, maj_at_k
from corl_bench.report.overlap import RowGrader, aligned, default_row_grader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnsembleScores:
    """maj@k of a two-model pool and of each model alone (fractions in [0, 1]; k = 2 * per_model)."""

    a: str
    b: str
    n_problems: int
    per_model: int
    k: int
    ensemble_maj: float
    """maj@k of the pool: the first ``per_model`` samples of A then of B"""
    maj_a: float
    """A's own maj@k over its first k samples"""
    maj_b: float
    avg_a: float
    """A's avg@k over its first k samples (for reference)"""
    avg_b: float
    ties: int
    """problems whose pooled plurality was a tie (decided by pool order, i.e. for A)"""


def _samples(rows: Iterable[Mapping[str, Any]], grade_row: RowGrader, name: str
             ) -> tuple[dict[str, list[tuple[Optional[str], bool]]], dict[str, str]]:
    """problem id -> [(extracted, correct)] of the sampled rows in sample_index order, and problem id -> gold."""
    by_pid: dict[str, list[tuple[int, tuple[Optional[str], bool]]]] = {}
    gold: dict[str, str] = {}
    for row in rows:
        if row.get("decoding") != "sampled":
            continue
        pid = str(row["problem_id"])
        gold.setdefault(pid, str(row["gold"]))
        extracted, correct = grade_row(row)
        by_pid.setdefault(pid, []).append((int(row.get("sample_index", 0)), (extracted, bool(correct))))
    if not by_pid:
        raise ConfigError(f"{name}: no sampled rows; the ensemble control needs sampled completions")
    return {pid: [o for _, o in sorted(v, key=lambda t: t[0])] for pid, v in by_pid.items()}, gold


def _tied(answers: list[Optional[str]]) -> bool:
    counts = Counter(a for a in answers if a is not None).most_common(2)
    return len(counts) == 2 and counts[0][1] == counts[1][1]


def ensemble_majority(rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]], per_model: int = 4,
                      *, grade_row: RowGrader | None = None, a: str = "A", b: str = "B") -> EnsembleScores:
    """maj@(2 * per_model) of the pooled first ``per_model`` samples of A and B, and each model's own.

    Rows are predictions rows (``problem_id``, ``decoding``, ``sample_index``, ``completion``, ``gold``); only
    ``sampled`` rows count and they are regraded by ``grade_row`` (default :func:`corl_bench.grading.verifier.grade`).
    ConfigError (one line) when the two cover different problems, disagree on a gold answer, or a model has fewer
    than 2 * per_model samples of a problem.
    """
    if per_model < 1:
        raise ConfigError(f"--per-model must be >= 1 (got {per_model})")
    grader = grade_row or default_row_grader
    sa, gold_a = _samples(rows_a, grader, a)
    sb, gold_b = _samples(rows_b, grader, b)
    ids = aligned(sa, sb, a, b)
    k = 2 * per_model
    pooled, own_a, own_b, avg_a, avg_b, ties = [], [], [], [], [], 0
    for pid in ids:
        if gold_a[pid] != gold_b[pid]:
            raise ConfigError(f"{pid}: {a} has gold {gold_a[pid]!r}, {b} has {gold_b[pid]!r}; compare predictions "
                              "of the same benchmark version")
        for name, samples in ((a, sa[pid]), (b, sb[pid])):
            if len(samples) < k:
                raise ConfigError(f"{name} has {len(samples)} sampled completions of {pid}; --per-model {per_model} "
                                  f"needs {k} per model (lower --per-model or evaluate with more samples)")
        pool = [x for x, _ in sa[pid][:per_model]] + [x for x, _ in sb[pid][:per_model]]
        ties += _tied(pool)
        pooled.append(maj_at_k(pool, gold_a[pid]))
        own_a.append(maj_at_k([x for x, _ in sa[pid][:k]], gold_a[pid]))
        own_b.append(maj_at_k([x for x, _ in sb[pid][:k]], gold_a[pid]))
        avg_a.append(avg_at_k([c for _, c in sa[pid][:k]]))
        avg_b.append(avg_at_k([c for _, c in sb[pid][:k]]))
    n = len(ids)
    return EnsembleScores(a=a, b=b, n_problems=n, per_model=per_model, k=k, ensemble_maj=sum(pooled) / n,
                          maj_a=sum(own_a) / n, maj_b=sum(own_b) / n, avg_a=sum(avg_a) / n, avg_b=sum(avg_b) / n,
                          ties=ties)
