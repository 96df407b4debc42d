"""Requests -> token ids (and a vision-language model's image tensors): the one encoder of the project.

Every rollout engine (``hf``, ``fast``, ``vllm``) and the agent's training forward pass turn requests into token ids
here, so a prompt is encoded the same way for sampling and for the loss:

    processor = Processor.of(tokenizer)         # the tokenizer and, for a VLM, its image codec, explicitly
    enc = encode(processor, requests)           # Encoded: one id list per request (+ image tensors per row)
    batch = left_padded(processor, enc, device) # engines: input_ids / attention_mask (B, L) (+ image inputs)

A :class:`Processor` holds the codec (:class:`corl_bench.models.images.VisionCodec`) as a field: nothing downstream
looks for it on the tokenizer. :meth:`Processor.of` is the one place that reads the codec a checkpoint loader
attached to its tokenizer (:func:`corl_bench.models.images.attach`).

Text requests are tokenized with the tokenizer's special tokens (``tokenizer(text)``, as a batch when every request
is text); token-id requests are taken as they are; a request with images goes through the codec (which places the
image tokens) — then every request of the batch does, as the model's image inputs are collated per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from corl_bench.rollout.request import Prompt, as_requests
from corl_bench.models.images import VisionCodec, codec_of

__all__ = ["Encoded", "Processor", "encode", "left_padded"]


@dataclass(frozen=True, eq=False)
class Processor:
    """A model's tokenizer and, for a vision-language model, its image codec (None for a text model)."""

    tokenizer: Any
    codec: VisionCodec | None = None

    @classmethod
    def of(cls, tokenizer: Any) -> "Processor":
        """The processor of a loaded model: its tokenizer and the codec its checkpoint loader attached to it."""
        if isinstance(tokenizer, Processor):
            return tokenizer
        return cls(tokenizer, codec_of(tokenizer))

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_token_id


@dataclass(frozen=True)
class Encoded:
    """A batch of encoded requests: ``ids[i]`` the prompt token ids of request i (image tokens in place) and
    ``visions[i]`` its image tensors ({} for a row without images); ``visions`` is [] when no request has images."""

    ids: list[list[int]]
    visions: list[dict[str, Any]] = field(default_factory=list)


def encode(processor: Processor, requests: Sequence[Prompt]) -> Encoded:
    """Prompt token ids (and image tensors) of ``requests``; see the module docstring for the rules.

    A request with images for a text model (no codec) is refused in one line."""
    reqs = as_requests(requests)
    if any(r.images for r in reqs):
        if processor.codec is None:
            raise ValueError("a request has images but this model is a text model (it has no vision codec); use a "
                             "vision-language family or drop the images")
        encoded = [processor.codec.prompt(r) for r in reqs]
        return Encoded([e[0] for e in encoded], [e[1] for e in encoded])
    tok = processor.tokenizer
    if reqs and all(r.text is not None for r in reqs):
        return Encoded([list(x) for x in tok([r.text for r in reqs], add_special_tokens=True)["input_ids"]])
    return Encoded([list(r.token_ids) if r.token_ids is not None else list(tok(r.text)["input_ids"])
                    for r in reqs])


def left_padded(processor: Processor, enc: Encoded, device: Any) -> dict[str, Any]:
    """The model inputs of an encoded batch for generation on ``device``: ``input_ids`` and ``attention_mask``
    (B, L) left-padded with the pad token (as ``tokenizer(texts, padding=True)`` with left padding gives), plus the
    collated image inputs of a vision-language batch."""
    import torch

    rows = enc.ids
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), processor.pad_token_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            att[i, width - len(r):] = 1
    out = {"input_ids": ids.to(device), "attention_mask": att.to(device)}
    if enc.visions:
        out.update(processor.codec.collate(enc.visions, out["input_ids"]))  # type: ignore[union-attr]
    return out
