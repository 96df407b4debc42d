"""Real Hugging Face VLM architectures through corl-bench (issue 24): tiny random checkpoints of Qwen2-VL, Qwen2.5-VL,
InternVL, LLaVA, LLaVA-NeXT, Idefics3 and Gemma-3 (:mod:`corl_bench.models.tiny_vlm`, real config, model and
processor classes) load through :func:`corl_bench.models.load.load_model` with their own processor as the codec, and:

* the prompt ids (and image tensors) corl-bench builds equal what the processor's ``apply_chat_template`` gives for
  the same messages and image; the chat template places the image;
* the engine's log-probs of sampled tokens equal the training forward pass (1e-5); an update moves the vision tower,
  and ``model.freeze_vision`` keeps it fixed while the language model learns;
* a saved agent reloads to the same processor, prompt ids and logits.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from corl_bench.config import AgentSpec, GRPOConfig
from corl_bench.models.hf_vlm import ProcessorCodec
from corl_bench.models.images import codec_of
from corl_bench.models.tiny_vlm import ARCHS, build, noise_image as image
from corl_bench.rollout import SamplingParams, make_engine
from corl_bench.rollout.request import Request

_CACHE: dict[str, tuple[Path, Any, Any]] = {}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """arch -> (folder, model, tokenizer carrying its ProcessorCodec), built and loaded once per module."""
    from corl_bench.models.load import load_model

    root = tmp_path_factory.mktemp("real_vlm")

    def get(arch: str) -> tuple[Path, Any, Any]:
        if arch not in _CACHE:
            folder = build(arch, root / arch, seed=0)
            _CACHE[arch] = (folder, *load_model(str(folder)))
        return _CACHE[arch]

    yield get
    _CACHE.clear()


def requests(tok: Any, n: int = 2) -> list[Request]:
    codec = codec_of(tok)
    sizes = [(40, 30), (24, 56), (32, 32)]
    questions = ["What is 2+3?", "How many squares are shaded?", "Which shape is larger?"]
    return [Request(text=codec.chat(questions[i], 1), images=(image(*sizes[i], i),)) for i in range(n)]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_prompt_ids_and_image_inputs_equal_the_processors_chat_template_on_cpu(loaded, arch):
    _, _, tok = loaded(arch)
    codec = codec_of(tok)
    assert isinstance(codec, ProcessorCodec) and tok.padding_side == "left"
    im = image(40, 30, 0)
    messages = [{"role": "user", "content": [{"type": "image", "image": im},
                                             {"type": "text", "text": "What is 2+3?"}]}]
    ref = codec.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                              return_tensors="pt")
    ids, vision = codec.prompt(Request(text=codec.chat("What is 2+3?", 1), images=(im,)))
    assert ids == ref["input_ids"][0].tolist()
    from corl_bench.models.load import load_tokenizer  # a prompt rendered before the model loads (Ray's controller)

    folder = loaded(arch)[0]
    alone = codec_of(load_tokenizer(folder))
    assert isinstance(alone, ProcessorCodec) and alone.chat("What is 2+3?", 1) == codec.chat("What is 2+3?", 1)
    batch = codec.collate([vision], torch.tensor([ids]))
    assert set(batch) == set(ref) - {"input_ids", "attention_mask"}
    assert all(torch.equal(batch[k], ref[k]) for k in batch)
    assert codec.image_token_id in ids and set(codec.layout_ids) <= set(ids)
    # a text without the template's placeholder gets the image block in front of it (images first)
    plain, _ = codec.prompt(Request(text="What is 2+3?", images=(im,)))
    assert plain.count(codec.image_token_id) == ids.count(codec.image_token_id)
    # a token-id request must already hold its image block
    again, _ = codec.prompt(Request(token_ids=tuple(ids), images=(im,)))
    assert again == ids
    with pytest.raises(ValueError, match="image tokens"):
        codec.prompt(Request(token_ids=tuple(t for t in ids if t != codec.image_token_id), images=(im,)))


@pytest.mark.parametrize("arch", list(ARCHS))
def test_unexpanded_prompt_ids_expand_through_the_processor_to_the_prompt_ids_on_cpu(loaded, arch):
    """What the vllm engine sends (the ids before the image placeholders are expanded): the processor run on their
    text with the images gives exactly the ids the training forward pass uses. Where the processor's block is a run
    of image tokens (Qwen2-VL, Qwen2.5-VL, LLaVA), collapsing the runs of a token-id request gives the same ids."""
    _, _, tok = loaded(arch)
    codec = codec_of(tok)
    for req in requests(tok, 2):
        ids, _ = codec.prompt(req)
        short = codec.unexpanded(req)
        assert len(short) < len(ids)
        again = codec._call(tok.decode(short), codec.images(req))["input_ids"][0].tolist()
        assert again == ids, arch
        if arch in ("qwen2-vl", "qwen2.5-vl", "llava"):
            assert codec.unexpanded(Request(token_ids=ids, images=req.images)) == short


@pytest.mark.parametrize("arch", list(ARCHS))
def test_engine_log_probs_equal_the_training_forward_and_freeze_vision_keeps_the_tower_on_cpu(loaded, arch):
    from corl_bench.models.hf_vlm import VISION_TOWERS
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    _, model, tok = loaded(arch)
    reqs = requests(tok, 2)  # two image sizes in one padded batch
    moved = {}
    for freeze in (False, True):
        ag = Agent(AgentSpec("a0", arch), copy.deepcopy(model), tok, GRPOConfig(lr=1e-2), freeze_vision=freeze)
        comps = ag.generate(reqs, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=1))
        assert not set(codec_of(tok).layout_ids) & {t for row in comps for c in row for t in c.token_ids}
        samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
        fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
        engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
        gap = (fwd.logp.detach()[fwd.mask.bool()] - engine_lp).abs().max().item()
        assert gap < 1e-5, f"{arch}: engine vs training log-prob gap {gap:.2e}"
        before = {n: p.detach().clone() for n, p in ag.model.named_parameters()}
        ag.score(samples)
        assert ag.update([1.0, -1.0, 0.5, -0.5]).grad_norm > 0
        changed = {n for n, p in ag.model.named_parameters() if not torch.equal(p, before[n])}
        tower = {n for n in before if any(f".{t}." in f".{n}" for t in VISION_TOWERS)}
        assert tower, f"{arch}: no vision tower found"
        moved[freeze] = (changed & tower, changed - tower)
    assert moved[False][0] and moved[False][1]  # the gradient reaches the vision tower through the image tokens
    assert not moved[True][0] and moved[True][1]  # frozen: the tower keeps its weights, the language model learns


@pytest.mark.parametrize("arch", ["qwen2.5-vl", "internvl", "gemma3"])
def test_a_saved_agent_reloads_to_the_same_prompts_and_logits_on_cpu(loaded, arch, tmp_path):
    from corl_bench.models.load import load_model
    from corl_bench.rollout.encode import Processor, encode, left_padded
    from corl_bench.train.agent import Agent

    _, model, tok = loaded(arch)
    ag = Agent(AgentSpec("a0", arch), copy.deepcopy(model), tok, GRPOConfig())
    ag.save(tmp_path / "final")
    model2, tok2 = load_model(str(tmp_path / "final"))
    assert type(model2) is type(model) and isinstance(codec_of(tok2), ProcessorCodec)
    reqs = requests(tok, 2)
    a = left_padded(Processor.of(tok), encode(Processor.of(tok), reqs), "cpu")
    b = left_padded(Processor.of(tok2), encode(Processor.of(tok2), reqs), "cpu")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with torch.no_grad():
        assert torch.equal(model(**a).logits, model2(**b).logits)


def test_greedy_batches_decode_as_each_prompt_alone_on_cpu(loaded):
    _, model, tok = loaded("qwen2.5-vl")
    eng = make_engine("hf", model, tok)
    reqs = requests(tok, 3)
    greedy = SamplingParams(greedy=True, max_new_tokens=6)
    batch = eng.generate(reqs, greedy)
    for r, out in zip(reqs, batch):
        assert eng.generate([r], greedy)[0][0].token_ids == out[0].token_ids


@pytest.mark.parametrize("memory", [{"gradient_checkpointing": True}, {"lora_rank": 4}, {"micro_batch": 1},
                                    {"logit_chunk": 4}, {"logit_chunk": 3, "micro_batch": 2}, {"shared_prefix": True},
                                    {"shared_prefix": True, "micro_batch": 2}],
                         ids=["gradient-checkpointing", "lora", "micro-batch", "logit-chunk", "chunk-and-micro-batch",
                              "shared-prefix", "shared-prefix-micro-batch"])
def test_memory_options_train_with_images_on_cpu(loaded, memory):
    """Gradient checkpointing, LoRA, micro-batches, chunked logits and the shared prefix take images: the same
    log-probs as the engine, one update that changes what it should (LoRA: the adapters only)."""
    from corl_bench.config import MemoryConfig
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    if "lora_rank" in memory:
        pytest.importorskip("peft")
    _, model, tok = loaded("qwen2.5-vl")
    ag = Agent(AgentSpec("a0", "qv"), copy.deepcopy(model), tok, GRPOConfig(lr=1e-2), memory=MemoryConfig(**memory))
    reqs = requests(tok, 2)
    comps = ag.generate(reqs, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=3))
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
    engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
    assert (fwd.logp.detach()[fwd.mask.bool()] - engine_lp).abs().max().item() < 1e-5
    before = {n: p.detach().clone() for n, p in ag.model.named_parameters()}
    ag.score(samples)
    assert ag.update([1.0, -1.0, 0.5, -0.5]).grad_norm > 0
    changed = {n for n, p in ag.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed
    if "lora_rank" in memory:
        assert all("lora_" in n for n in changed)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_fast_engine_takes_images_with_one_shared_prefill_on_cpu(loaded, arch):
    """The fast engine's greedy tokens equal the hf engine's, and its sampled log-probs equal the training forward
    pass (Qwen's multimodal rotary positions advanced per token; k samples sharing one prefill of the image)."""
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    _, model, tok = loaded(arch)
    reqs = requests(tok, 3)
    greedy = SamplingParams(greedy=True, max_new_tokens=6)
    hf_out = make_engine("hf", model, tok).generate(reqs, greedy)
    fast_out = make_engine("fast", model, tok).generate(reqs, greedy)
    assert [r[0].token_ids for r in fast_out] == [r[0].token_ids for r in hf_out]
    ag = Agent(AgentSpec("a0", arch), copy.deepcopy(model), tok, GRPOConfig(), backend="fast", temperature=1.5)
    comps = ag.generate(reqs, SamplingParams(n=4, temperature=1.5, max_new_tokens=16, seed=5))
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
    engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
    gap = (fwd.logp.detach()[fwd.mask.bool()] - engine_lp).abs().max().item()
    assert gap < 1e-5, f"{arch}: fast engine vs training log-prob gap {gap:.2e}"


@pytest.mark.parametrize("backend", ["hf", "fast"])
@pytest.mark.parametrize("arch", ["qwen2.5-vl", "gemma3"])
def test_engines_never_sample_image_layout_tokens_even_when_the_model_prefers_them_on_cpu(loaded, arch, backend):
    """A completion holding an image token would no longer match its images in the training forward pass: with the
    LM head pushed towards the image-layout tokens, greedy and sampled rollouts still hold none of them, and the
    reported log-probs are the raw ones (those of the training forward pass)."""
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    _, model, tok = loaded(arch)
    layout = list(codec_of(tok).layout_ids)
    biased = copy.deepcopy(model)

    def prefer_layout(module, args, out):
        out = out.clone()
        out[..., layout] += 8.0
        return out

    biased.get_output_embeddings().register_forward_hook(prefer_layout)
    ag = Agent(AgentSpec("a0", arch), biased, tok, GRPOConfig(), backend=backend)
    reqs = requests(tok, 2)
    greedy = ag.generate(reqs, SamplingParams(greedy=True, max_new_tokens=6))
    comps = ag.generate(reqs, SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=2))
    assert not set(layout) & {t for rows in (greedy, comps) for row in rows for c in row for t in c.token_ids}
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
    engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
    assert (fwd.logp.detach()[fwd.mask.bool()] - engine_lp).abs().max().item() < 1e-5


