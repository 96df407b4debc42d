"""CPU tests for corl_bench.report.collect / layout / render / table / reference on hand-built results directories
(tests/table_fixtures.py) with known percentages."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corl_bench.report import reference, table
from corl_bench.cli import app
from corl_bench.report.table import main
from corl_bench.report.collect import Row, collect, find_runs
from corl_bench.report.layout import build
from corl_bench.report.cells import PaperTable
from corl_bench.report.methods import ANY, row_labels
from corl_bench.report.render import render_text, to_csv, to_html, to_latex, to_markdown, to_rich
from tests.table_fixtures import AGENTS, DECODING, L, Q, T, build_results, build_world, make_run, make_world_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    return build_results(tmp_path / "results")


def by_key(rows: list[Row]) -> dict[tuple[str, str], Row]:
    return {(r.method, r.agent): r for r in rows}


def test_collect_numbers(results: Path) -> None:
    rows, warnings = collect(results)
    assert warnings == []
    assert [(r.method, r.cohort, r.agent) for r in rows] == [
        ("corl", "cross-family", "a0-qwen2-bpe"), ("corl", "cross-family", "a1-llama-sp"),
        ("ttrl", "cross-family", "a0-qwen2-bpe")]
    rows_by = by_key(rows)
    corl0 = rows_by["corl", "a0-qwen2-bpe"]
    assert corl0.seeds == (0, 1) and corl0.family == "qwen2-bpe"
    assert corl0.run_ids == ("corl-s0", "corl-s1")
    assert corl0.scores["alpha"]["greedy"] == pytest.approx(0.75)
    assert corl0.scores_sd["alpha"]["greedy"] == pytest.approx(0.3535534, abs=1e-6)
    assert corl0.scores["beta"]["greedy"] == pytest.approx(0.5)
    assert corl0.scores_sd["beta"]["greedy"] == pytest.approx(0.0)
    assert corl0.scores["alpha"]["avg_k"] == pytest.approx(0.5)
    assert corl0.scores["alpha"]["maj_k"] == pytest.approx(0.5)
    assert corl0.scores["alpha"]["pass_k"] == pytest.approx(0.75)
    assert corl0.scores["alpha"]["extraction_failure"] == pytest.approx(1 / 12)
    assert corl0.scores["alpha"]["clipped"] == pytest.approx(4 / 12)
    assert corl0.base["alpha"]["greedy"] == pytest.approx(0.25)
    assert corl0.base["beta"]["greedy"] == pytest.approx(0.25)
    assert corl0.ks == {"alpha": (2,), "beta": (2,)}
    mean, sd = corl0.avg("greedy", ["alpha", "beta"])
    assert mean == pytest.approx(0.625)  # seeds: (50+50)/2 = 50, (100+50)/2 = 75
    assert sd == pytest.approx(0.1767767, abs=1e-6)
    assert corl0.delta("greedy", ["alpha", "beta"]) == pytest.approx(0.625 - 0.25)

    ttrl = rows_by["ttrl", "a0-qwen2-bpe"]
    assert ttrl.seeds == (0,)
    assert ttrl.scores_sd["alpha"]["greedy"] is None
    assert ttrl.avg("greedy", ["alpha", "beta"]) == (pytest.approx(0.875), None)
    assert ttrl.delta("greedy", ["alpha", "beta"]) == pytest.approx(0.375)
    assert rows_by["corl", "a1-llama-sp"].delta("greedy", ["alpha", "beta"]) == pytest.approx(0.0)


def test_damaged_runs_are_skipped_and_named(results: Path) -> None:
    bad_json = results / "runs" / "broken-json"
    bad_json.mkdir(parents=True)
    (bad_json / "run.json").write_text('{"run_id": "broken-json", "method": ', encoding="utf-8")

    truncated = make_run(results, "truncated", "corl", 2, AGENTS[:1],
                         {"final": {"a0-qwen2-bpe": {"alpha": [T, T, T, T]}}})
    preds = truncated / "eval" / "final" / "a0-qwen2-bpe" / "alpha.jsonl"
    with preds.open("a", encoding="utf-8") as handle:
        handle.write('{"problem_id": "alpha-0003", "decoding": "sam')  # killed mid-write

    no_fields = results / "runs" / "no-method"
    no_fields.mkdir(parents=True)
    (no_fields / "run.json").write_text(json.dumps({"seed": 0, "status": "finished"}), encoding="utf-8")

    rows, warnings = collect(results)
    assert len(rows) == 3  # the three good groups, untouched
    assert by_key(rows)["corl", "a0-qwen2-bpe"].seeds == (0, 1)
    joined = "\n".join(warnings)
    assert "skipping runs/broken-json: run.json is not valid JSON" in warnings
    assert "skipping runs/truncated:" in joined and "alpha.jsonl line 13 is not valid JSON" in joined
    assert "skipping runs/no-method: run.json has no 'method'" in warnings
    assert all("\n" not in w for w in warnings)


def test_unfinished_runs(results: Path) -> None:
    make_run(results, "corl-running-empty", "corl", 5, AGENTS, {}, status="running")
    make_run(results, "corl-running", "corl", 3, AGENTS[:1],
             {"final": {"a0-qwen2-bpe": {"alpha": [T, T, T, T], "beta": [T, T]}}}, status="running")
    rows, warnings = collect(results)
    assert "runs/corl-running-empty has no predictions for phase final (status 'running'); skipped" in warnings
    assert any(w.startswith("runs/corl-running has status 'running'") for w in warnings)
    assert any(w.startswith("runs/corl-running has no predictions for phase base") for w in warnings)
    corl0 = by_key(rows)["corl", "a0-qwen2-bpe"]
    assert corl0.seeds == (0, 1, 3)
    assert corl0.delta("greedy", ["alpha", "beta"]) is not None  # base from the seeds that have one


def test_empty_results_dir(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find_runs(empty) == []
    assert collect(empty) == ([], [])
    for where in (empty, tmp_path / "does-not-exist"):
        console = Console(file=io.StringIO(), width=250)
        assert main(where, console=console) == []
        out = console.file.getvalue().strip()
        assert len(out.splitlines()) == 1 and str(where) in out and "corl-bench run" in out
    assert list(empty.iterdir()) == []


def test_only_damaged_runs_prints_warnings_and_returns_empty(tmp_path: Path) -> None:
    run = tmp_path / "r" / "runs" / "x"
    run.mkdir(parents=True)
    (run / "run.json").write_text("nope", encoding="utf-8")
    console = Console(file=io.StringIO(), width=250)
    assert main(tmp_path / "r", console=console) == []
    assert "skipping runs/x: run.json is not valid JSON" in console.file.getvalue()
    assert not (tmp_path / "r" / "table.md").exists()


# ============================================================================ paper-style table (tests/table_fixtures.WORLD)
@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("world") / "results")


@pytest.fixture(scope="module")
def world_table(world: Path) -> PaperTable:
    return build(world)


def rows_of(tab: PaperTable, family: str) -> dict[str, object]:
    block = next(b for b in tab.blocks if b.family == family)
    return {row.label: row for row in block.rows}


def _r(value: object) -> object:
    return None if value is None else round(100 * value, 4)  # type: ignore[operator]


def pct(stat) -> tuple[object, object, int]:  # (mean %, sd %, n) rounded for comparison
    return _r(stat.mean), _r(stat.sd), stat.n


def test_row_labels_come_from_the_methods_in_paper_order() -> None:
    labels = row_labels()
    assert isinstance(labels, dict)
    assert list(labels.values())[:8] == [
        "GT-Reward", "TTRL", "RENT", "Intuitor", "Co-rewarding-II", "Co-RL (same family)", "Co-RL (cross-family)",
        "Co-RL (cross-family+)"]
    assert labels[("corl", "cross-family-rephrased")] == "Co-RL (cross-family+)"
    assert labels[("ttrl", ANY)] == "TTRL"
    from corl_bench.report import layout

    assert layout.ROW_LABELS == labels  # the old constant, derived (kept for one release)
    assert layout.SINGLE_AGENT_METHODS == {"gt-reward", "ttrl", "rent", "intuitor", "co-rewarding-ii",
                                           "random-reward", "mm-upt", "empo", "srt", "format-reward",
                                           "incorrect-label", "scrl", "coverrl", "dcrl"}
    assert layout.REFERENCE_LABELS == {"GT-Reward", "MAPoRL-GT"}  # the methods that use labels (controls aside)
    assert layout.CONTROL_LABELS == {"Random reward", "Co-RL frozen peer", "Format reward", "Incorrect label"}


def test_blocks_rows_in_paper_order_with_per_agent_and_tagged_rows(world_table: PaperTable) -> None:
    assert [b.family for b in world_table.blocks] == ["qwen2-bpe", "llama-bpe"]
    qwen, llama = world_table.blocks
    assert [r.label for r in qwen.rows] == [
        "Base", "GT-Reward", "TTRL", "TTRL [budget-matched]", "Co-RL (same family) a0-qwen2-bpe",
        "Co-RL (same family) a1-qwen2-bpe", "Co-RL (cross-family)", "Random reward", "my-method (cross-family)"]
    assert [r.kind for r in qwen.rows] == ["base", "reference", "label-free", "control", "label-free", "label-free",
                                           "label-free", "control", "unknown"]  # my-method is not registered
    assert [r.label for r in llama.rows] == ["Base", "TTRL", "Co-RL (cross-family)", "my-method (cross-family)"]
    ttrl_llama = rows_of(world_table, "llama-bpe")["TTRL"]
    assert ttrl_llama.cohorts == ("cross-family",) and ttrl_llama.run_ids == ("ttrl-cross-family-s0",)
    assert qwen.backbone is None and world_table.benchmarks == ("alpha", "beta")
    assert [c.header for c in world_table.columns] == ["alpha pass@1", "beta pass@1", "Avg", "Δ"]


def test_duplicate_seed_across_cohorts_keeps_single_and_warns(world_table: PaperTable) -> None:
    ttrl = rows_of(world_table, "qwen2-bpe")["TTRL"]
    assert ttrl.run_ids == ("ttrl-single-s0", "ttrl-single-s1") and ttrl.cohorts == ("single",)
    assert ("method 'my-method' (runs my-method-cross-family-s0): not registered here (an uninstalled plugin?); its "
            "rows are labelled with the raw name and not ranked") in world_table.warnings
    dup = [w for w in world_table.warnings if "comes from 2 places" in w]
    assert dup == ["qwen2-bpe / TTRL: seed 0 comes from 2 places; kept ttrl-single-s0 (a0-qwen2-bpe, cohort single), "
                   "dropped ttrl-cross-family-s0 (a0-qwen2-bpe, cohort cross-family) (different final scores)"]


def test_mean_sd_n_and_delta_against_the_blocks_base(world_table: PaperTable) -> None:
    q, lm = rows_of(world_table, "qwen2-bpe"), rows_of(world_table, "llama-bpe")
    base = q["Base"]
    assert base.seeds == (0, 1, 2) and base.run_ids == ("gt-reward-single-s0", "gt-reward-single-s1",
                                                        "corl-cross-family-s2")
    assert [pct(c) for c in base.cells] == [(50.0, 0.0, 3), (30.0, 0.0, 3), (40.0, 0.0, 3)] and base.delta is None
    gt = q["GT-Reward"]  # seeds: 80/80 and 90/70
    assert [pct(c) for c in gt.cells] == [(85.0, 7.0711, 2), (75.0, 7.0711, 2), (80.0, 0.0, 2)]
    assert gt.delta == pytest.approx(0.40)
    ttrl = q["TTRL"]  # seeds: 60/40 and 40/40
    assert [pct(c) for c in ttrl.cells] == [(50.0, 14.1421, 2), (40.0, 0.0, 2), (45.0, 7.0711, 2)]
    assert ttrl.delta == pytest.approx(0.05)
    a1 = q["Co-RL (same family) a1-qwen2-bpe"]  # Δ against its own base (Q1_BASE: 40, as the block's Base here)
    assert pct(a1.cells[-1]) == (50.0, None, 1) and a1.delta == pytest.approx(0.10)
    corl_llama = lm["Co-RL (cross-family)"]  # three seeds: 40, 50, 60
    assert [pct(c) for c in corl_llama.cells] == [(50.0, 10.0, 3)] * 3 and corl_llama.delta == pytest.approx(0.30)
    assert lm["my-method (cross-family)"].delta == pytest.approx(-0.10)


def test_marks_rank_label_free_rows_only_with_shared_ties(world_table: PaperTable) -> None:
    q, lm = rows_of(world_table, "qwen2-bpe"), rows_of(world_table, "llama-bpe")
    marks = {label: row.marks for label, row in q.items()}
    for unranked in ("Base", "GT-Reward", "TTRL [budget-matched]", "Random reward"):  # GT 85 and controls 100
        assert marks[unranked] == ("", "", "", ""), unranked
    assert marks["Co-RL (cross-family)"] == ("b", "b", "b", "b")
    assert marks["Co-RL (same family) a0-qwen2-bpe"] == ("u", "u", "u", "u")  # 70 / 50 / 60 / +20
    assert marks["my-method (cross-family)"] == ("", "", "", "")  # unregistered: shown, not ranked
    assert marks["Co-RL (same family) a1-qwen2-bpe"] == ("u", "", "", "")  # 70 ties on alpha only
    assert marks["TTRL"] == ("", "", "", "")
    assert lm["Co-RL (cross-family)"].marks == ("b",) * 4 and lm["TTRL"].marks == ("u",) * 4
    assert lm["my-method (cross-family)"].marks == ("",) * 4


# ---------------------------------------------------------------------------------------------------- plugin methods
@pytest.fixture()
def plugin_methods() -> Iterator[None]:
    """Two methods registered at test time, as a plugin package would (no core edit): a control without a label
    (its rows use the registered name) and a label-free multi-agent method with its own cohort labels."""
    from corl_bench.method import Method
    from corl_bench.registries import METHODS

    class MyControl(Method):
        kind = "control"
        independent_agents = True
        table_order = 95

    class MyPair(Method):
        label = "My pair"
        cohort_labels = {"cross-family": "two families"}
        table_order = 65  # between Co-RL and Co-RL peer-majority
        min_agents = 2

    METHODS.register("my-control", MyControl)
    METHODS.register("my-pair", MyPair)
    try:
        yield
    finally:
        METHODS.unregister("my-control")
        METHODS.unregister("my-pair")


def test_a_plugin_control_lands_in_the_controls_and_a_plugin_label_free_method_is_ranked(
        tmp_path: Path, plugin_methods: None) -> None:
    root = build_world(tmp_path / "r", only=["gt-reward-single-s0", "ttrl-single-s0", "corl-cross-family-s0",
                                             "random-reward-single-s0"])
    base = {Q: {"alpha": (5, 2), "beta": (3, 1)}, L: {"alpha": (2, 1), "beta": (2, 1)}}
    make_world_run(root, "my-control-single-s0", "my-control", "single", 0, {Q: "qwen2-bpe"},
                   {Q: {"alpha": (10, 0), "beta": (10, 0)}}, {Q: base[Q]})  # 100 %: would be bold if ranked
    make_world_run(root, "my-pair-cross-family-s0", "my-pair", "cross-family", 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                   {Q: {"alpha": (9, 0), "beta": (9, 0)}, L: {"alpha": (1, 0), "beta": (1, 0)}}, base)
    tab = build(root)
    qwen = {r.label: r for r in tab.blocks[0].rows}
    assert list(qwen) == ["Base", "GT-Reward", "TTRL", "Co-RL (cross-family)", "My pair (two families)",
                          "Random reward", "my-control"]
    assert (qwen["my-control"].kind, qwen["my-control"].marks) == ("control", ("",) * 4)
    assert qwen["My pair (two families)"].kind == "label-free"
    assert qwen["My pair (two families)"].marks == ("b",) * 4  # 90 / 90 beats Co-RL's 80 / 60
    assert qwen["Co-RL (cross-family)"].marks == ("u",) * 4
    llama = [r.label for r in tab.blocks[1].rows]
    assert llama == ["Base", "Co-RL (cross-family)", "My pair (two families)"]
    assert not [w for w in tab.warnings if "not registered" in w]
    assert any("Random reward, Format reward, Incorrect label, my-control (control) and tagged rows are not ranked"
               in line for line in tab.footer)


def test_a_method_uninstalled_after_its_runs_is_shown_by_name_and_not_ranked(tmp_path: Path) -> None:
    root = build_world(tmp_path / "r", only=["ttrl-single-s0", "my-method-cross-family-s0"])
    tab = build(root)
    row = next(r for r in tab.blocks[0].rows if r.method == "my-method")
    assert (row.label, row.kind, row.marks) == ("my-method (cross-family)", "unknown", ("",) * 4)
    assert next(r for r in tab.blocks[0].rows if r.label == "TTRL").marks == ("b",) * 4
    assert any("methods not registered here and tagged rows are not ranked" in line for line in tab.footer)


def test_ties_are_compared_at_display_precision(tmp_path: Path) -> None:
    from corl_bench.report.layout import _marks
    from corl_bench.report.cells import Stat, TableRow

    def row(label: str, mean: float) -> TableRow:
        return TableRow(label, "label-free", label, "m", (), "", "", "f", (0,), ("r",), (Stat(mean, None, 1),), None)

    rows = [row("a", 0.60004), row("b", 0.59996), row("c", 0.5), row("d", 0.49)]
    assert _marks(rows, 2) == [("b", ""), ("b", ""), ("u", ""), ("", "")]  # 60.0 == 60.0 at one decimal


def test_footer_states_the_protocol(world_table: PaperTable) -> None:
    footer = "\n".join(world_table.footer)
    assert "Evaluation decoding: k=2 samples, temperature 1.0, greedy yes, max_new_tokens 40." in footer
    assert "Benchmarks: alpha v1 (not a registered benchmark: default math grading); beta v1" in footer
    assert "Checkpoint: final checkpoint after 50 steps, no selection on test data." in footer
    assert "Seeds: 0, 1, 2." in footer
    assert ("qwen2-bpe from gt-reward-single-s0 (seed 0), gt-reward-single-s1 (seed 1), corl-cross-family-s2 "
            "(seed 2); llama-bpe from ttrl-cross-family-s0 (seed 0)") in footer
    assert "Avg = mean of pass@1 over the 2 benchmark(s)" in footer
    assert ("Final-checkpoint samples without an extractable answer: 0.0–0.0 % per (row, benchmark, seed); cut at "
            "the token cap: 0.0–0.0 %.") in footer


def test_an_eval_target_without_config_takes_its_decoding_from_the_eval_manifest(tmp_path: Path) -> None:
    root = tmp_path / "r"
    run_dir = make_world_run(root, "smol", "base", "eval", 0, {Q: "qwen2-bpe"},
                             {Q: {"alpha": (5, 1), "beta": (5, 1)}})
    (run_dir / "config.yaml").unlink()  # `corl-bench eval smol` writes run.json and manifests, no config
    dec = {"greedy": False, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 512}
    manifest = {"alpha": {"decoding": {**dec, "samples": 8}}, "beta": {"decoding": {**dec, "samples": 1}}}
    (run_dir / "eval" / "final" / Q / "eval_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    tab = build(root)
    assert ("Evaluation decoding: k per benchmark (alpha 8, beta 1), temperature 0.6, top-p 0.95, greedy no, "
            "max_new_tokens 512.") in "\n".join(tab.footer)
    assert not any("config.yaml" in w for w in tab.warnings)


def test_footer_says_mixed_and_warns_when_runs_differ(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_world_run(root, "ttrl-s0", "ttrl", "single", 0, {Q: "qwen2-bpe"}, {Q: {"micro-test": (5, 1)}})
    make_world_run(root, "ttrl-s1", "ttrl", "single", 1, {Q: "qwen2-bpe"}, {Q: {"micro-test": (5, 1)}}, steps=30,
                   decoding={**DECODING, "samples": 4, "greedy": False}, version="2")
    tab = build(root)
    footer, warnings = "\n".join(tab.footer), "\n".join(tab.warnings)
    assert "Evaluation decoding: mixed (see warnings)." in footer
    assert ("runs differ in eval decoding: k=2 samples, temperature 1.0, greedy yes, max_new_tokens 40 in ttrl-s0; "
            "k=4 samples, temperature 1.0, greedy no, max_new_tokens 40 in ttrl-s1") in warnings
    assert "Checkpoint: final checkpoint after mixed steps (30, 50), no selection on test data." in footer
    assert "runs differ in training steps: 30 steps in ttrl-s1; 50 steps in ttrl-s0" in warnings
    assert "micro-test v1, v2 (mixed) (extractor qwen, grader math)" in footer  # from the registered spec
    assert "micro-test: predictions come from versions 1, 2 of the benchmark" in warnings
    assert "registered spec is version 1" in warnings
    assert all("\n" not in w for w in tab.warnings)


def test_multi_agent_wildcard_method_in_two_cohorts_gets_the_cohort_in_its_label(tmp_path: Path) -> None:
    root = tmp_path / "r"
    for cohort in ("cross-family", "three-agent"):
        make_world_run(root, f"comas-{cohort}", "comas", cohort, 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                       {Q: {"micro-test": (5, 1)}, L: {"micro-test": (3, 1)}})
    tab = build(root)  # no base-phase predictions: no Base row, Δ empty, a warning per block
    assert [r.label for r in tab.blocks[0].rows] == ["CoMAS (cross-family)", "CoMAS (three-agent)"]
    assert "qwen2-bpe: no run has base-phase predictions; Base and Δ left empty" in tab.warnings
    assert all(r.delta is None for r in tab.blocks[0].rows)


def test_several_metrics_give_column_groups_and_avg_uses_the_first(world: Path) -> None:
    tab = build(world, metrics=("avg_k", "greedy"))
    assert [c.header for c in tab.columns] == ["alpha pass@1", "beta pass@1", "alpha greedy", "beta greedy",
                                               "Avg pass@1", "Δ"]
    base = rows_of(tab, "qwen2-bpe")["Base"]  # greedy base: 2 / 5 and 1 / 5 problems
    assert [pct(c)[0] for c in base.cells] == [50.0, 30.0, 40.0, 20.0, 40.0]
    with pytest.raises(ValueError, match="unknown metric.*bogus.*choose from greedy, avg_k, maj_k, pass_k"):
        build(world, metrics=("avg_k", "bogus"))


# ---------------------------------------------------------------------------------------------------- formats
def test_markdown_format(world_table: PaperTable) -> None:
    md = to_markdown(world_table)
    lines = md.splitlines()
    assert "### qwen2-bpe" in lines and "### llama-bpe" in lines
    assert "| Method | n | alpha pass@1 | beta pass@1 | Avg | Δ |" in lines
    assert "| Base | 3 | 50.0 ± 0.0 | 30.0 ± 0.0 | 40.0 ± 0.0 | – |" in lines
    assert "| GT-Reward | 2 | 85.0 ± 7.1 | 75.0 ± 7.1 | 80.0 ± 0.0 | +40.0 |" in lines
    assert "| TTRL | 2 | 50.0 ± 14.1 | 40.0 ± 0.0 | 45.0 ± 7.1 | +5.0 |" in lines
    assert "| Co-RL (cross-family) | 3 | **80.0 ± 0.0** | **60.0 ± 0.0** | **70.0 ± 0.0** | **+30.0** |" in lines
    assert "| Co-RL (same family) a1-qwen2-bpe | 1 | <u>70.0</u> | 30.0 | 50.0 | +10.0 |" in lines
    assert "| my-method (cross-family) | 1 | 10.0 | 10.0 | 10.0 | -10.0 |" in lines
    assert "- Checkpoint: final checkpoint after 50 steps, no selection on test data." in lines
    assert render_text(world_table, "md") == md


def test_latex_format(world_table: PaperTable) -> None:
    tex = to_latex(world_table)
    assert tex.count(r"\begin{tabular}{lrrrrr}") == 1 and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"Method & n & alpha pass@1 & beta pass@1 & Avg & $\Delta$ \\" in tex
    assert r"\multicolumn{6}{l}{\textit{qwen2-bpe}} \\" in tex
    assert (r"Co-RL (cross-family) & 3 & \textbf{80.0 $\pm$ 0.0} & \textbf{60.0 $\pm$ 0.0} & "
            r"\textbf{70.0 $\pm$ 0.0} & \textbf{+30.0} \\") in tex
    assert r"Co-RL (same family) a0-qwen2-bpe & 1 & \underline{70.0} & \underline{50.0}" in tex
    assert r"Base & 3 & 50.0 $\pm$ 0.0 & 30.0 $\pm$ 0.0 & 40.0 $\pm$ 0.0 & -- \\" in tex
    assert r"max\_new\_tokens 40" in tex and r"\footnotesize" in tex  # footer, escaped


def test_csv_format(world_table: PaperTable) -> None:
    text = to_csv(world_table)
    body = "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))
    records = list(csv.DictReader(io.StringIO(body)))
    assert len(records) == 13  # 9 qwen2-bpe rows + 4 llama-bpe rows
    ttrl = next(r for r in records if r["block"] == "qwen2-bpe" and r["row"] == "TTRL")
    assert (ttrl["kind"], ttrl["method"], ttrl["cohorts"], ttrl["n"], ttrl["seeds"]) == (
        "label-free", "ttrl", "single", "2", "0 1")
    assert ttrl["alpha pass@1"] == "50.0000" and ttrl["alpha pass@1 sd"] == "14.1421"
    assert ttrl["Avg"] == "45.0000" and ttrl["Avg sd"] == "7.0711" and ttrl["Δ"] == "5.0000" and ttrl["marks"] == ""
    corl = next(r for r in records if r["block"] == "llama-bpe" and r["row"] == "Co-RL (cross-family)")
    assert corl["marks"] == "alpha pass@1=b; beta pass@1=b; Avg=b; Δ=b" and corl["runs"].count("corl-") == 3
    base = next(r for r in records if r["row"] == "Base")
    assert base["Δ"] == "" and base["kind"] == "base"
    footer = [line for line in text.splitlines() if line.startswith("# ")]
    assert any(line.startswith("# Evaluation decoding: k=2 samples") for line in footer)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.tags.append(tag)


def test_html_format_is_an_embeddable_table_fragment(world_table: PaperTable, world: Path) -> None:
    frag = to_html(world_table)
    assert frag.startswith("<table") and frag.rstrip().endswith("</table>") and frag.count("<table") == 1
    parser = _Tags()
    parser.feed(frag)
    assert parser.tags.count("tbody") == 2 and "tfoot" in parser.tags and "script" not in parser.tags
    assert "<b>80.0 ± 0.0</b>" in frag and "<u>70.0</u>" in frag and "<b>+30.0</b>" in frag
    assert "final checkpoint after 50 steps" in frag
    assert table.html(world) == frag  # the one-call API for other modules
    assert table.html(table.collect_results(world)) == frag  # ... and from an already-read results dir


def test_rich_table_styles_marks(world_table: PaperTable) -> None:
    rendered = to_rich(world_table)
    labels = [str(c) for c in rendered.columns[0].cells]
    alpha = list(rendered.columns[2].cells)
    assert str(alpha[labels.index("Co-RL (cross-family)")]) == "80.0 ± 0.0"
    assert alpha[labels.index("Co-RL (cross-family)")].style == "bold"
    assert alpha[labels.index("Co-RL (same family) a1-qwen2-bpe")].style == "underline"
    assert alpha[labels.index("GT-Reward")].style == ""
    console = Console(file=io.StringIO(), width=300)
    from corl_bench.report.render import print_rich

    print_rich(console, world_table)
    out = console.file.getvalue()
    assert "qwen2-bpe" in out and "Co-RL (same family) a0-qwen2-bpe" in out and "Seeds: 0, 1, 2." in out


def test_unknown_format_fails_with_one_line(world_table: PaperTable) -> None:
    with pytest.raises(ValueError, match=r"unknown format 'docx'; choose one of md, latex, csv, html"):
        render_text(world_table, "docx")


# ---------------------------------------------------------------------------------------------------- reference
def test_paper_reference_data_loads_as_blocks() -> None:
    blocks = reference.llm_main()
    assert [b.backbone for b in blocks] == ["Qwen2.5-3B", "Llama-3.2-3B-Instruct", "Qwen2.5-7B",
                                            "Llama-3.1-8B-Instruct"]
    qwen = blocks[0]
    assert qwen.columns == ("GSM8K", "MATH500", "AMC", "HumanEval", "GPQA", "MBPP", "LiveCodeBench", "Avg")
    assert [r.label for r in qwen.rows][-3:] == ["Co-RL (Same family)", "Co-RL (Different family)",
                                                 "Co-RL (Different family+)"]
    assert qwen.value("Co-RL (cross-family)", "GSM8K") == 80.1 and qwen.value("Base", "Avg") == 40.7
    assert qwen.row("Co-RL (cross-family+)").marks[0] == "b" and qwen.row("TTRL").printed[0] == "80.4"
    assert reference.our_label("Co-RL (Same family)") == "Co-RL (same family)"
    assert reference.backbone_for("qwen2-bpe") is None and reference.backbone_for("Qwen/Qwen2.5-3B") == "Qwen2.5-3B"
    shared = REPO.parent / "shared" / "reference" / "paper-results.json"
    if shared.is_file():
        assert reference.PAPER_RESULTS.read_bytes() == shared.read_bytes()  # copied verbatim
    with pytest.raises(ValueError, match="paper results not found"):
        reference.llm_main(REPO / "no-such-file.json")


def test_paper_results_are_tracked_and_shipped_as_package_data() -> None:
    """The paper's numbers live in the package (an installed wheel has them) and are not git-ignored."""
    import tomllib

    assert reference.PAPER_RESULTS == REPO / "corl_bench" / "report" / "paper-results.json"
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "paper-results.json" in data["corl_bench.report"]
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "-q", "corl_bench/report/paper-results.json"], cwd=REPO,
                          capture_output=True, timeout=30)
    assert proc.returncode == 1, "corl_bench/report/paper-results.json must not be git-ignored"


