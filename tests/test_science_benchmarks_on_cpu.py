"""MMLU and SciBench (the CoMAS comparison's two extra benchmarks) from the hub, without the network.

The hub is replaced by small fixture files in the hub layout that each test writes itself (invented rows, not benchmark
data): ``cais/mmlu``'s ``all/test-00000-of-00001.parquet`` (``question``, ``subject``, ``choices``, ``answer`` as a
ClassLabel index) and ``xw27/scibench``'s JSON files (``problem_text``, ``answer_latex``, ``answer_number``, ``unit``,
``source``, ``problemid``, ``comment``, ``solution``), read by the real ``datasets`` parquet / json builders in place of
``datasets.load_dataset``. The expected prompts are written out as MASLab's ``datasets/MMLU.json`` /
``SciBench.json`` queries are (CoMAS's evaluation; :mod:`corl_bench.eval.science`). No offline copy of either set is
in ../shared/data, so no test here reads one.
"""

from __future__ import annotations

import json

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.data import load_rows, prepare
from corl_bench.eval.evaluator import row_grader
from corl_bench.eval.items import build_items, render
from corl_bench.eval.metrics import score_predictions
from corl_bench.eval.science import extract_boxed_abcd, extract_math_verify_number, rel_tol_5pct
from corl_bench.eval.scoring import grade_text
from corl_bench.eval.specs import get_spec

pytestmark = pytest.mark.usefixtures("hub_answers")  # the hub's loader is replaced by a stand-in here

MMLU_ROWS = [
    {"question": "Fixture: which gas do plants take in?", "subject": "biology",
     "choices": ["Oxygen", "Carbon dioxide", "Helium", "Neon"], "answer": 1},
    {"question": "Fixture: 2 + 2 = ?\n", "subject": "elementary_mathematics", "choices": ["3", "5", "6", "4"],
     "answer": 3},
    {"question": "Fixture: capital of the fixture land?", "subject": "geography",
     "choices": [" Alpha ", "Beta", "Gamma", "Delta"], "answer": 0},
]
SCI_ROWS = [
    {"problem_text": " A fixture mass of $2 \\mathrm{~kg}$ falls for $1 \\mathrm{~s}$. How far does it fall?\r\n",
     "answer_latex": " $4.9$", "answer_number": "4.9", "unit": " $\\mathrm{~m}$", "source": "class",
     "problemid": " Problem 1.1", "comment": " ", "solution": ""},
    {"problem_text": "Evaluate the fixture series $S=\\frac{1}{2}+\\frac{1}{4}+\\cdots$\r\n", "answer_latex": " 1",
     "answer_number": "1", "unit": " ", "source": "calculus", "problemid": " 11.2.1", "comment": " ",
     "solution": ""},
    {"problem_text": "Compute the fixture enthalpy change.", "answer_latex": "+5.4", "answer_number": "+5.4",
     "unit": "$\\text{kJ}$", "source": "atkins", "problemid": " e2.3", "comment": " ", "solution": "Steps."},
]
MMLU_INSTRUCTION = ("\n\nProvide your step-by-step solution to the problem. The final answer should be either A, B, C, "
                    "or D enclosed within \\boxed{}, e.g. \\boxed{A}.")
SCI_INSTRUCTION = ("\n\nProvide your step-by-step solution to the problem. The final answer should be a decimal number "
                   "enclosed within \\boxed{}, e.g. \\boxed{1}, \\boxed{0.1}, or \\boxed{0.01}. The unit part given in "
                   "the problem should not be enclosed.")


@pytest.fixture(autouse=True)
def no_local_copies(monkeypatch):
    """Only --data-dir given in a test counts: no $CORL_BENCH_DATA from the environment."""
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)


@pytest.fixture()
def science_hub(monkeypatch, tmp_path):
    """``datasets.load_dataset`` for ``cais/mmlu`` (all/test) and ``xw27/scibench`` (train) = fixture files in the hub
    layout (MMLU: a parquet file with the hub's features, the answer a ClassLabel; SciBench: two per-textbook JSON
    lists), read by the real builders; returns the calls."""
    datasets = pytest.importorskip("datasets")
    real = datasets.load_dataset
    features = datasets.Features({"question": datasets.Value("string"), "subject": datasets.Value("string"),
                                  "choices": datasets.Sequence(datasets.Value("string")),
                                  "answer": datasets.ClassLabel(names=["A", "B", "C", "D"])})
    parquet = tmp_path / "hub" / "cais--mmlu" / "all" / "test-00000-of-00001.parquet"
    parquet.parent.mkdir(parents=True)
    datasets.Dataset.from_list(MMLU_ROWS, features=features).to_parquet(str(parquet))
    sci = tmp_path / "hub" / "xw27--scibench"
    sci.mkdir(parents=True)
    (sci / "class.json").write_text(json.dumps(SCI_ROWS[:1]), encoding="utf-8")
    (sci / "calculus.json").write_text(json.dumps(SCI_ROWS[1:]), encoding="utf-8")
    calls = []

    def load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        cache = str(tmp_path / "hf-datasets")
        if path == "cais/mmlu":
            assert (name, split) == ("all", "test")
            return real("parquet", data_files=str(parquet), split="train", cache_dir=cache)
        assert (path, name, split) == ("xw27/scibench", None, "train")
        return real("json", data_files=[str(sci / "class.json"), str(sci / "calculus.json")], split="train",
                    cache_dir=cache)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


