"""The real study's audit (scripts/realstudy_audit.py, scripts/alarm_record.py, scripts/collapse_check.py): the
first-committed-answer extractor, the alarm's precision / recall, per-agent claim cells, and the same-family
per-agent figures recomputed from the committed cells (skipped where a clone has no results/real-study/sweep)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import realstudy_audit as audit  # noqa: E402
from collapse_check import confusion, truth_of  # noqa: E402


@pytest.mark.parametrize("text, answer", [
    ("1 + 1 = 2\n\nThis is a fundamental concept with 3 parts", "2"),
    (" 6 + 9 = 7. The answer is 7.\n", "7"),
    ("The answer to this classic math problem is 5.\n\nIn mathematics, the concept of 4 + 1 is", "5"),
    ("14 - 3 is 11.", "11"),
    ("The answer is: $42$ and later 7", "42"),
    ("so we get \\boxed{1,200} = 1200", "1200"),
    ("Twelve equals 12, not 13", "12"),
    ("To add 7 and 2, you simply add them together: 7 + 2 = 9.", "9"),
    ("The result is -4", "-4"),
])
def test_first_committed_answer(text: str, answer: str) -> None:
    assert audit.first_committed_answer(text) == answer


def test_first_committed_answer_none_without_a_commitment() -> None:
    assert audit.first_committed_answer("Adding 7 and 2 gives a classic identity of mathematics") is None
    assert audit.first_committed_answer("") is None
    assert audit.first_committed_answer("The answer is unclear") is None


def test_same_number() -> None:
    assert audit.same_number("12", "12.0") and not audit.same_number("12", "13")
    assert not audit.same_number(None, "1") and not audit.same_number("x", "1")


def test_confusion_precision_recall() -> None:
    # (truly bad, alarm fired): 1 hit, 2 false alarms, 1 miss, 1 correct silence
    c = confusion([(True, True), (False, True), (False, True), (True, False), (False, False)])
    assert (c["tp"], c["fp"], c["fn"], c["tn"], c["agents"]) == (1, 2, 1, 1, 5)
    assert c["precision"] == pytest.approx(1 / 3) and c["recall"] == pytest.approx(0.5)
    empty = confusion([(False, False)])
    assert empty["precision"] is None and empty["recall"] is None
    assert audit.precision_recall([(True, True)])["recall"] == 1.0


def test_truth_rule() -> None:
    assert truth_of(0.307, 0.075, 0.387, 0.077) == "collapsed"      # Co-RL seed 0's Gemma
    assert truth_of(0.204, 0.192, 0.262, 0.047) == "collapsed"      # greedy alone below half
    assert truth_of(0.212, 0.185, 0.262, 0.209) == "degraded"       # more than 5 points down, not half
    assert truth_of(0.2, 0.4, 0.26, 0.5) == "ok"
    assert truth_of(None, 0.4, 0.26, 0.5) == "?"


def test_claims_select_one_agent() -> None:
    from corl_bench.report.study import AgentScores, claim_comparisons, parse_claims

    claims = parse_claims("claims:\n  - claim: a0 above base\n    a: {method: corl, cohort: same, agent: a0}\n"
                          "    b: {method: gt, cohort: same, tag: base}\n    backbones: [m]\n")
    assert claims[0].a.agent == "a0" and claims[0].a.label == "corl × same (a0)"

    def s(method, agent, seed, v, tag=""):
        return AgentScores(method, "same", tag, agent, "m", seed, {"greedy": v}, {})

    scores = [s("corl", "a0", i, 0.6 + i / 100) for i in range(3)] + [s("corl", "a1", i, 0.1) for i in range(3)]
    scores += [s("gt", "a0", i, 0.3, "base") for i in range(3)]
    (c,) = claim_comparisons(scores, metrics=("greedy",), claims=claims)
    assert c.verdict == "holds" and c.mean == pytest.approx(0.31)  # a1's 0.1 is not averaged in


def test_pilot_items_are_the_suites_first_hundred() -> None:
    from corl_bench.hf.arith import heldout_rows

    ids = audit.pilot_ids()
    rows = heldout_rows()
    assert len(ids) == 100 and rows[0][1] == "What is 1 + 1?" and rows[99][1] == "What is 10 + 3?"
    assert rows[100][0] not in ids


@pytest.mark.skipif(not (audit.REAL / "runs").is_dir(), reason="needs the committed cells in results/real-study/sweep")
def test_same_family_per_agent_from_the_stored_cells() -> None:
    scores = audit.agent_scores(audit.REAL, audit.HELDOUT)
    base = audit._pick(scores, *audit.BASE, family="smol")
    for agent, expected in (("a0-smol", (1.2, 6.0, 12.5)), ("a1-smol", (-5.2, -12.5, -0.5))):
        final = audit._pick(scores, "corl", audit.SAME, agent=agent)
        got = tuple(round(100 * (final[k].final["greedy"] - base[k].final["greedy"]), 1) for k in (0, 1, 2))
        assert got == expected


def test_tables_never_pool_agents_of_one_family() -> None:
    import importlib.util

    from corl_bench.report.study import AgentScores

    spec = importlib.util.spec_from_file_location("real_study", REPO / "scripts" / "real_study.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    scores = [AgentScores("corl", c, "", a, f, 0, {"greedy": 0.5, "avg_k": 0.4}, {})
              for c, a, f in (("same", "a0-smol", "smol"), ("same", "a1-smol", "smol"), ("cross", "a0-smol", "smol"),
                              ("cross", "a1-gemma", "gemma"))]
    cells = [("corl", "cross", ""), ("corl", "same", "")]
    assert script._rows_of(scores, cells, "smol") == [("corl", "cross", "", None), ("corl", "same", "", "a0-smol"),
                                                      ("corl", "same", "", "a1-smol")]
    table = script.tables({"b": scores})
    assert "| corl × same (a0-smol) | 1 |" in table and "| corl × same (a1-smol) | 1 |" in table
