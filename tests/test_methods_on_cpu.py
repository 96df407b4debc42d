"""Rewards of Co-RL, TTRL and GT-Reward on hand-built rollouts (definitions: shared/reference/methods.md,
corl-paper-and-code.md section 2)."""

from __future__ import annotations

import dataclasses

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
                    auxiliary_rollouts={"teacher": teacher})
    out = m.rewards(b)["a0"]
    assert out.pseudo_labels == ["0.5", None]  # teacher plurality; a teacher without answers labels nothing
    assert out.rewards == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]  # exact string, as the reference


def test_co_rewarding_ii_alpha_is_cosine_annealed_from_start_to_end():
    m = make("co-rewarding-ii", 1)
    assert m.auxiliary_update("teacher", 0, 100) == pytest.approx(0.01)
    assert m.auxiliary_update("teacher", 50, 100) == pytest.approx(1e-5 + 0.5 * (0.01 - 1e-5))
    assert m.auxiliary_update("teacher", 100, 100) == pytest.approx(1e-5)
    (teacher,) = METHODS.get("co-rewarding-ii").auxiliary
    assert teacher.name == "teacher" and teacher.generates and teacher.kl_reference


def test_co_rewarding_ii_refuses_to_run_without_teacher_rollouts():
    with pytest.raises(RuntimeError, match="teacher rollouts"):
        make("co-rewarding-ii", 1).rewards(batch({"a0": [["1"]]}, k=1))


# ----------------------------------------------------------------------------------------------- CoMAS
import torch  # noqa: E402

from corl_bench.advantages import whitened_advantages  # noqa: E402
from corl_bench.rollout import Completion  # noqa: E402



def comp(text: str, n_tokens: int = 2) -> Completion:
    return Completion(tuple(range(n_tokens)), (), text, True)


class ScriptedJudges:
    """Test double of RewardInput.generate: critiques echo the agent; scores come from a script keyed by agent."""

    def __init__(self, scores: dict[str, str]) -> None:
        self.scores = scores
        self.calls: list[tuple[str, str, int]] = []  # (agent, role, n prompts)
        self.prompts: dict[str, list[str]] = {}

    def __call__(self, agent, prompts, role, max_new_tokens=None):
        self.calls.append((agent, role, len(prompts)))
        self.prompts.setdefault(role, []).extend(prompts)
        if role.startswith("scorer"):
            return [comp(self.scores[agent], 1) for _ in prompts]
        return [comp(f"critique by {agent}", 3) for _ in prompts]


def comas_batch(k: int, judges: ScriptedJudges, n_prompts: int = 2) -> RewardInput:
    rollouts = {n: AgentRollouts(agent=n, answers=[["1"] * k] * n_prompts,
                                 completions=[[f"{n} sol p{p} s{j}" for j in range(k)] for p in range(n_prompts)],
                                 finished=[[True] * k] * n_prompts) for n in ("a0", "a1")}
    return RewardInput(step=5, problem_ids=[f"p{i}" for i in range(n_prompts)], rollouts=rollouts,
                       samples_per_prompt=k, prompts={n: [f"problem {p}" for p in range(n_prompts)]
                                                      for n in ("a0", "a1")}, generate=judges)


@pytest.mark.parametrize("text, strict, fork", [
    ("<score>3</score>", 3, 3), ("reasons... < score > 1 </score>", 1, 1), ("<score>7</score>", 3, 3),
    ("<score>0</score>", 1, 1), ("it is 2 maybe", None, 2), ("40+9=49;\\boxed{49}", None, 2),
    ("1 then 3", None, 3), ("", None, 2)])
def test_comas_score_parsing_strict_and_fork(text, strict, fork):
    from corl_bench.baselines.comas import parse_score
    assert parse_score(text, "strict") == strict
    assert parse_score(text, "fork") == fork


def test_comas_role_rewards_follow_the_reference_table():
    from corl_bench.baselines.comas import role_rewards
    assert role_rewards(3) == (1.0, 0.0, 0.0)
    assert role_rewards(2) == (0.5, 0.5, 0.0)
    assert role_rewards(1) == (0.0, 1.0, 0.0)
    assert role_rewards(None) == (0.0, 0.0, -1.0)


