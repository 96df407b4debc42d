"""Vision-language agents through the shared core, on tiny untrained VLMs of both micro visual families.

A request with images must go through the rollout engine, the training forward pass and the GRPO update exactly as
text does: the engine's log-probs equal the training pass's, a padded batch decodes as each prompt alone, micro-
batched updates equal the whole-batch update, and a saved checkpoint reloads (``AutoModelForImageTextToText`` + the
codec) to the same logits.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from corl_bench.config import AgentSpec, GRPOConfig, MemoryConfig
from corl_bench.rollout import Request, SamplingParams, make_engine
from corl_bench.models.images import VisionCodec, attach, codec_of

TINY_TEXT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 64}
TINY_VISION = {"embed_dim": 32, "depth": 1, "num_heads": 2, "hidden_size": 32, "intermediate_size": 64,
               "num_hidden_layers": 1, "num_attention_heads": 2}


def tiny_visual_family(name: str, **overrides):
    """A tiny version of a micro visual family (same style, layout and flaw; a handful of warm-start steps)."""
    from corl_bench.micro.vl_families import VISUAL_FAMILIES

    fam = VISUAL_FAMILIES[name]
    text = tuple((k, TINY_TEXT.get(k, v)) for k, v in fam.text_kwargs)
    vision = tuple((k, TINY_VISION.get(k, v)) for k, v in fam.vision_kwargs)
    return dataclasses.replace(fam, name=f"vtest-{name}", text_kwargs=text, vision_kwargs=vision, **overrides)


def build_tiny_vlm(name: str, seed: int = 0):
    """(model, tokenizer carrying its codec) of a tiny random-init VLM of the family's style."""
    from corl_bench.micro.families import build_tokenizer
    from corl_bench.micro.visual import visual_stream
    from corl_bench.micro.vl_families import build_codec, build_model, layout_tokens
    from corl_bench.micro.warmstart import render_prompt

    fam = tiny_visual_family(name)
    corpus = [render_prompt(p.text(v)) + p.solution() for p in itertools.islice(visual_stream(0), 200)
              for v in ("original", "rephrased")]
    tok = build_tokenizer("bpe", corpus, 300, layout_tokens(fam.style))
    attach(tok, build_codec(fam, tok))
    torch.manual_seed(seed)
    return build_model(fam, tok).eval(), tok


FAMILIES = ("qwen2vl-micro", "llava-micro")


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request):
    return build_tiny_vlm(request.param)


def _requests(n: int = 4) -> list[Request]:
    from corl_bench.micro.visual import visual_suite
    from corl_bench.micro.vl_warmstart import request

    probs = visual_suite("micro-visual-dev")[:n]
    return [request(p, "rephrased" if i % 2 else "original") for i, p in enumerate(probs)]


def test_the_codec_puts_one_image_block_after_bos_and_before_the_text_on_cpu(vlm):
    _, tok = vlm
    codec = codec_of(tok)
    req = _requests(1)[0]
    ids, vision = codec.prompt(req)
    block = codec.image_block(vision)
    assert ids[0] == tok.bos_token_id and ids[1: 1 + len(block)] == block
    assert ids[1 + len(block):] == tok(req.text, add_special_tokens=False)["input_ids"]
    assert block.count(codec.image_token_id) == 16  # 32x32 pixels, one image token per 8x8 cell
    plain, none = codec.prompt(Request(text=req.text))  # a text request stays a text prompt
    assert none == {} and plain == tok(req.text)["input_ids"]


def test_a_padded_batch_decodes_as_each_prompt_alone_and_image_tokens_are_never_sampled_on_cpu(vlm):
    model, tok = vlm
    eng = make_engine("hf", model, tok)
    reqs = _requests(4)
    greedy = SamplingParams(greedy=True, max_new_tokens=8)
    batch = eng.generate(reqs, greedy)
    for r, out in zip(reqs, batch):
        assert eng.generate([r], greedy)[0][0].token_ids == out[0].token_ids
    sampled = eng.generate(reqs, SamplingParams(n=4, temperature=1.5, max_new_tokens=12, seed=3))
    layout = set(codec_of(tok).layout_ids)
    assert not any(layout & set(c.token_ids) for row in sampled for c in row)


def test_engine_log_probs_equal_the_training_forward_pass_and_an_update_moves_the_vision_tower_on_cpu(vlm):
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    model, tok = vlm
    ag = Agent(AgentSpec("a0", "vtest"), _clone(model), tok, GRPOConfig(lr=1e-2))
    reqs = _requests(3)
    comps = ag.generate(reqs, SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=1))
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
    engine_lp = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
    assert torch.allclose(fwd.logp.detach()[fwd.mask.bool()], engine_lp, atol=1e-4)
    vision = {n: p.detach().clone() for n, p in ag.model.named_parameters() if "visual" in n or "vision" in n}
    assert vision
    ag.score(samples)
    stats = ag.update([1.0, -1.0] * 3)
    assert stats.grad_norm > 0 and stats.n_tokens == int(fwd.mask.sum())
    moved = [n for n, p in ag.model.named_parameters() if n in vision and not torch.equal(p, vision[n])]
    assert moved  # the gradient reaches the vision tower through the image tokens


