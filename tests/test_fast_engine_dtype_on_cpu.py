"""``rollout.engine_options: {dtype: bfloat16}`` on the fast engine: it decodes with its own bf16 copy of the agent's
fp32 module, refreshed after every update (a bf16 vLLM engine beside an fp32 trainer, on the CPU); the trainer keeps
fp32, the log-prob gap metric shows the engine's rounding."""

from __future__ import annotations

import copy

import pytest
import torch

from corl_bench.config import AgentSpec, GRPOConfig, load_config
from corl_bench.rollout import SamplingParams, make_engine
from corl_bench.train.agent import Agent
from corl_bench.train.boundary import TrainSample
from corl_bench.train.boundary import POLICY

PROMPTS = ["Ava has 12 coins.\n", "7+", "Tom has 40 apples.\n"]


def _agent(model, tok, **engine_options) -> Agent:
    return Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, GRPOConfig(lr=1e-2),
                 backend="fast", engine_options=engine_options)


def _greedy(engine) -> list:
    rows = engine.generate(PROMPTS, SamplingParams(n=1, greedy=True, max_new_tokens=8, logprobs=True))
    return [row[0].token_ids for row in rows]


def test_a_bf16_engine_decodes_with_a_bf16_copy_refreshed_after_every_update_on_cpu(tiny_qwen) -> None:
    model, tok = tiny_qwen
    agent = _agent(model, tok, dtype="bfloat16")
    engine = agent.engines[POLICY]
    assert engine.model is not agent.model
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in agent.model.parameters()} == {torch.float32}
    for _ in range(2):
        rows = agent.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=3))
        samples = [TrainSample(p, c) for p, row in zip(PROMPTS, rows) for c in row]
        agent.score(samples)
        upd = agent.update([1.0, -1.0, 0.5, -0.5, 0.25, -0.25], max_len=8)
        # the engine's log-probs are the bf16 copy's: close to the fp32 trainer's, not equal
        assert upd.logp_gap_mean is not None and 0 < upd.logp_gap_mean < 0.05
        # after the update the copy holds the trainer's new weights, cast
        for (name, p), q in zip(agent.model.named_parameters(), engine.model.parameters()):
            assert torch.equal(q, p.detach().to(torch.bfloat16)), name
    # and decodes as a fresh engine on a bf16 cast of the trained module, with eager attention, does
    cast = copy.deepcopy(agent.model).to(torch.bfloat16)
    cast.set_attn_implementation("eager")
    assert _greedy(engine) == _greedy(make_engine("fast", cast, tok))


def test_a_bf16_copy_attends_eagerly_and_its_lm_head_reads_a_contiguous_input_on_cpu(tiny_qwen) -> None:
    """The two CPU traps of a bf16 copy: PyTorch's CPU SDPA kernel is ~3x slower in bf16 than fp32 (the copy uses
    eager attention; the trainer keeps its own), and a strided (B, 1, H) input to the LM head makes ``linear``
    broadcast the weight into a ``bmm`` whose oneDNN allocation can fail and switch oneDNN off for the process
    (the copy's head gets a contiguous input, and oneDNN is on after generating)."""
    model, tok = tiny_qwen
    agent = _agent(model, tok, dtype="bfloat16")
    engine = agent.engines[POLICY]
    assert engine.model.config._attn_implementation == "eager"
    assert agent.model.config._attn_implementation == model.config._attn_implementation
    seen = []
    engine.model.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0]))
    assert torch.backends.mkldnn.enabled
    agent.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=1))
    assert seen and all(x.is_contiguous() for x in seen)
    assert torch.backends.mkldnn.enabled


def test_a_generation_that_switched_onednn_off_turns_it_back_on_with_a_warning_on_cpu(tiny_qwen, caplog) -> None:
    model, tok = tiny_qwen
    agent = _agent(model, tok, dtype="bfloat16")
    engine = agent.engines[POLICY]

    def fail_like_pytorch(module, args):  # what PyTorch's fallback does after a failed oneDNN product
        torch.backends.mkldnn.enabled = False

    handle = engine.model.register_forward_pre_hook(fail_like_pytorch)
    try:
        agent.generate(PROMPTS[:1], SamplingParams(n=1, greedy=True, max_new_tokens=2))
    finally:
        handle.remove()
        on = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = True
    assert on and "turned oneDNN off" in caplog.text


def test_the_default_and_a_same_dtype_engine_decode_with_the_agents_own_module_on_cpu(tiny_qwen) -> None:
    model, tok = tiny_qwen
    for options in ({}, {"dtype": "float32"}):
        agent = _agent(model, tok, **options)
        assert agent.engines[POLICY].model is agent.model


def test_an_unknown_dtype_is_refused_in_one_line_on_cpu(tiny_qwen) -> None:
    model, tok = tiny_qwen
    with pytest.raises(ValueError) as e:
        _agent(model, tok, dtype="bf16")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("rollout.engine_options.dtype must be one of bfloat16, float16, float32")


def test_the_option_passes_validation_as_an_engine_option_on_cpu() -> None:
    cfg = load_config(None, ["rollout.backend=fast", "rollout.engine_options={dtype: bfloat16}"])
    assert dict(cfg.rollout.engine_options) == {"dtype": "bfloat16"}
