"""Rewards of EMPO, SRT and the spurious-reward controls (format-reward, incorrect-label) on hand-built rollouts,
against values computed by hand from the reference rules stated in each method's docstring."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.method import AgentRollouts, RewardInput
from corl_bench.registries import METHODS
from tests.test_methods_on_cpu import batch, make

REPO_ROOT = Path(__file__).resolve().parent.parent
NEW = ("empo", "srt", "format-reward", "incorrect-label")


def rewards(name: str, answers: list[list[str | None]], labels: list[str] | None = None, **options):
    """(rewards, pseudo-labels, metrics) of one agent ``a0`` whose K = len(answers[0]) samples are ``answers``."""
    out = make(name, 1, **options).rewards(batch({"a0": answers}, k=len(answers[0]), labels=labels))["a0"]
    return out.rewards, out.pseudo_labels, out.metrics


# ------------------------------------------------------------------------------------------------ registration
def test_the_new_methods_are_registered_with_their_kind_and_label_use():
    kinds = {n: METHODS.get(n).method_kind() for n in NEW}
    assert kinds == {"empo": "label-free", "srt": "label-free", "format-reward": "control",
                     "incorrect-label": "control"}
    assert [METHODS.get(n).uses_labels for n in NEW] == [False, False, False, True]
    for n in NEW:
        cls = METHODS.get(n)
        assert cls.min_agents == 1 and cls.independent_agents and cls.label and "arXiv" in cls.reference
        assert cls.extra_cost and cls.table_order > METHODS.get("comas").table_order


def test_the_method_files_do_not_import_torch():
    code = ("import sys\nfrom corl_bench.registries import METHODS\n"
            f"for n in {NEW!r}: METHODS.get(n)\n"
            "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\nassert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------------------ EMPO
def test_empo_reward_is_the_share_of_the_samples_cluster_and_no_answer_gets_zero():
    r, labels, metrics = rewards("empo", [["1", "1", "2", None]])
    assert r == [[0.5, 0.5, 0.25, 0.0]] and labels == ["1"]
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))  # clusters {1, 1}, {2}, {None}
    assert metrics["semantic_entropy"] == pytest.approx(h)
    assert metrics["normalised_entropy"] == pytest.approx(h / math.log(4)) and metrics["filtered_fraction"] == 0.0


def test_empo_clusters_by_math_equivalence():
    r, labels, _ = rewards("empo", [["0.5", "\\frac{1}{2}", "3", "1/2"]])
    assert r == [[0.75, 0.75, 0.25, 0.75]] and labels == ["0.5"]


@pytest.mark.parametrize("answers", [["1", "2", "3", "4"], ["1", "2", "3"], [None, None, None], ["5", None, None]])
def test_empo_gives_nothing_where_every_answer_is_distinct(answers):
    # every missing answer is a cluster of its own (reference: verify('', '') is False), so ["5", None, None] is
    # all-distinct too: entropy log K, filtered
    r, labels, metrics = rewards("empo", [answers])
    assert r == [[0.0] * len(answers)] and labels == [None] and metrics["filtered_fraction"] == 1.0


def test_empo_missing_answers_do_not_join_each_other():
    r, _, _ = rewards("empo", [["5", "5", None, None]])  # {5, 5}, {None}, {None}: H < log 4
    assert r == [[0.5, 0.5, 0.0, 0.0]]


def test_empo_unanimous_group_is_rewarded_and_only_the_first_k_samples_count():
    m = make("empo", 1)
    out = m.rewards(batch({"a0": [["7", "7", "8", "9"]]}, k=2))["a0"]
    assert out.rewards == [[1.0, 1.0]] and out.pseudo_labels == ["7"]


def test_empo_entropy_thresholds_are_fractions_of_log_k():
    answers = [["1", "1", "2", None], ["7", "7", "7", "7"]]  # normalised entropies 0.75 and 0
    assert rewards("empo", answers, max_entropy=0.8)[0] == [[0.5, 0.5, 0.25, 0.0], [1.0] * 4]
    r, labels, metrics = rewards("empo", answers, max_entropy=0.7)
    assert r == [[0.0] * 4, [1.0] * 4] and labels == [None, "7"] and metrics["filtered_fraction"] == 0.5
    r, labels, _ = rewards("empo", answers, min_entropy=0.1)
    assert r == [[0.5, 0.5, 0.25, 0.0], [0.0] * 4] and labels == ["1", None]
    assert rewards("empo", answers, min_entropy=0.75)[1] == ["1", None]  # the lower bound is inclusive


@pytest.mark.parametrize("options, match", [({"min_entropy": 0.5, "max_entropy": 0.5}, "min_entropy < max_entropy"),
                                            ({"max_entropy": 1.5}, "max_entropy <= 1"),
                                            ({"min_entropy": -0.1}, "0 <= min_entropy"),
                                            ({"threshold": 0.5}, "not an option of method 'empo'")])
def test_empo_rejects_bad_options(options, match):
    with pytest.raises(ConfigError, match=match):
        make("empo", 1, **options)


# ------------------------------------------------------------------------------------------------ SRT
def test_srt_rewards_agreement_with_the_majority_of_parsable_answers():
    r, labels, metrics = rewards("srt", [["1", "1", "2", None], [None, None, None, None]])
    assert r == [[1.0, 1.0, 0.0, 0.0], [0.0] * 4] and labels == ["1", None]
    assert metrics["majority_share"] == pytest.approx((2 / 3 + 0) / 2)  # share among the 3 parsable answers
    assert metrics["labeled_fraction"] == 0.5 and metrics["kept_fraction"] == 0.5


def test_srt_majority_is_by_exact_string_and_reward_by_equivalence():
    r, labels, _ = rewards("srt", [["3", "0.5", "3", "1/2"]])  # "3" wins 2:1:1 by string
    assert labels == ["3"] and r == [[1.0, 0.0, 1.0, 0.0]]
    r, labels, _ = rewards("srt", [["1/2", "4", "4", "0.5", "1/2"]])  # tie 2:2 goes to the first seen
    assert labels == ["1/2"] and r == [[1.0, 0.0, 0.0, 1.0, 1.0]]


def test_srt_consistency_threshold_drops_prompts_below_it():
    answers = [["1", "1", "2", None]]  # majority share 2/3
    assert rewards("srt", answers, self_consistency_threshold=0.6)[0] == [[1.0, 1.0, 0.0, 0.0]]
    r, labels, metrics = rewards("srt", answers, self_consistency_threshold=0.7)
    assert r == [[0.0] * 4] and labels == [None] and metrics["labeled_fraction"] == 0.0
    assert rewards("srt", [["4", "4", "5", "5"]], self_consistency_threshold=0.5)[1] == ["4"]  # >= keeps


def test_srt_soft_reward_is_the_vote_share_of_the_samples_answer():
    r, labels, _ = rewards("srt", [["1", "1", "2", None]], soft_reward=True)
    assert r == [[pytest.approx(2 / 3), pytest.approx(2 / 3), pytest.approx(1 / 3), 0.0]] and labels == ["1"]
    r, _, _ = rewards("srt", [["0.5", "1/2", "3"]], soft_reward=True)  # shares of every equivalent answer add up
    assert r == [[pytest.approx(2 / 3), pytest.approx(2 / 3), pytest.approx(1 / 3)]]


def test_srt_keep_fraction_keeps_the_most_consistent_labeled_prompts():
    answers = [["1", "2", "3", "3"], ["4", "4", "4", "4"], [None] * 4, ["5", "5", "5", "6"]]  # shares .5 1 - .75
    r, labels, metrics = rewards("srt", answers, oversampling_keep_fraction=0.5)  # int(4 * .5) = 2 prompts
    assert labels == [None, "4", None, "5"]
    assert r == [[0.0] * 4, [1.0] * 4, [0.0] * 4, [1.0, 1.0, 1.0, 0.0]]
    assert metrics["labeled_fraction"] == 0.75 and metrics["kept_fraction"] == 0.5
    assert rewards("srt", answers, oversampling_keep_fraction=0.25)[1] == [None, "4", None, None]
    assert rewards("srt", answers, oversampling_keep_fraction=0.1)[1] == [None, "4", None, None]  # at least one
    tie = [["1", "1", "2", "2"], ["3", "3", "4", "4"]]  # equal shares: batch order decides
    assert rewards("srt", tie, oversampling_keep_fraction=0.5)[1] == ["1", None]


@pytest.mark.parametrize("options, match", [
    ({"self_consistency_threshold": 1.5}, "self_consistency_threshold must be in"),
    ({"oversampling_keep_fraction": 0.0}, "oversampling_keep_fraction must be in"),
    ({"oversampling_keep_fraction": 1.2}, "oversampling_keep_fraction must be in"),
    ({"soft_reward": "yes"}, "soft_reward must be true or false"),
    ({"soft_reward": True, "self_consistency_threshold": 0.5}, "set soft_reward: false"),
    ({"soft_reward": True, "oversampling_keep_fraction": 0.5}, "set soft_reward: false"),
    ({"keep_fraction": 0.5}, "not an option of method 'srt'.*oversampling_keep_fraction")])
def test_srt_rejects_bad_options(options, match):
    with pytest.raises(ConfigError, match=match):
        make("srt", 1, **options)


# ------------------------------------------------------------------------------------------------ format reward
def test_format_reward_is_one_for_a_parsable_box_whatever_it_says():
    texts = ["so \\boxed{42}", "the answer is 42", "\\boxed{}", "\\boxed{5", "\\boxed 9", "\\fbox{x+1}",
             "\\boxed{1} then \\boxed{2}", "ignored: beyond K \\boxed{3}"]
    ro = AgentRollouts(agent="a0", answers=[["0"] * len(texts)], completions=[texts],
                       finished=[[True] * len(texts)])
    out = make("format-reward", 1).rewards(RewardInput(step=0, problem_ids=["p0"], rollouts={"a0": ro},
                                                       samples_per_prompt=7))["a0"]
    assert out.rewards == [[1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]]
    assert out.pseudo_labels is None and out.metrics["boxed_fraction"] == pytest.approx(4 / 7)


def test_format_reward_has_no_options():
    with pytest.raises(ConfigError, match="not an option of method 'format-reward'"):
        make("format-reward", 1, p=0.5)


# ------------------------------------------------------------------------------------------------ incorrect label
def test_incorrect_label_rewards_agreement_with_the_plurality_of_wrong_answers():
    r, labels, metrics = rewards("incorrect-label", [["4", "4", "5", "5", "6", None], ["4", "4.0", "4", "4", "4", "4"],
                                                     [None] * 6], labels=["4", "4", "4"])
    assert labels == ["5", None, None] and metrics["labeled_fraction"] == pytest.approx(1 / 3)
    assert r == [[0.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0.0] * 6, [0.0] * 6]


def test_incorrect_label_judges_correctness_by_equivalence():
    r, labels, _ = rewards("incorrect-label", [["0.5", "3", "0.5", "0.5", "3"]], labels=["1/2"])
    assert labels == ["3"] and r == [[0.0, 1.0, 0.0, 0.0, 1.0]]


def test_incorrect_label_drop_correct_majority_keeps_only_prompts_whose_vote_is_wrong():
    answers, truth = [["4", "4", "5"], ["5", "5", "4"]], ["4", "4"]
    assert rewards("incorrect-label", answers, labels=truth)[1] == ["5", "5"]
    r, labels, _ = rewards("incorrect-label", answers, labels=truth, drop_correct_majority=True)
    assert labels == [None, "5"] and r == [[0.0] * 3, [1.0, 1.0, 0.0]]


def test_incorrect_label_refuses_to_run_without_labels_and_checks_its_option():
    with pytest.raises(RuntimeError, match="needs labels"):
        make("incorrect-label", 1).rewards(batch({"a0": [["1", "2"]]}, k=2))
    with pytest.raises(ConfigError, match="drop_correct_majority must be true or false"):
        make("incorrect-label", 1, drop_correct_majority="no")
