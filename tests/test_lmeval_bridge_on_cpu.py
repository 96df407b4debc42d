"""The lm-eval bridge: our specs as lm-eval tasks (include_path, nothing patched). With the same completions both
engines score identically; with a real HFLM on a real tiny model the run produces our prediction rows."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

# lm-eval caches json datasets through `datasets`; keep that out of the user's cache and off the network
os.environ.setdefault("HF_DATASETS_CACHE", str(Path(tempfile.gettempdir()) / "corl-bench-tests-hf-datasets"))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("lm_eval", reason="lm-eval is an optional extra: pip install -e '.[lm-eval]'")
from lm_eval.api.model import LM  # noqa: E402

from corl_bench.eval.items import Item  # noqa: E402
from corl_bench.eval.specs import get_spec, parse_spec  # noqa: E402
from corl_bench.eval.evaluator import row_grader  # noqa: E402
from corl_bench.eval.lmeval_bridge import render_task, rows_from_samples, run_lm_eval  # noqa: E402
from corl_bench.eval.metrics import score_predictions  # noqa: E402


class ReplayLM(LM):
    """Test double: an lm-eval model that answers every request from a table of stored completions."""

    def __init__(self, completions: dict[str, list[str]]):
        super().__init__()
        self.completions = completions
        self.served: dict[str, int] = {}

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            prompt = req.args[0]
            i = self.served.get(prompt, 0)
            self.served[prompt] = i + 1
            out.append(self.completions[prompt][i])
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError


def math_spec(samples=3):
    return parse_spec({"name": "toy-math", "version": "2", "task": "math", "source": {"local": "x.jsonl"},
                       "prompt": "Q: {problem}\nA:", "extractor": "boxed", "grader": "math",
                       "decoding": {"samples": samples, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8}})


ITEMS = [Item("a", "1+1", "2"), Item("b", "half of 1", "\\frac{1}{2}"), Item("c", "3*3", "9")]
COMPLETIONS = {  # per prompt, k=3: equivalences, a missing box, a majority that differs from the first sample
    "Q: 1+1\nA:": ["\\boxed{2}", "so 2", "\\boxed{3}"],
    "Q: half of 1\nA:": ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{\\dfrac12}"],
    "Q: 3*3\nA:": ["\\boxed{6}", "\\boxed{9}", "\\boxed{6}"],
}


def test_rendered_task_is_a_generate_until_task_with_repeats_and_take_first_k(tmp_path):
    name = render_task(math_spec(), ITEMS, tmp_path)
    text = (tmp_path / f"{name}.yaml").read_text()
    assert "repeats: 3" in text and "take_first_k" in text and "!function utils.process_results" in text
    docs = [json.loads(x) for x in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert [d["prompt"] for d in docs] == list(COMPLETIONS)


def test_same_completions_score_exactly_the_same_in_both_engines(tmp_path):
    spec = math_spec()
    metrics, samples = run_lm_eval(ReplayLM(COMPLETIONS), spec, ITEMS, tmp_path)
    rows = rows_from_samples(spec, samples, spec.decoding)
    ours = score_predictions(rows, row_grader(spec))
    assert [r["completion"] for r in rows] == [c for cs in COMPLETIONS.values() for c in cs]
    assert metrics["avg_k"] == pytest.approx(ours.avg_k, abs=0) == pytest.approx((1 + 3 + 1) / 9)
    assert metrics["maj_k"] == ours.maj_k == pytest.approx(2 / 3)  # 3*3: the majority answer 6 is wrong
    assert metrics["pass_k"] == ours.pass_k == 1.0


def test_real_hflm_on_a_real_tiny_model_writes_our_rows(tiny_qwen, tmp_path):
    from corl_bench.eval.lmeval_bridge import evaluate_with_lm_eval

    model, tok = tiny_qwen
    spec = math_spec(samples=2)
    out = tmp_path / "toy.jsonl"
    scores = evaluate_with_lm_eval(model, tok, spec, ITEMS, out_path=out, decoding=spec.decoding, batch_size=8)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 * 2 and {r["engine"] for r in rows} == {"lm-eval"}
    assert scores.n_problems == 3 and scores.k == 2
    assert all(isinstance(r["n_tokens"], int) for r in rows)  # re-tokenised (lm-eval returns text only)


def test_hflm_samples_with_the_specs_nucleus_and_no_top_k(tiny_qwen, tmp_path, monkeypatch):
    """lm-eval's HFLM hands the task's generation kwargs to ``model.generate``, whose global default is top_k=50;
    the rendered task must switch that off, or lm-eval samples from a different distribution than the spec's."""
    from lm_eval.models.huggingface import HFLM
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    model, tok = tiny_qwen
    seen = []
    real = type(model)._get_logits_processor

    def spy(self, generation_config, *args, **kwargs):
        procs = real(self, generation_config, *args, **kwargs)
        seen.append([type(p) for p in procs])
        return procs

    monkeypatch.setattr(type(model), "_get_logits_processor", spy)
    run_lm_eval(HFLM(pretrained=model, tokenizer=tok, batch_size=8), math_spec(samples=2), ITEMS[:1], tmp_path,
                tokenizer=tok)
    assert seen and all(TopPLogitsWarper in procs and TopKLogitsWarper not in procs for procs in seen)


def test_code_tasks_go_through_the_sandbox_in_both_engines(tmp_path):
    spec = get_spec("humaneval")
    from corl_bench.eval.items import build_items
    item = build_items(spec, [{"task_id": "H/1", "prompt": "def add(a, b):\n", "entry_point": "add",
                               "test": "def check(f):\n    assert f(2, 3) == 5\n"}])[0]
    completions = {item.problem: ["    return a + b\n"]}
    metrics, samples = run_lm_eval(ReplayLM(completions), spec, [item], tmp_path)
    rows = rows_from_samples(spec, samples, spec.decoding)
    assert metrics["avg_k"] == 1.0 and rows[0]["correct"] is True
