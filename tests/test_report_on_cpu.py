"""CPU tests for corl_bench.report.plots and corl_bench.report.html on hand-built run directories (no training, no torch).

A fixture run mimics a real one (results/runs/<run_id>/): run.json, config.yaml, metrics.jsonl (one row per step x
agent), samples.jsonl and eval/<phase>/<agent>/micro-test.jsonl predictions (greedy + sampled rows per problem).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corl_bench.report import plots
from corl_bench.cli import app
from corl_bench.report.html import ReportError, build_report, render_report, sample_rows

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GOLDS = ["38", "27", "12", "5"]
K = 4  # sampled rows per problem
QWEN = {"name": "a0-qwen2-bpe", "family": "qwen2-bpe", "view": "original"}
LLAMA = {"name": "a1-llama-bpe", "family": "llama-bpe", "view": "original"}
SCRIPT = "<script>alert('pwned')</script>"


def predictions(n_right_greedy: int, n_right_sampled: int) -> list[dict[str, Any]]:
    """Rows of one agent/phase: the first ``n_right_greedy`` problems right greedily; per problem the first
    ``n_right_sampled`` of K samples right (the rest answer 999)."""
    rows = []
    for i, gold in enumerate(GOLDS):
        base = {"benchmark": "micro-test", "benchmark_version": "1", "problem_id": f"micro-test-{i:04d}",
                "prompt": f"Sam has {gold} stamps. How many stamps now?\n", "gold": gold, "correct": True,
                "finished": True, "n_tokens": 12}
        rows.append({**base, "decoding": "greedy", "sample_index": 0,
                     "completion": f"{gold}+0={gold};\\boxed{{{gold if i < n_right_greedy else '999'}}}"})
        for j in range(K):
            answer = gold if j < n_right_sampled else "999"
            rows.append({**base, "decoding": "sampled", "sample_index": j, "completion": f"\\boxed{{{answer}}}"})
    return rows


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(root: Path, method: str, cohort: str, seed: int, agents: Sequence[dict[str, str]], *,
             steps: int = 8, phases: dict[str, tuple[int, int]] | None = None, labels: bool = True,
             tag: str = "", completion: str = "12+0=12;\\boxed{12}") -> Path:
    """A finished run; ``phases``: phase -> (greedy right, sampled right per problem), the same for every agent."""
    phases = phases or {"base": (2, 1), "final": (3, 2)}
    run_id = f"{method}-{cohort}{'-' + tag if tag else ''}-s{seed}-20261201-000000"
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {"run_id": run_id, "method": method, "cohort": cohort, "profile": "micro", "seed": seed, "tag": tag,
            "status": "finished", "started_at": "2026-12-01T00:00:00+00:00", "agents": list(agents), "steps": steps,
            "phases": list(phases), "timings": {"train": 1.0}, "wall_seconds": 2.0}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    (run_dir / "config.yaml").write_text(f"method:\n  name: {method}\nrun:\n  seed: {seed}\n  steps: {steps}\n",
                                         encoding="utf-8")
    metrics, samples = [], []
    for step in range(steps):
        for i, agent in enumerate(agents):
            row = {"step": step, "agent": agent["name"], "reward/mean": 0.2 + 0.05 * step + 0.1 * i,
                   "reward/accuracy": 0.6 + 0.02 * step, "len/mean": 20.0 + step, "len/clipped_ratio": 0.0,
                   "policy/entropy": 0.1 - 0.005 * step, "loss": 0.0}
            if labels:
                row["label/accuracy"] = 0.5 + 0.04 * step
            if len(agents) > 1:
                row["peer/agreement"] = 0.3 + 0.03 * step
            metrics.append(row)
            if step in (0, steps - 1):
                for p in range(3):
                    samples.append({"step": step, "agent": agent["name"], "problem_id": f"train-0-{p:07d}",
                                    "view": "original", "prompt": "Kai has 12 coins. How many coins now?\n",
                                    "completion": completion if step == steps - 1 else "old",
                                    "extracted": "12", "pseudo_label": "12" if labels else None, "truth": "12",
                                    "reward": 1.0})
    metrics.append({**metrics[-1]})  # a resumed run can log a step twice; the last row wins
    write_jsonl(run_dir / "metrics.jsonl", metrics)
    write_jsonl(run_dir / "samples.jsonl", samples)
    for phase, (greedy, sampled) in phases.items():
        for agent in agents:
            write_jsonl(run_dir / "eval" / phase / agent["name"] / "micro-test.jsonl", predictions(greedy, sampled))
    return run_dir


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seeds of corl x cross-family (one with an intermediate eval phase), a label-free rent run whose
    samples hold a <script>, and a damaged run."""
    root = tmp_path_factory.mktemp("results")
    make_run(root, "corl", "cross-family", 0, [QWEN, LLAMA],
             phases={"base": (2, 1), "step-000004": (2, 2), "final": (3, 2)})
    make_run(root, "corl", "cross-family", 1, [QWEN, LLAMA], phases={"base": (2, 1), "final": (4, 3)})
    make_run(root, "rent", "single", 0, [QWEN], labels=False, completion=f"I think {SCRIPT} \\boxed{{12}}")
    damaged = root / "runs" / "ttrl-single-s0-broken"
    damaged.mkdir(parents=True)
    (damaged / "run.json").write_text("{not json", encoding="utf-8")
    return root


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_run_writes_png_with_intermediate_phase(results: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = next((results / "runs").glob("corl-cross-family-s0-*"))
    messages: list[tuple[str, str]] = []
    real = plots._message
    monkeypatch.setattr(plots, "_message", lambda ax, title, text: (messages.append((title, text)),
                                                                     real(ax, title, text)))
    out = plots.plot_run(run_dir, tmp_path / "figs")
    assert out == tmp_path / "figs" / f"{run_dir.name}.png"
    data = out.read_bytes()
    width, height = png_size(data)
    assert 1000 <= width <= 2500 and 400 <= height <= 1500
    assert 10_000 < len(data) < 1_000_000
    assert messages == []  # corl logs every panel's metric
    points = plots.eval_points(run_dir, plots.read_run(run_dir))
    per_agent = points["micro-test"]
    assert set(per_agent) == {"a0-qwen2-bpe", "a1-llama-bpe"}
    assert [x for x, _ in per_agent["a0-qwen2-bpe"]] == [0, 4, 8]  # base, step-000004, final (= steps)
    greedy = [s["greedy"] for _, s in per_agent["a0-qwen2-bpe"]]
    avg = [s["avg_k"] for _, s in per_agent["a0-qwen2-bpe"]]
    assert greedy == [0.5, 0.5, 0.75] and avg == [0.25, 0.5, 0.5]


def test_plot_run_says_not_logged(results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = next((results / "runs").glob("rent-single-*"))
    messages: list[tuple[str, str]] = []
    real = plots._message
    monkeypatch.setattr(plots, "_message", lambda ax, title, text: (messages.append((title, text)),
                                                                     real(ax, title, text)))
    data = plots.plot_run(run_dir, tmp_path).read_bytes()
    png_size(data)
    assert ("pseudo-label accuracy (vs hidden truth)", "not logged by rent") in messages
    assert ("peer agreement", "not logged by rent") in messages
    assert len(messages) == 2


def test_plot_run_damaged_run_is_one_line_error(results: Path, tmp_path: Path) -> None:
    with pytest.raises(plots.RunPlotError, match="not readable JSON.*re-run"):
        plots.plot_run(results / "runs" / "ttrl-single-s0-broken", tmp_path)
    with pytest.raises(plots.RunPlotError, match="has no run.json"):
        plots.plot_run(tmp_path, tmp_path)


def test_phase_step() -> None:
    from corl_bench.results import phase_step

    assert phase_step("base", 50) == 0
    assert phase_step("step-000010", 50) == 10
    assert phase_step("final", 50) == 50
    assert phase_step("warmup", 50) is None


def test_plot_gains_two_seeds(results: Path, tmp_path: Path) -> None:
    from corl_bench.report.collect import collect

    rows, warnings = collect(results)
    assert any("ttrl-single-s0-broken" in w for w in warnings)
    out = plots.plot_gains(results, tmp_path / "gains.png")
    width, height = png_size(out.read_bytes())
    assert width > 800 and height > 300
    assert plots.plot_gains(rows, tmp_path / "g2.png", metric="greedy").stat().st_size > 3_000
    corl = next(r for r in rows if r.method == "corl" and r.agent == "a0-qwen2-bpe")
    assert corl.seeds == (0, 1)
    bar = plots._bar(corl, "corl · cross-family", ["micro-test"], ["micro-test"], "avg_k")
    # pass@1: base 25 %, final 50 % (seed 0) and 75 % (seed 1) -> Δ = 62.5 - 25 = 37.5 points, sd 17.7
    assert bar.n == 2
    assert bar.deltas[0] == pytest.approx(37.5)
    assert bar.sds[0] == pytest.approx(17.677, abs=1e-3)
    with pytest.raises(ValueError, match="unknown metric"):
        plots.gains_png(rows, metric="bogus")


def test_report_html(results: Path, tmp_path: Path) -> None:
    out = build_report(results, tmp_path / "r" / "report.html", samples_per_agent=2)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "<table" in text and "pass@1" in text and "maj@4" in text
    assert "62.5 ± 17.7" in text  # corl a0 pass@1 over two seeds
    assert text.count("data:image/png;base64,") == 4  # gains + one figure per readable run
    assert SCRIPT not in text and "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in text
    assert "<script" not in text.lower()
    assert "ttrl-single-s0-broken" in text.split("<h2>Results</h2>")[0]  # named among the warnings
    assert "http://" not in text and "https://" not in text  # self-contained
    assert "not logged" not in text  # the figure's text lives in the PNG, not the page
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temp file left behind


def test_sample_rows_last_step(results: Path) -> None:
    run_dir = next((results / "runs").glob("rent-single-*"))
    rows = sample_rows(run_dir, "a0-qwen2-bpe", 2)
    assert len(rows) == 2 and all(r["step"] == 7 for r in rows)
    assert sample_rows(run_dir, "nobody", 3) == []


def test_report_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="has no runs.*corl-bench run"):
        render_report(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        render_report(tmp_path / "missing")


def test_cli_report(tmp_path: Path) -> None:
    make_run(tmp_path / "sweep", "ttrl", "single", 0, [QWEN])
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(tmp_path / "sweep"), "--samples", "1"])
    assert result.exit_code == 0, result.output
    page = tmp_path / "sweep" / "report.html"
    assert page.is_file() and "corl-bench report: sweep" in page.read_text(encoding="utf-8")
    assert "wrote" in result.output  # --out FILE goes through the same build_report (see test_report_html)
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = runner.invoke(app, ["report", str(empty)])
    assert bad.exit_code == 2 and "has no runs" in bad.output