def test_comas_every_agent_critiques_and_scores_equally_often_and_rewards_follow_the_scorer():
    # a0 always scores 3, a1 always scores 1: a solution's reward tells who scored it
    judges = ScriptedJudges({"a0": "<score>3</score>", "a1": "<score>1</score>"})
    m = make("comas", 2)
    out = m.rewards(comas_batch(k=4, judges=judges))
    roles = {(a, r): n for a, r, n in judges.calls}
    assert roles[("a0", "evaluator-r0")] == roles[("a1", "evaluator-r0")] == 8  # 16 discussions, balanced
    assert roles[("a0", "scorer-r0")] == roles[("a1", "scorer-r0")] == 8
    for a in ("a0", "a1"):
        ev = [e for e in out[a].extra if e.role == "evaluator"]
        sc = [e for e in out[a].extra if e.role == "scorer"]
        assert len(ev) == len(sc) == 8
        assert all(e.completion.text == f"critique by {a}" for e in ev)
        assert all(e.reward == 0.0 for e in sc)  # every score parsed
        assert sorted({r for row in out[a].rewards for r in row}) <= [0.0, 1.0]
        assert all(e.reward in (0.0, 1.0) for e in ev)
    # zero-sum: over all discussions, solver + evaluator reward = 1; scores of 3 are as frequent as a0's scorings
    solver = [r for a in ("a0", "a1") for row in out[a].rewards for r in row]
    evaluator = [e.reward for a in ("a0", "a1") for e in out[a].extra if e.role == "evaluator"]
    assert sum(solver) + sum(evaluator) == 16 and sum(solver) == 8
    assert out["a0"].metrics["mean_score"] == 2.0 and out["a0"].metrics["unparsable_score_fraction"] == 0.0
    # the critique prompt holds the problem and the solution it critiques; the score prompt adds the critique
    assert any("problem 1" in p and "a1 sol p1 s3" in p for p in judges.prompts["evaluator-r0"])
    assert all("Evaluation: critique by" in p for p in judges.prompts["scorer-r0"])


def test_comas_unparsable_score_gives_scorer_minus_one_and_zero_to_solver_and_evaluator():
    judges = ScriptedJudges({"a0": "no idea", "a1": "no idea"})
    out = make("comas", 2).rewards(comas_batch(k=2, judges=judges))
    for a in ("a0", "a1"):
        assert out[a].rewards == [[0.0, 0.0], [0.0, 0.0]]
        assert {e.reward for e in out[a].extra if e.role == "scorer"} == {-1.0}
        assert {e.reward for e in out[a].extra if e.role == "evaluator"} == {0.0}
    assert out["a0"].metrics["unparsable_score_fraction"] == 1.0
    fork = make("comas", 2, score_parser="fork").rewards(comas_batch(k=2, judges=judges))
    assert fork["a0"].rewards == [[0.5, 0.5], [0.5, 0.5]]  # the fork's fallback: 2


def test_comas_second_round_solvers_see_references_and_train_on_their_new_solutions():
    judges = ScriptedJudges({"a0": "<score>2</score>", "a1": "<score>2</score>"})
    out = make("comas", 2, rounds=2, references=1).rewards(comas_batch(k=1, judges=judges, n_prompts=1))
    assert ("a0", "solver-r1", 1) in judges.calls and ("a1", "solver-r1", 1) in judges.calls
    prompt = judges.prompts["solver-r1"][0]
    assert prompt.count("Solution: ") == 1 and "Evaluation: critique by" in prompt and "problem 0" in prompt
    solver_extra = [e for a in ("a0", "a1") for e in out[a].extra if e.role == "solver"]
    assert len(solver_extra) == 2 and all(e.reward == 0.5 for e in solver_extra)


