"""Rewards of Co-RL, TTRL and GT-Reward on hand-built rollouts (definitions: shared/reference/methods.md,
corl-paper-and-code.md section 2)."""

from __future__ import annotations

import pytest

from corl_bench.config import AgentSpec, ConfigError
from corl_bench.method import AgentRollouts, RewardInput
from corl_bench.registries import METHODS


def agents(n: int) -> list[AgentSpec]:
    return [AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i) for i in range(n)]


def ro(name: str, answers: list[list[str | None]]) -> AgentRollouts:
    return AgentRollouts(agent=name, answers=answers, completions=[["" for _ in a] for a in answers],
                         finished=[[True for _ in a] for a in answers])


def batch(rollouts: dict[str, list[list[str | None]]], k: int, labels: list[str] | None = None) -> RewardInput:
    n_prompts = len(next(iter(rollouts.values())))
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(n_prompts)],
                       rollouts={n: ro(n, a) for n, a in rollouts.items()}, samples_per_prompt=k, labels=labels)


def make(name: str, n_agents: int, **options):
    cls = METHODS.get(name)
    return cls(cls.parse_options(options), agents(n_agents))


# ------------------------------------------------------------------------------------------------ Co-RL
def test_corl_two_agents_each_rewarded_by_the_other_agents_vote():
    m = make("corl", 2)
    out = m.rewards(batch({"a0": [["1", "2", "2", "3"]], "a1": [["1", "1", "5", "1"]]}, k=4))
    assert out["a0"].pseudo_labels == ["1"]  # a1's plurality
    assert out["a0"].rewards == [[1.0, 0.0, 0.0, 0.0]]
    assert out["a1"].pseudo_labels == ["2"]  # a0's plurality
    assert out["a1"].rewards == [[0.0, 0.0, 0.0, 0.0]]


def test_corl_three_agents_directed_ring_agent_n_learns_from_n_minus_1():
    m = make("corl", 3)
    assert m.teachers() == {"a0": ["a2"], "a1": ["a0"], "a2": ["a1"]}
    out = m.rewards(batch({"a0": [["7", "7"]], "a1": [["8", "8"]], "a2": [["9", "9"]]}, k=2))
    assert [out[a].pseudo_labels[0] for a in ("a0", "a1", "a2")] == ["9", "7", "8"]
    assert all(out[a].rewards == [[0.0, 0.0]] for a in out)


def test_corl_peer_without_any_answer_gives_zero_reward_on_that_prompt():
    m = make("corl", 2)
    out = m.rewards(batch({"a0": [["4", "4"], ["3", "3"]], "a1": [[None, None], ["3", "9"]]}, k=2))
    assert out["a0"].pseudo_labels == [None, "3"]
    assert out["a0"].rewards == [[0.0, 0.0], [1.0, 1.0]]
    assert out["a0"].metrics["unlabeled_fraction"] == 0.5


def test_corl_tie_goes_to_the_answer_seen_first_and_none_never_votes():
    m = make("corl", 2)
    out = m.rewards(batch({"a0": [["5", "6", None, "6"]], "a1": [[None, "6", "5", "5", "6"][:4]]}, k=4))
    # a1 votes: None, 6, 5, 5 -> 5 wins (2 votes); a0 votes: 5, 6, None, 6 -> 6
    assert out["a0"].pseudo_labels == ["5"] and out["a0"].rewards == [[1.0, 0.0, 0.0, 0.0]]
    tie = m.rewards(batch({"a0": [["1", "1"]], "a1": [["8", "9"]]}, k=2))
    assert tie["a0"].pseudo_labels == ["8"]


def test_corl_own_answer_none_gets_zero_and_equivalence_is_math_aware():
    m = make("corl", 2)
    out = m.rewards(batch({"a0": [[None, "0.5", "\\frac{1}{2}"]], "a1": [["1/2", "1/2", "1/2"]]}, k=3))
    assert out["a0"].rewards == [[0.0, 1.0, 1.0]]


def test_corl_rewards_only_the_first_k_samples():
    m = make("corl", 2)
    out = m.rewards(batch({"a0": [["1", "1", "1", "1"]], "a1": [["1", "1", "1", "1"]]}, k=2))
    assert out["a0"].rewards == [[1.0, 1.0]]


def test_corl_peer_majority_control_uses_strict_majority_of_all_peers():
    m = make("corl", 3, supervision="peer-majority")
    assert m.teachers()["a0"] == ["a1", "a2"]
    out = m.rewards(batch({"a0": [["3", "3"], ["3", "3"]], "a1": [["3", "3"], ["4", "4"]],
                           "a2": [["3", "3"], ["5", "5"]]}, k=2))
    assert out["a0"].pseudo_labels == ["3", None]  # agreeing peers label; split peers leave the prompt unlabeled
    assert out["a0"].rewards == [[1.0, 1.0], [0.0, 0.0]]


def test_corl_rejects_a_single_agent_cohort():
    with pytest.raises(ConfigError, match="at least 2 agents"):
        METHODS.get("corl").check_cohort(agents(1), "single")


# ------------------------------------------------------------------------------------------------- TTRL
def test_ttrl_rewards_agreement_with_own_plurality():
    m = make("ttrl", 1)
    out = m.rewards(batch({"a0": [["2", "3", "3", None], [None, None, None, None]]}, k=4))
    assert out["a0"].pseudo_labels == ["3", None]
    assert out["a0"].rewards == [[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_ttrl_votes_on_more_samples_than_it_trains_on():
    m = make("ttrl", 1, votes_per_prompt=6)
    assert m.generation_n(2) == 6
    # trained samples say "1", but the 6-sample vote says "2": the label comes from all votes
    out = m.rewards(batch({"a0": [["1", "1", "2", "2", "2", "9"]]}, k=2))
    assert out["a0"].pseudo_labels == ["2"] and out["a0"].rewards == [[0.0, 0.0]]


def test_ttrl_votes_per_prompt_below_samples_is_refused():
    m = make("ttrl", 1, votes_per_prompt=4)
    with pytest.raises(ConfigError, match="votes_per_prompt"):
        m.generation_n(8)


def test_ttrl_tie_goes_to_first_seen():
    m = make("ttrl", 1)
    out = m.rewards(batch({"a0": [["4", "5", "5", "4"]]}, k=4))
    assert out["a0"].pseudo_labels == ["4"] and out["a0"].rewards == [[1.0, 0.0, 0.0, 1.0]]


# ------------------------------------------------------------------------------------------- GT-Reward
def test_gt_reward_uses_the_labels():
    m = make("gt-reward", 1)
    assert METHODS.get("gt-reward").uses_labels
    out = m.rewards(batch({"a0": [["7", "8", None]]}, k=3, labels=["8"]))
    assert out["a0"].rewards == [[0.0, 1.0, 0.0]] and out["a0"].pseudo_labels == ["8"]


def test_gt_reward_refuses_to_run_without_labels():
    with pytest.raises(RuntimeError, match="needs labels"):
        make("gt-reward", 1).rewards(batch({"a0": [["7"]]}, k=1))


def test_label_free_methods_declare_no_labels():
    assert not METHODS.get("corl").uses_labels and not METHODS.get("ttrl").uses_labels
