"""Any Hugging Face vision-language model through its own processor (issue 24): the model's ``AutoProcessor``
(tokenizer + PIL image processor + chat template) as the project's image codec.

The micro visual families carry a hand-made :class:`corl_bench.models.images.VisionCodec` (two image layouts, images
before the text). A real checkpoint — Qwen2-VL, Qwen2.5-VL, InternVL, LLaVA, LLaVA-OneVision, Idefics3, SmolVLM,
Gemma-3 — brings its own processor, and :class:`ProcessorCodec` hands every image decision to it:

* **where an image goes** is decided by the model's chat template: a prompt is rendered with
  ``{"type": "image"}`` entries in the user turn (:meth:`ProcessorCodec.chat`), which writes the model's image
  placeholder (``<|vision_start|><|image_pad|><|vision_end|>``, ``<image>``, ``<start_of_image>``, ...) where the
  family puts it. A text that holds no placeholder (a prompt rendered without the template) gets one per image in
  front of it, as the micro codec places images;
* **how many tokens an image takes** and its tensors come from the processor's ``__call__`` on that text, so the prompt
  ids equal what ``processor.apply_chat_template(..., tokenize=True)`` gives for the same messages and images (the
  same ``add_special_tokens`` rule: off when the rendered text already starts with the tokenizer's ``<bos>``);
* **a batch's image inputs** are the rows' tensors concatenated in row order along dim 0 (zero-padded where the rows'
  shapes differ, as the processors pad a batch: Idefics3's image splits, LLaVA-OneVision's patches), and the
  per-token inputs some models need (Gemma-3's ``token_type_ids``, Qwen2-VL's ``mm_token_type_ids``) are rebuilt
  for the padded batch from the token ids, with the values the processor itself gave each image token.

The image processor is always the PIL backend (``backend="pil"``): the default torchvision backend does not import
next to the CPU build of torch. Nothing here imports torch or transformers at module level.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

from corl_bench.models.images import load_image

log = logging.getLogger(__name__)

__all__ = ["ProcessorCodec", "freeze_vision_tower", "is_processor_vlm", "load_processor", "processor_class",
           "without_video"]

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
_PROBE = "\x00corl\x00"  # a text the chat template copies verbatim, to find where it puts an image


def _model_type(path: Path) -> str:
    try:
        return str(json.loads((Path(path) / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""


def is_processor_vlm(path: Path) -> bool:
    """Whether a ``save_pretrained`` folder is a vision-language model with its own processor: its ``model_type`` is
    an image-text-to-text architecture of transformers and the folder holds a processor config (no weights read)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    path = Path(path)
    return (_model_type(path) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
            and any((path / f).is_file() for f in PROCESSOR_FILES))


def without_video(cls: type) -> type:
    """``cls`` (a processor class) without its video processor: the same class name, tokenizer, image processor and
    chat template; ``videos=`` is never given. Qwen2-VL, Qwen2.5-VL, InternVL, LLaVA-OneVision and SmolVLM
    processors take a video processor, which transformers has for the torchvision backend only; without this, they
    do not load next to the CPU build of torch (and a run never sends videos)."""
    import inspect

    attrs = [a for a in cls.get_attributes() if "video" not in a]
    if len(attrs) == len(cls.get_attributes()):
        return cls
    param = inspect.signature(cls.__init__).parameters.get("video_processor")
    body: dict[str, Any] = {"get_attributes": classmethod(lambda c: list(attrs)), "__module__": cls.__module__,
                            "__doc__": cls.__doc__}
    if param is not None and param.default is inspect.Parameter.empty:  # SmolVLM requires the argument
        if hasattr(cls, "from_dict"):  # transformers >= 5.25 builds processors from keywords
            base_dict = cls.from_dict.__func__  # type: ignore[attr-defined]

            def from_dict(c: Any, processor_dict: Any, **kwargs: Any) -> Any:
                return base_dict(c, processor_dict, **{"video_processor": None, **kwargs})

            body["from_dict"] = classmethod(from_dict)
        if hasattr(cls, "from_args_and_dict"):  # earlier releases: sub-processors positionally, in attribute order
            base = cls.from_args_and_dict.__func__  # type: ignore[attr-defined]

            def from_args_and_dict(c: Any, args: Any, processor_dict: Any, **kwargs: Any) -> Any:
                return base(c, [*args, None], processor_dict, **kwargs)  # video_processor=None, positionally

            body["from_args_and_dict"] = classmethod(from_args_and_dict)
    own = getattr(cls, "apply_chat_template", None)
    if own is not None and "video_processor" in getattr(own, "__code__", compile("", "", "exec")).co_names:
        from transformers.processing_utils import ProcessorMixin  # SmolVLM's override reads video defaults

        body["apply_chat_template"] = ProcessorMixin.apply_chat_template
    return type(cls.__name__, (cls,), body)


