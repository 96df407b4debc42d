"""Requests with images -> the inputs of a vision-language model: one codec shared by the rollout engines, the
training forward pass and the warm start, so a prompt is encoded the same way everywhere.

A :class:`VisionCodec` pairs a model's tokenizer with its image processor (the PIL processors of ``transformers``:
the default ones import torchvision, which does not load next to the CPU torch) and knows the model's image-token
layout (:class:`ImageLayout`):

==============  ==========================================================  =========================================
style           where the image goes                                         extra model inputs
==============  ==========================================================  =========================================
``qwen2-vl``    ``<bos> <|vision_start|> <|image_pad|> x n <|vision_end|>``  ``pixel_values`` (patches, D),
                then the text; n = grid_t * grid_h * grid_w / merge²          ``image_grid_thw`` (images, 3),
                                                                              ``mm_token_type_ids`` (M-RoPE)
``llava``       ``<bos> <image> x n`` then the text; n = the vision tower's   ``pixel_values`` (images, C, H, W)
                patches (the CLS feature is dropped)
==============  ==========================================================  =========================================

Images precede the text, as the Qwen2-VL and LLaVA chat templates place an image before the question, so a
request's ``text`` never carries model-specific image tokens and one rendered prompt serves every family. A
request's images are PIL images or paths (opened and converted to RGB). A checkpoint loader attaches the codec to its
tokenizer (:func:`attach`); :meth:`corl_bench.rollout.encode.Processor.of` reads it from there once, and from then on
every encoder path (engines, training pass, warm start) receives it explicitly in that processor.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["CODEC_FILE", "ImageLayout", "VisionCodec", "attach", "codec_of", "load_image"]

CODEC_FILE = "corl_vision_codec.json"
STYLES = ("qwen2-vl", "llava")


@dataclass(frozen=True)
class ImageLayout:
    """How a model's prompt holds an image (see the module table)."""

    style: str
    image_token: str
    start_token: str = ""
    end_token: str = ""
    tokens_per_image: int = 0
    """llava: image tokens per image (the tower's patch count); qwen2-vl: 0 (it follows each image's grid)"""
    merge_size: int = 1
    """qwen2-vl: the vision tower's spatial merge size"""

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"unknown image layout style {self.style!r}; use one of {', '.join(STYLES)}")
        if self.style == "llava" and self.tokens_per_image < 1:
            raise ValueError("a llava image layout needs tokens_per_image >= 1 (the vision tower's patch count)")


