"""Benchmark specs, extractors, data loading (local dir, env var, checksums, prepare) and LiveCodeBench decoding.

Tests that read ../shared/data carry the ``shared_data`` marker and skip with a reason where it is absent; all other
tests build their own small fixtures.
"""

from __future__ import annotations

import json
import pickle
import base64
import zlib

import pytest

from corl_bench.eval.items import build_items, render
from corl_bench.eval.specs import get_spec, parse_spec
from corl_bench.config import ConfigError
from corl_bench.eval.data import load_rows, prepare
from corl_bench.eval.livecodebench import decode_private, encode_private, read_release
from corl_bench.registries import BENCHMARKS
from corl_bench.eval.scoring import extract_boxed, extract_code, extract_flexible, extract_letter, grade_text
from tests.conftest import SHARED_DATA

PAPER_SUITE = ("gsm8k", "math500", "amc83", "humaneval", "mbpp", "gpqa_diamond", "livecodebench_v6")
EXTRA = ("aime24", "aime25", "amc23", "minerva_math", "olympiadbench")


def spec_dict(**over):
    base = {"name": "toy", "version": "3", "task": "math", "source": {"local": "toy/test.jsonl"},
            "prompt": "{problem}\nAnswer:", "extractor": "boxed", "grader": "math",
            "decoding": {"samples": 2, "temperature": 0.6, "max_new_tokens": 16}}
    base.update(over)
    return base


# ------------------------------------------------------------------------------------------------ specs
def test_every_registered_spec_validates_and_the_paper_suite_is_complete():
    names = BENCHMARKS.names()
    for name in PAPER_SUITE + EXTRA:
        assert name in names, name
    for name in names:
        spec = get_spec(name)
        assert spec.version and spec.key == f"{name}@{spec.version}"
    paper = [get_spec(n) for n in PAPER_SUITE]
    assert all(s.decoding.temperature == 0.6 and s.decoding.top_p == 0.95 and s.decoding.max_new_tokens == 3072
               for s in paper)  # the paper's decoding (corl-paper-and-code.md section 4.2)
    assert get_spec("amc83").decoding.samples == 8  # AMC avg@8
    assert {s.task for s in paper} == {"math", "mcq", "code"}


@pytest.mark.parametrize("over, match", [
    ({"extractor": "nope"}, "extractor: unknown answer extractor 'nope'"),
    ({"grader": "vibes"}, "grader: unknown grader 'vibes'"),
    ({"task": "essay"}, "task must be one of"),
    ({"prompt": "no placeholder"}, "must contain {problem}"),
    ({"colour": 1}, "'colour' is not a spec field"),
    ({"decoding": {"samples": 0}}, "set samples >= 1 or greedy: true"),
    ({"decoding": {"temperature": 0}}, "temperature must be > 0"),
    ({"decoding": {"top_k": 3}}, "decoding.top_k is not a field"),
    ({"source": {}}, "give a local path, a hub dataset or a generator"),
    ({"source": {"generator": "my_pkg.tasks", "suite": "t", "size": 3, "seed": 1}},
     "names the profile that serves its items; add profile"),
    ({"metrics": ["pass@1000000"]}, "'pass@1000000' is unknown"),
])
def test_bad_specs_fail_with_one_line_naming_the_field(over, match):
    with pytest.raises(ConfigError, match=match) as e:
        parse_spec(spec_dict(**over), origin="toy.yaml")
    assert "\n" not in str(e.value) and "toy.yaml" in str(e.value)


# ------------------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize("text, expected", [
    ("so she makes $18 a day.", "18"), ("Total: 1,234 apples", "1234"), ("The answer is -7.", "-7"),
    ("\\boxed{42} dollars", "42"), ("no digits here", None), ("It costs $3.50.", "3.50")])
def test_flexible_extract_takes_the_last_number(text, expected):
    assert extract_flexible(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"), ("first \\boxed{3} then \\boxed{4}", "4"),
    ("the answer is 5", None), ("\\boxed{12", None)])
def test_boxed_extract_takes_only_the_last_box(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("... so \\boxed{C}", "C"), ("\\boxed{(b)}", "B"), ("\\boxed{\\text{D}}", "D"), ("The answer is (A).", "A"),
    ("Answer: B", "B"), ("I think \\boxed{A} no wait \\boxed{D}", "D"), ("no letter", None)])
def test_letter_extract_for_multiple_choice(text, expected):
    assert extract_letter(text) == expected


def test_code_extract_prefers_the_last_fenced_block_else_the_continuation():
    assert extract_code("text\n```python\ndef f():\n    return 1\n```\nmore\n```python\nx = 2\n```") == "x = 2\n"
    assert extract_code("    return a + b\n") == "    return a + b\n"
    assert extract_code("```python\nunclosed = 1\n") == "unclosed = 1\n"
    assert extract_code("   ") is None


def test_grade_text_uses_the_specs_extractor_and_grader():
    assert grade_text("\\boxed{0.5}", "\\frac12", "boxed", "math") == ("0.5", True)
    assert grade_text("the answer is 0.5", "\\frac12", "boxed", "math") == (None, False)
    assert grade_text("hmm \\boxed{b}", "B", "letter", "letter") == ("B", True)


