"""The multi-turn debate of the method contract (corl_bench/debate.py) and the methods on it (maporl, maporl-gt,
maca): prompts, images, rewards and advantages on hand-computed cases with a scripted ``generate`` (a test double
that answers by a script and records what it was asked), then one tiny real run of each method family.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from corl_bench.config import AgentSpec, ConfigError, load_config
from corl_bench.method import (DEBATE_TEMPLATE, AgentRollouts, Completion, Request, RewardInput, debate_prompt,
                               run_debate, turn_advantages)
from corl_bench.registries import FAMILIES, METHODS

NAMES = ("a0", "a1")


def boxed(x: str | None) -> str:
    return f"so \\boxed{{{x}}}" if x is not None else "no idea"


class Script:
    """``generate`` double: agent ``a`` answers its i-th prompt of round t with ``script[(a, t)][i]``."""

    def __init__(self, script: dict[tuple[str, int], list[str | None]]):
        self.script = script
        self.asked: list[tuple[str, str, object]] = []  # (agent, role, prompt)

    def __call__(self, agent, prompts, role, max_new_tokens=None):
        t = int(role.removeprefix("debate-r"))
        self.asked.extend((agent, role, p) for p in prompts)
        texts = self.script[(agent, t)]
        assert len(texts) == len(prompts), (agent, role)
        return [Completion(token_ids=(1,) * (3 + i), logprobs=(), text=boxed(x), finished=True)
                for i, x in enumerate(texts)]


def batch(round0: dict[str, list[list[str | None]]], script: Script | None, prompts=None, labels=None, step=0):
    """A RewardInput of P problems x K rollouts per agent whose round-0 answers are ``round0[agent][p][j]``."""
    n_prob = len(next(iter(round0.values())))
    ro = {a: AgentRollouts(agent=a, answers=ans, completions=[[boxed(x) for x in row] for row in ans],
                           finished=[[True] * len(row) for row in ans]) for a, ans in round0.items()}
    prompts = prompts or {a: [f"Problem {p}?\n" for p in range(n_prob)] for a in round0}
    return RewardInput(step=step, problem_ids=[f"p{p}" for p in range(n_prob)], rollouts=ro,
                       samples_per_prompt=len(next(iter(round0.values()))[0]), labels=labels, prompts=prompts,
                       generate=script)


def method(name: str, n_agents: int = 2, **options):
    cls = METHODS.get(name)
    return cls(cls.parse_options(options), [AgentSpec(name=f"a{i}", family="f") for i in range(n_agents)])


# ------------------------------------------------------------------------------------------------ the debate
def test_round_t_prompt_shows_the_other_agents_previous_responses_then_the_agents_own_problem_prompt():
    script = Script({("a0", 1): ["5", "5"], ("a1", 1): ["5", "7"]})
    b = batch({"a0": [["3", "4"]], "a1": [["5", None]]}, script)
    debate = run_debate(b, METHODS.get("maca").parse_options({}), "maca")
    assert debate.rounds == 2 and [r for _, r, _ in script.asked] == ["debate-r1"] * 4
    a0_slot0 = [p for a, _, p in script.asked if a == "a0"][0]
    assert a0_slot0 == DEBATE_TEMPLATE.format(responses="Agent 1: so \\boxed{5}", problem="Problem 0?\n")
    assert a0_slot0 == "Agent 1: so \\boxed{5}\nUpdate your answer.\nProblem 0?\n"
    a1_slot1 = [p for a, _, p in script.asked if a == "a1"][1]
    assert a1_slot1.startswith("Agent 1: so \\boxed{4}\n")  # slot 1 shows slot 1's round-0 answers only
    # every later turn's answer is extracted (the run's extractor; default the shared verifier's)
    assert debate.answers(0, 1) == [["4", None], ["5", "7"]]
    assert debate.turns["a1"][1][0][1].prompt == a1_slot1 and debate.turns["a1"][1][0][1].completion.text == boxed("7")


def test_include_own_max_others_show_answer_and_the_seeded_order():
    round0 = {"a0": [["1"]], "a1": [["2"]], "a2": [[None]]}
    script = Script({(a, 1): ["9"] for a in round0})
    opts = METHODS.get("maporl").parse_options({"include_own": True, "max_others": 2, "show": "answer"})
    run_debate(batch(round0, script), opts, "maporl")
    shown = {a: p.split("\nUpdate")[0].split("\n") for a, _, p in script.asked}
    assert all(len(lines) == 2 for lines in shown.values())  # 3 candidates (own included), 2 shown
    assert {line.split(": ", 1)[1] for lines in shown.values() for line in lines} <= {"\\boxed{1}", "\\boxed{2}",
                                                                                      "(no answer)"}
    again = Script({(a, 1): ["9"] for a in round0})
    run_debate(batch(round0, again), opts, "maporl")
    assert again.asked == script.asked  # the order is seeded by (method, step, problem, slot, agent, round)
    extract = Script({(a, 1): ["9"] for a in round0})
    b = batch(round0, extract)
    b = dataclasses.replace(b, extract=lambda text: "42")
    assert run_debate(b, opts, "maporl").answers(0, 0)[1] == ["42", "42", "42"]  # the run's extractor


def test_images_travel_with_the_problem_into_every_debate_prompt():
    img = object()
    prompts = {a: [Request(text="<image>\nHow many squares?\n", images=(img,))] for a in NAMES}
    script = Script({("a0", 1): ["2"], ("a1", 1): ["2"], ("a0", 2): ["2"], ("a1", 2): ["2"]})
    run_debate(batch({"a0": [["1"]], "a1": [["2"]]}, script, prompts=prompts),
               METHODS.get("maporl").parse_options({"rounds": 3}), "maporl")
    assert [r for _, r, _ in script.asked] == ["debate-r1", "debate-r1", "debate-r2", "debate-r2"]
    for _, _, p in script.asked:
        assert isinstance(p, Request) and p.images == (img,) and p.text.endswith("<image>\nHow many squares?\n")
    assert debate_prompt("Q?\n", []) == "\nUpdate your answer.\nQ?\n"  # text problems stay plain strings


def test_one_round_is_no_debate_and_a_debate_without_generate_says_what_is_missing():
    b = batch({"a0": [["1"]], "a1": [["2"]]}, None)
    assert run_debate(b, METHODS.get("maca").parse_options({"rounds": 1}), "maca").rounds == 1
    with pytest.raises(RuntimeError, match="RewardInput.generate"):
        run_debate(b, METHODS.get("maca").parse_options({}), "maca")


# ------------------------------------------------------------------------------------------------ maporl
def test_maporl_rewards_agreement_with_the_majority_over_all_agents_and_turns():
    # round 0: 3 vs 5 (a tie that the first-seen rule would give to 3); round 1 both say 5 -> majority 5 (3 votes)
    script = Script({("a0", 1): ["5"], ("a1", 1): ["5"]})
    m = method("maporl")
    out = m.rewards(batch({"a0": [["3"]], "a1": [["5"]]}, script))
    assert out["a0"].pseudo_labels == ["5"]
    assert out["a0"].rewards == [[0.0]] and [e.reward for e in out["a0"].extra] == [1.0]
    assert out["a1"].rewards == [[1.0]] and [e.reward for e in out["a1"].extra] == [1.0]
    assert out["a0"].extra[0].role == "debate-r1" and out["a0"].extra[0].completion.text == boxed("5")
    assert out["a0"].metrics["answer_change_rate"] == 1.0 and out["a1"].metrics["answer_change_rate"] == 0.0
    assert m.teachers() == {"a0": ["a0", "a1"], "a1": ["a0", "a1"]}
    # the vote pools the K slots of a problem: slot 1's four 7s outvote slot 0's 3/5
    script = Script({("a0", 1): ["5", "7"], ("a1", 1): ["3", "7"]})
    out = m.rewards(batch({"a0": [["3", "7"]], "a1": [["5", "7"]]}, script))
    assert out["a0"].pseudo_labels == ["7"] and out["a0"].rewards == [[0.0, 1.0]]


def test_official_discounted_sum_over_future_turns_by_hand():
    from corl_bench.baselines.maporl import discounted_sum

    v = [[0.0, 1.0], [1.0, 1.0]]  # v[t][agent]
    assert discounted_sum(v, 0, 0, 0.3) == pytest.approx((0 + 0.3 * 1.0) / 1.3)
    assert discounted_sum(v, 0, 1, 0.3) == pytest.approx(1.0)
    assert discounted_sum(v, 1, 0, 0.3) == 1.0
    v3 = [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    assert discounted_sum(v3, 0, 0, 0.5) == pytest.approx((1 + 0.5 * 0 + 0.25 * 1) / 1.75)
    assert discounted_sum(v3, 1, 1, 0.5) == pytest.approx((0 + 0.5 * 1) / 1.5)
    # through the method: round 0 a0 says 3 (wrong vs the majority 5), everything else 5
    script = Script({("a0", 1): ["5"], ("a1", 1): ["5"]})
    out = method("maporl", horizon="discounted_sum", discount=0.3).rewards(
        batch({"a0": [["3"]], "a1": [["5"]]}, script))
    assert out["a0"].rewards[0][0] == pytest.approx(0.3 / 1.3) and out["a1"].rewards[0][0] == pytest.approx(1.0)


def test_official_revision_and_influence_incentives_by_hand():
    from corl_bench.baselines.maporl import incentive

    alpha = (1.0, 2.0, 4.0, 8.0)
    c = [[0.0, 0.0], [1.0, 0.0]]  # a0 turns right alone; a1 stays wrong
    assert incentive(c, 1, 0, alpha) == 2.0  # wrong -> right while the others were wrong: +a1
    assert incentive(c, 0, 1, alpha) == -4.0  # the other turns right next, I was wrong: -a2 (sign as coded)
    assert incentive(c, 0, 0, alpha) == 0.0 and incentive(c, 1, 1, alpha) == 0.0
    c = [[1.0, 1.0], [0.0, 1.0]]  # a0 turns wrong although the other was right
    assert incentive(c, 1, 0, alpha) == -2.0  # right -> wrong, others right: -a1
    assert incentive(c, 0, 1, alpha) == 4.0  # the other turns wrong next, I was right: +a2
    c = [[0.0, 1.0], [1.0, 1.0]]  # a0 persuaded to the right answer by a right peer
    assert incentive(c, 1, 0, alpha) == 1.0  # wrong -> right, others right: +a0
    assert incentive(c, 0, 1, alpha) == -8.0  # the other turns right next, I was right: -a3
    c = [[1.0, 0.0], [0.0, 0.0]]
    assert incentive(c, 1, 0, alpha) == -1.0  # right -> wrong, others wrong: -a0
    assert incentive(c, 0, 1, alpha) == 8.0  # the other turns wrong next, I was wrong: +a3
    # through the method (label-free scores): a0 3 -> 5, a1 5 -> 5, majority 5; a0 wrong->right, other right: +a0
    script = Script({("a0", 1): ["5"], ("a1", 1): ["5"]})
    out = method("maporl", alpha=[1, 2, 4, 8]).rewards(batch({"a0": [["3"]], "a1": [["5"]]}, script))
    assert [e.reward for e in out["a0"].extra] == [1.0 + 1.0]
    assert out["a1"].rewards == [[1.0 - 8.0]]  # a1 right, the other turns right next: -a3


def test_marti_quality_and_margin_shaping_by_hand():
    from corl_bench.baselines.maporl import shaped

    v = [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]  # Q at t=1 = 2/3
    q = shaped(v, "quality", 0.5, 0.5)
    assert q[0] == v[0] and q[1] == pytest.approx([0.5 * (0 - 1 / 3), 1 + 0.5 * 2 / 3, 1 + 0.5 * 2 / 3])
    m = shaped(v, "margin", 0.5, 0.5)
    assert m[1] == pytest.approx([0.5 * (0 - 2 / 3), 1 + 0.5 / 3, 1 + 0.5 / 3])
    o = shaped(v, "margin_with_outcome", 0.5, 0.5)
    assert o[0] == pytest.approx([1.0, 1.5, 0.5]) and o[1] == pytest.approx([x + 0.5 * y for x, y in zip(m[1], v[1])])
    assert shaped(v, "none", 0.5, 0.5) == v


def test_maporl_gt_scores_turns_by_the_ground_truth_and_needs_labels():
    script = Script({("a0", 1): ["5"], ("a1", 1): ["3"]})
    m = method("maporl-gt", horizon="current")
    out = m.rewards(batch({"a0": [["3"]], "a1": [["3"]]}, script, labels=["5"]))
    assert out["a0"].rewards == [[0.0]] and [e.reward for e in out["a0"].extra] == [1.0]
    assert out["a1"].rewards == [[0.0]] and [e.reward for e in out["a1"].extra] == [0.0]
    cls = METHODS.get("maporl-gt")
    assert cls.uses_labels and cls.method_kind() == "uses-labels" and cls.parse_options({}).horizon == "discounted_sum"
    assert METHODS.get("maporl").method_kind() == "label-free"
    with pytest.raises(RuntimeError, match="needs labels"):
        m.rewards(batch({"a0": [["3"]], "a1": [["3"]]}, Script({("a0", 1): ["5"], ("a1", 1): ["3"]})))


# ------------------------------------------------------------------------------------------------ maca
def test_maca_rewards_agreement_with_the_final_rounds_consensus():
    script = Script({("a0", 1): ["5", "5"], ("a1", 1): ["5", "7"]})
    out = method("maca").rewards(batch({"a0": [["3", "3"]], "a1": [["5", "5"]]}, script))
    # consensus over the final round of both slots: 5, 5, 5, 7 -> 5 (round 0's 3s do not vote)
    assert out["a0"].pseudo_labels == ["5"]
    assert out["a0"].rewards == [[0.0, 0.0]] and [e.reward for e in out["a0"].extra] == [2.0, 2.0]
    assert out["a1"].rewards == [[2.0, 2.0]] and [e.reward for e in out["a1"].extra] == [2.0, 0.0]
    assert out["a1"].metrics["consensus_agreement"] == 0.75
    # no final-round answer: no consensus, every turn 0 (MACA skips the question)
    script = Script({("a0", 1): [None], ("a1", 1): [None]})
    out = method("maca").rewards(batch({"a0": [["3"]], "a1": [["3"]]}, script))
    assert out["a0"].pseudo_labels == [None] and out["a0"].rewards == [[0.0]] and out["a0"].extra[0].reward == 0.0


def test_maca_format_reward_by_hand():
    from corl_bench.baselines.maca import consensus_reward, format_reward

    assert format_reward("Step one is here ok\nStep two is here ok\n\\boxed{5}") == pytest.approx(0.2 + 0.5)
    assert format_reward("\\boxed{5} and \\boxed{6}") == 0.0  # two boxes: -0.2, clamped
    assert format_reward("so \\boxed{5}\nmore text here ok") == pytest.approx(0.3 - 0.1)
    assert format_reward("a\nb\nc\n" + "long line number %d\n" * 0 + "\\boxed{1}") == pytest.approx(0.5)
    lines = "".join(f"reasoning line {i}\n" for i in range(9)) + "\\boxed{1}"  # 9 steps: 0.2 + min(0.2, 0.28)
    assert format_reward(lines) == pytest.approx(0.9)
    assert (consensus_reward("5", "5.0"), consensus_reward("4", "5"), consensus_reward(None, "5"),
            consensus_reward("5", None)) == (2.0, 0.0, 0.0, 0.0)
    script = Script({("a0", 1): ["5"], ("a1", 1): ["5"]})
    out = method("maca", format_reward=True).rewards(batch({"a0": [["5"]], "a1": [["5"]]}, script))
    assert out["a0"].rewards == [[2.0 + 0.5]]  # "so \boxed{5}": one box on the last line, no steps


# ------------------------------------------------------------------------------------------------ advantages
def test_turn_advantages_group_each_round_of_a_problem_and_follow_the_training_order():
    import torch

    from corl_bench.advantages import whitened_advantages

    adv = turn_advantages([[1.0, 0.0]], [1.0, 1.0], [3, 4, 5, 6], "group")
    assert adv.tolist() == pytest.approx([0.7071, -0.7071, 0.0, 0.0], abs=1e-4)
    two = turn_advantages([[1.0, 0.0], [0.0, 0.0]], [0.0, 1.0, 1.0, 1.0], [1] * 8, "group")
    assert two.tolist() == pytest.approx([0.7071, -0.7071, 0, 0, -0.7071, 0.7071, 0, 0], abs=1e-4)
    rf = turn_advantages([[1.0, 0.0]], [1.0, 1.0], [3, 4, 5, 6], "reinforce")
    assert torch.equal(rf, whitened_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([3, 4, 5, 6])))
    with pytest.raises(ValueError, match="whole rounds"):
        turn_advantages([[1.0, 0.0]], [1.0], [1, 1, 1], "group")


def test_methods_give_one_advantage_per_trained_turn():
    script = Script({("a0", 1): ["5", "5"], ("a1", 1): ["5", "7"]})
    b = batch({"a0": [["3", "3"]], "a1": [["5", "5"]]}, script)
    for name in ("maporl", "maca"):
        m = method(name)
        r = m.rewards(b)
        lengths = {a: [4, 4] + [len(e.completion.token_ids) for e in r[a].extra] for a in r}
        adv = m.advantages(b, r, lengths)
        assert {a: len(x) for a, x in adv.items()} == {"a0": 4, "a1": 4}
    adv = method("maca").advantages(b, method("maca").rewards(b), {a: [1] * 4 for a in NAMES})
    assert adv["a1"].tolist() == pytest.approx([0, 0, 0.7071, -0.7071], abs=1e-4)


# ------------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize("name,options,match", [
    ("maporl", {"rounds": 0}, "rounds must be >= 1.*rounds=2"),
    ("maca", {"max_others": -1}, "max_others must be >= 0"),
    ("maca", {"show": "all"}, "show must be one of completion, answer"),
    ("maporl", {"alpha": [1, 2]}, r"four non-negative weights.*alpha=\[0,0.5,0,0\]"),
    ("maporl", {"horizon": "last"}, "horizon must be current or discounted_sum"),
    ("maporl", {"shaping": "quality", "horizon": "discounted_sum"}, "set method.options.horizon=current"),
    ("maporl-gt", {"shaping": "margin"}, "two credit rules"),
    ("maca", {"estimator": "ppo"}, "estimator must be group or reinforce"),
    ("maca", {"gamma": 1}, "not an option of method 'maca'"),
])
def test_bad_options_get_one_line_errors_that_name_the_fix(name, options, match):
    with pytest.raises(ConfigError, match=match):
        METHODS.get(name).parse_options(options)


# ------------------------------------------------------------------------------------------------ real runs
@pytest.mark.slow
@pytest.mark.parametrize("name", ["maporl", "maca"])
def test_a_tiny_real_debate_trains_every_turn(name, tmp_path_factory, monkeypatch):
    from corl_bench.train.runner import run
    from corl_bench.train.trainer import Trainer
    from tests.conftest import tiny_family

    # own family names: other tests register tiny-* families with fewer warm-start steps, whose models emit
    # no answer at all (every reward 0, so no gradient) -- this test must not depend on which ran first
    for fam in ("qwen2-bpe", "neox-bpe"):
        f = dataclasses.replace(tiny_family(fam, warmstart_steps=4, warmstart_batch=16), name=f"debatetest-{fam}")
        if f.name not in FAMILIES:
            FAMILIES.register(f.name, f)
    asked: list = []
    original = Trainer._generator

    def generator(self, step):
        generate = original(self, step)

        def spy(agent, prompts, role, max_new_tokens=None):
            asked.extend((agent, role, p) for p in prompts)
            return generate(agent, prompts, role, max_new_tokens)

        return spy

    monkeypatch.setattr(Trainer, "_generator", generator)
    root = tmp_path_factory.mktemp(f"debate-{name}")
    cfg = load_config(None, [
        f"method.name={name}", "cohort.name=tiny-debate",
        "cohort.agents=[{name: a0, family: debatetest-qwen2-bpe}, {name: a1, family: debatetest-neox-bpe, seed_offset: 1}]",
        "run.steps=2", f"run.output_dir={root / 'runs'}", f"model.cache_dir={tmp_path_factory.getbasetemp() / 'dc'}",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=12",
        "eval.max_problems=2", "eval.samples=1", "eval.max_new_tokens=12", "grpo.lr=1e-3"])
    run_dir = run(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["method/extra_samples"] == 2 * 2 for r in rows)  # P*K turns of round 1
    assert all(r["policy/grad_norm"] > 0 for r in rows)
    assert {(a, role) for a, role, _ in asked} == {("a0", "debate-r1"), ("a1", "debate-r1")} and len(asked) == 16
    assert all(p.startswith("Agent 1: ") and "\nUpdate your answer.\n" in p and p.endswith("\n") for _, _, p in asked)
