"""Warm start of a micro vision-language family: a short supervised phase on its own flawed visual corpus.

The text warm start (:mod:`corl_bench.micro.warmstart`) with images: each example is (image, question in a view)
-> the family's solution (:func:`corl_bench.micro.visual.flawed_solution`: correct, or carrying the family's
systematic flaw); loss on the solution tokens only; the vision tower, projector and language model all train from
scratch. Prompts are encoded by the same :class:`corl_bench.models.images.VisionCodec` the rollout engines and the
training forward pass use, and the stopping check decodes greedily through the ``hf`` engine, so the accuracy it
stops at is the one a run measures. Seeded and single-threaded: a rebuilt checkpoint is bit-identical on the same
machine and torch build.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any, Callable

from corl_bench.micro.vl_families import VisualFamily, build_codec, build_model, layout_tokens
from corl_bench.micro.warmstart import render_prompt, right_padded, supervised_loop


def request(problem: Any, view: str = "original") -> Any:
    """The request a micro visual problem makes: its question in ``view`` and its image."""
    from corl_bench.rollout.request import Request

    return Request(text=render_prompt(problem.text(view)), images=(problem.image(),))


def _dev_set(family: VisualFamily, n: int = 96) -> list[Any]:
    """Problems for the stopping check: the family's own seeded stream, disjoint from every test suite."""
    from corl_bench.micro.visual import visual_stream

    return list(itertools.islice(visual_stream(family.seed + 7_777, prefix=f"warm-dev-{family.name}"), n))


def dev_accuracy(model: Any, tok: Any, problems: list[Any], max_new_tokens: int = 40) -> float:
    """Greedy accuracy on ``problems`` (original view) through the ``hf`` engine, graded by the project's verifier."""
    from corl_bench.grading.verifier import grade
    from corl_bench.rollout import SamplingParams, make_engine

    model.eval()
    outs = make_engine("hf", model, tok).generate([request(p) for p in problems],
                                                  SamplingParams(greedy=True, max_new_tokens=max_new_tokens,
                                                                 logprobs=False))
    return sum(grade(o[0].text, p.answer)[1] for o, p in zip(outs, problems)) / len(problems)


def _examples(family: VisualFamily, n: int, seed: int) -> list[tuple[Any, str, str]]:
    """(problem, view, solution) triples of the family's corpus."""
    from corl_bench.micro.visual import flawed_solution, visual_stream

    rng = random.Random(seed)
    out = []
    for p in itertools.islice(visual_stream(seed, prefix=f"warm-{family.name}"), n):
        view = "rephrased" if rng.random() < family.rephrased_share else "original"
        out.append((p, view, flawed_solution(family.flaw, p, rng, family.p_sys, family.p_noise)))
    return out


def warm_start(family: VisualFamily, *, steps: int | None = None,
               progress: Callable[[int, int, Any], None] | None = None, threads: int = 1) -> tuple[Any, Any, dict]:
    """Build tokenizer, codec and model for ``family`` and train them; returns (model, tokenizer, record). The
    tokenizer carries the codec (:func:`corl_bench.models.images.codec_of`)."""
    import torch

    from corl_bench.micro.families import build_tokenizer
    from corl_bench.models.images import attach
    from corl_bench.rollout.encode import Processor, encode

    torch.set_num_threads(threads)
    steps = family.warmstart_steps if steps is None else steps
    bs = family.warmstart_batch
    dev = _dev_set(family)
    data = _examples(family, steps * bs, seed=family.seed)
    corpus = [render_prompt(p.text(v)) + s for p, v, s in data[:4000]]
    tok = build_tokenizer("bpe", corpus, vocab_size=family.vocab_size, extra_special=layout_tokens(family.style))
    codec = build_codec(family, tok)
    attach(tok, codec)  # checkpoints load the codec onto the tokenizer; in here it is passed explicitly
    processor = Processor(tok, codec)
    torch.manual_seed(family.seed)
    model = build_model(family, tok)
    eos = tok.eos_token_id

    def batch(step: int) -> dict[str, Any]:
        part = data[step * bs: (step + 1) * bs]
        enc = encode(processor, [request(p, v) for p, v, _ in part])  # the encoder of the engines and the agent
        sols = tok([s for _, _, s in part], add_special_tokens=False)["input_ids"]
        ids, att, labels = right_padded([(e, s + [eos]) for e, s in zip(enc.ids, sols)], tok.pad_token_id)
        return {"input_ids": ids, "attention_mask": att, "labels": labels, **codec.collate(enc.visions, ids)}

    done, checks, losses, seconds = supervised_loop(family, model, steps, batch, lambda: dev_accuracy(model, tok, dev),
                                                    progress)
    record = {"family": family.name, "style": family.style, "steps": done, "max_steps": steps,
              "target_dev_greedy": family.warmstart_target, "dev_checks": checks, "batch": bs,
              "lr": family.warmstart_lr, "seed": family.seed, "flaw": family.flaw,
              "final_loss": sum(losses[-20:]) / max(1, min(20, len(losses))), "seconds": seconds,
              "n_params": sum(p.numel() for p in model.parameters())}
    return model, tok, record


def save_checkpoint(model: Any, tok: Any, record: dict, path: Path) -> None:
    """Model, tokenizer, image processor and image layout, and the warm-start record, as one folder."""
    from corl_bench.models.images import codec_of

    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    codec_of(tok).save_pretrained(path)
    (path / "warmstart.json").write_text(json.dumps(record, indent=2))


def load_checkpoint(path: Path) -> tuple[Any, Any]:
    """(model in eval mode, left-padding tokenizer carrying its codec) from a :func:`save_checkpoint` folder."""
    from transformers import AutoModelForImageTextToText, PreTrainedTokenizerFast

    from corl_bench.models.images import VisionCodec, attach

    tok = PreTrainedTokenizerFast.from_pretrained(path)
    tok.padding_side = "left"
    attach(tok, VisionCodec.from_pretrained(path, tok))
    model = AutoModelForImageTextToText.from_pretrained(path)
    model.eval()
    return model, tok
