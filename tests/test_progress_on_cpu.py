"""The end-of-run summary table and the plain progress lines for non-terminal output."""

from __future__ import annotations

import io

from rich.console import Console

from corl_bench.eval.metrics import BenchmarkScores
from corl_bench.record import RunRecord
from corl_bench.train.progress import RunProgress, summary_table


def test_summary_shows_base_to_final_scores_in_percent_and_rewards_in_their_own_units():
    out = io.StringIO()
    console = Console(file=out, width=80)
    base = BenchmarkScores(300, 0.5, 0.4, 0.6, 0.9, 8, 0.0, 0.0)
    final = BenchmarkScores(300, 0.6, 0.45, 0.7, 0.9, 8, 0.0, 0.0)
    info = {"method": "rent", "cohort": "single", "seed": 0, "run_id": "r", "wall_seconds": 3.0,
            "timings": {"train": 2.0, "eval_final": 1.0}}
    history = [{"a0-qwen2-bpe": {"reward/mean": -0.11, "label/accuracy": None, "peer/agreement": None}}]
    summary_table(console, RunRecord.from_dict(info), {"base": {"a0-qwen2-bpe": {"micro-test": base}},
                                  "final": {"a0-qwen2-bpe": {"micro-test": final}}}, history)
    text = out.getvalue()
    assert "a0-qwen2-bpe" in text  # printed at full width, never cut to "…"
    assert "50.0 → 60.0" in text and "40.0 → 45.0" in text and "-0.110" in text
    assert "time per phase: train 2 s · eval final 1 s" in text


def test_progress_prints_a_first_line_and_one_per_tenth_when_not_a_terminal():
    out = io.StringIO()
    with RunProgress(Console(file=out, width=120, force_terminal=False)) as prog:
        task = prog.add("train", 20)
        for _ in range(20):
            prog.advance(task, 1, status="r=0.5")
    lines = [ln for ln in out.getvalue().splitlines() if "train:" in ln]
    assert len(lines) == 11  # the first step, then one line per 10 %
    assert "1/20" in lines[0] and "20/20" in lines[-1] and "r=0.5" in lines[-1]
