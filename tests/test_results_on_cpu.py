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
