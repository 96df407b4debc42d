"""The run record (issue 23): one typed shape of run.json, written through one function, read by every reader; and a
run loop whose stages fit on a screen.

Runs written before the record existed must read unchanged, and the JSON a run writes now must be the one it wrote
before (same keys, same order, same values), so stored results and other tools keep working. Nothing trains here.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from corl_bench.record import AgentEntry, RunRecord
from corl_bench.results import RunDir

REPO = Path(__file__).resolve().parents[1]

#: run.json of a finished micro run as the runner wrote it before the record existed (key order included).
TRAINED = {
    "run_id": "corl-cross-family-s0-20261202-133807", "method": "corl", "cohort": "cross-family", "profile": "micro",
    "seed": 0, "tag": "", "status": "finished", "started_at": "2026-12-02T13:38:07+00:00",
    "agents": [{"name": "a0-qwen2-bpe", "family": "qwen2-bpe", "view": "original"},
               {"name": "a1-llama-bpe", "family": "llama-bpe", "view": "original"}],
    "steps": 3, "phases": ["base", "final"],
    "timings": {"models": 2.37, "eval_base": 24.7, "train": 46.4, "eval_final": 7.0},
    "paper_row": "different-family",
    "teachers": {"a0-qwen2-bpe": ["a1-llama-bpe"], "a1-llama-bpe": ["a0-qwen2-bpe"]},
    "collapse_alarms": [], "finished_at": "2026-12-02T13:39:28+00:00", "wall_seconds": 80.6}

#: run.json of ``corl-bench eval`` (a stand-alone evaluation: a Base row of the table).
EVALUATED = {"run_id": "qwen", "method": "base", "cohort": "eval", "profile": "pretrained", "seed": 0,
             "status": "finished", "started_at": "2026-12-02T13:38:07+00:00", "model": "Qwen/Qwen2.5-3B",
             "agents": [{"name": "qwen", "family": "Qwen/Qwen2.5-3B"}], "phases": ["final"]}

#: a resumed run that had failed once, stopped on the collapse alarm and selected a checkpoint.
RESUMED = {**{k: v for k, v in TRAINED.items() if k not in ("collapse_alarms", "finished_at", "wall_seconds")},
           "contamination": {"training_set": "micro", "dropped": 0, "problems_before": 100},
           "collapse_alarms": [{"step": 1, "agent": "a0-qwen2-bpe", "symptoms": ["consensus"], "signals": {}}],
           "stopped": "collapse", "stopped_after_step": 2, "selection": {"rule": "dev", "agents": {}},
           "resumed_at": ["2026-12-02T13:40:00+00:00"], "finished_at": "2026-12-02T13:41:00+00:00",
           "wall_seconds": 99.5}


@pytest.mark.parametrize("raw", [TRAINED, EVALUATED, RESUMED], ids=["trained", "evaluated", "resumed"])
def test_a_record_writes_back_the_json_it_was_read_from_key_for_key(raw):
    assert json.dumps(RunRecord.from_dict(raw).to_dict()) == json.dumps(raw)


def test_one_function_writes_the_record_and_the_directory_reads_it_back(tmp_path):
    rd = RunDir(tmp_path)
    record = RunRecord.from_dict(TRAINED)
    rd.write_record(record)
    assert rd.record() == record and rd.info() == TRAINED
    assert rd.agents() == TRAINED["agents"]


def test_an_old_or_odd_run_json_reads_missing_fields_default_and_unknown_keys_survive():
    raw = {"status": "running", "cohort": "cross-family", "from_the_future": {"x": 1}, "seed": "zero",
           "agents": [{"name": "a0", "family": "f", "colour": "red"}, {"family": "nameless"}]}
    record = RunRecord.from_dict(raw)
    assert record.method is None and record.paper_row is None and record.steps is None and not record.finished
    assert record.problem("method") == "has no 'method'"
    assert record.problem("seed") == "field 'seed' should be int (got 'zero')" and record.seed is None
    assert record.agent_names == ("a0",) and record.agents[0].extra == {"colour": "red"}
    assert record.problem("cohort") is None and record.extra == {"from_the_future": {"x": 1}}
    assert record.to_dict() == raw  # rewriting it (a resume) loses nothing
    assert RunRecord.from_dict({"agents": "a0"}).problem("agents") == "field 'agents' should be list (got 'a0')"


def test_updating_a_record_keeps_the_order_a_run_has_always_written():
    record = RunRecord(run_id="r", method="corl", cohort="single", profile="micro", seed=0, tag="", status="running",
                       started_at="t0", agents=(AgentEntry("a0", "f", "original"),), steps=2, phases=(), timings={})
    record = record.with_timing("models", 1.0).with_phase("base", 2.0).replace(collapse_alarms=())
    record = record.with_timing("train", 3.0, add=True).with_phase("final", 4.0).with_phase("base", 5.0)
    record = record.replace(status="failed", error="boom", finished_at="t1", wall_seconds=9.0)
    record = record.replace(resumed_at=("t2",)).replace(status="finished", error=None)
    out = record.to_dict()
    assert list(out) == ["run_id", "method", "cohort", "profile", "seed", "tag", "status", "started_at", "agents",
                         "steps", "phases", "timings", "collapse_alarms", "resumed_at", "finished_at", "wall_seconds"]
    assert out["phases"] == ["final", "base"] and out["status"] == "finished" and "error" not in out
    assert out["timings"] == {"models": 1.0, "eval_base": 5.0, "train": 3.0, "eval_final": 4.0}
    assert record.comparable() == {k: v for k, v in out.items()
                                   if k not in ("run_id", "started_at", "timings", "resumed_at", "finished_at",
                                                "wall_seconds")}


def test_every_reader_uses_the_record_and_no_reporter_has_its_own_run_info():
    """run.json is read only through RunDir.record (RunDir.info is the raw file behind it) and written only
    through RunDir.write_record; no module defines its own RunInfo."""
    readers = [p for folder in ("corl_bench", "scripts") for p in sorted((REPO / folder).rglob("*.py"))]
    for path in readers:
        text = path.read_text(encoding="utf-8")
        assert "class RunInfo" not in text, path
        if path.name != "results.py":
            assert ".info()" not in text, f"{path} reads run.json as a dict; use RunDir.record()"
            assert "info_path, " not in text, f"{path} writes run.json itself; use RunDir.write_record"


def _long_functions(limit: int) -> list[str]:
    out = []
    for path in sorted((REPO / "corl_bench" / "train").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_of_the_training_package_is_longer_than_a_screen():
    assert _long_functions(60) == []


def test_the_run_loop_reads_top_to_bottom_as_its_stages():
    from corl_bench.train import runner

    tree = ast.parse(Path(runner.__file__).read_text(encoding="utf-8"))
    (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    calls = sorted((n.lineno, n.func.attr) for n in ast.walk(run) if isinstance(n, ast.Call)
                   and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                   and n.func.value.id == "session")
    assert [name for _, name in calls] == ["build", "restore", "evaluate_base", "train", "evaluate_final", "summary"]
    assert run.end_lineno - run.lineno + 1 <= 30
