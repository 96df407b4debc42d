"""The fast training path: the ``fast`` engine's rollouts train exactly as the ``hf`` engine's under greedy decoding
(token for token, weight for weight), and ``memory.shared_prefix`` (each prompt once, its K completions on the cached
prompt) gives the plain pass's log-probs, statistics, loss and update within float rounding, for every micro family,
with micro-batches and with a KL reference."""

from __future__ import annotations

import copy

import pytest
import torch

from corl_bench.config import MOVED_TO_MEMORY, AgentSpec, ConfigError, GRPOConfig, MemoryConfig, load_config
from corl_bench.rollout import Request, SamplingParams
from corl_bench.train import prefix
from corl_bench.train.agent import Agent
from corl_bench.train.boundary import TrainSample
from tests.conftest import build_tiny

PROMPTS = ["Ava has 12 coins.\n", "Tom has 40 apples. He eats 3 and finds 9. How many apples now?\n", "7+"]


def _agent(model, tok, backend="hf", **options):
    """An agent with ``options`` of the grpo and memory sections (each field goes to its own section)."""
    mem = {k: options.pop(k) for k in list(options) if k in MOVED_TO_MEMORY}
    return Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, GRPOConfig(lr=1e-2, **options),
                 backend=backend, memory=MemoryConfig(**mem))


def _train(agent: Agent, steps: int, params: SamplingParams) -> list:
    """Rollouts + one update per step with fixed advantages; returns the completions of every step."""
    seen = []
    for step in range(steps):
        rows = agent.generate(PROMPTS * 2, params)
        comps = [row[0] for row in rows]
        seen.append([c.token_ids for c in comps])
        agent.score([TrainSample(agent_req, c) for agent_req, c in zip(PROMPTS * 2, comps)])
        agent.update([1.0, -1.0, 0.5, -0.5, 0.25, -0.25], max_len=params.max_new_tokens)
    return seen


def test_fast_engine_rollouts_train_exactly_as_hf_under_greedy_decoding(tiny_qwen):
    model, tok = tiny_qwen
    params = SamplingParams(n=1, greedy=True, max_new_tokens=10)
    hf, fast = _agent(model, tok, "hf"), _agent(model, tok, "fast")
    assert _train(hf, 3, params) == _train(fast, 3, params)
    for (k, a), b in zip(hf.model.state_dict().items(), fast.model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("family", ["qwen2-bpe", "llama-bpe", "neox-bpe"])
def test_shared_prefix_logits_equal_the_full_forward(family):
    model, tok = build_tiny(family)
    prompts = ["Ava has 12 coins.\n", "Ava has 12 coins.\n", "Ava has 12 coins.\n", "7+", "7+"]
    comps = [[5, 9, 11], [5, 7], [8, 8, 8, 8, 8], [3], [4, 6, 2, 9]]
    p_ids = tok(prompts)["input_ids"]
    b = prefix.build(p_ids, comps, tok.pad_token_id, "cpu")
    assert b.prompt_ids.shape[0] == 2 and b.group.tolist() == [0, 0, 0, 1, 1]
    with torch.no_grad():
        shared = prefix.logits(model, b)
        for r, (p, c) in enumerate(zip(p_ids, comps)):
            full = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1: len(p) + len(c) - 1]
            assert torch.allclose(shared[r, : len(c)], full, atol=1e-5), (family, r)


def _scored_update(model, tok, samples, adv, **grpo):
    agent = _agent(model, tok, **grpo)
    if agent.reference is not None:  # a reference that differs from the policy, so the KL term is not zero
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in agent.reference.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=gen))
    agent.optimizer.step = lambda *a, **k: None  # compare gradients: AdamW's first step is lr * sign(g), which
    stats = agent.score(samples)                 # turns float rounding in a near-zero gradient into +-lr
    upd = agent.update(adv, max_len=12)
    return agent, stats, upd


@pytest.mark.parametrize("grpo", [{}, {"micro_batch": 4}, {"kl_coef": 0.1}, {"loss_agg": "seq-mean-token-mean"}],
                         ids=["whole", "micro4", "kl", "seq-mean"])
