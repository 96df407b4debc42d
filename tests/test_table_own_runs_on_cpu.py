"""CPU tests: `corl-bench table` shows the user's own runs (results/runs) by default and a committed study by name;
a duplicate run is set aside with one line saying so; warnings are summarised; env.json differences are listed; Δ is
each run's gain over its own base evaluation on the same problems (hand-built run directories, no model is run)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corl_bench.cli import app
from corl_bench.report.collect import collect, collect_results, items_differ
from corl_bench.report.layout import build
from corl_bench.report.table import main, study_dir, studies, warnings_summary
from tests.table_fixtures import write_config

Q, L = "a0-qwen2-bpe", "a1-llama-bpe"
ENV = {"python": "3.11.7", "platform": "Linux-x86_64", "machine": "x86_64", "cpu_count": 2, "seed": 0,
       "packages": {"transformers": "5.24.0", "torch": "2.13.0+cpu", "math-verify": "0.9.0"},
       "git_commit": "aaaa", "argv": ["corl-bench", "run"], "created_at": "2026-12-01T00:00:00+00:00"}


def write_preds(path: Path, n_items: int, n_right: int) -> None:
    """Problems p0..p{n_items-1} of benchmark "micro" with one greedy and one sampled row each; the first
    ``n_right`` are right (pass@1 = greedy = n_right / n_items)."""
    rows = []
    for i in range(n_items):
        gold = str(100 + i)
        answer = gold if i < n_right else "999"
        base = {"benchmark": "micro", "benchmark_version": "1", "problem_id": f"p{i}", "prompt": "q", "gold": gold,
                "finished": True, "n_tokens": 5, "completion": f"so \\boxed{{{answer}}}"}
        rows += [{**base, "decoding": "greedy", "sample_index": 0}, {**base, "decoding": "sampled", "sample_index": 0}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(root: Path, run_id: str, method: str, seed: int, final: dict[str, tuple[int, int]],
             base: Optional[dict[str, tuple[int, int]]] = None, *, cohort: str = "cross-family",
             started: str = "2026-12-01T10:00:00+00:00", env: Optional[dict] = None) -> Path:
    """A finished run under ``root/run_id``; final/base: agent -> (problems, right)."""
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    families = {Q: "qwen2-bpe", L: "llama-bpe"}
    meta = {"run_id": run_id, "method": method, "cohort": cohort, "profile": "micro", "seed": seed, "tag": "",
            "status": "finished", "steps": 5, "started_at": started,
            "agents": [{"name": a, "family": families[a]} for a in final]}
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    (run_dir / "env.json").write_text(json.dumps(env or ENV), encoding="utf-8")
    write_config(run_dir, method, cohort, seed, steps=5)
    for phase, counts in (("final", final), ("base", base or {})):
        for agent, (n, right) in counts.items():
            write_preds(run_dir / "eval" / phase / agent / "micro.jsonl", n, right)
    return run_dir


def row(table, label: str, family: str = "qwen2-bpe"):
    block = next(b for b in table.blocks if b.family == family)
    return next(r for r in block.rows if r.label == label)


def pct(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(100 * value, 4)


# ------------------------------------------------------------------------------------------ Δ against the run's own base
def test_delta_uses_each_runs_own_base_on_the_same_problems(tmp_path: Path) -> None:
    """A 5-step Co-RL run on 60 problems beside TTRL runs on 300: the block's Base row comes from the 300-problem
    runs (the most common set); Co-RL's Δ is against its own base on its 60 problems (+5.0), not the Base row's 54.0
    (which would print +1.0), and the footer says its problems differ from the Base row's."""
    root = tmp_path / "runs"
    make_run(root, "ttrl-s0", "ttrl", 0, {Q: (300, 180)}, {Q: (300, 162)})  # 60.0, base 54.0: Δ +6.0
    make_run(root, "ttrl-s1", "ttrl", 1, {Q: (300, 186)}, {Q: (300, 162)})  # 62.0, base 54.0: Δ +8.0
    make_run(root, "corl-s0", "corl", 0, {Q: (60, 33)}, {Q: (60, 30)})  # 55.0, own base 50.0: Δ +5.0
    table = build(root)
    base, ttrl, corl = row(table, "Base"), row(table, "TTRL"), row(table, "Co-RL (cross-family)")
    assert base.run_ids == ("ttrl-s0", "ttrl-s1") and pct(base.cells[-1].mean) == 54.0
    assert pct(ttrl.delta) == 7.0  # mean of +6.0 and +8.0
    assert pct(corl.cells[-1].mean) == 55.0 and pct(corl.delta) == 5.0
    assert ("qwen2-bpe / Co-RL (cross-family): evaluated on other problems than the Base row (micro: the Base row "
            "on 300 items, this row on 60); its Δ is against its own base on its own problems.") in table.footer
    assert not any("TTRL" in line for line in table.footer)  # same problems as the Base row: no note
    rows = {r.method: r for r in collect(root)[0]}  # the aggregated rows of `collect` agree
    assert pct(rows["corl"].delta("avg_k", ["micro"])) == 5.0 and pct(rows["ttrl"].delta("avg_k", ["micro"])) == 7.0