def test_reference_paper_without_overlap_shows_the_papers_tables(world: Path) -> None:
    tab = build(world, reference="paper")
    assert tab.notes[0].startswith("--reference paper: nothing to compare, none of our backbones (qwen2-bpe, "
                                   "llama-bpe) is a paper backbone")
    assert tab.notes[1] == ("paper backbones: Qwen2.5-3B, Llama-3.2-3B-Instruct, Qwen2.5-7B, Llama-3.1-8B-Instruct; "
                            "pick one with --backbone NAME.")
    assert len(tab.paper_blocks) == 4 and all(r.kind != "paper" for b in tab.blocks for r in b.rows)
    md = to_markdown(tab)
    assert "Paper (Co-RL): main LLM table, values as printed" in md and "### Qwen2.5-3B (3B tier)" in md
    assert ("| Co-RL (Different family+) | **81.0** | <u>66.6</u> | <u>36.1</u> | 62.8 | <u>25.8</u> | 55.6 "
            "| **17.2** | **49.3** |") in md
    one = build(world, backbone="Llama-3.2-3B-Instruct")  # --backbone implies --reference paper
    assert [b.backbone for b in one.paper_blocks] == ["Llama-3.2-3B-Instruct"] and len(one.notes) == 1
    for fmt in ("latex", "html", "csv"):
        assert "73.6" in render_text(one, fmt)  # the paper's Llama-3.2-3B Base GSM8K, in every format
    with pytest.raises(ValueError, match="unknown backbone 'Nope'; the paper's are: Qwen2.5-3B"):
        build(world, backbone="Nope")
    with pytest.raises(ValueError, match="unknown reference 'arxiv'"):
        build(world, reference="arxiv")