# ------------------------------------------------------------------------------------------------ MMLU
def test_the_comas_comparisons_seven_benchmarks_are_registered():
    from corl_bench.registries import BENCHMARKS, CONVERTERS

    # corl-paper-and-code.md 4.2: GSM8K, MATH-500, HumanEval, MBPP, MMLU, GPQA, SciBench (CoMAS's GPQA.json holds
    # 448 questions, GPQA main; gpqa_diamond is the Diamond set)
    assert {"gsm8k", "math500", "humaneval", "mbpp", "mmlu", "gpqa_diamond", "scibench"} <= set(BENCHMARKS.names())
    assert {"mmlu", "scibench"} <= set(CONVERTERS.names())
    assert (get_spec("mmlu").source.converter, get_spec("scibench").source.converter) == ("mmlu", "scibench")


def test_mmlu_hub_rows_become_lettered_items_asked_as_comas_asks_them(science_hub):
    spec = get_spec("mmlu")
    rows = load_rows(spec)
    assert science_hub == [("cais/mmlu", "all", "test")]
    assert [r["answer"] for r in rows] == ["B", "D", "A"]  # the ClassLabel index -> the letter
    assert [r["id"] for r in rows] == ["0", "1", "2"] and rows[1]["subject"] == "elementary_mathematics"
    items = build_items(spec, rows)
    assert [it.gold for it in items] == ["B", "D", "A"]
    # MASLab MMLU.json query: question, blank line, "(A) text" lines, blank line, the instruction
    assert render(spec, items[0]) == ("Fixture: which gas do plants take in?\n\n(A) Oxygen\n(B) Carbon dioxide\n"
                                      "(C) Helium\n(D) Neon" + MMLU_INSTRUCTION)
    assert render(spec, items[2]).startswith("Fixture: capital of the fixture land?\n\n(A) Alpha\n(B) Beta\n")
    assert (spec.chat_template, spec.fewshot, spec.system) == (True, 0, None)
    d = spec.decoding  # CoMAS scripts/evaluate_model.sh + MASLab defaults: T 0.7, top_p 1.0, 2048 tokens, 1 sample
    assert (d.greedy, d.samples, d.temperature, d.top_p, d.max_new_tokens) == (False, 1, 0.7, 1.0, 2048)


def test_mmlu_grading_takes_only_the_last_boxed_a_to_d_letter(science_hub):
    spec = get_spec("mmlu")
    items = build_items(spec, load_rows(spec))
    completions = {"0": "Plants fix CO2, so \\boxed{B}.", "1": "2+2=4, option (D). The answer is D.",
                   "2": "First \\boxed{A}, then \\boxed{e}"}
    graded = [grade_text(completions[it.id], it.gold, spec.extractor, spec.grader) for it in items]
    # item 1: no \boxed{} at all -> no answer (the `letter` extractor would read "answer is D"); item 2: \boxed{e} is
    # not A-D, so the last A-D box counts, as MASLab's findall does
    assert graded == [("B", True), (None, False), ("A", True)]
    rows = [{"problem_id": it.id, "decoding": "sampled", "completion": completions[it.id], "gold": it.gold}
            for it in items]
    scores = score_predictions(rows, row_grader(spec))  # how `corl-bench table` re-grades stored rows
    assert (scores.avg_k, scores.k, scores.extraction_failure) == (pytest.approx(2 / 3), 1, pytest.approx(1 / 3))


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{c}", "C"), ("\\boxed{A} ... \\boxed{D}", "D"), ("\\boxed{ B }", None), ("\\boxed{(B)}", None),
    ("\\boxed{\\text{B}}", None), ("The answer is B", None), ("\\boxed{E}", None), ("", None),
])
def test_boxed_abcd_is_maslabs_regex(text, expected):
    assert extract_boxed_abcd(text) == expected


def test_mmlu_rows_in_another_layout_or_with_a_bad_answer_are_one_line(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: [{"Question": "q", "A": "1", "target": "A"}])
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("mmlu"))
    msg = str(e.value)
    assert "\n" not in msg and "no 'question' column (another layout than cais/mmlu)" in msg
    assert msg.endswith("with DIR/mmlu/test.jsonl")
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: [{"question": "q", "choices": ["x", "y"],
                                                                       "answer": 2}])
    with pytest.raises(ConfigError, match="row 0 has answer 2, not the index of one of its 2 choices"):
        load_rows(get_spec("mmlu"))


