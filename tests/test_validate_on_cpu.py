"""``corl-bench validate`` accepts the default config and writes nothing; the table of refusals that validate and run
share (one line, exit 2, nothing written) is tests/test_bad_input_on_cpu.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app


def _invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output


def _error_line(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    return lines[0]


def test_validate_accepts_the_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    code, out = _invoke(["validate"])
    assert code == 0 and "valid." in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ray_backend_without_ray_is_refused_in_one_line(monkeypatch, tmp_path):
    import corl_bench.train.runner as runner

    real = runner.importlib.util.find_spec
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    code, out = _invoke(["validate", "--set", "run.backend=ray", "--set", f"run.output_dir={tmp_path / 'runs'}"])
    assert code == 2 and "run.backend=ray needs Ray" in _error_line(out)
    assert not (tmp_path / "runs").exists()


def test_a_missing_ray_or_vllm_is_a_warning_when_validating_for_another_machine(monkeypatch, tmp_path):
    """``validate --elsewhere`` checks a config for a GPU machine from one without Ray or vLLM: what this machine
    lacks is a warning there (refused without --elsewhere, as above)."""
    import corl_bench.rollout.vllm as vmod
    import corl_bench.train.runner as runner

    real = importlib.util.find_spec
    missing = lambda name, *a: None if name in ("ray", "vllm") else real(name, *a)  # noqa: E731
    monkeypatch.setattr(runner.importlib.util, "find_spec", missing)
    monkeypatch.setattr(vmod.importlib.util, "find_spec", missing)
    sets = ["--set", "run.backend=ray", "--set", "rollout.backend=vllm", "--set", f"run.output_dir={tmp_path / 'r'}"]
    res = CliRunner().invoke(app, ["validate", "--elsewhere", *sets])
    assert res.exit_code == 0, res.output
    assert "run.backend=ray needs Ray" in res.stderr and "vllm is not installed" in res.stderr, res.stderr
    code, out = _invoke(["validate", *sets])
    assert code == 2 and "needs vLLM" in _error_line(out)  # the first thing this machine lacks, refused
