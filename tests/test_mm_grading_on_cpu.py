"""The multimodal grading: the ``answer_tag`` extractor (the paper's VLM answer format, no fallback) and the
``mc_letter_or_value`` grader (the multiple-choice letter-or-value fix), table-tested; choices reach the grader
through ``grade_text`` and through stored prediction rows (``corl-bench table`` re-grades them)."""

from __future__ import annotations

import pytest

from corl_bench.eval.evaluator import row_grader
from corl_bench.eval.scoring import extract_answer_tag, gold_index, grade_text, mc_letter_or_value, option_letter
from corl_bench.registries import EXTRACTORS, GRADERS
from corl_bench.eval.specs import parse_spec

OPTS = ["40°", "60°", "120°", "140°"]
FRACS = ["\\frac{1}{2}", "0.75", "2\\sqrt{3}", "x+1", "No correct answer"]


@pytest.mark.parametrize("text, expected", [
    ("<think>2+3</think><answer>5</answer>", "5"),
    ("<answer>3</answer> then again <answer>7</answer>", "7"),                 # the LAST tag
    ("<ANSWER> 12 </Answer>", "12"),                                           # case-insensitive, stripped
    ("<answer>\n\\frac{1}{2}\n</answer>", "\\frac{1}{2}"),                     # spans lines
    ("<answer>\\boxed{42}</answer>", "42"),                                    # one enclosing box unwrapped
    ("<answer>$x = 4$</answer>", "4"),                                         # normalised like boxed's answers
    ("<answer>(B)</answer>", "B"),
    ("<answer>B: 60°</answer>", "B:60"),
    ("the answer is \\boxed{9}", None),                                        # NO fallback to \boxed
    ("The answer is 9.", None),                                                # nor to a phrase or a number
    ("<answer>5", None),                                                       # unclosed: no complete tag
    ("<answer></answer>", None),                                               # empty
    ("<answer>   </answer>", None),
    ("", None),
    (None, None),
])
def test_answer_tag_takes_the_last_tag_and_never_falls_back(text, expected):
    assert extract_answer_tag(text) == expected
    assert EXTRACTORS.get("answer_tag") is extract_answer_tag


@pytest.mark.parametrize("answer, n, expected", [
    ("B", 4, "B"), ("(B)", 4, "B"), ("B.", 4, "B"), ("B:", 4, "B"), ("B)", 4, "B"), ("B: 60°", 4, "B"),
    ("(B) 60", 4, "B"), ("\\text{(C)}", 4, "C"), ("\\textbf{D}", 4, "D"), ("(F)", 6, "F"),
    ("E", 4, None),            # beyond the item's four options
    ("b", 4, None),            # a lone lower-case letter may be a value
    ("60", 4, None), ("Bx", 4, None), ("BC", 4, None), ("", 4, None), (None, 4, None),
])
def test_option_letter_reads_the_usual_ways_of_naming_an_option(answer, n, expected):
    assert option_letter(answer, n) == expected


@pytest.mark.parametrize("gold, choices, expected", [
    ("C", OPTS, 2), ("c", OPTS, 2), ("(C)", OPTS, 2), ("120°", OPTS, 2), ("120 °", OPTS, None),
    ("False", ["True", "False"], 1), ("C\nD", OPTS, None), ("E", OPTS, None), ("A", None, None), ("A", [], None),
])
def test_gold_index_from_a_letter_or_an_option_text(gold, choices, expected):
    assert gold_index(gold, choices) == expected


