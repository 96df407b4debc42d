"""Contamination probe (``corl-bench probe contamination``, arXiv 2507.10532): hand-worked prefix splits, ROUGE-L,
exact completion, Wilson intervals, aggregation and the flag rule; one real tiny-model run through the CLI that
resumes without generating; a reciting model (a test double that returns the true remainder) flagged and named in
the footer of ``corl-bench table``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app
from corl_bench.config import ConfigError
from corl_bench.report import contamination as cont
from corl_bench.report.contamination import (aggregate, exact_completion, flag, lcs_length, parse_fractions,
                                             rouge_l, split_prefix, wilson)


# ---------------------------------------------------------------------------------------------- pure functions
def test_split_prefix_cuts_at_the_last_whitespace_at_or_before_the_fraction():
    text = "a bb ccc dddd"  # 13 characters; spaces at 1, 4, 8
    assert split_prefix(text, 0.5) == ("a bb", " ccc dddd")  # limit 6: last space at or before it is 4
    assert split_prefix(text, 0.31) == ("a bb", " ccc dddd")  # limit floor(4.03) = 4: a space exactly there counts
    assert split_prefix(text, 0.3) == ("a", " bb ccc dddd")  # limit 3
    assert split_prefix(text, 0.99) == ("a bb ccc", " dddd")  # limit 12
    assert split_prefix("one  two three", 0.35) == ("one", "  two three")  # back to the start of the run
    assert split_prefix("  x yz \n", 0.9) == ("x", " yz")  # the text is stripped first
    assert split_prefix("abcdefgh", 0.5) == ("", "abcdefgh")  # no boundary
    assert split_prefix("ab cd", 0.1) == ("", "ab cd")  # limit 0
    for f in (0.2, 0.4, 0.6, 0.8):
        prefix, rest = split_prefix(" Tom has 3 apples and buys 5 more. How many now? ", f)
        assert prefix + rest == "Tom has 3 apples and buys 5 more. How many now?" and not prefix.endswith(" ")


def test_lcs_and_rouge_l_by_hand():
    assert lcs_length(list("ABCBDAB"), list("BDCABA")) == 4  # the textbook example
    assert lcs_length([], ["a"]) == 0
    # LCS "the cat on the mat" = 5 of 6 tokens each side: P = R = 5/6
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    assert rouge_l("a b c d", "a c") == pytest.approx(2 * 0.5 * 1 / 1.5)  # P 2/4, R 2/2 -> 2/3
    assert rouge_l("x  y\nz", "x y z") == 1.0
    assert rouge_l("", "x") == 0.0 and rouge_l("x", "") == 0.0 and rouge_l("p q", "r s") == 0.0


def test_exact_completion_is_a_whitespace_normalised_prefix_match():
    assert exact_completion("  ccc\n dddd and then more", " ccc dddd")
    assert exact_completion("ccc dddd", "ccc dddd")
    assert not exact_completion("ccc ddd", "ccc dddd")
    assert not exact_completion("", "x") and not exact_completion("anything", " \n")
    assert exact_completion("costs 50", "costs 5")  # documented: what follows the remainder is not read


def test_wilson_interval_by_hand():
    assert wilson(0, 0) is None
    lo, hi = wilson(0, 10)  # centre = (z^2/20) / (1 + z^2/10), half-width the same: [0, 2 * centre]
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson(5, 10) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(10, 10)[0] == pytest.approx(0.7225, abs=1e-4)


def _row(f, exact, rl, correct=None, rest="two words"):
    return {"id": "p", "fraction": f, "exact": exact, "rouge_l": rl, "answered_correct": correct, "rest": rest}


def test_aggregate_and_the_flag_rule():
    rows = [_row(0.4, True, 1.0), _row(0.4, False, 0.5),
            _row(0.8, True, 1.0, True), _row(0.8, False, 0.2, False), _row(0.8, False, 0.0, None),
            _row(0.8, False, 0.4, False)]
    low, mid, high = aggregate(rows, (0.4, 0.6, 0.8))
    assert (low["n"], low["exact"]["k"], low["exact"]["rate"], low["rouge_l"]) == (2, 1, 0.5, 0.75)
    assert low["exact"]["ci95"] == list(wilson(1, 2)) and low["answered_correct"] is None
    assert mid == {"fraction": 0.6, "n": 0, "short": 0, "exact": {"k": 0, "rate": None, "ci95": None},
                   "rouge_l": None, "answered_correct": None}
    assert (high["n"], high["exact"]["rate"], high["rouge_l"]) == (4, 0.25, pytest.approx(0.4))
    assert high["answered_correct"] == {"n": 3, "k": 1, "rate": pytest.approx(1 / 3), "ci95": list(wilson(1, 3))}
    stats = [low, mid, high]
    assert flag(stats, 0.10) == "recites"  # 25 % >= 10 %
    assert flag(stats, 0.25) == "recites"  # at the threshold counts
    assert flag(stats, 0.30) == "no"
    assert flag(stats[:2], 0.10) == "unmeasured"  # 0.8 not probed
    assert flag(aggregate([_row(0.8, False, 0.0)] * 10, (0.8,)), 0.10) == "no"


def test_short_remainders_are_stored_but_not_scored():
    """A one-word remainder ("1?") is a guess: with min_rest_words=2 it is counted as short, not scored; where every
    remainder at the flag's 80 % is short, the largest shorter prefix with scored rows decides the flag."""
    rows = [_row(0.4, False, 0.1, rest=" 12 mod 5 equal?")] * 9 + [_row(0.4, True, 1.0, rest=" 12 mod 5?")] + \
        [_row(0.8, True, 1.0, rest=" 1?"), _row(0.8, False, 0.0, rest=" 4?")]
    low, high = aggregate(rows, (0.4, 0.8), min_rest_words=2)
    assert (high["n"], high["short"], high["exact"]["rate"]) == (0, 2, None)
    assert (low["n"], low["short"], low["exact"]["k"]) == (10, 0, 1)
    assert cont.flag_stats([low, high]) is low and flag([low, high], 0.10) == "recites"  # 1/10 at 40 %
    assert flag([low, high], 0.2) == "no"
    guessed = aggregate(rows, (0.4, 0.8))  # min_rest_words=1 scores the guess: 1 of 2 at 80 %
    assert guessed[1]["exact"]["rate"] == 0.5 and cont.flag_stats(guessed) is guessed[1]
    assert aggregate(rows, (0.4, 0.8), min_rest_words=4)[0]["n"] == 9  # " 12 mod 5?" has 3 words
    assert cont.flag_stats([low]) is None  # 80 % not probed at all: unmeasured, no fallback