def processor_class(path: Path) -> type | None:
    """The processor class a folder names (``processor_config.json``), else its model type's in transformers."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = None
    conf = Path(path) / "processor_config.json"
    if conf.is_file():
        name = json.loads(conf.read_text()).get("processor_class")
    name = name or PROCESSOR_MAPPING_NAMES.get(_model_type(Path(path)))
    return getattr(transformers, name, None) if name else None


def load_processor(path: Path, trust_remote_code: bool = False) -> Any:
    """The folder's processor with the PIL image processor and without a video processor (:func:`without_video`),
    left padding, a pad token. The same processor on every machine, torchvision or not."""
    from transformers import AutoProcessor

    kwargs: dict[str, Any] = {"trust_remote_code": True} if trust_remote_code else {}
    cls = processor_class(path)
    proc = (without_video(cls).from_pretrained(path, backend="pil", **kwargs) if cls is not None
            else AutoProcessor.from_pretrained(path, backend="pil", **kwargs))
    tok = proc.tokenizer
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return proc


def _cat(parts: Sequence[Any]) -> Any:
    """``parts`` concatenated along dim 0, each zero-padded at the end of every other dim to the largest."""
    import torch

    shape = [max(p.shape[d] for p in parts) for d in range(1, parts[0].dim())]
    padded = []
    for p in parts:
        if list(p.shape[1:]) != shape:
            q = p.new_zeros((p.shape[0], *shape))
            q[tuple(slice(0, s) for s in p.shape)] = p
            p = q
        padded.append(p)
    return torch.cat(padded, dim=0)


class ProcessorCodec:
    """A Hugging Face VLM's processor as the image codec of :mod:`corl_bench.rollout.encode` (module docstring).

    The same interface as :class:`corl_bench.models.images.VisionCodec`: :meth:`prompt`, :meth:`collate`,
    ``layout_ids``, ``image_token_id``, :meth:`save_pretrained`."""

    def __init__(self, processor: Any, max_image_side: int = 0) -> None:
        self.processor = processor
        self.max_image_side = max_image_side
        """images whose longer side exceeds this are downscaled to it (aspect kept) before the processor; 0 = off"""
        self.tokenizer = processor.tokenizer
        token = getattr(processor, "image_token", None)
        if not token:
            raise ValueError(f"{type(processor).__name__} names no image token; it is not an image-text processor")
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids(token))
        self.placeholder = self._placeholder()
        block, kinds = self._probe()
        added = set(getattr(self.tokenizer, "added_tokens_decoder", {}) or {})
        self.layout_ids = tuple(dict.fromkeys(i for i in block if i in added or i == self.image_token_id))
        """the image-block tokens: engines never sample them (a completion holding one would no longer match its
        images in the training forward pass)"""
        self.token_types = kinds
        """per-token inputs the model takes beside the ids (name -> {token id: value}), rebuilt for each batch"""

    # ---------------------------------------------------------------- rendering
    def chat(self, text: str, n_images: int, system: str = "") -> str:
        """``text`` as one user turn after ``n_images`` images, in the model's chat template (with the generation
        prompt); ``text`` itself with the placeholders in front when the processor has no template."""
        if not getattr(self.processor, "chat_template", None):
            return self.placeholder * n_images + text
        content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
        messages = ([{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []) + \
            [{"role": "user", "content": content}]
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _placeholder(self) -> str:
        """The text the chat template writes for one image (the part of the user turn before the text)."""
        if not getattr(self.processor, "chat_template", None):
            return str(self.processor.image_token)
        import os

        with_image, without = self.chat(_PROBE, 1), self.chat(_PROBE, 0)
        head = os.path.commonprefix([with_image, without[: without.index(_PROBE)]])  # Idefics3: "User:" vs "User: "
        end = with_image.find(_PROBE)
        if end <= len(head):
            raise ValueError(f"{type(self.processor).__name__}: cannot find where its chat template puts an image")
        return with_image[len(head): end]

    def _probe(self) -> tuple[list[int], dict[str, dict[int, int]]]:
        """The token ids of one image's block and the per-token inputs the processor returns with them."""
        from PIL import Image

        out = self.processor(text=[self.placeholder], images=[[Image.new("RGB", (32, 32), (128, 128, 128))]],
                             add_special_tokens=False, return_tensors="pt")
        ids = out["input_ids"][0].tolist()
        kinds: dict[str, dict[int, int]] = {}
        for key, value in out.items():
            if key in ("input_ids", "attention_mask") or not hasattr(value, "shape"):
                continue
            if tuple(value.shape) == tuple(out["input_ids"].shape):
                table = {i: int(v) for i, v in zip(ids, value[0].tolist()) if int(v) != 0}
                kinds[key] = table
        return ids, kinds

    # ---------------------------------------------------------------- encoding
    def _call(self, text: str, images: Sequence[Any]) -> Any:
        bos = getattr(self.tokenizer, "bos_token", None)
        special = not (bos and text.startswith(bos))  # as processor.apply_chat_template(tokenize=True) decides
        return self.processor(text=[text], images=[list(images)] if images else None,
                              add_special_tokens=special, return_tensors="pt")

    def _capped(self, image: Any) -> Any:
        """``image`` downscaled (bicubic, aspect kept) so its longer side is at most ``max_image_side``."""
        side = self.max_image_side
        if not side or max(image.size) <= side:
            return image
        from PIL import Image

        scale = side / max(image.size)
        size = (max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale)))
        return image.resize(size, Image.Resampling.BICUBIC)

    def _vision(self, out: Any) -> dict[str, Any]:
        return {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")
                and k not in self.token_types and hasattr(v, "shape")}

    def images(self, request: Any) -> list[Any]:
        """The request's images as the processor gets them: loaded, RGB, capped at ``max_image_side``."""
        return [self._capped(load_image(i)) for i in (getattr(request, "images", ()) or ())]

    def text(self, request: Any) -> str:
        """The text of a text request as the processor gets it: the placeholders put in front of the text when the
        rendered prompt holds none (one per image)."""
        n = len(getattr(request, "images", ()) or ())
        if n and self.placeholder.strip() and self.placeholder.strip() not in request.text:
            return self.placeholder * n + request.text
        return request.text

    def unexpanded(self, request: Any) -> list[int]:
        """The prompt ids *before* the processor expands each image placeholder into its block: the tokenizer's ids
        of :meth:`text` (what an engine that runs the processor itself, such as vLLM, is given). For a token-id
        request, each run of image tokens becomes one. :meth:`prompt` gives the expanded ids."""
        if request.token_ids is not None:
            out: list[int] = []
            for t in request.token_ids:
                if not (t == self.image_token_id and out and out[-1] == t):
                    out.append(int(t))
            return out
        text = self.text(request)
        bos = getattr(self.tokenizer, "bos_token", None)
        return list(self.tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"])

    def prompt(self, request: Any) -> tuple[list[int], dict[str, Any]]:
        """(prompt token ids with each image's block in place, the request's image tensors; {} without images).

        A token-id request with images must already hold their blocks (its image-token count is checked)."""
        images = self.images(request)
        if request.token_ids is not None:
            ids = list(request.token_ids)
            if not images:
                return ids, {}
            out = self._call(self.placeholder * len(images), images)
            want = int((out["input_ids"] == self.image_token_id).sum())
            if ids.count(self.image_token_id) != want:
                raise ValueError(f"a token-id request with {len(images)} image(s) must hold their {want} image tokens")
            return ids, self._vision(out)
        out = self._call(self.text(request), images)
        return out["input_ids"][0].tolist(), self._vision(out) if images else {}

    def collate(self, visions: Sequence[dict[str, Any]], ids: Any) -> dict[str, Any]:
        """The model's image inputs for a batch whose rows have ``visions`` (row order) and padded ``ids``: the rows'
        tensors concatenated (zero-padded where shapes differ) plus the per-token inputs rebuilt from ``ids``.
        An all-text batch gets {} (the model runs as a text model)."""
        import torch

        parts = [v for v in visions if v]
        if not parts:
            return {}
        out = {k: _cat([v[k] for v in parts]).to(ids.device) for k in parts[0]}
        for key, table in self.token_types.items():
            kind = torch.zeros_like(ids)
            for tid, value in table.items():
                kind[ids == tid] = value
            out[key] = kind
        return out

    # ---------------------------------------------------------------- persistence
    def save_pretrained(self, path: Path) -> None:
        """The processor (image processor, chat template, tokenizer) beside a ``save_pretrained`` checkpoint."""
        self.processor.save_pretrained(Path(path))


VISION_TOWERS = ("visual", "vision_tower", "vision_model")
"""Attribute names of a VLM's vision encoder in transformers (Qwen2-VL / Qwen2.5-VL: ``visual``, with its merger;
LLaVA, LLaVA-OneVision, InternVL, Gemma-3: ``vision_tower``; Idefics3, SmolVLM: ``vision_model``)."""


def freeze_vision_tower(model: Any) -> int:
    """Stop gradients into ``model``'s vision encoder (``model.freeze_vision``); returns how many parameters were
    frozen. A model without one (a text model) is refused in one line."""
    frozen = 0
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in VISION_TOWERS:
            for p in module.parameters():
                if p.requires_grad:
                    p.requires_grad_(False)
                    frozen += p.numel()
    if not frozen:
        raise ValueError(f"model.freeze_vision is set but {type(model).__name__} has no vision tower (none of "
                         f"{', '.join(VISION_TOWERS)}); set model.freeze_vision=false for a text model")
    return frozen
