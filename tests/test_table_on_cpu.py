"""CPU tests for corl_bench.table on a hand-built results directory with known percentages."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest
from rich.console import Console
from rich.table import Table

from corl_bench import table
from corl_bench.table import Row, collect, find_runs, main, render, to_csv, to_markdown

REPO = Path(__file__).resolve().parents[1]
AGENTS = [{"name": "a0-qwen2-bpe", "family": "qwen2-bpe", "view": "original"},
          {"name": "a1-llama-sp", "family": "llama-sp", "view": "original"}]
GOLDS = {"alpha": ["3", "12", "7", "40"], "beta": ["5", "9"]}

# Per benchmark: greedy correctness per problem; samples default to SAMPLES (k = 2 everywhere).
# sample values: True = right answer, False = the wrong answer 999, None = no answer at all.
SAMPLES: list[list[Optional[bool]]] = [[True, True], [True, False], [False, True], [None, False]]
# alpha (4 problems): avg@2 = (1 + .5 + .5 + 0) / 4 = 50 %; maj@2 = 1, 1 (tie -> first seen), 0, 0 = 50 %;
# pass@2 = 75 %.  beta (2 problems, first two patterns): avg@2 = 75 %, maj@2 = 100 %, pass@2 = 100 %.


def completion(gold: str, ok: Optional[bool]) -> str:
    if ok is None:
        return "I am not sure what to say."
    return f"so the result is \\boxed{{{gold if ok else '999'}}}"


def write_predictions(path: Path, bench: str, greedy: Sequence[bool],
                      samples: Sequence[Sequence[Optional[bool]]] = SAMPLES) -> None:
    """One greedy row and len(samples[i]) sampled rows per problem; stored `correct` always True."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for i, gold in enumerate(GOLDS[bench]):
        base = {"benchmark": bench, "benchmark_version": "1", "problem_id": f"{bench}-{i:04d}",
                "prompt": "q", "extracted": gold, "gold": gold, "correct": True, "finished": True,
                "n_tokens": 9}
        rows.append({**base, "decoding": "greedy", "sample_index": 0,
                     "completion": completion(gold, greedy[i])})
        for j, ok in enumerate(samples[i % len(samples)]):
            rows.append({**base, "decoding": "sampled", "sample_index": j,
                         "completion": completion(gold, ok), "finished": j == 0})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(results: Path, run_id: str, method: str, seed: int, agents: list[dict[str, str]],
             greedy: dict[str, dict[str, dict[str, list[bool]]]], status: str = "finished") -> Path:
    """greedy: phase -> agent name -> benchmark -> per-problem greedy correctness."""
    run_dir = results / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {"run_id": run_id, "method": method, "cohort": "cross-family", "profile": "micro", "seed": seed,
            "status": status, "agents": agents, "phases": ["base", "final"], "wall_seconds": 12.5}
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    for phase, per_agent in greedy.items():
        for agent, per_bench in per_agent.items():
            for bench, flags in per_bench.items():
                write_predictions(run_dir / "eval" / phase / agent / f"{bench}.jsonl", bench, flags)
    return run_dir


T, F = True, False


def build_results(root: Path) -> Path:
    """Two seeds of a 2-agent corl run and one ttrl run (greedy percentages in comments)."""
    a1 = {"alpha": [T, F, F, F], "beta": [T, F]}  # 25 / 50, same before and after
    make_run(root, "corl-s0", "corl", 0, AGENTS, {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, F, F], "beta": [T, F]}, "a1-llama-sp": a1},  # 50 / 50
        "base": {"a0-qwen2-bpe": {"alpha": [T, F, F, F], "beta": [F, F]}, "a1-llama-sp": a1},  # 25 / 0
    })
    make_run(root, "corl-s1", "corl", 1, AGENTS, {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, T, T], "beta": [F, T]}, "a1-llama-sp": a1},  # 100 / 50
        "base": {"a0-qwen2-bpe": {"alpha": [F, F, T, F], "beta": [F, T]}, "a1-llama-sp": a1},  # 25 / 50
    })
    make_run(root, "ttrl-s0", "ttrl", 0, AGENTS[:1], {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, T, F], "beta": [T, T]}},  # 75 / 100
        "base": {"a0-qwen2-bpe": {"alpha": [T, T, F, F], "beta": [T, F]}},  # 50 / 50
    })
    return root


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