def test_comas_prompts_about_a_problem_with_images_carry_its_images():
    """A vision-language problem: the critique, the score and a later round's solution prompt are requests with the
    problem's images (those of the solver's own request) and its text; nothing is asked without them."""
    from corl_bench.method import Request

    judges = ScriptedJudges({"a0": "<score>3</score>", "a1": "<score>2</score>"})
    b = comas_batch(k=2, judges=judges, n_prompts=2)
    pictures = {p: (f"figure-{p}.png", f"inset-{p}.png") for p in range(2)}
    b = dataclasses.replace(b, prompts={n: [Request(text=f"problem {p}", images=pictures[p]) for p in range(2)]
                                        for n in ("a0", "a1")})
    out = make("comas", 2, rounds=2, references=1).rewards(b)
    assert set(judges.prompts) == {"evaluator-r0", "scorer-r0", "solver-r1", "evaluator-r1", "scorer-r1"}
    for role, prompts in judges.prompts.items():
        assert prompts and all(isinstance(q, Request) for q in prompts), role
        for q in prompts:
            shown = [p for p in range(2) if f"problem {p}" in q.text]
            assert len(shown) == 1 and q.images == pictures[shown[0]], (role, q)
    extra = [e for a in out for e in out[a].extra]  # what the authors train on holds the images too
    assert extra and all(isinstance(e.prompt, Request) and e.prompt.images for e in extra)


def test_whitened_advantages_are_token_weighted_by_hand():
    # rewards 1, 0 with lengths 3, 1: mean = 3/4, var = (3*(1/4)^2 + 1*(3/4)^2)/4 = 3/16
    adv = whitened_advantages(torch.tensor([1.0, 0.0]), torch.tensor([3, 1]))
    s = (3 / 16) ** 0.5
    assert adv.tolist() == pytest.approx([0.25 / s, -0.75 / s])
    assert (adv * torch.tensor([3.0, 1.0])).sum().item() == pytest.approx(0.0, abs=1e-6)  # token-weighted mean 0
    assert whitened_advantages(torch.tensor([0.5, 0.5, 0.5]), torch.tensor([1, 2, 3])).tolist() == [0.0, 0.0, 0.0]
    assert whitened_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0])).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="must both be"):
        whitened_advantages(torch.tensor([[1.0]]), torch.tensor([1]))


def test_comas_advantages_whiten_all_of_an_agents_samples_together():
    judges = ScriptedJudges({"a0": "<score>3</score>", "a1": "nothing"})
    m = make("comas", 2)
    b = comas_batch(k=2, judges=judges, n_prompts=1)
    out = m.rewards(b)
    lengths = {a: [2] * 2 + [len(e.completion.token_ids) for e in out[a].extra] for a in out}
    adv = m.advantages(b, out, lengths)
    for a in out:
        flat = [x for row in out[a].rewards for x in row] + [e.reward for e in out[a].extra]
        assert adv[a].shape == (len(flat),)
        assert torch.allclose(adv[a], whitened_advantages(torch.tensor(flat), torch.tensor(lengths[a])))


def test_comas_rejects_a_single_agent_cohort_and_needs_the_generate_hook():
    with pytest.raises(ConfigError, match="at least 2 agents"):
        METHODS.get("comas").check_cohort(agents(1), "single")
    b = comas_batch(k=1, judges=ScriptedJudges({}))
    with pytest.raises(RuntimeError, match="generates critiques"):
        make("comas", 2).rewards(RewardInput(step=0, problem_ids=b.problem_ids, rollouts=b.rollouts,
                                             samples_per_prompt=1))


def test_corl_peer_majority_is_registered_as_its_own_method_for_three_agents():
    cls = METHODS.get("corl-peer-majority")
    with pytest.raises(ConfigError, match="at least 3 agents.*three-agent"):
        cls.check_cohort(agents(2), "cross-family")
    m = make("corl-peer-majority", 3)
    out = m.rewards(batch({"a0": [["7"]], "a1": [["7"]], "a2": [["8"]]}, k=1))
    assert out["a2"].pseudo_labels == ["7"] and out["a0"].pseudo_labels == [None]  # 7 vs 8: tie, unlabeled