def _clone(model):
    import copy

    return copy.deepcopy(model)


def test_micro_batched_and_chunked_updates_equal_the_whole_batch_update_with_images_on_cpu(vlm):
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    model, tok = vlm
    reqs = _requests(4)
    comps = make_engine("hf", model, tok).generate(reqs, SamplingParams(n=2, max_new_tokens=10, seed=2))
    samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
    adv = [0.5, -0.5, 1.0, -1.0, 0.2, -0.2, 0.0, 0.3]
    after = []
    for micro, chunk, shared in ((0, 0, False), (3, 0, False), (3, 5, False), (0, 0, True)):
        ag = Agent(AgentSpec("a0", "vtest"), _clone(model), tok, GRPOConfig(),
                   memory=MemoryConfig(micro_batch=micro, logit_chunk=chunk, shared_prefix=shared))
        ag.optimizer = torch.optim.SGD(ag.model.parameters(), lr=1.0)  # the step is the (clipped) gradient itself
        ag.score(samples)
        ag.update(adv)
        after.append(torch.cat([p.detach().flatten() for p in ag.model.parameters()]))
    assert all(torch.allclose(after[0], a, atol=1e-5) for a in after[1:])


def test_text_paths_refuse_images_with_one_line_and_the_fast_engine_takes_them_on_cpu(vlm, tiny_qwen):
    model, tok = vlm
    req = _requests(1)
    greedy = SamplingParams(greedy=True, max_new_tokens=4)  # the fast engine takes images as hf does
    assert make_engine("fast", model, tok).generate(req, greedy)[0][0].token_ids == \
        make_engine("hf", model, tok).generate(req, greedy)[0][0].token_ids
    text_model, text_tok = tiny_qwen
    with pytest.raises(ValueError, match="text model"):
        make_engine("hf", text_model, text_tok).generate(req, SamplingParams(greedy=True, max_new_tokens=4))


def test_a_saved_vlm_reloads_with_its_codec_to_the_same_logits_on_cpu(vlm, tmp_path):
    from corl_bench.micro.vl_warmstart import load_checkpoint, save_checkpoint

    model, tok = vlm
    save_checkpoint(model, tok, {"note": "test"}, tmp_path / "ckpt")
    model2, tok2 = load_checkpoint(tmp_path / "ckpt")
    assert type(model2) is type(model) and isinstance(codec_of(tok2), VisionCodec)
    req = _requests(2)
    a = make_engine("hf", model, tok).encode(req, "cpu")
    b = make_engine("hf", model2, tok2).encode(req, "cpu")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with torch.no_grad():
        assert torch.allclose(model(**a).logits, model2(**b).logits, atol=1e-6)


def test_rollout_extractor_answer_tag_reads_the_paper_vlm_format_for_every_method_on_cpu():
    from corl_bench.config import ConfigError, RolloutConfig, load_config
    from corl_bench.registries import EXTRACTORS
    from corl_bench.rollout import Completion
    from corl_bench.train.runner import resolve
    from corl_bench.train.trainer import _rollouts

    rows = [[Completion((1,), (), "count <answer>3</answer>", True), Completion((1,), (), "\\boxed{4}", True)]]
    assert _rollouts("a0", rows).answers == [["3", "4"]]  # the default: last number / boxed
    tagged = _rollouts("a0", rows, EXTRACTORS.get(RolloutConfig(extractor="answer_tag").extractor))
    assert tagged.answers == [["3", None]]  # no <answer> tag: no answer, no fallback
    for name in [e for e in EXTRACTORS.names() if e != "code"]:  # the valid set is the registry's
        assert resolve(load_config(None, [f"rollout.extractor={name}"])).config.rollout.extractor == name
    for bad in ("code", "nope"):  # code reads a program, not an answer; an unknown name is one line naming the known
        with pytest.raises(ConfigError, match=r"not a registered answer extractor \(known: answer_tag, boxed.*"
                                              r"set rollout.extractor=qwen"):
            resolve(load_config(None, [f"rollout.extractor={bad}"]))


def test_the_probe_asks_micro_visual_items_with_their_scene_on_cpu():
    from corl_bench.eval.evaluator import request_for
    from corl_bench.eval.specs import get_spec
    from corl_bench.report.probe import probe_items

    spec = get_spec("micro-visual-test")
    items = probe_items(spec)
    assert len(items) == 300 and spec.modality == "image"
    req = request_for(spec, items[0])
    assert isinstance(req, Request) and len(req.images) == 1 and req.images[0].size == (32, 32)
    assert req.text == items[0].problem.text("original") + "\n"