PAPER_BENCHES = ("gsm8k", "math500", "amc83", "humaneval", "gpqa_diamond", "mbpp", "livecodebench_v6")


def _fake_qwen_runs(root: Path, benches: tuple[str, ...]) -> Path:
    f = "fake-qwen"
    every = {b: (6, 0) for b in benches}  # 60 % everywhere
    make_world_run(root, "gt-reward-single-s0", "gt-reward", "single", 0, {"a0": f}, {"a0": every},
                   {"a0": {b: (4, 0) for b in benches}})
    make_world_run(root, "corl-cross-family-s0", "corl", "cross-family", 0, {"a0": f, "a1": "llama-bpe"},
                   {"a0": {b: (7, 0) for b in benches}, "a1": {b: (3, 0) for b in benches}},
                   {"a0": {b: (4, 0) for b in benches}, "a1": {b: (2, 0) for b in benches}})
    make_world_run(root, "ttrl-single-budget-matched-s0", "ttrl", "single", 0, {"a0": f}, {"a0": every},
                   tag="budget-matched")
    return root


def test_reference_paper_beside_our_rows_when_a_backbone_overlaps(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reference.BACKBONES, "fake-qwen", "Qwen2.5-3B")
    tab = build(_fake_qwen_runs(tmp_path / "r", ("gsm8k", "math500")), reference="paper")
    fake, llama = tab.blocks
    assert fake.backbone == "Qwen2.5-3B" and llama.backbone is None and tab.paper_blocks == ()
    assert [r.label for r in fake.rows] == ["Base", "Base (paper)", "GT-Reward", "GT-Reward (paper)",
                                            "TTRL [budget-matched]", "TTRL (paper)", "Co-RL (cross-family)",
                                            "Co-RL (cross-family) (paper)"]
    assert [r.label for r in llama.rows] == ["Base", "Co-RL (cross-family)"]
    rows = {r.label: r for r in fake.rows}
    assert [pct(c)[0] for c in rows["Co-RL (cross-family) (paper)"].cells] == [80.1, 66.8, None]  # no 7-bench Avg
    assert [pct(c)[0] for c in rows["Base (paper)"].cells] == [73.4, 56.6, None]
    assert rows["Co-RL (cross-family) (paper)"].marks == ("",) * 4 and rows["Co-RL (cross-family)"].marks[0] == "b"
    assert [pct(c)[0] for c in rows["Co-RL (cross-family)"].cells] == [70.0, 70.0, 70.0]
    assert tab.notes == ("--reference paper: rows marked (paper) hold the paper's printed values for Qwen2.5-3B on "
                         "GSM8K, MATH500 (pass@1 columns only; not ranked).",)
    assert any("best in-loop MATH-500" in line for line in tab.footer)
    md = to_markdown(tab)
    assert "| Co-RL (cross-family) (paper) |  | 80.1 | 66.8 | – | – |" in md
    assert "### fake-qwen (paper backbone Qwen2.5-3B)" in md
    greedy = build(tmp_path / "r", reference="paper", metrics=("greedy",))
    assert "add avg_k to --metric" in greedy.notes[0] and len(greedy.paper_blocks) == 4


