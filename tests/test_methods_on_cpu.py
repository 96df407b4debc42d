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


# ----------------------------------------------------------------------------- RENT, Intuitor, random reward
from corl_bench.method import SequenceStats  # noqa: E402


def stats_batch(entropy, certainty, completions, k):
    answers = [[None] * len(row) for row in completions]
    ro = AgentRollouts(agent="a0", answers=answers, completions=completions,
                       finished=[[True] * len(row) for row in completions])
    return RewardInput(step=3, problem_ids=[f"p{i}" for i in range(len(completions))], rollouts={"a0": ro},
                       samples_per_prompt=k, stats={"a0": SequenceStats(entropy=entropy, self_certainty=certainty)})


def test_rent_reward_is_minus_mean_entropy_with_the_official_format_penalty():
    # two-token vocabulary, p = [0.25, 0.75] at every position: H = 0.5623 nats (hand value)
    h = 0.562335
    b = stats_batch([[h, 0.1]], [[0.0, 0.0]], [["1+1=2;\\boxed{2}", "no box here 2"]], k=2)
    assert make("rent", 1).rewards(b)["a0"].rewards == [[pytest.approx(-h), -7.0]]
    assert make("rent", 1, no_answer_entropy=None).rewards(b)["a0"].rewards == [[pytest.approx(-h), -0.1]]


def test_intuitor_reward_is_the_self_certainty():
    sc = 0.143841  # KL(U || [0.25, 0.75]) by hand
    b = stats_batch([[0.5, 0.5]], [[sc, 0.0]], [["\\boxed{1}", "\\boxed{1}"]], k=2)
    assert make("intuitor", 1).rewards(b)["a0"].rewards == [[sc, 0.0]]


def test_intrinsic_methods_refuse_to_run_without_policy_statistics():
    for name in ("rent", "intuitor"):
        with pytest.raises(RuntimeError, match="RewardInput.stats"):
            make(name, 1).rewards(batch({"a0": [["1"]]}, k=1))


def test_random_reward_is_bernoulli_seeded_and_ignores_the_completions():
    m = make("random-reward", 1, p=0.5, seed=7)
    b1 = batch({"a0": [["1"] * 8] * 50}, k=8)
    b2 = batch({"a0": [["9"] * 8] * 50}, k=8)
    r1, r2 = m.rewards(b1)["a0"].rewards, m.rewards(b2)["a0"].rewards
    assert r1 == r2  # independent of the answers, reproducible
    flat = [x for row in r1 for x in row]
    assert set(flat) == {0.0, 1.0} and 0.35 < sum(flat) / len(flat) < 0.65
    assert make("random-reward", 1, p=0.0).rewards(b1)["a0"].rewards == [[0.0] * 8] * 50


# ----------------------------------------------------------------------------------------------- Co-rewarding-II
def test_co_rewarding_ii_rewards_exact_agreement_with_the_teachers_plurality():
    m = make("co-rewarding-ii", 1)
    b = batch({"a0": [["2", "0.5", "3", None], ["7", "7", "7", "7"]]}, k=4)
    teacher = {"a0": ro("a0", [["0.5", "0.5", "1/2", None], [None, None, None, None]])}
    b = RewardInput(step=0, problem_ids=b.problem_ids, rollouts=b.rollouts, samples_per_prompt=4,
                    teacher_rollouts=teacher)
    out = m.rewards(b)["a0"]
    assert out.pseudo_labels == ["0.5", None]  # teacher plurality; a teacher without answers labels nothing
    assert out.rewards == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]  # exact string, as the reference


def test_co_rewarding_ii_alpha_is_cosine_annealed_from_start_to_end():
    m = make("co-rewarding-ii", 1)
    assert m.teacher_alpha(0, 100) == pytest.approx(0.01)
    assert m.teacher_alpha(50, 100) == pytest.approx(1e-5 + 0.5 * (0.01 - 1e-5))
    assert m.teacher_alpha(100, 100) == pytest.approx(1e-5)
    assert METHODS.get("co-rewarding-ii").teacher


def test_co_rewarding_ii_refuses_to_run_without_teacher_rollouts():
    with pytest.raises(RuntimeError, match="teacher rollouts"):
        make("co-rewarding-ii", 1).rewards(batch({"a0": [["1"]]}, k=1))
