"""MM-UPT (baselines/mm_upt.py): hand-computed rewards, one test per way it differs from TTRL, label-freedom,
registration, the recipe config, and one real training step of two agents on tiny micro models."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from corl_bench.config import AgentSpec, ConfigError, load_config
from corl_bench.method import AgentRollouts, RewardInput
from corl_bench.profile import Profile
from corl_bench.registries import METHODS

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "mm-upt.yaml"


def agents(n: int) -> list[AgentSpec]:
    return [AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i) for i in range(n)]


def boxed(a: str | None) -> str:
    return f"so \\boxed{{{a}}}" if a is not None else "I am not sure"


def ro(name: str, answers: list[list[str | None]], completions: list[list[str]] | None = None) -> AgentRollouts:
    comps = completions if completions is not None else [[boxed(a) for a in row] for row in answers]
    return AgentRollouts(agent=name, answers=answers, completions=comps, finished=[[True] * len(a) for a in answers])


def batch(rollouts: dict[str, list[list[str | None]]], k: int, completions=None, labels=None) -> RewardInput:
    n_prompts = len(next(iter(rollouts.values())))
    return RewardInput(step=0, problem_ids=[f"p{i}" for i in range(n_prompts)],
                       rollouts={n: ro(n, a, (completions or {}).get(n)) for n, a in rollouts.items()},
                       samples_per_prompt=k, labels=labels)


def make(name: str = "mm-upt", n_agents: int = 1, **options):
    cls = METHODS.get(name)
    return cls(cls.parse_options(options), agents(n_agents))


def mm_upt_and_ttrl(answers: list[str | None], **options):
    """(labels, rewards) of MM-UPT and of TTRL (votes on the trained samples) on one prompt of one agent."""
    b = batch({"a0": [answers]}, k=len(answers))
    m, t = make(**options).rewards(b)["a0"], make("ttrl").rewards(b)["a0"]
    return (m.pseudo_labels[0], m.rewards[0]), (t.pseudo_labels[0], t.rewards[0])


# ------------------------------------------------------------------------------------------ hand-computed rewards
def test_reward_is_agreement_with_the_own_majority():
    out = make().rewards(batch({"a0": [["2", "3", "3", "5"], ["7", "7", "7", "7"]]}, k=4))["a0"]
    assert out.pseudo_labels == ["3", "7"]
    assert out.rewards == [[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    assert out.metrics == {"no_answer_label_fraction": 0.0}


def test_ten_samples_as_the_recipe():
    answers = ["4", "4", "9", "4", None, "9", "4", "1", "9", "4"]  # 4: five votes, 9: three, None: one, 1: one
    out = make().rewards(batch({"a0": [answers]}, k=10))["a0"]
    assert out.pseudo_labels == ["4"]
    assert out.rewards == [[1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]]


def test_tie_between_answers_goes_to_the_one_seen_first_as_ttrl():
    mm, tt = mm_upt_and_ttrl(["4", "5", "5", "4"])
    assert mm == tt == ("4", [1.0, 0.0, 0.0, 1.0])


def test_equivalent_answers_are_rewarded_but_vote_by_their_exact_string():
    (label, rewards), _ = mm_upt_and_ttrl(["0.5", "\\frac12", "0.5", "3"])
    assert label == "0.5" and rewards == [1.0, 1.0, 1.0, 0.0]  # \frac12 == 0.5
    (label, rewards), _ = mm_upt_and_ttrl(["\\frac12", "0.5", "3", "3"])
    assert label == "3" and rewards == [0.0, 0.0, 1.0, 1.0]  # 1/2 and 0.5 do not pool their votes (Counter)


def test_only_the_first_k_samples_vote_and_are_rewarded():
    out = make().rewards(batch({"a0": [["1", "1", "2", "2", "2", "2"]]}, k=2))["a0"]
    assert make().generation_n(2) == 2  # no separate voting pool
    assert out.pseudo_labels == ["1"] and out.rewards == [[1.0, 1.0]]


# ---------------------------------------------------------------------------- differences from TTRL, one test each
def test_difference_no_answer_takes_part_in_the_vote_and_wins_a_tie_when_seen_first():
    mm, tt = mm_upt_and_ttrl([None, "3", None, "3"])
    assert mm == ("None", [1.0, 0.0, 1.0, 0.0])  # Counter over "None", "3", "None", "3": "None" seen first
    assert tt == ("3", [0.0, 1.0, 0.0, 1.0])  # TTRL leaves the no-answer samples out of the vote
    mm, tt = mm_upt_and_ttrl(["3", None, None, "3"])
    assert mm == tt == ("3", [1.0, 0.0, 0.0, 1.0])


def test_difference_a_no_answer_majority_rewards_the_samples_without_an_answer():
    mm, tt = mm_upt_and_ttrl([None, None, None, "7"])
    assert mm == ("None", [1.0, 1.0, 1.0, 0.0])  # grade_answer("None", "None") is True
    assert tt == ("7", [0.0, 0.0, 0.0, 1.0])
    out = make().rewards(batch({"a0": [[None, None, "7"], ["7", "7", None]]}, k=3))["a0"]
    assert out.metrics == {"no_answer_label_fraction": 0.5}


def test_difference_no_valid_answer_at_all_gives_every_sample_one_not_zero():
    mm, tt = mm_upt_and_ttrl([None, None, None, None])
    assert mm == ("None", [1.0, 1.0, 1.0, 1.0])
    assert tt == (None, [0.0, 0.0, 0.0, 0.0])  # unlabeled
    (label, rewards), _ = mm_upt_and_ttrl([None, None, None, None], no_answer_votes=False)
    assert label is None and rewards == [0.0, 0.0, 0.0, 0.0]  # the option gives TTRL's behaviour back


def test_difference_only_boxed_answers_count():
    # the shared extractor found "5" in three completions without \boxed{} (an answer phrase / the last number)
    answers = [["5", "5", "5", "6"]]
    comps = {"a0": [["the answer is 5", "so 5", "5", "\\boxed{6}"]]}
    b = batch({"a0": answers}, k=4, completions=comps)
    assert make("ttrl").rewards(b)["a0"].rewards == [[1.0, 1.0, 1.0, 0.0]]  # TTRL: label 5
    out = make(no_answer_votes=False).rewards(b)["a0"]
    assert out.pseudo_labels == ["6"] and out.rewards == [[0.0, 0.0, 0.0, 1.0]]
    out = make().rewards(b)["a0"]  # MM-UPT as released: three "None" against one "6"
    assert out.pseudo_labels == ["None"] and out.rewards == [[1.0, 1.0, 1.0, 0.0]]
    out = make(boxed_only=False, no_answer_votes=False).rewards(b)["a0"]
    assert out.pseudo_labels == ["5"] and out.rewards == [[1.0, 1.0, 1.0, 0.0]]


def test_with_both_options_off_it_is_ttrl():
    rng = random.Random(0)
    pool = ["1", "2", "3", "0.5", "\\frac{1}{2}", None]
    rollouts = {"a0": [[rng.choice(pool) for _ in range(6)] for _ in range(200)]}
    b = batch(rollouts, k=6)
    mm, tt = make(boxed_only=False, no_answer_votes=False).rewards(b)["a0"], make("ttrl").rewards(b)["a0"]
    assert mm.pseudo_labels == tt.pseudo_labels and mm.rewards == tt.rewards


# ---------------------------------------------------------------------------------- agents, labels, registration
def test_every_agent_is_rewarded_by_its_own_vote_only():
    for n in (1, 2, 3):
        m = make(n_agents=n)
        assert m.teachers() == {f"a{i}": [f"a{i}"] for i in range(n)}
    out = make(n_agents=3).rewards(batch({"a0": [["1", "1", "2"]], "a1": [["2", "2", "1"]], "a2": [[None, None, "2"]]},
                                         k=3))
    assert [out[a].pseudo_labels for a in ("a0", "a1", "a2")] == [["1"], ["2"], ["None"]]
    assert out["a0"].rewards == [[1.0, 1.0, 0.0]] and out["a1"].rewards == [[1.0, 1.0, 0.0]]
    assert out["a2"].rewards == [[1.0, 1.0, 0.0]]


class Untouchable(list):
    """Gold labels that fail the test when anything reads them."""

    def _read(self, *a, **k):
        raise AssertionError("mm-upt read the gold labels")

    __iter__ = __getitem__ = __len__ = __contains__ = __eq__ = __bool__ = _read  # type: ignore[assignment]


def test_never_reads_the_gold_labels():
    cls = METHODS.get("mm-upt")
    assert not cls.uses_labels and cls.method_kind() == "label-free"
    answers = {"a0": [["1", "2", "2"], [None, None, "3"]], "a1": [["4", "4", "9"], ["3", "3", "3"]]}
    b = RewardInput(step=0, problem_ids=["p0", "p1"], rollouts={n: ro(n, a) for n, a in answers.items()},
                    samples_per_prompt=3, labels=Untouchable())
    got = make(n_agents=2).rewards(b)
    unlabeled = make(n_agents=2).rewards(batch(answers, k=3))
    assert {a: (r.rewards, r.pseudo_labels) for a, r in got.items()} == \
        {a: (r.rewards, r.pseudo_labels) for a, r in unlabeled.items()}


def test_registered_and_listed_as_a_label_free_independent_method():
    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.report import methods as views

    assert "mm-upt" in METHODS.names()
    cls = METHODS.get("mm-upt")
    assert METHODS.get("MM_UPT") is cls and METHODS.get("mmupt") is cls
    assert cls.label == "MM-UPT" and cls.independent_agents and cls.min_agents == 1 and cls.max_agents is None
    assert cls.row_label("cross-family") == cls.row_label("single") == "MM-UPT"
    assert views.describe("mm-upt").independent
    res = CliRunner().invoke(app, ["ls", "methods"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "mm-upt" in res.output and "waltonfuture/MM-UPT" in res.output


def test_unknown_option_is_refused_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="no_answer_votes, boxed_only"):
        METHODS.get("mm-upt").parse_options({"votes_per_prompt": 16})


# ------------------------------------------------------------------------------------------------------ the recipe
def test_recipe_config_holds_the_reference_values_and_validates():
    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.train.runner import resolve

    cfg = load_config(RECIPE)
    assert cfg.method.name == "mm-upt"
    r, g = cfg.rollout, cfg.grpo
    assert (r.samples_per_prompt, r.temperature, r.top_p) == (10, 0.7, 0.99)
    assert (g.kl_coef, g.clip_low, g.clip_high, g.loss_agg) == (0.01, 0.2, 0.3, "token-mean")
    assert (g.weight_decay, tuple(g.betas), g.max_grad_norm, g.scale_std, g.adv_eps) == (0.01, (0.9, 0.999), 1.0,
                                                                                          True, 1e-6)
    plan = resolve(load_config(RECIPE, ["method.name=mm-upt", "cohort.name=three-agent"]))
    assert plan.method_cls is METHODS.get("mm-upt") and len(plan.config.cohort.agents) == 3
    res = CliRunner().invoke(app, ["validate", "--method", "mm-upt", "--config", str(RECIPE)])
    assert res.exit_code == 0, res.output
    assert "16 prompts x 10 generated (10 trained)" in " ".join(res.output.split())


# ------------------------------------------------------------------------------------------ one real training step
class MicroProblems(Profile):
    def training_problems(self, seed: int):
        from corl_bench.micro.tasks import problem_stream

        return problem_stream(seed)

    def render(self, problem, view: str, model=None, prompt=""):
        from corl_bench.micro.warmstart import render_prompt
        from corl_bench.rollout import Request

        return Request(text=render_prompt(problem.text(view)))


def test_two_agents_train_one_step_with_the_recipe(tiny_qwen, tmp_path):
    from corl_bench.train.agent import Agent
    from corl_bench.train.trainer import Trainer

    model, tok = tiny_qwen
    cfg = load_config(RECIPE, ["rollout.prompts_per_step=2", "rollout.max_new_tokens=8", "grpo.lr=1e-3",
                               "run.steps=1", "run.log_samples_every=1", f"run.output_dir={tmp_path}"])
    specs = agents(2)
    cls = METHODS.get("mm-upt")
    team = [Agent(s, copy.deepcopy(model), tok, cfg.grpo, temperature=cfg.rollout.temperature) for s in specs]
    trainer = Trainer(cfg, team, cls(cls.parse_options(cfg.method.options), specs), MicroProblems(), tmp_path)
    result = trainer.step(0)
    assert set(result.metrics) == {"a0", "a1"}
    for m in result.metrics.values():
        assert m["reward/mean"] is not None and 0.0 <= m["reward/mean"] <= 1.0
        assert m["label/coverage"] == 1.0  # every prompt gets a label ("None" when no answer wins)
        assert m["method/no_answer_label_fraction"] is not None and m["policy/kl"] is not None
    assert {s["agent"] for s in result.samples} == {"a0", "a1"}
    assert all(s["pseudo_label"] is not None for s in result.samples)