def test_reference_paper_avg_and_delta_with_all_seven_benchmarks(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reference.BACKBONES, "fake-qwen", "Qwen2.5-3B")
    tab = build(_fake_qwen_runs(tmp_path / "r", PAPER_BENCHES), reference="paper")
    rows = {r.label: r for r in tab.blocks[0].rows}
    assert tab.benchmarks == PAPER_BENCHES  # in the paper's column order
    gt = rows["GT-Reward (paper)"]
    assert pct(gt.cells[-1])[0] == 47.4 and gt.delta == pytest.approx(0.067)  # 47.4 - 40.7
    assert [pct(c)[0] for c in gt.cells[:-1]] == [76.2, 64.6, 36.1, 65.2, 20.7, 54.4, 14.5]
    assert rows["Base (paper)"].delta is None
    # ours, regraded with each spec: math 6/10 right; code keeps the stored execution result (all True here);
    # GPQA's multiple-choice grader accepts letters only, and these golds are numbers
    assert [pct(c)[0] for c in rows["GT-Reward"].cells] == [60.0, 60.0, 60.0, 100.0, 0.0, 100.0, 100.0, 68.5714]


# ---------------------------------------------------------------------------------------------------- main + CLI
def test_main_prints_and_writes_table_md_and_csv_atomically(world: Path, tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=300)
    out = tmp_path / "tables"
    rows = main(world, metrics=("avg_k", "maj_k"), out_dir=out, console=console)
    assert len(rows) == 12 and {r.tag for r in rows} == {"", "budget-matched"}  # collect(): one per agent
    text = console.file.getvalue()
    assert "corl-bench results (paper style)" in text and "maj@2" in text and "comes from 2 places" in text
    assert f"wrote {out / 'table.md'}" in text and f"wrote {out / 'table.csv'}" in text
    assert sorted(p.name for p in out.iterdir()) == ["table.csv", "table.md"]  # no temp files left
    assert "### qwen2-bpe" in (out / "table.md").read_text(encoding="utf-8")
    assert (out / "table.csv").read_text(encoding="utf-8").startswith("block,backbone,row,kind,")


