"""Bad input, fuzzed (hypothesis): configs, dataset rows and model outputs. Every generated case ends in a result or
a one-line error naming the input — never a traceback of another kind, a hang, or a lost file."""

from __future__ import annotations

import json
import string
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from corl_bench.eval.items import build_items
from corl_bench.eval.specs import parse_spec
import dataclasses

from corl_bench.config import Config, ConfigError, config_from_dict, load_config
from corl_bench.eval.data import load_rows
from corl_bench.grading.verifier import extract_normalized, grade, is_equivalent, plurality_vote

CASES = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
FIELDS_FOR_FUZZ = sorted(f"{sec.name}.{f.name}" for sec in dataclasses.fields(Config) if sec.name != "set_keys"
                         for f in dataclasses.fields(sec.default_factory()))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=30), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                                               st.integers(), max_size=2))


def one_line(e: Exception) -> None:
    text = str(e)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)


# ------------------------------------------------------------------------------------------------ configs
@CASES
@given(st.dictionaries(st.sampled_from(FIELDS_FOR_FUZZ + ["run.nope", "nope.x", "grpo", "model.profile.x"]),
                       SCALARS, max_size=6))
def test_fuzzed_config_fields_give_a_config_or_a_one_line_error(fields):
    data: dict = {}
    for dotted, value in fields.items():
        section, _, key = dotted.partition(".")
        if key:
            if not isinstance(data.get(section, {}), dict):
                continue
            data.setdefault(section, {})[key] = value
        else:
            data[section] = value
    try:
        config_from_dict(data)
    except ConfigError as e:
        one_line(e)


@CASES
@given(st.lists(st.text(alphabet=string.printable, max_size=40), max_size=4))
def test_fuzzed_set_overrides_give_a_config_or_a_one_line_error(items):
    try:
        load_config(None, items)
    except ConfigError as e:
        one_line(e)


@CASES
@given(st.binary(max_size=300))
def test_fuzzed_config_files_give_a_config_or_a_one_line_error(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_bytes(raw)
    try:
        load_config(path)
    except ConfigError as e:
        one_line(e)


# ------------------------------------------------------------------------------------------------ dataset rows
ROW_VALUES = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=50), st.just(""),
                       st.just("x" * 200_000), st.lists(st.text(max_size=5), max_size=3))


@CASES
@given(st.lists(st.dictionaries(st.sampled_from(["id", "problem", "answer", "choices", "extra"]), ROW_VALUES,
                                max_size=5), max_size=6),
       st.sampled_from(["math", "mcq"]), st.binary(max_size=40))
@example(rows=[{"id": "\n"}], task="math", junk=b"")  # found by hypothesis: an id with a newline broke the one line
def test_fuzzed_dataset_rows_give_items_or_a_one_line_error(tmp_path_factory, rows, task, junk):
    root = tmp_path_factory.mktemp("data")
    (root / "toy").mkdir()
    path = root / "toy" / "test.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(text.encode() + junk)  # junk: torn lines, non-UTF-8 bytes, stray text
    spec = parse_spec({"name": "toy", "version": "1", "task": task, "source": {"local": "toy/test.jsonl"},
                       "prompt": "{problem}", "extractor": "qwen" if task == "math" else "letter",
                       "grader": "math" if task == "math" else "letter"})
    before = path.read_bytes()
    try:
        items = build_items(spec, load_rows(spec, root))
        assert all(isinstance(it.problem, str) and isinstance(it.gold, str) for it in items)
    except ConfigError as e:
        one_line(e)
    assert path.read_bytes() == before  # reading never rewrites the data


# ------------------------------------------------------------------------------------------------ model outputs
PIECES = st.sampled_from(["\\boxed{", "}", "{", "\\boxed 9", "\\fbox{", "the answer is ", "final answer is $",
                          "$. I hope", "答案是", "\\frac{", "1/2", "-3.5", "1,000", "\x00", "\x1b[31m", "\r", "\n",
                          "\\text{", "\\left(", "\\right)", "∞", "π", " ", "42", "\\dfrac12", "{{{{", "}}}}"])


@CASES
@given(st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=40), st.integers(0, 3))
def test_fuzzed_completions_are_graded_without_error(pieces, repeat):
    text = "".join(pieces) * (1 + repeat * 50)
    t0 = time.perf_counter()
    answer = extract_normalized(text)
    extracted, correct = grade(text, "42")
    vote = plurality_vote([answer, extracted, None, "42"])
    assert answer is None or isinstance(answer, str)
    assert isinstance(correct, bool) and vote.label in (answer, extracted, "42", None)
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("text", ["\\boxed{" * 50_000, "}" * 100_000, "1" * 100_000, "\\boxed{" + "x" * 100_000,
                                  "\\boxed{\\boxed{\\boxed{7}}}", "\x00" * 10_000 + "\\boxed{3}"])
def test_pathological_completions_finish_quickly(text):
    t0 = time.perf_counter()
    grade(text, "7")
    is_equivalent(extract_normalized(text), "7")
    assert time.perf_counter() - t0 < 10
