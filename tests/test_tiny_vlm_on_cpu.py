"""The tiny real-architecture VLM checkpoints of :mod:`corl_bench.models.tiny_vlm`: every folder loads offline through
its processor class (PIL image processor, no video processor: :func:`corl_bench.models.hf_vlm.load_processor`) and
``AutoModelForImageTextToText``; a chat with an image, a batch of two
image sizes and a text-only chat run through processor, forward pass and ``generate``; a build is deterministic."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corl_bench.models.tiny_vlm import ARCHS, UNAVAILABLE, build, noise_image as _image

IMAGE_TOKENS = {"qwen2-vl": 12, "qwen2.5-vl": 12, "internvl": 16, "llava-onevision": 44, "llava": 16,
                "llava-next": 44, "idefics3": 80, "smolvlm": 80, "gemma3": 16}
"""image tokens (each arch's ``image_token``) for the 40 x 30 test image"""
PLACEHOLDER = {"qwen2-vl": "<|vision_start|><|image_pad|><|vision_end|>",
               "qwen2.5-vl": "<|vision_start|><|image_pad|><|vision_end|>", "internvl": "<IMG_CONTEXT>\n",
               "llava-onevision": "<image>\n", "llava": "<image>\n", "llava-next": "<image>\n", "idefics3": "<image>",
               "smolvlm": "<image>", "gemma3": "<start_of_image>"}
"""what the chat template writes for one ``{"type": "image"}`` entry"""

_LOADED: dict[str, tuple[Path, Any, Any]] = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """arch -> (folder, processor, model), each built and loaded once for the module."""
    from transformers import AutoModelForImageTextToText

    from corl_bench.models.hf_vlm import load_processor

    root = tmp_path_factory.mktemp("tiny_vlm")

    def get(arch: str) -> tuple[Path, Any, Any]:
        if arch not in _LOADED:
            path = build(arch, root / arch, seed=0)
            processor = load_processor(path)
            model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True).eval()
            _LOADED[arch] = (path, processor, model)
        return _LOADED[arch]

    yield get
    _LOADED.clear()


def _chat(text: str, image: bool = True) -> list[dict[str, Any]]:
    return [{"role": "user", "content": ([{"type": "image"}] if image else []) + [{"type": "text", "text": text}]}]


def _add_special(processor: Any, text: str) -> bool:
    """As ``apply_chat_template(tokenize=True)`` decides: no tokenizer specials when the template wrote ``<bos>``."""
    bos = processor.tokenizer.bos_token
    return not (bos and text.startswith(bos))


def test_module_imports_neither_torch_nor_transformers():
    code = ("import sys, corl_bench.models.tiny_vlm\n"
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_unavailable_and_unknown_archs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="choose one of"):
        build("no-such-vlm", tmp_path / "n")
    assert not set(UNAVAILABLE) & set(ARCHS)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_folder_loads_offline_as_the_real_classes(built, arch):
    path, processor, model = built(arch)
    spec = ARCHS[arch]
    assert type(processor).__name__ == spec.processor_class
    assert type(processor.image_processor).__name__ == spec.image_processor_class
    assert type(processor.image_processor).__module__.split(".")[-1].startswith("image_processing_pil_")
    assert type(model).__name__ == spec.model_class
    assert {str(p.dtype) for p in model.parameters()} == {"torch.float32"}
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 2_000_000, f"{arch}: {size} bytes"
    tok = processor.tokenizer
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    assert model.config.get_text_config().vocab_size >= len(tok)
    assert model.generation_config.pad_token_id == tok.pad_token_id
    import re

    for special in (spec.image_token, *re.findall(r"<[^<>]+>", PLACEHOLDER[arch])):  # one token each, never split
        assert tok(special, add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(special)]
    text = "Héllo, wörld! 2+3=5; ∑x² ≈ 3.14 {a: [1, 2]}\n\t~`"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and tok.decode(ids) == text


@pytest.mark.parametrize("arch", list(ARCHS))
def test_chat_with_an_image_forward_and_generate(built, arch):
    import torch

    _, processor, model = built(arch)
    rendered = processor.apply_chat_template(_chat("What is 2+3?"), add_generation_prompt=True)
    without = processor.apply_chat_template(_chat("What is 2+3?", image=False), add_generation_prompt=True)
    assert PLACEHOLDER[arch] in rendered and PLACEHOLDER[arch] not in without
    messages = [{"role": "user", "content": [{"type": "image", "image": _image(40, 30, 0)},
                                             {"type": "text", "text": "What is 2+3?"}]}]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    image_id = processor.tokenizer.convert_tokens_to_ids(ARCHS[arch].image_token)
    assert int((inputs["input_ids"] == image_id).sum()) == IMAGE_TOKENS[arch]
    bos = processor.tokenizer.bos_token_id
    if bos is not None:  # one <bos>, from the template or the tokenizer (Qwen2 and InternVL have none)
        assert inputs["input_ids"][0, 0] == bos and inputs["input_ids"][0, 1] != bos
    with torch.no_grad():
        logits = model(**inputs).logits
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert logits.shape[:2] == inputs["input_ids"].shape and torch.isfinite(logits).all()
    assert out.shape[0] == 1 and inputs["input_ids"].shape[1] < out.shape[1] <= inputs["input_ids"].shape[1] + 3


@pytest.mark.parametrize("arch", list(ARCHS))
def test_two_image_sizes_in_one_batch(built, arch):
    import torch

    _, processor, model = built(arch)
    texts = [processor.apply_chat_template(_chat(q), add_generation_prompt=True)
             for q in ("What is 2+3?", "Name a prime number above ten.")]
    batch = processor(text=texts, images=[[_image(40, 30, 1)], [_image(24, 56, 2)]], padding=True,
                      add_special_tokens=_add_special(processor, texts[0]), return_tensors="pt")
    images = batch["image_grid_thw"] if "image_grid_thw" in batch else batch["pixel_values"]
    assert batch["input_ids"].shape[0] == 2 and images.shape[0] >= 2  # Qwen: one grid per image, patches flat
    with torch.no_grad():
        logits = model(**batch).logits
        out = model.generate(**batch, max_new_tokens=2, do_sample=False)
    assert logits.shape[:2] == batch["input_ids"].shape and torch.isfinite(logits).all()
    assert out.shape[0] == 2


@pytest.mark.parametrize("arch", list(ARCHS))
def test_text_only_chat(built, arch):
    import torch

    _, processor, model = built(arch)
    inputs = processor.apply_chat_template(_chat("What is 2+3?", image=False), add_generation_prompt=True,
                                           tokenize=True, return_dict=True, return_tensors="pt")
    assert "pixel_values" not in inputs
    assert not (inputs["input_ids"] == processor.tokenizer.convert_tokens_to_ids(ARCHS[arch].image_token)).any()
    with torch.no_grad():
        logits = model(**inputs).logits
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert torch.isfinite(logits).all() and out.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(processor.decode(out[0], skip_special_tokens=True), str)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_build_is_deterministic(tmp_path, arch):
    def digest(folder: Path) -> str:
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    build(arch, tmp_path / "warm", seed=0)  # the first build of a process imports the model's modules
    start = time.perf_counter()
    a = digest(build(arch, tmp_path / "a", seed=7))
    elapsed = time.perf_counter() - start
    assert a == digest(build(arch, tmp_path / "b", seed=7))
    assert a != digest(build(arch, tmp_path / "c", seed=8))
    assert elapsed < 5, f"{arch}: build took {elapsed:.1f} s"