def test_main_out_writes_only_that_file_in_the_format_of_its_suffix(world: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in world.iterdir())
    target = tmp_path / "t" / "table.html"
    console = Console(file=io.StringIO(), width=300)
    main(world, out=target, console=console)
    assert target.read_text(encoding="utf-8").startswith("<table") and "wrote" in console.file.getvalue()
    assert sorted(p.name for p in world.iterdir()) == before  # nothing written into the results dir
    tex = tmp_path / "t" / "table.txt"
    main(world, out=tex, fmt="latex", console=Console(file=io.StringIO()))
    assert tex.read_text(encoding="utf-8").startswith("% corl-bench results")
    with pytest.raises(ValueError, match="unknown format 'docx'"):
        main(world, fmt="docx", console=Console(file=io.StringIO()))


def test_cli_table_formats_and_errors(world: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.md"
    res = runner.invoke(app, ["table", "-r", str(world), "--format", "md", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "**80.0 ± 0.0**" in out.read_text(encoding="utf-8") and "Co-RL (cross-family)" in res.output
    res = runner.invoke(app, ["table", "-r", str(world), "--format", "html", "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 0 and (tmp_path / "x.html").read_text(encoding="utf-8").startswith("<table")
    res = runner.invoke(app, ["table", "-r", str(world), "--format", "csv", "--metric", "avg_k,greedy",
                              "--out-dir", str(tmp_path / "od")])
    assert res.exit_code == 0, res.output
    assert "block,backbone,row,kind" in res.output and "alpha greedy" in res.output  # csv on stdout
    res = runner.invoke(app, ["table", "-r", str(world), "--reference", "paper", "--backbone", "Qwen2.5-7B",
                              "--out", str(tmp_path / "ref.md")])
    assert res.exit_code == 0, res.output
    assert "nothing to compare" in res.output and "Qwen2.5-7B" in res.output
    assert "### Qwen2.5-7B (7B/8B tier)" in (tmp_path / "ref.md").read_text(encoding="utf-8")
    for args, words in ((["--metric", "bogus"], ("bogus", "pass_k")), (["--format", "docx"], ("docx", "html")),
                        (["--reference", "arxiv"], ("arxiv", "paper")), (["--backbone", "Nope"], ("Nope", "Qwen"))):
        res = runner.invoke(app, ["table", "-r", str(world), *args])
        assert res.exit_code == 2, (args, res.output)
        assert all(w in res.output for w in words) and "Traceback" not in res.output


def test_damaged_run_beside_good_ones_is_named_in_the_paper_table(world: Path, tmp_path: Path) -> None:
    root = build_world(tmp_path / "r", only=["gt-reward-single-s0", "ttrl-single-s0"])
    bad = root / "runs" / "broken"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text("{", encoding="utf-8")
    tab = build(root)
    assert "skipping runs/broken: run.json is not valid JSON" in tab.warnings
    assert [r.label for r in tab.blocks[0].rows] == ["Base", "GT-Reward", "TTRL"]


def test_table_modules_do_not_pull_torch(world: Path) -> None:
    code = ("import sys, corl_bench.report.table, corl_bench.report.layout, corl_bench.report.render, corl_bench.report.reference\n"
            "import corl_bench.eval.metrics, corl_bench.report.html, corl_bench.report.plots, corl_bench.report.study, corl_bench.report.overlap\n"
            f"text = corl_bench.report.table.html({str(world)!r}, reference='paper')\n"
            "assert '<table' in text\n"
            "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
            "assert not bad, bad\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