def test_the_fidelity_and_build_scripts_run_on_cpu(tmp_path):
    """scripts/build_tiny_vlms.py writes loadable folders; scripts/vlm_fidelity.py prints a row per architecture
    with equal prompt ids and log-prob gaps under 1e-5."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "scripts" / "build_tiny_vlms.py"), "--out", str(tmp_path / "m"),
                    "gemma3"], check=True, capture_output=True, timeout=300)
    assert (tmp_path / "m" / "gemma3" / "config.json").is_file()
    out = subprocess.run([sys.executable, str(root / "scripts" / "vlm_fidelity.py"), "--out", str(tmp_path / "f"),
                          "internvl"], check=True, capture_output=True, text=True, timeout=300).stdout
    row = next(line for line in out.splitlines() if line.startswith("| internvl |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "yes" and max(float(cells[4]), float(cells[5])) < 1e-5


def test_max_image_side_downscales_images_before_the_processor_on_cpu(loaded, tmp_path):
    """model.max_image_side / --max-image-side (the paper's 1024-px cap): an image whose longer side exceeds the cap
    is encoded exactly as the same image resized (bicubic, aspect kept); smaller ones are untouched."""
    from PIL import Image

    from corl_bench.config import ConfigError, load_config
    from corl_bench.models.load import load_model

    folder, _, tok = loaded("qwen2.5-vl")
    _, capped_tok = load_model(str(folder), max_image_side=16)
    capped = codec_of(capped_tok)
    assert capped.max_image_side == 16 and codec_of(tok).max_image_side == 0
    big, small = image(40, 30, 0), image(12, 16, 1)
    text = capped.chat("What is 2+3?", 1)
    ids, vision = capped.prompt(Request(text=text, images=(big,)))
    want_ids, want = codec_of(tok).prompt(Request(text=text, images=(big.resize((16, 12), Image.Resampling.BICUBIC),)))
    assert ids == want_ids and all(torch.equal(vision[k], want[k]) for k in want)
    assert len(ids) < len(codec_of(tok).prompt(Request(text=text, images=(big,)))[0])  # fewer image tokens
    assert capped.prompt(Request(text=text, images=(small,)))[0] == codec_of(tok).prompt(
        Request(text=text, images=(small,)))[0]
    with pytest.raises(ConfigError, match="model.max_image_side must be >= 0"):
        load_config(None, ["model.max_image_side=-1"])


@pytest.mark.parametrize("arch", ["qwen2.5-vl", "gemma3", "internvl"])
def test_chunked_and_micro_batched_updates_equal_the_plain_one_with_images_on_cpu(loaded, arch):
    """The same samples and advantages give the same SGD step with the whole batch, micro-batches, chunked logits
    and the shared prefix (one pass over each prompt and its image for its samples; Qwen's rotary positions
    continued from the prompt's last): the memory options change what is held at once, not the update."""
    from corl_bench.config import MemoryConfig
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    _, model, tok = loaded(arch)
    reqs = requests(tok, 2)
    comps = make_engine("hf", model, tok).generate(reqs, SamplingParams(n=2, max_new_tokens=6, seed=4))
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    after = []
    memories = ({}, {"logit_chunk": 3}, {"micro_batch": 2, "logit_chunk": 5}, {"shared_prefix": True},
                {"shared_prefix": True, "micro_batch": 2})
    for memory in memories:
        ag = Agent(AgentSpec("a0", arch), copy.deepcopy(model), tok, GRPOConfig(), memory=MemoryConfig(**memory))
        ag.optimizer = torch.optim.SGD(ag.model.parameters(), lr=1.0)  # the step is the (clipped) gradient itself
        ag.score(samples)
        ag.update([0.5, -0.5, 1.0, -1.0])
        after.append(torch.cat([p.detach().flatten() for p in ag.model.parameters()]))
    assert all(torch.allclose(after[0], a, atol=1e-5) for a in after[1:])


def test_shared_prefix_groups_prompts_by_their_images_too_on_cpu(loaded):
    """Two prompts with the same text and same-size but different images have equal token ids: they must not share
    a prefix (each keeps its own image), and the shared pass gives the plain pass's log-probs."""
    from corl_bench.config import MemoryConfig
    from corl_bench.rollout.base import Completion
    from corl_bench.train.agent import Agent

    _, model, tok = loaded("qwen2.5-vl")
    codec = codec_of(tok)
    text = codec.chat("How many squares are shaded?", 1)
    a, b = Request(text=text, images=(image(32, 32, 1),)), Request(text=text, images=(image(32, 32, 2),))
    assert codec.prompt(a)[0] == codec.prompt(b)[0]
    comps = [Completion((20, 21, 22), (), "", True), Completion((23, 24), (), "", True)] * 2
    prompts = [a, a, b, b]
    ag = Agent(AgentSpec("a0", "qv"), copy.deepcopy(model), tok, GRPOConfig(), memory=MemoryConfig(shared_prefix=True))
    batch = ag._prefix_batch(prompts, comps, "cpu")
    assert batch.prompt_ids.shape[0] == 2 and batch.group.tolist() == [0, 0, 1, 1] and batch.first_rows == [0, 2]
    shared = ag.forward(prompts, comps)
    plain = Agent(AgentSpec("a0", "qv"), copy.deepcopy(model), tok, GRPOConfig()).forward(prompts, comps)
    got = shared.logp.detach()[shared.mask.bool()]
    want = plain.logp.detach()[plain.mask.bool()]
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(want[:3], want[5:8])  # the images differ, so do the log-probs of the same tokens