def test_shared_prefix_update_equals_the_plain_update(tiny_qwen, grpo):
    model, tok = tiny_qwen
    rows = _agent(model, tok).generate(PROMPTS, SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=3))
    samples = [TrainSample(Request(text=p), c) for p, row in zip(PROMPTS, rows) for c in row]
    adv = torch.linspace(-1, 1, len(samples)).tolist()
    a, sa, ua = _scored_update(model, tok, samples, adv, **grpo)
    b, sb, ub = _scored_update(model, tok, samples, adv, shared_prefix=True, **grpo)
    assert torch.allclose(torch.tensor(sa.entropy), torch.tensor(sb.entropy), atol=1e-5)
    assert torch.allclose(torch.tensor(sa.self_certainty), torch.tensor(sb.self_certainty), atol=1e-5)
    assert ua.n_tokens == ub.n_tokens
    if grpo.get("kl_coef"):
        assert ua.kl > 0
    assert abs(ua.loss - ub.loss) < 1e-5 and abs(ua.kl - ub.kl) < 1e-6
    assert abs(ua.grad_norm - ub.grad_norm) < 1e-4 * max(1.0, ua.grad_norm)
    for (k, x), y in zip(a.model.named_parameters(), b.model.parameters()):
        assert x.grad is not None and torch.allclose(x.grad, y.grad, rtol=1e-4, atol=1e-7), k


def test_shared_prefix_refuses_chunked_logits_and_checkpointing():
    for bad in ("memory.logit_chunk=8", "memory.gradient_checkpointing=true"):
        with pytest.raises(ConfigError, match="memory.shared_prefix cannot be combined"):
            load_config(None, ["memory.shared_prefix=true", bad])


def test_truncated_is_weight_is_the_capped_ratio_and_one_off_the_mask():
    from corl_bench.train import grpo

    logp = torch.log(torch.tensor([[0.5, 0.5, 0.2], [0.9, 0.1, 0.3]]))
    beh = torch.log(torch.tensor([[0.25, 0.5, 0.01], [0.9, 0.05, 0.3]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w = grpo.truncated_is_weight(logp, beh, mask, 3.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 3.0], [1.0, 2.0, 1.0]]), atol=1e-5)


@pytest.mark.parametrize("shared", [False, True], ids=["plain", "shared-prefix"])
@pytest.mark.parametrize("micro", [0, 4], ids=["whole", "micro4"])
def test_behaviour_is_correction_scales_the_policy_gradient_term(tiny_qwen, shared, micro):
    """The engine's own log-probs (the hf engine's equal the trainer's) leave the update as it was; log-probs
    log 2 lower double every token's term; log 5 lower are capped at 3."""
    import dataclasses
    import math

    model, tok = tiny_qwen
    rows = _agent(model, tok).generate(PROMPTS, SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=3))
    adv = torch.linspace(0.1, 1, 12).tolist()  # not summing to 0: the loss is then not 0

    def loss(cap: float, shift: float) -> float:
        samples = [TrainSample(Request(text=p), dataclasses.replace(c, logprobs=tuple(x - shift for x in c.logprobs)))
                   for p, row in zip(PROMPTS, rows) for c in row]
        agent = _agent(model, tok, behaviour_is_cap=cap, shared_prefix=shared, micro_batch=micro)
        agent.score(samples)
        return agent.update(adv, max_len=12).loss

    base = loss(0.0, 0.0)
    assert abs(base) > 1e-3  # a loss that a factor can be seen in
    assert abs(loss(3.0, 0.0) - base) < 1e-5
    assert abs(loss(3.0, math.log(2.0)) - 2 * base) < 1e-4
    assert abs(loss(3.0, math.log(5.0)) - 3 * base) < 1e-4


def test_behaviour_is_cap_below_one_is_refused():
    with pytest.raises(ConfigError, match="grpo.behaviour_is_cap"):
        load_config(None, ["grpo.behaviour_is_cap=0.5"])
