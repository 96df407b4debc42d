"""Re-export for existing imports (scripts, plugins, notebooks): the verifier moved to
:mod:`corl_bench.grading.verifier` (issue 23), below evaluation, so the micro warm start and the method contract grade
with it without importing evaluation. New code imports from there."""

from __future__ import annotations

from corl_bench.grading.verifier import (NO_ANSWER, Vote, extract_answer, extract_normalized, grade, has_boxed,
                                         is_correct, is_equivalent, normalize_answer, percent_equivalent,
                                         plurality_vote)

__all__ = ["NO_ANSWER", "Vote", "extract_answer", "extract_normalized", "grade", "has_boxed", "is_correct",
           "is_equivalent", "normalize_answer", "percent_equivalent", "plurality_vote"]