def load_image(image: Any) -> Any:
    """A PIL image (RGB) from a PIL image or a path; a missing file is one clear line."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image if image.mode == "RGB" else image.convert("RGB")
    path = Path(str(image))
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist; check the benchmark's data directory (--data-dir)")
    with Image.open(path) as im:
        return im.convert("RGB")


class VisionCodec:
    """A vision-language model's tokenizer + image processor + image-token layout."""

    def __init__(self, tokenizer: Any, image_processor: Any, layout: ImageLayout) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.layout = layout
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (layout.image_token, layout.start_token,
                                                                 layout.end_token) if t}
        unk = getattr(tokenizer, "unk_token_id", None)
        missing = [t for t, i in ids.items() if i is None or (unk is not None and i == unk)]
        if missing:
            raise ValueError(f"the tokenizer has no token {missing[0]!r} for images; add it as a special token")
        self.image_token_id = ids[layout.image_token]
        self.start_id = ids.get(layout.start_token)
        self.end_id = ids.get(layout.end_token)
        self.layout_ids = tuple(ids.values())
        """the image-layout tokens: a prompt's image block is made of them, and engines never sample them (a
        completion holding one would no longer match its images in the training forward pass)"""
        head = tokenizer("", add_special_tokens=True)["input_ids"]
        self._head = list(head)  # what the tokenizer puts before a text (<bos>), [] when nothing

    # ---------------------------------------------------------------- persistence
    def save_pretrained(self, path: Path) -> None:
        """The image processor's config and the layout beside a ``save_pretrained`` checkpoint."""
        path = Path(path)
        self.image_processor.save_pretrained(path)
        (path / CODEC_FILE).write_text(json.dumps(asdict(self.layout), indent=2))

    @classmethod
    def from_pretrained(cls, path: Path, tokenizer: Any) -> "VisionCodec":
        """The codec saved with a checkpoint by :meth:`save_pretrained` (the PIL image processor of its class)."""
        import importlib

        path = Path(path)
        layout = ImageLayout(**json.loads((path / CODEC_FILE).read_text()))
        conf = json.loads((path / "preprocessor_config.json").read_text())
        name = str(conf.get("image_processor_type", "")).removesuffix("Pil").removesuffix("Fast")
        module = {"Qwen2VLImageProcessor": "qwen2_vl", "CLIPImageProcessor": "clip",
                  "SiglipImageProcessor": "siglip"}.get(name)
        if module is None:
            raise ValueError(f"{path}: no PIL image processor known for {name!r}")
        mod = importlib.import_module(f"transformers.models.{module}.image_processing_pil_{module}")
        proc = getattr(mod, f"{name}Pil").from_pretrained(path)
        return cls(tokenizer, proc, layout)

    # ---------------------------------------------------------------- encoding
    def pixels(self, images: Sequence[Any]) -> dict[str, Any]:
        """The image processor's tensors for ``images`` (pixel_values, and image_grid_thw for qwen2-vl)."""
        out = self.image_processor(images=[load_image(i) for i in images], return_tensors="pt")
        return {k: v for k, v in out.items() if k in ("pixel_values", "image_grid_thw")}

    def image_block(self, vision: dict[str, Any]) -> list[int]:
        """The token ids that stand for a request's images, in order."""
        lay = self.layout
        if lay.style == "llava":
            n_images = int(vision["pixel_values"].shape[0])
            return [self.image_token_id] * (lay.tokens_per_image * n_images)
        block: list[int] = []
        for thw in vision["image_grid_thw"].tolist():
            n = thw[0] * thw[1] * thw[2] // (lay.merge_size ** 2)
            block += [self.start_id] + [self.image_token_id] * n + [self.end_id]
        return block

    def prompt(self, request: Any) -> tuple[list[int], dict[str, Any]]:
        """(prompt token ids with the image tokens in place, the request's image tensors; {} without images).

        A token-id request with images must already hold the image block (its image-token count is checked)."""
        images = tuple(getattr(request, "images", ()) or ())
        vision = self.pixels(images) if images else {}
        if request.token_ids is not None:
            ids = list(request.token_ids)
            if images and ids.count(self.image_token_id) != len(self.image_block(vision)):
                raise ValueError(f"a token-id request with {len(images)} image(s) must hold their "
                                 f"{len(self.image_block(vision))} image tokens")
            return ids, vision
        if not images:
            return list(self.tokenizer(request.text, add_special_tokens=True)["input_ids"]), {}
        body = self.tokenizer(request.text, add_special_tokens=False)["input_ids"]
        return self._head + self.image_block(vision) + list(body), vision

    def collate(self, visions: Sequence[dict[str, Any]], ids: Any) -> dict[str, Any]:
        """The model's image inputs for a batch whose rows have ``visions`` (in row order) and padded ``ids``.

        Rows without images contribute nothing; an all-text batch gets {} (the model runs as a text model)."""
        import torch

        parts = [v for v in visions if v]
        if not parts:
            return {}
        out = {k: torch.cat([v[k] for v in parts], dim=0).to(ids.device) for k in parts[0]}
        if self.layout.style == "qwen2-vl":
            out["mm_token_type_ids"] = (ids == self.image_token_id).long()
        return out


def attach(tokenizer: Any, codec: VisionCodec) -> Any:
    """Let ``tokenizer`` carry its model's codec (engines and agents find it with :func:`codec_of`)."""
    tokenizer.vision_codec = codec
    return tokenizer


def codec_of(tokenizer: Any) -> VisionCodec | None:
    """The vision codec a tokenizer carries, or None for a text model."""
    return getattr(tokenizer, "vision_codec", None)
