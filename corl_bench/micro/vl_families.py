"""Vision-language families of the micro visual world: tiny VLMs that differ as real ones do.

==================  ========================================  ===================  ====================================
family              architecture                              tokenizer            systematic error in its warm start
==================  ========================================  ===================  ====================================
``qwen2vl-micro``   ``Qwen2VLForConditionalGeneration``: its  byte-level BPE, 600  ``edge-blind``: overlooks what lies
                    own ViT (4-px patches, 2x2 merge, M-RoPE   target, own corpus   in the rightmost column of the image
                    in the language model), Qwen2 decoder
``llava-micro``     ``LlavaForConditionalGeneration``: a       byte-level BPE, 450  ``undercount``: reads counts of 4 or
                    separate CLIP vision encoder (8-px         target, own corpus   more, and bars / lines of 3 or more
                    patches, CLS dropped) + MLP projector +                         cells, one too low
                    Llama decoder
==================  ========================================  ===================  ====================================

Like Qwen2.5-VL x InternVL in the paper, the pair differs in how the image reaches the language model (a native
vision tower with merged patches and multimodal rotary positions, against an encoder + projector in front of a
plain decoder), in tokenizers, sizes, seeds, warm-start corpora and flaws. Both see a 32 x 32 image as 16 image
tokens, one per 8 x 8 cell of the scene grid (:mod:`corl_bench.micro.visual`). Checkpoints are ordinary
``save_pretrained`` folders (model, tokenizer, PIL image-processor config and the codec's image layout) that
``AutoModelForImageTextToText`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

IMAGE = 32  # pixels per side of a micro visual scene


@dataclass(frozen=True)
class VisualFamily:
    """A micro vision-language family: ``style`` picks the builder, ``text_kwargs`` / ``vision_kwargs`` its sizes."""

    profile: ClassVar[str] = "micro-visual"
    """the profile that builds and loads this family (a class attribute: not part of the recipe's fingerprint)"""

    name: str
    style: str  # "qwen2-vl" | "llava"
    text_kwargs: tuple[tuple[str, Any], ...]
    vision_kwargs: tuple[tuple[str, Any], ...]
    flaw: str  # a flaw of corl_bench.micro.visual.flawed_solution
    vocab_size: int = 600
    p_sys: float = 0.5
    p_noise: float = 0.15
    rephrased_share: float = 0.3
    warmstart_steps: int = 1200
    """the cap; the warm start stops once the dev greedy accuracy reaches ``warmstart_target``"""
    warmstart_target: float = 0.6
    warmstart_min_steps: int = 150
    warmstart_check_every: int = 25
    warmstart_lr: float = 2e-3
    warmstart_batch: int = 64
    seed: int = 0
    kind: str = "visual"
    """marks a vision-language family (text families have no such field)"""

    @property
    def arch(self) -> str:
        """The ``transformers`` model class, as ``corl-bench ls families`` shows it."""
        return {"qwen2-vl": "Qwen2VLConfig", "llava": "LlavaConfig (CLIP + Llama)"}.get(self.style, self.style)

    @property
    def tokenizer(self) -> str:
        return "bpe"

    @property
    def text_config(self) -> dict[str, Any]:
        return dict(self.text_kwargs)

    @property
    def vision_config(self) -> dict[str, Any]:
        return dict(self.vision_kwargs)


def is_visual(family: Any) -> bool:
    return getattr(family, "kind", "") == "visual"


def layout_tokens(style: str) -> tuple[str, ...]:
    """The special tokens a family's tokenizer needs for its image layout."""
    return ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>") if style == "qwen2-vl" \
        else ("<image>",)


def build_codec(family: VisualFamily, tokenizer: Any) -> Any:
    """The family's image processor (PIL) and image layout around ``tokenizer``."""
    from corl_bench.models.images import ImageLayout, VisionCodec

    vis = family.vision_config
    try:  # the PIL image processors (transformers 5): the default ones import torchvision
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    except ImportError as e:
        raise ImportError(f"the micro visual families need the PIL image processors of transformers >= 5 "
                          f"(pip install -U transformers): {e}") from None
    if family.style == "qwen2-vl":

        proc = Qwen2VLImageProcessorPil(patch_size=vis["patch_size"], temporal_patch_size=2,
                                        merge_size=vis["spatial_merge_size"],
                                        size={"shortest_edge": IMAGE * IMAGE, "longest_edge": IMAGE * IMAGE})
        layout = ImageLayout("qwen2-vl", "<|image_pad|>", "<|vision_start|>", "<|vision_end|>",
                             merge_size=vis["spatial_merge_size"])
    elif family.style == "llava":
        proc = CLIPImageProcessorPil(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE})
        layout = ImageLayout("llava", "<image>", tokens_per_image=(IMAGE // vis["patch_size"]) ** 2)
    else:
        raise ValueError(f"family {family.name}: unknown style {family.style!r}; use qwen2-vl or llava")
    return VisionCodec(tokenizer, proc, layout)


def build_model(family: VisualFamily, tokenizer: Any) -> Any:
    """A freshly initialised ``transformers`` VLM of this family (seeded by the caller)."""
    import transformers

    special = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    text = {**family.text_config, **special}
    tid = tokenizer.convert_tokens_to_ids
    if family.style == "qwen2-vl":
        head_dim = text["hidden_size"] // text["num_attention_heads"]
        quarter = head_dim // 2 // 4
        text.setdefault("rope_scaling", {"type": "mrope",
                                         "mrope_section": [head_dim // 2 - 2 * quarter, quarter, quarter]})
        vision = {**family.vision_config, "hidden_size": text["hidden_size"]}  # the merger's output = the LM's width
        cfg = transformers.Qwen2VLConfig(text_config=text, vision_config=vision,
                                         image_token_id=tid("<|image_pad|>"), video_token_id=tid("<|video_pad|>"),
                                         vision_start_token_id=tid("<|vision_start|>"),
                                         vision_end_token_id=tid("<|vision_end|>"),
                                         tie_word_embeddings=text.get("tie_word_embeddings", True), **special)
        return transformers.Qwen2VLForConditionalGeneration(cfg)
    vis = family.vision_config
    cfg = transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(image_size=IMAGE, **vis),
        text_config=transformers.LlamaConfig(**text), image_token_id=tid("<image>"),
        vision_feature_layer=-1, vision_feature_select_strategy="default",
        image_seq_length=(IMAGE // vis["patch_size"]) ** 2, tie_word_embeddings=text.get("tie_word_embeddings", True))
    return transformers.LlavaForConditionalGeneration(cfg)


VISUAL_FAMILIES: dict[str, VisualFamily] = {
    "qwen2vl-micro": VisualFamily(
        "qwen2vl-micro", "qwen2-vl",
        (("hidden_size", 128), ("num_hidden_layers", 4), ("num_attention_heads", 4), ("num_key_value_heads", 2),
         ("intermediate_size", 384), ("max_position_embeddings", 256), ("tie_word_embeddings", True)),
        (("depth", 2), ("embed_dim", 64), ("num_heads", 4), ("mlp_ratio", 2), ("patch_size", 4),
         ("temporal_patch_size", 2), ("spatial_merge_size", 2), ("in_channels", 3)),
        flaw="edge-blind", vocab_size=600, seed=44, warmstart_lr=3e-3),
    "llava-micro": VisualFamily(
        "llava-micro", "llava",
        (("hidden_size", 128), ("num_hidden_layers", 4), ("num_attention_heads", 4), ("intermediate_size", 384),
         ("max_position_embeddings", 256), ("tie_word_embeddings", True)),
        (("hidden_size", 64), ("intermediate_size", 128), ("num_hidden_layers", 2), ("num_attention_heads", 4),
         ("patch_size", 8)),
        flaw="undercount", vocab_size=450, seed=55),
}