def test_parse_fractions():
    assert parse_fractions("0.8, 0.4,0.6,0.4") == (0.4, 0.6, 0.8)
    for bad in ("1.2", "0", "0.5,1", "a", ""):
        with pytest.raises(ConfigError, match="fractions"):
            parse_fractions(bad)


# ---------------------------------------------------------------------------------------------- through the CLI
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    from tests.conftest import build_tiny

    folder = tmp_path_factory.mktemp("tiny") / "tiny-qwen2-bpe"
    model, tok = build_tiny("qwen2-bpe")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_the_batched_engine_completer_equals_generate_one_prefix_at_a_time(tiny):
    """The probe decodes batches of prefixes with the fast engine to the batch's largest budget and cuts each row to
    its own: the same text as ``transformers``' ``generate`` run on each prefix alone at its budget."""
    from corl_bench.models.load import load_model

    model, tok = load_model(tiny)
    pairs = [("Tom has 3 apples", " and buys 5 more."), ("What is", " 17 + 26? Answer with a number only, please"),
             ("A train leaves the station at 9 and", " travels"), ("x", " y z")]
    batched, budget = cont.engine_completer(model, tok, slack=3, cap=12)
    single, same_budget = cont.hf_completer(model, tok, slack=3, cap=12)
    assert [budget(r) for _, r in pairs] == [same_budget(r) for _, r in pairs]
    assert len({budget(r) for _, r in pairs}) > 1  # the rows' budgets differ: the cut matters
    assert batched(pairs) == single(pairs)
    assert batched([]) == []


