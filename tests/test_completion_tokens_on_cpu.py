"""The method contract gives each completion's length in tokens (``Completion.n_tokens``, ``AgentRollouts.n_tokens``),
filled by the real engines on a tiny micro model: a length penalty counts tokens, not characters."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from corl_bench.config import AgentSpec, load_config
from corl_bench.method import AgentRewards, Method, RewardInput
from corl_bench.micro.tasks import problem_stream
from corl_bench.micro.warmstart import render_prompt
from corl_bench.profile import Profile
from corl_bench.rollout import SamplingParams, make_engine
from corl_bench.train.agent import Agent
from corl_bench.train.trainer import Trainer

CAP = 6


class _Micro(Profile):
    def __init__(self) -> None:
        pass

    def training_problems(self, seed: int):
        yield from problem_stream(seed)

    def render(self, problem, view: str, model=None, prompt="") -> str:
        return render_prompt(problem.text(view))


class LengthPenalty(Method):
    """A user's method: reward -tokens/100, and a spy on what the trainer trains on."""

    name = "length-penalty-test"
    seen: list = []

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        k = batch.samples_per_prompt
        out = {}
        for name, ro in batch.rollouts.items():
            out[name] = AgentRewards(rewards=[[-n / 100 for n in row[:k]] for row in ro.n_tokens])
        self.seen.append(batch)
        return out

    def advantages(self, batch, rewards, lengths):
        self.seen.append(lengths)
        return None


@pytest.mark.parametrize("backend", ["hf", "fast"])
def test_every_completion_of_a_real_engine_knows_its_token_count(tiny_qwen, backend):
    model, tok = tiny_qwen
    engine = make_engine(backend, model, tok)
    out = engine.generate([render_prompt("Uma has 40 apples. Uma sells 3. How many apples now?")] * 2,
                          SamplingParams(n=4, max_new_tokens=CAP, seed=3))
    comps = [c for row in out for c in row]
    assert all(c.n_tokens == len(c.token_ids) and 1 <= c.n_tokens <= CAP for c in comps)
    assert all(c.n_tokens == CAP for c in comps if not c.finished)  # a clipped completion used the whole cap
    assert any(len(c.text) != c.n_tokens for c in comps)  # characters are not tokens


@pytest.mark.parametrize("backend", ["hf", "fast"])
def test_a_method_reads_token_counts_aligned_with_the_trained_lengths(tiny_qwen, backend):
    model, tok = tiny_qwen
    cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=3",
                             f"rollout.max_new_tokens={CAP}", f"rollout.backend={backend}"])
    agent = Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo, backend=backend)
    method = LengthPenalty(LengthPenalty.parse_options({}), [agent.spec])
    method.seen = []
    Trainer(cfg, [agent], method, _Micro(), Path("/nonexistent")).step(0)
    batch, lengths = method.seen
    ro = batch.rollouts["a0"]
    assert [len(row) for row in ro.n_tokens] == [len(row) for row in ro.completions] == [3, 3]
    assert [n for row in ro.n_tokens for n in row] == lengths["a0"]  # what the update trains on, token for token
    assert all(n == CAP for row, fin in zip(ro.n_tokens, ro.finished) for n, f in zip(row, fin) if not f)
