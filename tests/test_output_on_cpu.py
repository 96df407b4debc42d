"""Output where stdout/stderr is not a terminal (CI logs, ``nohup``, ``| tee``) and in narrow terminals.

* A run through a pipe prints plain timestamped lines only (no live-bar residue, no ANSI escapes) and a summary
  table whose names are whole.
* ``corl-bench ls <kind>`` never cuts a name, piped or in a narrow terminal (``TTY_COMPATIBLE=1`` makes rich treat
  the pipe as a terminal of ``COLUMNS`` columns).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rich.console import Console

from corl_bench.eval.metrics import BenchmarkScores
from corl_bench.record import RunRecord
from corl_bench.train.progress import RunProgress, summary_table

ROOT = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "corl-bench"
KINDS = ("methods", "cohorts", "benchmarks", "families", "profiles", "engines")
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")
PROGRESS = re.compile(r"\b\d+/\d+ \(\d+ s")  # "eval base: 120/1200 (12 s, eta 100 s)"
BAR_RESIDUE = re.compile(r"━|elapsed|eta\s+[-\d]+:[-\d]|…")  # bar glyphs, "elapsed 0:00:12 eta 0:01:40", cut text
ANSI = "\x1b["


def _env(columns: int, terminal: bool = False, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR")}
    env.update(COLUMNS=str(columns), **extra)
    if terminal:
        env.update(TTY_COMPATIBLE="1", TTY_INTERACTIVE="0", NO_COLOR="1")
    return env


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _whole(name: str, text: str) -> bool:
    """``name`` occurs as a whole token (not a prefix of a longer name, not cut to ``livecodeben…``)."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text) is not None


# ----------------------------------------------------------------------------------------------- ls
LS_CASES = [(kind, cols, terminal) for kind in KINDS for cols in (80, 40) for terminal in (False, True)]


@pytest.fixture(scope="module")
def listings() -> dict[tuple[str, int, bool], subprocess.CompletedProcess]:
    def one(case: tuple[str, int, bool]) -> subprocess.CompletedProcess:
        kind, cols, terminal = case
        return subprocess.run([str(CLI), "ls", kind], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(cols, terminal), timeout=60)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(LS_CASES, pool.map(one, LS_CASES)))