def test_a_tiny_model_through_the_cli_and_resume(tiny, tmp_path, monkeypatch):
    out = tmp_path / "cont"
    args = ["probe", "contamination", tiny, "-b", "micro-test", "--max-problems", "3", "--fractions", "0.5,0.8",
            "--max-new-tokens", "8", "--chunk", "4", "--out", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    path = out / "tiny-qwen2-bpe" / "micro-test.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 6 and {(r_["id"], r_["fraction"]) for r_ in rows} == {
        (f"micro-test-000{i}", f) for i in range(3) for f in (0.5, 0.8)}
    assert {"id", "fraction", "prefix_chars", "rest", "completion", "exact", "rouge_l"} <= set(rows[0])
    assert all(r_["max_new_tokens"] == 8 for r_ in rows)  # capped: every remainder is longer than 0 tokens
    assert all((r_["answered_correct"] is None) == (r_["fraction"] == 0.5) for r_ in rows)  # graded at 80 % only
    data = json.loads((out / "contamination.json").read_text())
    assert data["settings"]["fractions"] == [0.5, 0.8] and data["reference"] == "arXiv 2507.10532"
    (res,) = data["results"]
    assert (res["model"], res["benchmark"], res["n_problems"]) == ("tiny-qwen2-bpe", "micro-test", 3)
    assert [s["n"] for s in res["fractions"]] == [3, 3] and res["flag"] in ("no", "recites")
    md = (out / "contamination.md").read_text()
    assert "| tiny-qwen2-bpe | micro-test | 80 % | 3 |" in md
    before = path.read_text()

    def no_model(*_a, **_k):
        raise AssertionError("a model was loaded although every row is stored")

    monkeypatch.setattr(cont, "load_completer", no_model)
    r = CliRunner().invoke(app, args)  # resumable: nothing is generated, no model is loaded
    assert r.exit_code == 0, r.output
    assert "0 completions to generate (6 stored" in r.output and path.read_text() == before
    both = [*args[:4], "micro-test,micro-dev", *args[5:], "--from-predictions"]  # report only: nothing generated
    r = CliRunner().invoke(app, both)
    assert r.exit_code == 0, r.output
    partial = json.loads((out / "contamination.json").read_text())
    assert [x["benchmark"] for x in partial["results"]] == ["micro-test"]
    assert partial["incomplete"] == [{"model": "tiny-qwen2-bpe", "benchmark": "micro-dev", "missing": 6}]
    assert "tiny-qwen2-bpe on micro-dev (6 missing)" in (out / "contamination.md").read_text()
    assert not (out / "tiny-qwen2-bpe" / "micro-dev.jsonl").exists()
    with path.open("a") as f:  # a row stored twice (two runs into one --out) and a torn last line count once
        f.write(json.dumps({**rows[0], "exact": True}) + "\n" + '{"id": "micro-te')
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    (res,) = json.loads((out / "contamination.json").read_text())["results"]
    assert [s["n"] for s in res["fractions"]] == [3, 3]
    assert res["fractions"][0]["exact"]["k"] == sum(r_["exact"] for r_ in rows if r_["fraction"] == 0.5)
    assert path.read_text().endswith('"id": "micro-te\n')  # the torn line is ended: a new row gets a line of its own


def test_bad_input_is_one_line():
    cases = [(["probe", "contamination"], "at least one model"),
             (["probe", "contamination", "qwen2-bpe", "-b", "nonesuch"], "nonesuch"),
             (["probe", "contamination", "qwen2-bpe", "-b", "micro-test", "--fractions", "0.5,1.5"], "(0, 1)"),
             (["probe", "contamination", "qwen2-bpe", "-b", "micro-test", "--threshold", "2"], "--threshold"),
             (["probe", "contamination", "qwen2-bpe", "-b", "micro-test", "--chunk", "0"], "--chunk")]
    for args, text in cases:
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and text in r.output, (args, r.output)
        assert r.output.strip().startswith("error:") and len(r.output.strip().splitlines()) <= 2, r.output