def test_delta_not_shown_where_base_and_final_cover_different_problems(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "ttrl-s0", "ttrl", 0, {Q: (300, 180)}, {Q: (300, 162)})
    make_run(root, "corl-s0", "corl", 0, {Q: (60, 33)}, {Q: (300, 162)})  # base on 300, final on 60
    make_run(root, "corl-s1", "corl", 1, {Q: (60, 36)}, {Q: (60, 30)})  # 60.0 - 50.0 = +10.0
    make_run(root, "gt-reward-s0", "gt-reward", 0, {Q: (60, 40)}, {Q: (300, 162)})
    table = build(root)
    assert row(table, "GT-Reward").delta is None
    assert ("qwen2-bpe / GT-Reward: Δ not shown: micro: base on 300 items, final on 60 (seed 0)."
            in table.footer)
    corl = row(table, "Co-RL (cross-family)")
    assert pct(corl.delta) == 10.0  # seed 1 only
    assert "qwen2-bpe / Co-RL (cross-family): Δ over seed(s) 1 only; micro: base on 300 items, final on 60 (seed 0)." \
        in table.footer
    rows = {r.method: r for r in collect(root)[0]}
    assert rows["gt-reward"].delta("avg_k", ["micro"]) is None and pct(rows["corl"].delta("avg_k", ["micro"])) == 10.0


def test_base_row_leaves_out_a_seed_whose_base_covers_other_problems(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "ttrl-s0", "ttrl", 0, {Q: (300, 180)}, {Q: (300, 162)})
    make_run(root, "ttrl-s1", "ttrl", 1, {Q: (300, 186)}, {Q: (300, 165)})
    make_run(root, "corl-s2", "corl", 2, {Q: (60, 33)}, {Q: (60, 30)})
    table = build(root)
    base = row(table, "Base")
    assert base.seeds == (0, 1) and pct(base.cells[-1].mean) == 54.5
    assert ("qwen2-bpe / Base: seed 2 left out: no run evaluated its base on the block's problems (corl-s2, micro: "
            "the Base row on 300 items, its base on 60).") in table.footer
    assert pct(row(table, "Co-RL (cross-family)").delta) == 5.0


def test_items_differ_says_why_in_a_few_words() -> None:
    a, b = frozenset({"p1", "p2"}), frozenset({"p1", "p3"})
    assert items_differ(a, a) == ""
    assert items_differ(a, frozenset({"p1"})) == "base on 2 items, final on 1"
    assert items_differ(a, b) == "base and final on different items (2 each, 1 shared)"