@pytest.fixture(scope="module")
def registered() -> dict[str, list[str]]:
    """Every kind's names as a fresh process sees them (other tests register test-only families in this one)."""
    code = ("import json; from corl_bench import registries; "
            f"print(json.dumps({{k: getattr(registries, k.upper()).names() for k in {list(KINDS)!r}}}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(res.stdout)


@pytest.mark.parametrize("kind, cols, terminal", LS_CASES)
def test_ls_never_cuts_a_name(listings, registered, kind: str, cols: int, terminal: bool) -> None:
    res = listings[kind, cols, terminal]
    assert res.returncode == 0, res.stderr
    out = _plain(res.stdout)  # a terminal gets bold headers
    names = registered[kind]
    assert names
    for name in names:
        assert _whole(name, out), f"{name} cut or missing in `ls {kind}` at {cols} columns:\n{out}"
    assert "…" not in out


@pytest.mark.parametrize("kind", KINDS)
def test_ls_through_a_pipe_prints_plain_tab_separated_rows_that_start_with_the_name(listings, registered,
                                                                                    kind: str) -> None:
    out = listings[kind, 80, False].stdout
    assert ANSI not in out and "━" not in out and "│" not in out
    first = [line.split("\t")[0] for line in out.splitlines()]
    assert first[0] == "name"
    assert sorted(first[1:]) == sorted(registered[kind])


def test_ls_benchmarks_piped_at_80_columns_finds_livecodebench_with_grep(listings) -> None:
    hits = [line for line in listings["benchmarks", 80, False].stdout.splitlines() if "livecodebench" in line]
    assert any(line.startswith("livecodebench") for line in hits), hits


def test_ls_in_a_wide_terminal_is_still_a_table() -> None:
    res = subprocess.run([str(CLI), "ls", "families"], capture_output=True, text=True, env=_env(120, terminal=True),
                         timeout=60)
    assert "┃ name" in _plain(res.stdout) and "│ qwen2-bpe " in res.stdout


# ----------------------------------------------------------------------------------------------- progress
def _fake_run(console: Console) -> None:
    with RunProgress(console) as prog:
        warm = prog.add("warm start qwen2-bpe", 40)
        for _ in range(40):
            prog.advance(warm, 1)
        train = prog.add("train", 5)
        for _ in range(5):
            prog.advance(train, 1, status="a0 r=0.50")


def test_progress_off_a_terminal_prints_only_timestamped_lines_and_no_bar_on_exit() -> None:
    out = io.StringIO()
    _fake_run(Console(file=out, width=40, force_terminal=False))
    lines = out.getvalue().splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines
    assert not any(BAR_RESIDUE.search(line) or ANSI in line for line in lines), lines
    assert lines[0].endswith("warm start qwen2-bpe: 1/40 (0 s)")
    assert lines[-1].endswith("train: 5/5 (0 s) a0 r=0.50")  # whole, although the console has 40 columns
    assert len([line for line in lines if "warm start" in line]) == 11  # first step + every 10 %


def test_progress_in_a_terminal_still_draws_live_bars() -> None:
    out = io.StringIO()
    _fake_run(Console(file=out, width=120, force_terminal=True))
    text = out.getvalue()
    assert "━" in text and "elapsed" in text and "40/40" in text
    assert "warm start qwen2-bpe: " not in text  # no plain lines beside the bars


def test_summary_off_a_terminal_has_no_heavy_rules_and_whole_names_at_40_columns() -> None:
    out = io.StringIO()
    scores = BenchmarkScores(300, 0.5, 0.4, 0.6, 0.9, 8, 0.0, 0.0)
    agent = "a0-qwen2-bpe-with-a-long-name"
    info = {"method": "corl", "cohort": "cross-family", "seed": 0, "run_id": "corl-cross-family-s0-x",
            "wall_seconds": 3.0, "timings": {"train": 2.0}}
    summary_table(Console(file=out, width=40, force_terminal=False), RunRecord.from_dict(info),
                  {"base": {agent: {"livecodebench_v6": scores}}, "final": {agent: {"livecodebench_v6": scores}}}, [])
    text = out.getvalue()
    assert _whole(agent, text) and _whole("livecodebench_v6", text) and "50.0 → 50.0" in text
    assert "━" not in text and "…" not in text and ANSI not in text
    assert any(line.startswith("diagnostics:") and line.endswith("*.jsonl") for line in text.splitlines())


def test_log_records_off_a_terminal_are_plain_timestamped_lines() -> None:
    code = ("import logging; from corl_bench.cli import _setup_logging; _setup_logging(False); "
            "logging.getLogger('corl_bench.x').warning('resuming %s', 'r1')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(80), timeout=60)
    assert res.returncode == 0, res.stderr
    line, = res.stderr.splitlines()
    assert STAMP.match(line) and line.endswith(" WARNING resuming r1"), line


# ----------------------------------------------------------------------------------------------- a real run
# The tiny (untrained-size) families of tests/conftest.py, warm-started for 4 steps (seconds, not the ~5 minutes
# of the real micro models); registered in the child process, which then is `corl-bench` itself.
RUN_TINY = """
import sys
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family
for name in ("qwen2-bpe", "llama-bpe"):
    FAMILIES.register(f"tiny-{name}", tiny_family(name, warmstart_steps=4, warmstart_batch=16))
from corl_bench.cli import main
sys.argv = ["corl-bench", *sys.argv[1:]]
main()
"""
AGENTS = "[{name: a0-qwen2-bpe, family: tiny-qwen2-bpe}, {name: a1-llama-bpe, family: tiny-llama-bpe, seed_offset: 1}]"


@pytest.fixture(scope="module")
def piped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    tmp = tmp_path_factory.mktemp("piped-run")
    sets = [f"cohort.agents={AGENTS}", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
            "rollout.max_new_tokens=16", "eval.max_problems=4", "eval.samples=2", "eval.max_new_tokens=16"]
    argv = [sys.executable, "-c", RUN_TINY, "run", "--method", "corl", "--cohort", "cross-family", "--steps", "2",
            "--output-dir", str(tmp / "runs"), "--verbose", *(a for s in sets for a in ("--set", s))]
    env = _env(80, CORL_BENCH_CACHE=str(tmp / "cache"), PYTHONPATH=str(ROOT))
    res = subprocess.run(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    return res, tmp


@pytest.mark.slow
def test_a_piped_run_prints_plain_timestamped_progress_lines_only(piped_run) -> None:
    res, _ = piped_run
    text = res.stdout + res.stderr
    assert ANSI not in text
    lines = res.stderr.splitlines()
    assert not [line for line in lines if BAR_RESIDUE.search(line)], res.stderr
    progress = [line for line in lines if PROGRESS.search(line)]
    assert progress and all(STAMP.match(line) for line in progress), progress
    for phase in ("warm start tiny-qwen2-bpe", "warm start tiny-llama-bpe", "eval base", "train", "eval final"):
        assert any(f" {phase}: " in line for line in progress), phase
    title = next(i for i, line in enumerate(lines) if "corl · cross-family · seed 0" in line)
    assert all(STAMP.match(line) for line in lines[:title]), lines[:title]  # before the summary: log lines only


@pytest.mark.slow
def test_a_piped_runs_summary_keeps_names_whole(piped_run) -> None:
    res, tmp = piped_run
    summary = res.stderr[res.stderr.index("corl · cross-family"):]
    run_id = next((tmp / "runs").iterdir()).name
    for name in ("a0-qwen2-bpe", "a1-llama-bpe", "micro-test", run_id):
        assert _whole(name, summary), f"{name} cut or missing:\n{summary}"
    assert any(line.startswith("diagnostics:") and line.endswith("*.jsonl") for line in summary.splitlines())
