"""scripts/methods_matrix.py's verdict: the paired change of per-problem sampled pass@1 between two phases."""

from __future__ import annotations

import pytest

from tests.conftest import load_script


def rows(hits: dict[str, list[bool]]) -> list[dict]:
    return [{"problem_id": pid, "decoding": "sampled", "completion": f"\\boxed{{{1 if h else 0}}}", "gold": "1"}
            for pid, hs in hits.items() for h in hs] + [
        {"problem_id": "p0", "decoding": "greedy", "completion": "\\boxed{0}", "gold": "1"}]  # greedy rows ignored


def test_paired_verdict_gain_loss_and_inconclusive():
    mm = load_script("methods_matrix")
    base = rows({f"p{i}": [False, False] for i in range(20)})
    gain = rows({f"p{i}": [True, i % 2 == 0] for i in range(20)})  # +0.75 on average, sd 0.26
    change, verdict = mm.paired_verdict(base, gain)
    assert change == pytest.approx(0.75) and verdict == "gain"
    assert mm.paired_verdict(gain, base) == (pytest.approx(-0.75), "loss")
    mixed = rows({f"p{i}": [i % 2 == 0, i % 2 == 0] for i in range(20)})  # +1 on half, 0 on the other half
    one_up = rows({f"p{i}": [i == 0, False] for i in range(20)})  # +0.5 on one problem: inside the interval
    assert mm.paired_verdict(base, mixed)[1] == "gain"
    assert mm.paired_verdict(base, one_up) == (pytest.approx(0.025), "inconclusive")
    assert mm.paired_verdict(base, rows({"q": [True]})) == (None, "–")  # no problem in common
