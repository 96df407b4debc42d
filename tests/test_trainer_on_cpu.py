"""The training step with real tiny agents and planted test doubles: who rewards whom, and label blindness."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from corl_bench.train.agent import Agent
from corl_bench.train.boundary import SampleStats, TrainSample, UpdateStats
from corl_bench.config import AgentSpec, load_config
from corl_bench.micro.tasks import problem_stream
from corl_bench.micro.warmstart import render_prompt
from corl_bench.profile import Profile as BaseProfile
from corl_bench.registries import METHODS
from corl_bench.rollout import Completion
from corl_bench.train.trainer import Trainer


class Profile(BaseProfile):
    """Test double of a profile: the real micro stream, optionally with scrambled hidden answers."""

    def __init__(self, scramble: bool = False) -> None:
        self.scramble = scramble

    def training_problems(self, seed: int):
        for p in problem_stream(seed):
            yield _Scrambled(p) if self.scramble else p

    def render(self, problem, view: str, model=None, prompt="") -> str:
        return render_prompt(problem.text(view))


class _Scrambled:
    def __init__(self, p) -> None:
        self._p, self.id = p, p.id
        self.answer = str(int(p.answer) + 1)  # every hidden answer is now wrong

    def text(self, view: str) -> str:
        return self._p.text(view)


class PlantedAgent:
    """A peer that always answers the same thing (cycling through ``answers`` per sample) and never learns."""

    def __init__(self, name: str, answers: list[str], offset: int = 1) -> None:
        self.name, self.spec = name, AgentSpec(name=name, family="qwen2-bpe", seed_offset=offset)
        self.answers = answers
        self.updates: list[torch.Tensor] = []

    def generate(self, prompts, params, model="policy"):
        return [[Completion((5, 6), (), f"1+1=2;\\boxed{{{self.answers[j % len(self.answers)]}}}", True)
                 for j in range(params.n)] for _ in prompts]

    def score(self, samples):
        n = len(samples)
        return SampleStats(entropy=[0.5] * n, self_certainty=[0.25] * n)

    def update(self, advantages, max_len=None):
        self.updates.append(torch.tensor(advantages))
        return UpdateStats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)

    def discard(self):
        pass


def make_trainer(agents, method_name: str, profile=None, **overrides) -> tuple[Trainer, list]:
    cfg = load_config(None, ["rollout.prompts_per_step=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12",
                             "run.log_samples_every=1"] + [f"{k}={v}" for k, v in overrides.items()])
    cls = METHODS.get(method_name)
    method = cls(cls.parse_options({}), [a.spec for a in agents])
    seen = []
    original = method.rewards

    def spy(batch):
        out = original(batch)
        seen.append((batch, out))
        return out

    method.rewards = spy
    return Trainer(cfg, agents, method, profile or Profile(), Path("/nonexistent")), seen


@pytest.fixture()
def real_agent(tiny_qwen):
    model, tok = tiny_qwen
    cfg = load_config(None, ["grpo.lr=1e-3"])
    return Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo)


def test_real_agent_is_rewarded_only_by_its_planted_peer(real_agent):
    peer = PlantedAgent("a1", ["42"])
    trainer, seen = make_trainer([real_agent, peer], "corl")
    trainer.step(0)
    batch, out = seen[0]
    assert batch.labels is None  # a label-free method never receives the truth
    assert out["a0"].pseudo_labels == ["42"] * 4  # whatever the truth is
    own = batch.rollouts["a0"].answers
    assert out["a0"].rewards == [[1.0 if a == "42" else 0.0 for a in row[:4]] for row in own]
    # and the planted peer is rewarded by the real agent's votes, not by anything else
    from corl_bench.grading.verifier import plurality_vote

    assert out["a1"].pseudo_labels == [plurality_vote(row).label for row in own]


def test_planted_peer_with_mixed_answers_gives_rewards_and_advantages_to_the_learner():
    learner = PlantedAgent("a0", ["42", "7", "42", "9"], offset=0)
    peer = PlantedAgent("a1", ["42"])
    trainer, seen = make_trainer([learner, peer], "corl")
    result = trainer.step(0)
    assert seen[0][1]["a0"].rewards == [[1.0, 0.0, 1.0, 0.0]] * 4
    adv = learner.updates[0].reshape(4, 4)
    assert torch.allclose(adv[0], torch.tensor([0.866, -0.866, 0.866, -0.866]), atol=1e-3)
    m = result.metrics["a0"]
    assert m["reward/mean"] == 0.5 and m["adv/zero_std_fraction"] == 0.0
    assert m["peer/agreement"] == 1.0  # a0's vote (42, first seen in a 2-2 tie) equals the peer's
    assert result.samples and {"prompt", "completion", "extracted", "pseudo_label", "truth", "reward"} <= set(
        result.samples[0])


class OracleAgent(PlantedAgent):
    """Answers the (unscrambled) truth on its first samples and a wrong answer on the rest."""

    def __init__(self, name: str, offset: int, n_right: int) -> None:
        super().__init__(name, ["0"], offset)
        self.truth = {render_prompt(p.text("original")): p.answer for p, _ in zip(problem_stream(0), range(64))}
        self.n_right = n_right

    def generate(self, prompts, params, model="policy"):
        return [[Completion((5,), (), f"\\boxed{{{self.truth[str(p)] if j < self.n_right else '99'}}}", True)
                 for j in range(params.n)] for p in prompts]


@pytest.mark.parametrize("method", ["corl", "ttrl"])
def test_scrambling_the_hidden_answers_does_not_change_label_free_rewards(method):
    def run(scramble: bool):
        agents = [OracleAgent("a0", 0, n_right=3), OracleAgent("a1", 1, n_right=1)]
        trainer, seen = make_trainer(agents, method, profile=Profile(scramble=scramble))
        result = trainer.step(0)
        return {n: r.rewards for n, r in seen[0][1].items()}, result.metrics

    (plain, m_plain), (scrambled, m_scr) = run(False), run(True)
    assert plain == scrambled
    assert any(r == 1.0 for row in plain["a0"] for r in row)  # the rewards are not trivially all zero
    # ...while the monitoring diagnostics, which do use the truth, see the difference
    assert m_plain["a0"]["reward/true_mean"] == 0.75 and m_scr["a0"]["reward/true_mean"] == 0.0
    assert [m_plain[a]["label/accuracy"] for a in ("a0", "a1")] != [m_scr[a]["label/accuracy"] for a in ("a0", "a1")]


def test_scrambling_the_hidden_answers_changes_gt_reward():
    def rewards(scramble: bool):
        agents = [PlantedAgent("a0", ["%d" % i for i in range(100)], offset=0)]
        trainer, seen = make_trainer(agents, "gt-reward", profile=Profile(scramble=scramble),
                                     **{"rollout.samples_per_prompt": 100})
        trainer.step(0)
        return seen[0][1]["a0"].rewards

    assert rewards(False) != rewards(True)


def test_update_moves_parameters_and_zero_advantage_does_not(real_agent):
    prompts = [render_prompt("Uma has 40 apples. Uma finds 9 and sells 3. How many apples now?")] * 2
    comps = [c for row in real_agent.generate(prompts[:1], __import__("corl_bench.rollout", fromlist=["x"])
             .SamplingParams(n=2, max_new_tokens=6, seed=0)) for c in row]
    before = [p.detach().clone() for p in real_agent.model.parameters()]
    samples = [TrainSample(p, c) for p, c in zip(prompts, comps)]
    real_agent.score(samples)
    real_agent.update([0.0, 0.0])
    assert all(torch.equal(a, b) for a, b in zip(before, real_agent.model.parameters()))
    real_agent.score(samples)
    stats = real_agent.update([1.0, -1.0])
    assert any(not torch.equal(a, b) for a, b in zip(before, real_agent.model.parameters()))
    assert stats.grad_norm > 0 and stats.entropy > 0 and stats.n_tokens == sum(len(c.token_ids) for c in comps)


def test_positive_advantage_raises_the_completions_logprob(real_agent):
    from corl_bench.rollout import SamplingParams

    prompt = render_prompt("Ben has 12 coins. Ben loses 4 and wins 8. How many coins now?")
    comp = real_agent.generate([prompt], SamplingParams(n=1, max_new_tokens=6, seed=1))[0][0]

    def logp() -> float:
        ids, att, cmask, _ = real_agent._batch([prompt], [comp])
        with torch.no_grad():
            lp = torch.log_softmax(real_agent.model(input_ids=ids, attention_mask=att).logits[:, :-1], -1)
        return float((lp.gather(-1, ids[:, 1:, None]).squeeze(-1) * cmask[:, 1:]).sum())

    before = logp()
    for _ in range(3):
        real_agent.score([TrainSample(prompt, comp)] * 2)
        real_agent.update([1.0, 1.0])
    assert logp() > before


def test_agents_see_the_same_problems_in_the_same_order_but_sample_differently(tiny_qwen):
    """Same-family cohort: one checkpoint, two agents; prompts are shared, rollout randomness is not."""
    model, tok = tiny_qwen
    cfg = load_config(None, ["grpo.lr=1e-3"])
    agents = [Agent(AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i), copy.deepcopy(model), tok, cfg.grpo)
              for i in range(2)]
    trainer, seen = make_trainer(agents, "corl")
    trainer.step(0)
    batch, _ = seen[0]
    assert list(batch.rollouts) == ["a0", "a1"] and len(batch.problem_ids) == 4
    a0, a1 = batch.rollouts["a0"].completions, batch.rollouts["a1"].completions
    assert a0 != a1  # different sampling seeds
    # a rerun of the same step with the same seeds reproduces every completion
    trainer2, seen2 = make_trainer([Agent(a.spec, copy.deepcopy(model), tok, cfg.grpo) for a in agents], "corl")
    trainer2.step(0)
    assert seen2[0][0].rollouts["a0"].completions == a0 and seen2[0][0].problem_ids == batch.problem_ids


@pytest.mark.parametrize("method,expected", [("rent", -0.5), ("intuitor", 0.25)])
def test_trainer_hands_the_forward_pass_statistics_to_intrinsic_methods(method, expected):
    agent = PlantedAgent("a0", ["42"], offset=0)  # its forward pass reports entropy 0.5, self-certainty 0.25
    trainer, seen = make_trainer([agent], method)
    trainer.step(0)
    assert seen[0][1]["a0"].rewards == [[expected] * 4] * 4


def test_real_forward_pass_statistics_match_a_recomputation(real_agent):
    from corl_bench.train import grpo
    from corl_bench.rollout import SamplingParams

    prompt = render_prompt("Ava has 77 pens. Ava gets 6 and buys 5. How many pens now?")
    comps = real_agent.generate([prompt], SamplingParams(n=2, max_new_tokens=6, seed=4))[0]
    stats = real_agent.score([TrainSample(prompt, c) for c in comps])
    ids, att, cmask, _ = real_agent._batch([prompt] * 2, comps)
    with torch.no_grad():
        logits = real_agent.model(input_ids=ids, attention_mask=att).logits[:, :-1]
    mask = cmask[:, 1:]
    assert torch.allclose(torch.tensor(stats.entropy),
                          grpo.masked_seq_mean(grpo.entropy_from_logits(logits), mask), atol=1e-5)
    assert torch.allclose(torch.tensor(stats.self_certainty),
                          grpo.masked_seq_mean(grpo.self_certainty_from_logits(logits), mask), atol=1e-5)
    real_agent.discard()


class TeacherDouble(PlantedAgent):
    """A planted agent whose EMA teacher answers ``teacher_answer`` and records its EMA rates."""

    def __init__(self, name, answers, teacher_answer):
        super().__init__(name, answers, offset=0)
        self.teacher_answer, self.alphas = teacher_answer, []

    def generate(self, prompts, params, model="policy"):
        if model == "teacher":
            return [[Completion((5,), (), f"\\boxed{{{self.teacher_answer}}}", True)] * params.n for _ in prompts]
        return super().generate(prompts, params)

    def update_auxiliary(self, name, alpha):
        self.alphas.append((name, alpha))


def test_trainer_generates_teacher_rollouts_and_updates_the_teacher_after_each_step():
    agent = TeacherDouble("a0", ["5", "6", "5", "5"], teacher_answer="5")
    trainer, seen = make_trainer([agent], "co-rewarding-ii", **{"run.steps": 4})
    trainer.step(0)
    trainer.step(1)
    batch, out = seen[0]
    assert batch.teacher_rollouts["a0"].answers == [["5"] * 4] * 4
    assert out["a0"].rewards == [[1.0, 0.0, 1.0, 1.0]] * 4
    assert [n for n, _ in agent.alphas] == ["teacher", "teacher"]
    assert [a for _, a in agent.alphas] == pytest.approx([0.01, 1e-5 + 0.5 * (0.01 - 1e-5) * (1 + math.cos(math.pi / 4))])


def test_agent_ema_update_moves_the_teacher_toward_the_policy(tiny_qwen):
    model, tok = tiny_qwen
    cfg = load_config(None, [])
    teacher = METHODS.get("co-rewarding-ii").auxiliary
    agent = Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo, auxiliary=teacher)
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(1.0)
    before = [t.detach().clone() for t in agent.reference.parameters()]
    agent.update_auxiliary("teacher", 0.25)
    for t, b, p in zip(agent.reference.parameters(), before, agent.model.parameters()):
        assert torch.allclose(t, 0.25 * p + 0.75 * b, atol=1e-6)
    assert agent.auxiliary["teacher"] is agent.reference and agent.engines["teacher"].model is agent.reference


def test_comas_extra_generations_join_the_authors_forward_pass_and_update(tiny_qwen):
    model, tok = tiny_qwen
    cfg = load_config(None, [])
    agents = [Agent(AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i), copy.deepcopy(model), tok, cfg.grpo)
              for i in range(2)]
    steps = {}
    for a in agents:
        original = a.update

        def spy(adv, max_len=None, _a=a, _orig=original):
            steps[_a.name] = (_a._pending.logp.shape[0], torch.tensor(adv))
            return _orig(adv, max_len=max_len)

        a.update = spy
    trainer, seen = make_trainer(agents, "comas", **{"method.options": "{score_parser: fork, score_max_tokens: 4}"})
    result = trainer.step(0)
    batch, out = seen[0]
    for a in agents:
        n_main, n_extra = 4 * 4, len(out[a.name].extra)
        assert n_extra == 2 * 16  # 32 discussions: each agent critiques 16 and scores 16
        n_rows, adv = steps[a.name]
        assert n_rows == n_main + n_extra and adv.shape == (n_main + n_extra,)
        assert result.metrics[a.name]["method/extra_samples"] == n_extra
    # the extra generations are the agents' own (policy) samples with a per-role seed: rerunning reproduces them
    trainer2, seen2 = make_trainer([Agent(AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i),
                                          copy.deepcopy(model), tok, cfg.grpo) for i in range(2)], "comas",
                                   **{"method.options": "{score_parser: fork, score_max_tokens: 4}"})
    trainer2.step(0)
    assert [e.completion.text for e in seen2[0][1]["a0"].extra] == [e.completion.text for e in out["a0"].extra]


def test_method_with_extra_samples_but_no_advantages_is_refused(tiny_qwen):
    from corl_bench.method import ExtraSample

    class Extra(METHODS.get("corl")):
        def rewards(self, batch):
            out = super().rewards(batch)
            out["a0"].extra.append(ExtraSample("p", Completion((5,), (), "x", True), 1.0, "x"))
            return out

    model, tok = tiny_qwen
    cfg = load_config(None, [])
    real = Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo)
    trainer, _ = make_trainer([real, PlantedAgent("a1", ["1"])], "corl")
    trainer.method = Extra(trainer.method.options, trainer.method.agents)
    with pytest.raises(RuntimeError, match="no advantages for them; override Method.advantages"):
        trainer.step(0)
