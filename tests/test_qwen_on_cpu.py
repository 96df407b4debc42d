"""Fidelity of the Qwen2.5-Coder model entries (issue 40): the dequantised model keeps the GGUF's architecture,
tokenizer and chat template; greedy completions of the ``fast`` and ``hf`` rollout engines equal ``transformers``'
``generate`` token for token on 20 GSM8K problems; the engines' log-probs of sampled tokens equal the training forward
within 1e-5; a trained checkpoint survives save -> load exactly.

Each test runs per entry (``-k 0.5b`` or ``-k 1.5b`` picks one); an entry whose packages are not installed is
skipped with its install command. The GSM8K tests need the data (``$CORL_BENCH_DATA``, else ``../shared/data``).
``QWEN_FIDELITY_TOKENS`` new tokens per problem (default 32) keep one entry's greedy test within minutes here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from corl_bench.config import AgentSpec, ConfigError, GRPOConfig, MemoryConfig
from corl_bench.models import entries as models

pytestmark = pytest.mark.slow
QWEN = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
TOKENS = int(os.environ.get("QWEN_FIDELITY_TOKENS", "32"))
PARAMS = {"qwen2.5-coder-0.5b": 630_167_424, "qwen2.5-coder-1.5b": 1_777_088_000}
"""parameters after dequantising (measured here; fit.KNOWN leaves the q/k/v biases out)"""


def _missing(name: str) -> str:
    """'' when the entry's packages are installed, else the skip reason naming the install command."""
    try:
        models.check_entry(models.ENTRIES[name])
    except ConfigError:
        return f"{name} needs its packages: make qwen (or {models.ENTRIES[name].install})"
    return ""


def _data_dir() -> Path | None:
    env = os.environ.get("CORL_BENCH_DATA")
    for d in ([Path(env)] if env else []) + [Path(__file__).resolve().parents[2] / "shared" / "data"]:
        if (d / "gsm8k" / "test.jsonl").is_file():
            return d
    return None


@pytest.fixture(scope="module", params=QWEN, ids=["0.5b", "1.5b"])
def entry(request):
    """(entry name, holder): the holder keeps the loaded model and tokenizer; one entry at a time (the 1.5B is 7 GB
    of fp32), freed when its tests are done or when a test takes the model over."""
    reason = _missing(request.param)
    if reason:
        pytest.skip(reason)
    holder: dict = {}
    yield request.param, holder
    holder.clear()


def _loaded(entry) -> tuple:
    name, holder = entry
    if "model" not in holder:
        from corl_bench.models.load import load_model

        holder["model"], holder["tok"] = load_model(name)
    return holder["model"], holder["tok"]


@pytest.fixture()
def qwen(entry):
    """(entry name, model, tokenizer) of the module's entry."""
    return (entry[0], *_loaded(entry))


@pytest.fixture(scope="module")
def gsm8k_prompts(entry):
    """The first 20 GSM8K test problems as the hf profile asks them (the paper's turn in the model's template)."""
    data = _data_dir()
    if data is None:
        pytest.skip("GSM8K data not found: set CORL_BENCH_DATA to the folder that holds gsm8k/test.jsonl")
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec
    from corl_bench.hf.data import INSTRUCTION
    from corl_bench.hf.profile import chat_prompt

    spec = get_spec("gsm8k")
    items = build_items(spec, load_rows(spec, data))[:20]
    _, tok = _loaded(entry)
    return [chat_prompt(tok, f"{it.problem}\n {INSTRUCTION}") for it in items]


def test_the_entry_keeps_the_ggufs_architecture_tokenizer_and_chat_template(qwen):
    from corl_bench.hf import fit
    from corl_bench.hf.profile import chat_prompt
    from corl_bench.models.load import default_cache_root

    name, model, tok = qwen
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    folder = models.entry_dir(name, default_cache_root())
    assert fit.from_config(folder / "config.json", name) == fit.KNOWN[name]  # the estimate before dequantising
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()  # untied, as KNOWN says
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left" and tok.pad_token_id is not None
    prompt = chat_prompt(tok, "What is 17 + 26?")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>user\nWhat is 17 + 26?"
                                                                        "<|im_end|>\n<|im_start|>assistant\n")


