"""Spec-driven evaluation with a real tiny model: predictions written per sample, a re-run generates only what is
missing (and regenerates it identically), versions and decodings never mix, the table re-grades with the spec, and code is graded in the sandbox."""

from __future__ import annotations

import json

import pytest

from corl_bench.eval.items import Item, build_items
from corl_bench.eval.specs import get_spec, parse_spec
from corl_bench.config import ConfigError
from corl_bench.eval.targets import check_manifest
from corl_bench.eval.evaluator import evaluate_spec, row_grader, with_overrides
from corl_bench.eval.metrics import score_predictions


def toy_spec(version: str = "1", **decoding):
    dec = {"greedy": True, "samples": 2, "temperature": 1.0, "max_new_tokens": 6, **decoding}
    return parse_spec({"name": "toy", "version": version, "task": "math", "source": {"local": "toy/test.jsonl"},
                       "prompt": "{problem}\n", "extractor": "qwen", "grader": "math", "decoding": dec})


ITEMS = [Item(f"p{i}", f"Ava has {10 + i} coins. She finds 2. How many coins now?", str(12 + i)) for i in range(5)]


class CountingModel:
    """Wraps a real model to count forward calls (a spy, not a fake: every token is the real model's)."""

    def __init__(self, model):
        self._m, self.calls = model, 0

    def __getattr__(self, name):
        return getattr(self._m, name)

    def __call__(self, *a, **kw):
        self.calls += 1
        return self._m(*a, **kw)


def test_predictions_are_written_per_sample_and_a_rerun_generates_nothing(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    spy = CountingModel(model)
    out = tmp_path / "toy.jsonl"
    scores = evaluate_spec(spy, tok, toy_spec(), ITEMS, out_path=out, seed=1, chunk=2)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 5 * (1 + 2) and scores.n_problems == 5 and scores.k == 2
    assert {(r["decoding"], r["sample_index"]) for r in rows} == {("greedy", 0), ("sampled", 0), ("sampled", 1)}
    assert {"prompt", "completion", "extracted", "gold", "correct", "finished", "n_tokens"} <= set(rows[0])
    calls = spy.calls
    again = evaluate_spec(spy, tok, toy_spec(), ITEMS, out_path=out, seed=1, chunk=2)
    assert spy.calls == calls and again == scores and len(out.read_text().splitlines()) == 15


def test_an_interrupted_file_is_completed_not_duplicated(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    out = tmp_path / "toy.jsonl"
    evaluate_spec(model, tok, toy_spec(), ITEMS, out_path=out, seed=1, chunk=2)
    lines = out.read_text().splitlines()
    kept = [x for x in lines if json.loads(x)["problem_id"] != "p3"]
    out.write_text("\n".join(kept) + "\n" + lines[-1][: len(lines[-1]) // 2])  # lost rows + a torn last line
    evaluate_spec(model, tok, toy_spec(), ITEMS, out_path=out, seed=1, chunk=2)
    rows = [json.loads(x) for x in out.read_text().splitlines() if x.strip().endswith("}")]
    keys = [(r["problem_id"], r["decoding"], r["sample_index"]) for r in rows]
    assert len(keys) == len(set(keys)) == 15
    # chunks are fixed over the full item list and seeded by their start: the lost rows come back identical
    assert sorted(json.dumps(r) for r in rows) == sorted(json.dumps(json.loads(x)) for x in lines)


def test_predictions_of_another_version_are_refused(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    out = tmp_path / "toy.jsonl"
    evaluate_spec(model, tok, toy_spec("1"), ITEMS[:1], out_path=out)
    with pytest.raises(ConfigError, match="version"):
        evaluate_spec(model, tok, toy_spec("2"), ITEMS[:1], out_path=out)


def test_resuming_with_a_different_decoding_is_refused(tmp_path):
    spec = toy_spec()
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours")
    (tmp_path / "toy.jsonl").write_text('{"problem_id": "p0", "benchmark_version": "1"}\n')
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours")  # same protocol: fine
    with pytest.raises(ConfigError, match="different decoding"):
        check_manifest(tmp_path, spec, with_overrides(spec.decoding, max_new_tokens=99), "m", "ours")
    (tmp_path / "toy.jsonl").unlink()  # no predictions left: nothing to mix, the new protocol is recorded
    check_manifest(tmp_path, spec, with_overrides(spec.decoding, max_new_tokens=99), "m", "ours")


def test_stop_strings_cut_the_completion(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    out = tmp_path / "toy.jsonl"
    evaluate_spec(model, tok, toy_spec(stop=["="], greedy=True, samples=0), ITEMS, out_path=out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all("=" not in r["completion"] for r in rows)


def test_table_regrades_rows_with_the_specs_extractor():
    rows = [{"problem_id": "a", "decoding": "sampled", "completion": "I think 4, so \\boxed{5}", "gold": "4"}]
    assert score_predictions(rows).avg_k == 0.0  # default (Qwen chain): the box wins
    gsm = get_spec("gsm8k")  # flexible-extract: the last number
    assert score_predictions(rows, row_grader(gsm)).avg_k == 0.0
    rows[0]["completion"] = "\\boxed{5}... no, it is 4"
    assert score_predictions(rows, row_grader(gsm)).avg_k == 1.0


def test_code_items_are_graded_by_running_their_tests(tmp_path):
    from corl_bench.eval.evaluator import _grade

    spec = get_spec("humaneval")
    row = {"task_id": "HumanEval/x", "prompt": "def add(a, b):\n", "entry_point": "add",
           "test": "def check(f):\n    assert f(2, 3) == 5\n"}
    item = build_items(spec, [row])[0]
    right, wrong, early = _grade(spec, [(item, "    return a + b\n"), (item, "    return a - b\n"),
                                        (item, "    return 0\nimport sys; sys.exit(0)\n")], 5.0, 2)
    assert right[1] is True and wrong[1] is False and early[1] is False
    mbpp = get_spec("mbpp")
    item = build_items(mbpp, [{"task_id": 7, "text": "Add.", "code": "", "test_list": ["assert add(1, 1) == 2"],
                               "test_setup_code": ""}])[0]
    (ok,) = _grade(mbpp, [(item, "```python\ndef add(a, b):\n    return a + b\n```")], 5.0, 1)
    assert ok[1] is True


def test_livecodebench_stdin_and_functional_problems_run_in_the_sandbox():
    from corl_bench.eval.codeexec import run_tests

    stdin = {"kind": "livecodebench", "func_name": None,
             "tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                       {"input": "5 6\n", "output": "11\n", "testtype": "stdin"}]}
    assert run_tests("a, b = map(int, input().split())\nprint(a + b)\n", stdin)[0] is True
    assert run_tests("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)\n", stdin)[0]
    assert run_tests("print(3)\n", stdin)[0] is False
    functional = {"kind": "livecodebench", "func_name": "twoSum",
                  "tests": [{"input": "[2, 7, 11]\n9", "output": "[0, 1]", "testtype": "functional"}]}
    good = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
            "        seen = {}\n        for i, x in enumerate(nums):\n"
            "            if target - x in seen:\n                return [seen[target - x], i]\n"
            "            seen[x] = i\n")
    assert run_tests(good, functional)[0] is True
    assert run_tests(good.replace("return [seen[target - x], i]", "return [i, i]"), functional)[0] is False