def test_a_reciting_model_is_flagged_and_named_in_the_table_footer(tmp_path, monkeypatch):
    from tests.table_fixtures import L, Q, make_world_run

    calls = []

    def reciter(m, settings):  # the test double: returns the true remainder of every prefix
        calls.append(m.label)
        return (lambda pairs: [rest for _, rest in pairs]), (lambda rest: 8)

    monkeypatch.setattr(cont, "load_completer", reciter)
    results = tmp_path / "results"
    out = results / "contamination"
    r = CliRunner().invoke(app, ["probe", "contamination", "qwen2-bpe", "-b", "micro-test", "--max-problems", "4",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert calls == ["qwen2-bpe"] and "qwen2-bpe / micro-test: recites" in r.output
    (res,) = json.loads((out / "contamination.json").read_text())["results"]
    assert [(s["fraction"], s["n"], s["exact"]["rate"], s["rouge_l"]) for s in res["fractions"]] == [
        (0.4, 4, 1.0, 1.0), (0.6, 4, 1.0, 1.0), (0.8, 4, 1.0, 1.0)]
    assert res["flag"] == "recites"

    counts = {Q: {"micro-test": (6, 3)}, L: {"micro-test": (4, 2)}}
    make_world_run(results, "corl-cross-family-s0", "corl", "cross-family", 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                   counts, counts)
    r = CliRunner().invoke(app, ["table", "-r", str(results), "--format", "md"])
    assert r.exit_code == 0, r.output
    assert "micro-test‡ pass@1" in r.output
    assert "‡ recited (contamination probe" in r.output
    assert "qwen2-bpe on micro-test (4/4 exact completions from the 80 % prefix; threshold 10 %)" in r.output
    elsewhere = tmp_path / "elsewhere"  # a report outside the results dir: named with --contamination
    out.rename(elsewhere)
    r = CliRunner().invoke(app, ["table", "-r", str(results), "--format", "md"])
    assert r.exit_code == 0 and "‡" not in r.output, r.output
    r = CliRunner().invoke(app, ["table", "-r", str(results), "--format", "md", "--contamination",
                                 str(elsewhere / "contamination.json")])
    assert r.exit_code == 0 and "micro-test‡" in r.output, r.output
    r = CliRunner().invoke(app, ["table", "-r", str(results), "--contamination", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "not a readable contamination report" in r.output


def test_summary_table_by_hand():
    def res(model, bench, k, n, flagged):
        stats = [{"fraction": 0.4, "n": n, "exact": {"k": n, "rate": 1.0, "ci95": [0, 1]}},
                 {"fraction": 0.8, "n": n, "exact": {"k": k, "rate": k / n, "ci95": [0, 1]}}]
        return {"model": model, "benchmark": bench, "fractions": stats, "flag": flagged}

    short = res("m2", "arith", 0, 40, "no")
    short["fractions"][0]["exact"] = {"k": 0, "rate": 0.0, "ci95": [0, 0.1]}
    short["fractions"][1] = {"fraction": 0.8, "n": 0, "short": 40, "exact": {"k": 0, "rate": None, "ci95": None}}
    data = {"settings": {"flag_fraction": 0.8}, "models": [{"label": "m1"}, {"label": "m2"}],
            "results": [res("m1", "gsm8k", 0, 40, "no"), res("m1", "math500", 9, 40, "recites"),
                        res("m2", "math500", 1, 40, "no"), short]}
    assert cont.summary_table(data) == (
        "| exact from the 80 % prefix | gsm8k | math500 | arith |\n"
        "|---|---:|---:|---:|\n"
        "| m1 | 0/40 (0 %) | **9/40 (22 %)** | – |\n"
        "| m2 | – | 1/40 (2 %) | 0/40 (0 %) at 40 % |\n")



def test_the_readme_table_is_the_committed_report():
    """The README's contamination table is ``summary_table`` of the committed report, recomputed from its rows'
    stats (so neither can drift from the other)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = json.loads((root / "results" / "contamination" / "contamination.json").read_text(encoding="utf-8"))
    table = cont.summary_table(data).strip().splitlines()
    readme = [line.strip() for line in (root / "README.md").read_text(encoding="utf-8").splitlines()]
    starts = [i for i, line in enumerate(readme) if line == table[0]]  # the table may sit indented in a list item
    assert any(readme[i: i + len(table)] == table for i in starts), "README's contamination table is stale"
    for res in data["results"]:  # the stored flags are the rule applied to the stored stats
        assert res["flag"] == flag(res["fractions"], data["settings"]["threshold"], data["settings"]["flag_fraction"])