def test_greedy_fast_and_hf_engines_equal_transformers_generate_on_20_gsm8k_problems(qwen, gsm8k_prompts):
    """The reference is ``generate`` on each prompt alone (no padding); the engines decode all 20 in one left-padded
    batch, as a rollout does."""
    import torch

    from corl_bench.rollout import SamplingParams, make_engine

    _, model, tok = qwen
    want = []
    with torch.no_grad():
        for p in gsm8k_prompts:
            ids = tok(p, return_tensors="pt")
            out = model.generate(**ids, do_sample=False, temperature=None, top_p=None, top_k=None,
                                 max_new_tokens=TOKENS, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            gen = out[0, ids["input_ids"].shape[1]:].tolist()
            want.append(gen[: gen.index(tok.eos_token_id) + 1] if tok.eos_token_id in gen else gen)
    params = SamplingParams(n=1, greedy=True, max_new_tokens=TOKENS)
    for backend in ("fast", "hf"):
        got = [row[0].token_ids for row in make_engine(backend, model, tok).generate(gsm8k_prompts, params)]
        diff = [i for i, (g, w) in enumerate(zip(got, want)) if list(g) != w]
        assert not diff, (backend, diff[:3], [(list(got[i]), want[i]) for i in diff[:1]])
    assert sum(len(w) for w in want) > 10 * TOKENS  # the completions are real text, not an immediate stop


@pytest.mark.parametrize("backend", ["fast", "hf"])
def test_engine_logprobs_of_sampled_tokens_equal_the_training_forward_within_1e_5(qwen, backend):
    """The agent's own path: the engine samples (temperature 1, as training does), score() runs the training forward
    (train mode, the padded batch); the two log-probs of every sampled token differ by at most 1e-5."""

    from corl_bench.rollout import SamplingParams
    from corl_bench.rollout.request import Request
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample
    from corl_bench.hf.profile import chat_prompt

    name, model, tok = qwen
    agent = Agent(AgentSpec("a0", name), model, tok, GRPOConfig(lr=1e-6), backend=backend)
    prompts = [chat_prompt(tok, q) for q in ("What is 17 + 26?", "Tom has 5 apples and eats 2. How many are left?")]
    rows = agent.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=24, seed=3))
    agent.score([TrainSample(Request(text=p), c) for p, row in zip(prompts, rows) for c in row])
    fwd = agent._pending
    mask = fwd.mask.bool()
    gap = (fwd.logp.detach() - fwd.behaviour).abs()[mask]
    agent.discard()
    model.eval()
    assert gap.numel() == sum(len(c.token_ids) for row in rows for c in row) > 20
    assert all(math.isfinite(x) for x in fwd.behaviour[mask].tolist())
    print(f"{name} {backend}: max |engine - training| log-prob over {gap.numel()} sampled tokens: "
          f"{float(gap.max()):.3g}")
    assert float(gap.max()) <= 1e-5, float(gap.max())
    del fwd


def _digests(state) -> dict[str, str]:
    """sha256 of every tensor's bytes (compares two models exactly without holding both)."""
    import hashlib

    import torch

    return {k: hashlib.sha256(v.detach().contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()
            for k, v in state.items()}


def test_a_trained_checkpoint_survives_save_and_load_exactly(entry, tmp_path):
    """One real GRPO update (full fine-tuning for the 0.5B, LoRA rank 8 merged into the weights for the 1.5B, as the
    cohorts train them), then Agent.save -> load_folder (how ``corl-bench eval RUN_DIR`` reads it): every tensor
    equal (by the sha256 of its bytes), and the same greedy completions. Runs last: it trains the module's model in
    place and frees it before loading the saved copy (one model in memory at a time)."""
    import gc

    import torch

    from corl_bench.hf.profile import chat_prompt
    from corl_bench.models.load import load_folder
    from corl_bench.models.lora import has_lora, merged_state_dict
    from corl_bench.rollout import SamplingParams, make_engine
    from corl_bench.rollout.request import Request
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    name, holder = entry
    _loaded(entry)
    model, tok = holder.pop("model"), holder["tok"]  # trained in place below, then freed
    lora = 8 if name.endswith("1.5b") else 0
    probe = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight")
    before = {k: model.state_dict()[k].clone() for k in probe}
    agent = Agent(AgentSpec("a0", name, lora_rank=lora), model, tok, GRPOConfig(lr=1e-5), backend="fast",
                  memory=MemoryConfig(micro_batch=2, logit_chunk=16))
    prompts = [chat_prompt(tok, q) for q in ("What is 17 + 26?", "What is 9 - 5?")]
    rows = agent.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=16, seed=1))
    agent.score([TrainSample(Request(text=p), c) for p, row in zip(prompts, rows) for c in row])
    agent.update([1.0, -1.0, 0.5, -0.5])
    agent.optimizer.state.clear()  # AdamW's moments and the gradients are not part of the saved model
    agent.optimizer.zero_grad(set_to_none=True)
    greedy = SamplingParams(n=1, greedy=True, max_new_tokens=16)
    want_text = [r[0].token_ids for r in agent.generate(prompts, greedy)]
    state = merged_state_dict(agent.model) if has_lora(agent.model) else agent.model.state_dict()
    assert all(not torch.equal(state[k], before[k]) for k in probe)  # it trained (LoRA: the merged delta)
    want = _digests(state)
    agent.save(tmp_path / "ckpt")
    del state, agent, model, before  # one model in memory at a time
    gc.collect()
    loaded, tok2 = load_folder(tmp_path / "ckpt")
    got = _digests(loaded.state_dict())
    assert set(got) == set(want) and [k for k in want if got[k] != want[k]] == []
    assert [r[0].token_ids for r in make_engine("fast", loaded, tok2).generate(prompts, greedy)] == want_text