# ------------------------------------------------------------------------------------------ duplicates
def test_a_duplicate_run_is_set_aside_for_the_newer_with_one_line(tmp_path: Path) -> None:
    results = tmp_path / "results"
    make_run(results / "study" / "runs", "corl-cross-family-s0", "corl", 0, {Q: (10, 7)}, {Q: (10, 4)},
             started="2026-12-01T10:00:00+00:00")
    make_run(results / "runs", "corl-cross-family-s0", "corl", 0, {Q: (10, 5)}, {Q: (10, 4)},
             started="2026-12-06T05:10:00+00:00")
    collected = collect_results(results)
    assert [r.rel for r in collected.results] == ["runs/corl-cross-family-s0"]  # the user's newer run
    line = ("duplicate run corl / cross-family / seed 0: kept runs/corl-cross-family-s0 (newer, started 2026-12-06 "
            f"05:10), set aside study/runs/corl-cross-family-s0 (started 2026-12-01 10:00); see it with -r "
            f"{results / 'study' / 'runs' / 'corl-cross-family-s0'}")
    assert collected.duplicates == (line,) and line in collected.warnings
    rows, _ = collect(results)
    assert [(r.seeds, pct(r.scores["micro"]["avg_k"])) for r in rows] == [((0,), 50.0)]  # never pooled
    console = Console(file=io.StringIO(), width=400)
    main(results, console=console, show_warnings=False, out_dir=tmp_path / "out")
    text = console.file.getvalue()
    assert text.count("duplicate run") == 1 and f"note: {line}" in text