def test_markdown_and_csv(results: Path) -> None:
    rows, _ = collect(results)
    md = to_markdown(rows, ("greedy", "avg_k", "maj_k"))
    lines = md.splitlines()
    assert lines[0] == ("| method | cohort | agent | family | seeds | alpha greedy | alpha pass@1 | alpha maj@2 "
                        "| beta greedy | beta pass@1 | beta maj@2 | avg | Δ base |")
    assert lines[2] == ("| corl | cross-family | a0-qwen2-bpe | qwen2-bpe | 2 | 75.0 ± 35.4 | 50.0 ± 0.0 "
                        "| 50.0 ± 0.0 | 50.0 ± 0.0 | 75.0 ± 0.0 | 100.0 ± 0.0 | 62.5 ± 17.7 | +37.5 |")
    assert lines[3].startswith("| corl | cross-family | a1-llama-sp | llama-sp | 2 | 25.0 ± 0.0 |")
    assert lines[3].endswith("| 37.5 ± 0.0 | +0.0 |")
    assert lines[4] == ("| ttrl | cross-family | a0-qwen2-bpe | qwen2-bpe | 1 | 75.0 | 50.0 | 50.0 "
                        "| 100.0 | 75.0 | 100.0 | 87.5 | +37.5 |")
    assert "avg = mean over benchmarks of greedy" in md

    records = list(csv.DictReader(io.StringIO(to_csv(rows, ("greedy", "pass_k")))))
    assert len(records) == 3
    corl0 = records[0]
    assert (corl0["method"], corl0["agent"], corl0["seeds"]) == ("corl", "a0-qwen2-bpe", "2")
    assert corl0["alpha greedy"] == "75.0" and corl0["alpha greedy sd"] == "35.4"
    assert corl0["alpha pass@2"] == "75.0"
    assert corl0["avg"] == "62.5" and corl0["avg sd"] == "17.7" and corl0["Δ base"] == "+37.5"
    assert records[2]["alpha greedy sd"] == "" and records[2]["avg sd"] == ""


def test_render_headers_and_first_metric_drives_avg(results: Path) -> None:
    rows, _ = collect(results)
    rendered = render(rows, metrics=("avg_k",))
    assert isinstance(rendered, Table)
    assert [c.header for c in rendered.columns] == [
        "method", "cohort", "agent", "family", "seeds", "alpha\npass@1", "beta\npass@1", "avg", "Δ base"]
    console = Console(file=io.StringIO(), width=250)
    console.print(rendered)
    text = console.file.getvalue()
    assert "a1-llama-sp" in text and "+0.0" in text
    with pytest.raises(ValueError):
        render(rows, metrics=("bogus",))


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


def test_main_prints_and_writes_atomically(results: Path, tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=250)
    out = tmp_path / "tables"
    rows = main(results, metrics=("greedy", "maj_k"), out_dir=out, console=console)
    assert len(rows) == 3
    text = console.file.getvalue()
    assert "a0-qwen2-bpe" in text and "maj@2" in text
    assert f"wrote {out / 'table.md'}" in text and f"wrote {out / 'table.csv'}" in text
    assert sorted(p.name for p in out.iterdir()) == ["table.csv", "table.md"]  # no temp files left
    assert "alpha maj@2" in (out / "table.md").read_text(encoding="utf-8")
    assert (out / "table.csv").read_text(encoding="utf-8").startswith("method,cohort,agent,family,seeds,")

    main(results, console=Console(file=io.StringIO()))  # default out_dir is the results dir
    assert (results / "table.md").is_file() and (results / "table.csv").is_file()


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


def test_import_does_not_pull_torch() -> None:
    code = ("import sys, corl_bench.table, corl_bench.metrics\n"
            "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
            "assert not bad, bad\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert table.__name__ == "corl_bench.table"