@pytest.mark.parametrize("pred, gold, choices, right", [
    # the gold letter, written in any of the usual ways
    ("C", "C", OPTS, True), ("(C)", "C", OPTS, True), ("C.", "C", OPTS, True), ("C: 120°", "C", OPTS, True),
    ("\\text{(C)}", "C", OPTS, True), ("C:120", "C", OPTS, True),
    # another letter is wrong, whatever text follows it
    ("B", "C", OPTS, False), ("B: 120°", "C", OPTS, False), ("(D)", "C", OPTS, False),
    # the gold option's value: string, degrees, numbers, LaTeX (math-verify)
    ("120°", "C", OPTS, True), ("120", "C", OPTS, True), ("120^\\circ", "C", OPTS, True), ("60", "C", OPTS, False),
    ("\\frac12", "A", FRACS, True), ("0.5", "A", FRACS, True), ("\\dfrac{1}{2}", "A", FRACS, True),
    ("3/4", "B", FRACS, True), ("\\sqrt{12}", "C", FRACS, True), ("1+x", "D", FRACS, True),
    ("no correct answer", "E", FRACS, True), ("0.5", "B", FRACS, False),
    # a letter beyond the options is no letter; then it is compared as a value (and is wrong)
    ("F", "E", FRACS, False),
    # a gold written as an option's text (MathVista, some MathVerse items)
    ("B", "False", ["True", "False"], True), ("False", "False", ["True", "False"], True),
    ("A", "False", ["True", "False"], False), ("(C)", "(C)", ["p", "q", "r"], True),
    # a gold that names no single option ("C\nD"): only an answer equal to it counts
    ("C", "C\nD", OPTS, False),
    # image options named by their letters (MathVision): letter and text coincide
    ("D", "D", ["A", "B", "C", "D", "E"], True), ("(E)", "D", ["A", "B", "C", "D", "E"], False),
    # free-form items (no options): the math grader, and letter golds compared as letters
    ("6", "6", None, True), ("6.0", "6", None, True), ("\\frac{12}{2}", "6", None, True), ("7", "6", None, False),
    ("(B)", "B", None, True), ("C", "B", None, False),
    # nothing extracted
    (None, "C", OPTS, False),
])
def test_mc_letter_or_value(pred, gold, choices, right):
    assert mc_letter_or_value(pred, gold, choices) is right
    assert GRADERS.get("mc_letter_or_value") is mc_letter_or_value


@pytest.mark.parametrize("completion, extractor, right", [
    ("so \\boxed{C}", "boxed", True), ("so \\boxed{120^\\circ}", "boxed", True), ("so \\boxed{B}", "boxed", False),
    ("no box, the answer is C", "boxed", False),
    ("<answer>(C) 120°</answer>", "answer_tag", True), ("<answer>120</answer>", "answer_tag", True),
    ("\\boxed{C}", "answer_tag", False),
])
def test_grade_text_threads_the_choices_to_the_grader(completion, extractor, right):
    extracted, ok = grade_text(completion, "C", extractor, "mc_letter_or_value", OPTS)
    assert ok is right and (extracted is not None or not right)


def test_other_graders_ignore_the_choices_so_text_grading_is_unchanged():
    for completion, gold in (("\\boxed{5}", "5"), ("\\boxed{x}", "5"), ("no answer", "5")):
        assert grade_text(completion, gold, "boxed", "math", OPTS) == grade_text(completion, gold, "boxed", "math")
    assert grade_text("\\boxed{B}", "B", "letter", "letter", OPTS) == ("B", True)


def test_a_stored_row_is_regraded_with_its_choices_its_extractor_and_a_judge_verdict():
    spec = parse_spec({"name": "mm", "version": "1", "task": "math", "source": {"local": "mm/test.jsonl"},
                       "prompt": "{problem}", "extractor": "boxed", "grader": "mc_letter_or_value",
                       "decoding": {"greedy": True, "samples": 0}})
    grade = row_grader(spec)
    row = {"completion": "\\boxed{120}", "gold": "C", "choices": OPTS}
    assert grade(row) == ("120", True)
    assert grade({**row, "choices": None}) == ("120", False)          # without the options the value cannot match
    assert grade({"completion": "<answer>C</answer>", "gold": "C", "choices": OPTS, "extractor": "answer_tag"}) \
        == ("C", True)                                                 # the row's own extractor (eval --extractor)
    wrong = {"completion": "\\boxed{60}", "gold": "C", "choices": OPTS}
    assert grade(wrong) == ("60", False)
    assert grade({**wrong, "judge": {"model": "j", "verdict": True, "output": "YES"}}) == ("60", True)
    assert grade({**wrong, "judge": {"model": "j", "verdict": None, "output": "?"}}) == ("60", False)
