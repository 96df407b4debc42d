"""``corl-bench validate`` refuses exactly what ``corl-bench run`` refuses, with the same one-line error, and a refused
``run`` writes nothing (no run directory, no ``results/``). Both call ``runner.resolve`` before anything else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app

BAD_AGENT_YAML = "cohort:\n  name: mine\n  agents:\n    - {name: a0, family: gpt5-bpe}\n    - {name: a1, family: qwen2-bpe}\n"

# name -> (arguments shared by validate and run, files to create, a fragment of the expected error line)
CASES: dict[str, tuple[list[str], dict[str, str], str]] = {
    "text-benchmark-in-micro": (["--set", "eval.benchmarks=[gsm8k]"], {}, "is not a micro benchmark"),
    "unknown-benchmark": (["--set", "eval.benchmarks=[gsm9k]"], {}, "eval.benchmarks"),
    "output-dir-under-a-file": (["--set", "run.output_dir=afile/runs"], {"afile": "x"}, "cannot create results directory"),
    "cache-under-a-file": (["--set", "model.cache_dir=afile/cache"], {"afile": "x"}, "micro model cache"),
    "too-few-agents": (["--method", "corl", "--cohort", "single"], {}, "at least 2 agents"),
    "unknown-option": (["--set", "method.options={bogus: 1}"], {}, "method.options.bogus"),
    "unknown-family": (["cfg.yaml"], {"cfg.yaml": BAD_AGENT_YAML}, "gpt5-bpe"),
    "profile-nope": (["--set", "model.profile=paperx"], {}, "model.profile"),
    "engine-not-registered": (["--set", "rollout.backend=sglang"], {}, "rollout.backend: unknown rollout engine"),
    "engine-option-unknown": (["--set", "rollout.engine_options={foo: 1}"], {}, "the hf engine has no option 'foo'"),
    "run-backend-unknown": (["--set", "run.backend=slurm"], {}, "run.backend must be one of local, ray"),
    "shared-prefix-with-chunks": (["--set", "grpo.shared_prefix=true", "--set", "grpo.logit_chunk=64"], {},
                                  "grpo.shared_prefix cannot be combined"),
}
if importlib.util.find_spec("vllm") is None:  # where vLLM is absent (the main environment on a CPU)
    CASES["vllm-not-installed"] = (["--set", "rollout.backend=vllm"], {}, "make vllm-env")


def _invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output


def _error_line(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    return lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_validate_and_run_refuse_the_same_configs_and_run_writes_nothing(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, files, fragment = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    for rel, text in files.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    config_args = [a for a in args if a.endswith(".yaml")]
    flag_args = [a for a in args if not a.endswith(".yaml")]
    code_v, out_v = _invoke(["validate", *config_args, *flag_args])
    run_args = ["run", *(["--config", *config_args] if config_args else []), *flag_args]
    code_r, out_r = _invoke(run_args)
    assert code_v == 2 and code_r == 2, (out_v, out_r)
    line_v, line_r = _error_line(out_v), _error_line(out_r)
    assert fragment in line_v, line_v
    assert line_v == line_r
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no results/, no cache


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
