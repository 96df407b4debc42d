"""Crash-safe results: unique run directories under concurrency, one writer per run directory, atomic files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from corl_bench.config import ConfigError
from corl_bench.results import atomic_write_text, new_run_dir, read_jsonl, run_lock


def test_concurrent_runs_with_the_same_id_get_distinct_directories(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: new_run_dir(tmp_path, "corl-x-s0"), range(16)))
    assert len(set(dirs)) == 16 and all(d.is_dir() for d in dirs)


def test_a_second_process_cannot_write_a_locked_run(tmp_path):
    script = textwrap.dedent(f"""
        from pathlib import Path
        from corl_bench.config import ConfigError
        from corl_bench.results import run_lock
        try:
            with run_lock(Path({str(tmp_path)!r})):
                print("got it")
        except ConfigError as e:
            print("refused:", e)
    """)
    with run_lock(tmp_path):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60).stdout
        assert out.startswith("refused:") and "being written by another corl-bench process" in out
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == "got it"  # released with its holder


def test_atomic_write_replaces_whole_files_and_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "x.jsonl"
    atomic_write_text(path, '{"a": 1}\n{"a": 2}\n')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}] and (path.stat().st_mode & 0o777) == 0o644
    assert not list(tmp_path.glob(".x.jsonl.*"))  # no temp file left behind
    path.write_bytes(b'{"a": 1}\n\xff\xfe\n')
    with pytest.raises(ConfigError, match="line 2 is not UTF-8"):
        read_jsonl(path, ConfigError)


def test_atomic_write_bytes_for_images(tmp_path):
    from corl_bench.results import atomic_write_bytes

    path = tmp_path / "deep" / "fig.png"
    atomic_write_bytes(path, b"\x89PNG\r\n\x1a\n")
    assert path.read_bytes() == b"\x89PNG\r\n\x1a\n" and not list(path.parent.glob(".fig.png.*"))


def test_run_dir_names_the_layout_the_runner_writes_and_reads_it(tmp_path):
    import json

    from corl_bench.results import RunDir, append_jsonl, find_runs, step_phase, write_json

    run = RunDir(tmp_path / "results" / "runs" / "corl-x-s0")
    assert run.name == "corl-x-s0" and str(run) == str(run.path) and not run.is_run()
    rel = {k: getattr(run, k).relative_to(run.path).as_posix() for k in (
        "info_path", "config_path", "env_path", "metrics_path", "samples_path", "lock_path", "eval_root",
        "checkpoints_dir")}
    assert rel == {"info_path": "run.json", "config_path": "config.yaml", "env_path": "env.json",
                   "metrics_path": "metrics.jsonl", "samples_path": "samples.jsonl", "lock_path": ".lock",
                   "eval_root": "eval", "checkpoints_dir": "checkpoints"}
    assert run.predictions_path("base", "a0", "micro-test") == run.path / "eval/base/a0/micro-test.jsonl"
    assert run.manifest_path("final", "a0") == run.path / "eval/final/a0/eval_manifest.json"
    assert run.final_checkpoint("a0") == run.path / "checkpoints/final/a0"
    assert run.step_checkpoint(20) == run.path / "checkpoints/step-000020" and step_phase(20) == "step-000020"

    write_json(run.info_path, {"run_id": run.name, "status": "finished",
                               "agents": [{"name": "a0", "family": "f"}, {"family": "no name"}]})
    run.config_path.write_text("eval:\n  samples: 2\n", encoding="utf-8")
    append_jsonl(run.metrics_path, [{"step": 0, "agent": "a0"}])
    with open(run.metrics_path, "a", encoding="utf-8") as f:
        f.write('{"step": 1, "ag')  # a killed run's torn last line
    for phase, agent, bench in (("base", "a0", "b-x"), ("base", "a0", "b"), ("final", "a0", "b"),
                                (step_phase(10), "a0", "b")):
        append_jsonl(run.predictions_path(phase, agent, bench), [{"problem_id": "p0"}])
    run.manifest_path("final", "a0").write_text(json.dumps({"b": {"decoding": {}}}), encoding="utf-8")

    assert run.is_run() and run.info()["status"] == "finished" and run.config() == {"eval": {"samples": 2}}
    assert run.agents() == [{"name": "a0", "family": "f"}]
    assert run.metrics(complete_only=True) == [{"step": 0, "agent": "a0"}]
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        run.metrics()
    assert run.samples(complete_only=True) == []
    assert run.phases() == ["base", "final", "step-000010"] and run.evaluated_agents("base") == ["a0"]
    assert run.benchmarks("base", "a0") == ["b-x", "b"]  # in file-name order, as the table reads them
    assert run.benchmarks("final", "nobody") == [] and run.evaluated_agents("nothing") == []
    assert run.predictions("final", "a0", "b") == [{"problem_id": "p0"}]
    assert run.manifest("final", "a0") == {"b": {"decoding": {}}} and run.manifest("base", "a0") == {}
    assert run.manifest_paths() == [run.manifest_path("final", "a0")]
    other = RunDir(tmp_path / "results" / "runs" / "nested" / "ttrl-s1")
    write_json(other.info_path, {})
    assert find_runs(tmp_path / "results") == [run, other] and find_runs(tmp_path / "missing") == []
