"""The trainer-vs-engine log-prob gap (``engine/logp_gap_mean`` / ``engine/logp_gap_max``): the rollout engine's
log-probs of the sampled tokens against the training forward pass, per agent and update. Near zero while the engine
holds the trainer's weights, on every scoring path (whole batch, micro-batches, shared prefix); large, with one
warning, when the engine's weights go stale (a sync that did nothing)."""

from __future__ import annotations

import copy
import logging

import pytest

from corl_bench.config import AgentSpec, GRPOConfig, MemoryConfig
from corl_bench.rollout.base import SamplingParams
from corl_bench.train.diagnostics import agent_diagnostics
from tests.conftest import build_tiny

PROMPTS = ["Q: 12+7=? A:", "Q: 9-5=? A:"]
PARAMS = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=3)


def _step(agent):
    from corl_bench.train.boundary import TrainSample
    from corl_bench.rollout.request import Request

    comps = agent.generate(PROMPTS, PARAMS)
    agent.score([TrainSample(Request(text=p), c) for p, row in zip(PROMPTS, comps) for c in row])
    return agent.update([1.0, -1.0, 0.5, -0.5] * len(PROMPTS))


@pytest.mark.parametrize("backend", ["hf", "fast"])
@pytest.mark.parametrize("memory", [{}, {"micro_batch": 3}, {"shared_prefix": True}])
def test_the_gap_is_near_zero_while_the_engine_holds_the_trainers_weights_on_cpu(backend, memory):
    from corl_bench.train.agent import Agent

    model, tok = build_tiny("qwen2-bpe")
    agent = Agent(AgentSpec("a0", "tiny-qwen2-bpe"), model, tok, GRPOConfig(lr=1e-2), backend=backend,
                  memory=MemoryConfig(**memory))
    for _ in range(2):  # the second step samples from the updated, synced weights
        stats = _step(agent)
        assert stats.logp_gap_max is not None and stats.logp_gap_max < 1e-4, (backend, memory, stats.logp_gap_max)
        assert 0 <= stats.logp_gap_mean <= stats.logp_gap_max


def test_stale_engine_weights_show_in_the_gap_and_warn_once_on_cpu(caplog):
    from corl_bench.train.agent import Agent

    model, tok = build_tiny("qwen2-bpe")
    agent = Agent(AgentSpec("a0", "tiny-qwen2-bpe"), model, tok, GRPOConfig(lr=5e-2), backend="hf")
    engine = agent.engines["policy"]
    first = _step(agent)
    engine.model = copy.deepcopy(agent.model)  # the engine samples from a copy no update reaches (a sync that failed)
    _step(agent)  # the engine's copy equals the trainer here; the update then moves only the trainer
    with caplog.at_level(logging.WARNING, logger="corl_bench.train.agent"):
        stale = _step(agent)
        _step(agent)
    assert stale.logp_gap_mean > 100 * max(first.logp_gap_mean, 1e-7) and stale.logp_gap_max > 1e-3
    assert sum("weights look stale" in r.getMessage() for r in caplog.records) == 1
    row = agent_diagnostics(rollouts=_rollouts(), rewards=_rewards(), truth=["1"], k=1, own_votes=[],
                            other_votes={}, lengths=[1], update=stale, zero_std_fraction=0.0)
    assert row["engine/logp_gap_max"] == stale.logp_gap_max and row["engine/logp_gap_mean"] == stale.logp_gap_mean


def _rollouts():
    from corl_bench.method import AgentRollouts

    return AgentRollouts(agent="a0", answers=[["1"]], completions=[["1"]], finished=[[True]])


def _rewards():
    from corl_bench.method import AgentRewards

    return AgentRewards(rewards=[[1.0]])