# ------------------------------------------------------------------------------------------------ data
@pytest.fixture()
def data_dir(tmp_path):
    root = tmp_path / "data"
    (root / "toy").mkdir(parents=True)
    rows = [{"id": f"t{i}", "problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(5)]
    (root / "toy" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_local_data_from_the_argument_or_the_environment(data_dir, monkeypatch):
    spec = parse_spec(spec_dict())
    assert [r["id"] for r in load_rows(spec, data_dir)] == [f"t{i}" for i in range(5)]
    monkeypatch.setenv("CORL_BENCH_DATA", str(data_dir))
    assert len(load_rows(spec)) == 5


def test_missing_data_names_the_file_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    with pytest.raises(ConfigError, match=r"toy/test.jsonl not found in .*; pass --data-dir DIR or set"):
        load_rows(parse_spec(spec_dict()), tmp_path)


def test_duplicate_ids_and_broken_lines_are_refused(data_dir):
    path = data_dir / "toy" / "test.jsonl"
    path.write_text(path.read_text() + json.dumps({"id": "t0", "problem": "x", "answer": "1"}) + "\n")
    with pytest.raises(ConfigError, match="duplicate ids"):
        load_rows(parse_spec(spec_dict()), data_dir)
    path.write_text('{"id": "a", "problem": "x", "answer": "1"}\n{"id": \n')
    with pytest.raises(ConfigError, match=r"test.jsonl line 2 is not valid JSON"):
        load_rows(parse_spec(spec_dict()), data_dir)


def test_prepare_freezes_with_checksums_and_a_tampered_file_is_refused(data_dir, tmp_path):
    spec = parse_spec(spec_dict(source={"local": "toy/test.jsonl", "where": {}}))
    dest = tmp_path / "frozen"
    manifest = prepare([spec], dest, data_dir)
    assert manifest["benchmarks"]["toy"] == {"version": "3", "file": "toy/test.jsonl", "rows": 5}
    assert len(manifest["files"]["toy/test.jsonl"]) == 64
    assert [r["answer"] for r in load_rows(spec, dest)] == ["1", "2", "3", "4", "5"]
    frozen = dest / "toy" / "test.jsonl"
    frozen.write_text(frozen.read_text().replace('"answer": "1"', '"answer": "7"'))
    with pytest.raises(ConfigError, match="does not match its checksum"):
        load_rows(spec, dest)


def test_where_filters_rows_and_items_render_with_the_template(data_dir):
    spec = parse_spec(spec_dict(source={"local": "toy/test.jsonl", "where": {"answer": "3"}}))
    items = build_items(spec, load_rows(spec, data_dir))
    assert [it.id for it in items] == ["t2"] and items[0].gold == "3"
    assert render(spec, items[0]) == "What is 2+1?\nAnswer:"


def test_gpqa_items_letter_the_options_in_the_corl_order():
    spec = get_spec("gpqa_diamond")
    row = {"id": "r1", "question": "Which?", "choices": "['w', 'x', 'y', 'z']", "corl_choices": "['z', 'w', 'y', 'x']",
           "corl_answer_letter": "B"}
    item = build_items(spec, [row])[0]
    assert item.problem == "Which?\n\n(A) z\n(B) w\n(C) y\n(D) x" and item.gold == "B"


def test_chat_template_renders_one_user_turn(tiny_qwen):
    _, tok = tiny_qwen
    tok = tok.__class__.from_pretrained(tok.name_or_path) if tok.name_or_path else tok
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}<assistant>"
    spec = get_spec("math500")
    item = build_items(spec, [{"id": "1", "problem": "1+1?", "answer": "2"}])[0]
    assert render(spec, item, tok) == ("<user>1+1?\nPlease reason step by step, and put your final answer within "
                                       "\\boxed{}.</user><assistant>")


# ------------------------------------------------------------------------------------------------ LiveCodeBench
def lcb_row(qid: str, private: list[dict], func: str | None = None) -> dict:
    return {"question_id": qid, "question_title": "t", "question_content": "Print the sum of two ints.",
            "platform": "atcoder", "contest_date": "2025-02-01T00:00:00", "starter_code": "",
            "difficulty": "easy", "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n",
                                                                   "testtype": "stdin"}]),
            "private_test_cases": encode_private(private),
            "metadata": json.dumps({"func_name": func} if func else {})}


def test_livecodebench_release_format_round_trips(tmp_path):
    private = [{"input": "5 6\n", "output": "11\n", "testtype": "stdin"}]
    (tmp_path / "test.jsonl").write_text(json.dumps(lcb_row("abc1", private)) + "\n")
    (tmp_path / "test6.jsonl").write_text(json.dumps(lcb_row("abc2", private)) + "\n")
    rows = read_release(tmp_path)
    assert [r["id"] for r in rows] == ["abc1", "abc2"]
    assert rows[0]["tests"] == [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}] + private
    # the real payload layout: base64(zlib(pickle(json string)))
    payload = lcb_row("x", private)["private_test_cases"]
    assert json.loads(pickle.loads(zlib.decompress(base64.b64decode(payload)))) == private


def test_livecodebench_payload_with_a_global_is_refused():
    evil = base64.b64encode(zlib.compress(pickle.dumps(print))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        decode_private(evil)


@pytest.mark.shared_data
@pytest.mark.parametrize("name, count", [("gsm8k", 1319), ("math500", 500), ("amc83", 83), ("humaneval", 164),
                                         ("mbpp", 500), ("gpqa_diamond", 198), ("aime24", 30), ("aime25", 30),
                                         ("amc23", 40), ("minerva_math", 272), ("olympiadbench", 675)])
def test_shared_data_has_every_offline_benchmark(name, count):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (offline benchmark copies live there on the project machines)")
    spec = get_spec(name)
    items = build_items(spec, load_rows(spec, SHARED_DATA))
    assert len(items) == count
    if spec.task != "code":
        assert all(it.gold for it in items)