def test_many_duplicates_give_three_lines_and_a_count(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for seed in range(5):
        for where, day in (("old", "01"), ("runs", "06")):
            make_run(results / where, f"ttrl-s{seed}", "ttrl", seed, {Q: (10, 5)}, {Q: (10, 4)},
                     started=f"2026-12-{day}T10:00:00+00:00")
    console = Console(file=io.StringIO(), width=400)
    main(results, console=console, show_warnings=False, out_dir=tmp_path / "out")
    notes = [ln for ln in console.file.getvalue().splitlines() if ln.startswith("note: ")]
    assert len(notes) == 4 and all("kept runs/ttrl-s" in ln for ln in notes[:3])
    assert notes[3] == "note: 2 more run(s) set aside for another; --warnings lists them"


# ------------------------------------------------------------------------------------------ warnings and environments
def test_warnings_are_summarised_in_one_line_and_listed_with_the_flag(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "ttrl-s0", "ttrl", 0, {Q: (10, 7)})  # no base phase
    make_run(root, "ttrl-s1", "ttrl", 1, {Q: (10, 6)})
    make_run(root, "corl-s0", "corl", 0, {Q: (10, 8)}, {Q: (10, 4)},
             env={**ENV, "packages": {**ENV["packages"], "transformers": "5.25.0"}, "git_commit": "bbbb"})
    quiet = Console(file=io.StringIO(), width=400)
    main(root, console=quiet, show_warnings=False, out_dir=tmp_path / "q")
    lines = [ln for ln in quiet.file.getvalue().splitlines() if not ln.startswith("wrote") and "warning" in ln]
    assert lines == ["4 warnings (2 kinds): 2 environment differences, 2 runs without a base-phase evaluation; "
                     "--warnings shows them"]
    loud = Console(file=io.StringIO(), width=400)
    main(root, console=loud, show_warnings=True, out_dir=tmp_path / "l")
    text = loud.file.getvalue()
    assert "warning: ttrl-s0 has no predictions for phase base; Δ base left empty" in text
    assert ("warning: environments differ in transformers: 5.24.0 in ttrl-s0, ttrl-s1; 5.25.0 in corl-s0"
            in text)
    assert "warning: environments differ in git commit: aaaa in ttrl-s0, ttrl-s1; bbbb in corl-s0" in text
    footer = build(root).footer
    env_lines = [ln for ln in footer if ln.startswith("Environments differ")]
    assert env_lines == ["Environments differ (env.json): transformers 5.24.0 (2 runs) vs 5.25.0 (1 run); "
                         "git commit (2 commits over 3 runs)."]  # python, platform, seed, argv, dates: not named
    assert env_lines[0] in (tmp_path / "q" / "table.md").read_text(encoding="utf-8")  # files keep the footer
    assert "warning" not in (tmp_path / "q" / "table.md").read_text(encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(app, ["table", "-r", str(root), "--out", str(tmp_path / "cli.md")])
    assert res.exit_code == 0 and "4 warnings (2 kinds)" in res.output and "warning: " not in res.output
    res = runner.invoke(app, ["table", "-r", str(root), "-W", "--out", str(tmp_path / "cli.md")])
    assert res.exit_code == 0 and res.output.count("warning: ") == 4 and "--warnings shows them" not in res.output


def test_same_environments_give_no_line(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "ttrl-s0", "ttrl", 0, {Q: (10, 7)}, {Q: (10, 4)})
    make_run(root, "ttrl-s1", "ttrl", 1, {Q: (10, 6)}, {Q: (10, 4)},
             env={**ENV, "created_at": "2026-12-02T00:00:00+00:00", "seed": 1, "argv": ["x"]})
    table = build(root)
    assert not any(line.startswith("Environments differ") for line in table.footer)
    assert table.warnings == ()


def test_warnings_summary_counts_kinds() -> None:
    assert warnings_summary(["a has no predictions for phase base; Δ base left empty", "something new"]) == (
        "2 warnings (2 kinds): 1 runs without a base-phase evaluation, 1 other; --warnings shows them")


# ------------------------------------------------------------------------------------------ own runs and studies
@pytest.fixture()
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh clone's results/: a committed study and the user's own run of the same cell."""
    make_run(tmp_path / "results" / "real-study" / "sweep" / "runs", "corl-cross-family-s0", "corl", 0,
             {Q: (10, 7)}, {Q: (10, 4)})  # 70.0
    (tmp_path / "results" / "matrix").mkdir()
    (tmp_path / "results" / "matrix" / "summary.md").write_text("x", encoding="utf-8")
    make_run(tmp_path / "results" / "runs", "corl-cross-family-s0", "corl", 0, {Q: (10, 5)}, {Q: (10, 4)},
             started="2026-12-06T05:10:00+00:00")  # 50.0
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_default_table_shows_the_users_runs_and_study_opens_a_committed_one(checkout: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["table", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert "50.0000" in res.output and "70.0000" not in res.output and "duplicate" not in res.output
    assert (checkout / "results" / "runs" / "table.md").is_file()
    res = runner.invoke(app, ["table", "--study", "real-study", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert "70.0000" in res.output and "50.0000" not in res.output
    assert not (checkout / "results" / "real-study" / "table.md").exists()  # never written into a committed study
    assert (checkout / "results" / "tables" / "real-study" / "table.md").is_file()
    assert studies(checkout / "results") == ["real-study"]  # runs/, tables/ and directories without runs are not studies
    assert study_dir("real-study", checkout / "results") == checkout / "results" / "real-study"


def test_unknown_study_and_study_with_r_fail_with_one_line(checkout: Path) -> None:
    runner = CliRunner()
    for args, words in ((["--study", "real-studdy"], ("did you mean 'real-study'", "studies under results/: "
                                                       "real-study")),
                        (["--study", "matrix"], ("results/matrix holds no runs", "real-study")),
                        (["--study", "real-study", "-r", "results"], ("not both",))):
        res = runner.invoke(app, ["table", *args])
        assert res.exit_code == 2, (args, res.output)
        assert all(w in res.output for w in words), (args, res.output)
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_without_own_runs_the_table_points_to_the_studies(tmp_path: Path) -> None:
    make_run(tmp_path / "results" / "micro-study", "ttrl-s0", "ttrl", 0, {Q: (10, 7)})
    console = Console(file=io.StringIO(), width=400)
    assert main(tmp_path / "results" / "runs", console=console) == []
    out = console.file.getvalue().strip()
    assert len(out.splitlines()) == 1 and "corl-bench run" in out and "--study micro-study" in out