# ------------------------------------------------------------------------------------------------ SciBench
def test_scibench_hub_rows_carry_the_unit_sentence_as_comas_asks_them(science_hub):
    spec = get_spec("scibench")
    rows = load_rows(spec)
    assert science_hub == [("xw27/scibench", None, "train")]
    assert [r["answer"] for r in rows] == ["4.9", "1", "+5.4"]
    assert [(r["source"], r["problemid"], r["unit"]) for r in rows] == [
        ("class", "Problem 1.1", "$\\mathrm{~m}$"), ("calculus", "11.2.1", ""), ("atkins", "e2.3", "$\\text{kJ}$")]
    items = build_items(spec, rows)
    # MASLab SciBench.json: problem_text verbatim + " The unit of the answer should be {unit}." (blank unit: none)
    assert render(spec, items[0]) == (" A fixture mass of $2 \\mathrm{~kg}$ falls for $1 \\mathrm{~s}$. How far does "
                                      "it fall?\r\n The unit of the answer should be $\\mathrm{~m}$." + SCI_INSTRUCTION)
    assert render(spec, items[1]) == ("Evaluate the fixture series $S=\\frac{1}{2}+\\frac{1}{4}+\\cdots$\r\n"
                                      + SCI_INSTRUCTION)
    assert items[2].problem.endswith("enthalpy change. The unit of the answer should be $\\text{kJ}$.")
    d = spec.decoding
    assert (spec.chat_template, d.samples, d.temperature, d.top_p, d.max_new_tokens) == (True, 1, 0.7, 1.0, 2048)


def test_scibench_grading_is_a_five_percent_relative_tolerance(science_hub):
    spec = get_spec("scibench")
    items = {it.id: it for it in build_items(spec, load_rows(spec))}
    cases = [("0", "s = g t^2 / 2, so \\boxed{5.1}", True),       # 4.1 % off 4.9
             ("0", "\\boxed{5.2} m", False),                         # 6.1 % off
             ("1", "The sum is \\boxed{\\frac{24}{25}}", True),      # a fraction: 0.96, 4 % off 1
             ("1", "so the sum converges to 0.9", False),            # last number, 10 % off
             ("2", "\\Delta H = \\boxed{5.4}", True),                # gold "+5.4": the sign is dropped as MASLab does
             ("2", "\\boxed{-5.4}", False),
             ("2", "I cannot tell.", False)]
    for rid, completion, right in cases:
        answer, ok = grade_text(completion, items[rid].gold, spec.extractor, spec.grader)
        assert ok is right, (completion, answer)


@pytest.mark.parametrize("pred, gold, right", [
    # math.isclose is relative to the larger of the two: right for 4.655 <= pred <= 4.9 / 0.95 = 5.1579
    ("4.9", "4.9", True), ("5.157", "4.9", True), ("5.16", "4.9", False), ("4.66", "4.9", True),
    ("4.65", "4.9", False), ("-30.0", "-30", True),
    ("0.0", "0", True), ("1e-3", "0.00104", True), ("nan", "1", False), ("x", "1", False), (None, "1", False),
    ("1.0", "+1", True), ("2.0", " 2 ", True),
])
def test_rel_tol_5pct(pred, gold, right):
    assert rel_tol_5pct(pred, gold) is right


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{13.4} m", "13.4"), ("first 2 then \\boxed{-30}", "-30.0"), ("\\boxed{1.6 \\times 10^{-3}}", "0.0016"),
    ("no number here", None), ("\\boxed{x+1}", None),
])
def test_math_verify_number_is_the_first_parsed_value(text, expected):
    assert extract_math_verify_number(text) == expected


def test_scibench_rows_in_another_layout_are_one_line(monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: [{"problem": "p", "answer": "1"}])
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("scibench"))
    msg = str(e.value)
    assert "\n" not in msg and "no 'problem_text' column (another layout than xw27/scibench)" in msg


# ------------------------------------------------------------------------------------------------ prepare
def test_prepare_freezes_both_and_the_local_copies_load_back_identically(science_hub, tmp_path):
    specs = [get_spec("mmlu"), get_spec("scibench")]
    hub_rows = {s.name: load_rows(s) for s in specs}
    dest = tmp_path / "frozen"
    manifest = prepare(specs, dest)
    assert manifest["benchmarks"] == {"mmlu": {"version": "1", "file": "mmlu/test.jsonl", "rows": 3},
                                      "scibench": {"version": "1", "file": "scibench/test.jsonl", "rows": 3}}
    calls = len(science_hub)
    for spec in specs:
        frozen = load_rows(spec, dest)
        assert frozen == hub_rows[spec.name]
        assert build_items(spec, frozen) == build_items(spec, hub_rows[spec.name])
    assert len(science_hub) == calls  # the frozen copies did not touch the hub
