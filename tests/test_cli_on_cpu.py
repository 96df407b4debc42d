"""Tests for the ``corl-bench`` command line, run as the installed console script in a subprocess.

Every command runs in its own empty working directory so a test can check that a rejected ``run`` wrote nothing (no ``results/``).
No test trains a model: every ``run`` here is rejected by ``resolve`` before torch work starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

CLI = Path(sys.executable).parent / "corl-bench"
TIMEOUT = 60  # each call takes ~1-5 s (a config that reaches GRPOConfig imports torch); this only guards a hang

GOOD_YAML = "method:\n  name: corl\ncohort:\n  name: cross-family\nrun:\n  steps: 3\n"
NO_TORCH = ("import sys; from typer.testing import CliRunner; from corl_bench.cli import app; "
            "r = CliRunner().invoke(app, ['ls',{kind!r}]); assert r.exit_code == 0, r.output; "
            "assert 'torch' not in sys.modules; print('ok')")
NO_TORCH_ALL = ("import sys; from typer.testing import CliRunner; from corl_bench.cli import app; "
                "rs = [CliRunner().invoke(app, ['ls', k]) for k in ('methods', 'cohorts', 'benchmarks', 'families', "
                "'profiles')]; assert all(r.exit_code == 0 for r in rs), [r.output for r in rs]; "
                "assert 'torch' not in sys.modules; print('ok')")

# Every subprocess of this module: name -> (argv after the program, files to create in its empty cwd).
# A list starting with "-c" runs the venv's python instead of corl-bench. They all run concurrently once, in the
# module-scoped ``cli`` fixture (each takes seconds, mostly torch's import), and the tests check the results.
CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "run-method-nope": (["run", "--method", "nope"], {}),
    "run-cohort-nope": (["run", "--cohort", "nope"], {}),
    "run-bad-lr": (["run", "--set", "grpo.lr=-1"], {}),
    "run-corl-single": (["run", "-m", "corl", "-c", "single", "--output-dir", "out", "--steps", "1"], {}),
    "run-options-scalar": (["run", "--set", "method.options=5"], {}),
    "validate-good": (["validate", "cfg.yaml", "--set", "rollout.prompts_per_step=4"], {"cfg.yaml": GOOD_YAML}),
    "validate-malformed": (["validate", "bad.yaml"], {"bad.yaml": "run: [1,\n  steps: 3\n"}),
    "validate-list": (["validate", "list.yaml"], {"list.yaml": "- run\n- grpo\n"}),
    "validate-missing": (["validate", "missing.yaml"], {}),
    "validate-typo": (["validate", "--set", "grpo.lrr=1"], {}),
    "ls-methods": (["ls", "methods"], {}),
    "ls-cohorts": (["ls", "cohorts"], {}),
    "ls-benchmarks": (["ls", "benchmarks"], {}),
    "ls-families": (["ls", "families"], {}),
    "ls-profiles": (["ls", "profiles"], {}),
    "ls-nope": (["ls", "nope"], {}),
    "table-empty": (["table", "--results-dir", "empty-results"], {"empty-results/.keep": ""}),
    "table-bad-metric": (["table", "--results-dir", ".", "--metrics", "greedy,bogus"], {}),
    "no-torch-methods": (["-c", NO_TORCH.format(kind="methods")], {}),  # the exact check of the brief
    "no-torch-all-kinds": (["-c", NO_TORCH_ALL], {}),
}


@dataclass(frozen=True)
class Result:
    cwd: Path
    returncode: int
    stdout: str
    stderr: str


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["COLUMNS"] = "250"  # rich tables: no truncated names
    env["CORL_BENCH_CACHE"] = str(home / "cache")  # never touch the user's model cache
    env.pop("CORL_BENCH_COHORTS", None)
    env["NO_COLOR"] = "1"
    return env


def _launch(name: str, root: Path) -> Result:
    args, files = CASES[name]
    cwd = root / name
    cwd.mkdir()
    for rel, text in files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(text, encoding="utf-8")
    argv = [sys.executable, *args] if args[0] == "-c" else [str(CLI), *args]
    proc = subprocess.run(argv, cwd=cwd, env=_env(root), capture_output=True, text=True, timeout=TIMEOUT)
    return Result(cwd, proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    root = tmp_path_factory.mktemp("cli")
    workers = min(8, max(2, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(_launch, name, root) for name in CASES}
        return {name: f.result() for name, f in futures.items()}


def _error_line(res: Result) -> str:
    """The single line the CLI writes to stderr on a rejected command."""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line error on stderr, got:\n{res.stderr}"
    assert lines[0].startswith("error:"), lines[0]
    assert "Traceback" not in res.stderr
    return lines[0]


def _assert_wrote_nothing(res: Result, *inputs: str) -> None:
    assert not (res.cwd / "results").exists()
    written = sorted(p.name for p in res.cwd.iterdir())
    assert written == sorted(inputs), f"files written: {written}"


def test_console_script_is_installed() -> None:
    assert CLI.is_file(), f"{CLI} missing; install the project (pip install -e .)"


# ----------------------------------------------------------------------------------------------- run: fail fast
def test_run_with_unknown_method_exits_2_naming_valid_methods_and_writes_nothing(cli: dict[str, Result]) -> None:
    res = cli["run-method-nope"]
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert "'nope'" in line
    for name in ("corl", "gt-reward", "ttrl"):
        assert name in line
    assert res.stdout == ""
    _assert_wrote_nothing(res)


def test_run_with_unknown_cohort_exits_2_naming_valid_cohorts_and_writes_nothing(cli: dict[str, Result]) -> None:
    res = cli["run-cohort-nope"]
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert "'nope'" in line
    for name in ("cross-family", "same-family", "single", "three-agent"):
        assert name in line
    _assert_wrote_nothing(res)


def test_run_with_bad_set_value_exits_2_naming_the_field_and_writes_nothing(cli: dict[str, Result]) -> None:
    res = cli["run-bad-lr"]
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert "grpo.lr" in line and "set" in line
    _assert_wrote_nothing(res)


def test_run_with_method_cohort_mismatch_exits_2_and_writes_nothing(cli: dict[str, Result]) -> None:
    res = cli["run-corl-single"]
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert "'corl'" in line and "cohort with more agents, such as cross-family" in line
    _assert_wrote_nothing(res)


def test_run_with_non_mapping_method_options_exits_2_with_one_line(cli: dict[str, Result]) -> None:
    res = cli["run-options-scalar"]
    assert res.returncode == 2, res.stderr
    assert "method.options" in _error_line(res)
    _assert_wrote_nothing(res)


# ----------------------------------------------------------------------------------------------- validate
def test_validate_prints_the_resolved_config_and_valid(cli: dict[str, Result]) -> None:
    res = cli["validate-good"]
    assert res.returncode == 0, res.stderr
    resolved = yaml.safe_load(res.stdout)
    assert resolved["method"]["name"] == "corl"
    assert resolved["run"]["steps"] == 3
    assert resolved["rollout"]["prompts_per_step"] == 4
    assert resolved["cohort"]["name"] == "cross-family"
    assert [a["family"] for a in resolved["cohort"]["agents"]] == ["qwen2-bpe", "llama-bpe"]
    assert [a["name"] for a in resolved["cohort"]["agents"]] == ["a0-qwen2-bpe", "a1-llama-bpe"]
    assert "valid" in res.stderr
    assert "2 agent(s)" in res.stderr
    assert "error" not in res.stderr
    _assert_wrote_nothing(res, "cfg.yaml")  # validate writes nothing


def test_validate_on_malformed_yaml_exits_2_with_one_line(cli: dict[str, Result]) -> None:
    res = cli["validate-malformed"]
    assert res.returncode == 2, res.stderr
    line = _error_line(res)
    assert "not valid YAML" in line and "bad.yaml" in line
    assert res.stdout == ""


def test_validate_on_a_yaml_list_exits_2_with_one_line(cli: dict[str, Result]) -> None:
    res = cli["validate-list"]
    assert res.returncode == 2, res.stderr
    assert "mapping" in _error_line(res)


def test_validate_on_a_missing_file_exits_2_with_one_line(cli: dict[str, Result]) -> None:
    res = cli["validate-missing"]
    assert res.returncode == 2, res.stderr
    assert "does not exist" in _error_line(res)


def test_validate_with_unknown_key_suggests_the_close_one(cli: dict[str, Result]) -> None:
    res = cli["validate-typo"]
    assert res.returncode == 2, res.stderr
    assert "did you mean grpo.lr?" in _error_line(res)


# ----------------------------------------------------------------------------------------------- ls
@pytest.mark.parametrize("kind, names", [
    ("methods", ["corl", "gt-reward", "ttrl"]),
    ("cohorts", ["cross-family", "cross-family-rephrased", "same-family", "single", "three-agent"]),
    ("benchmarks", ["micro-test", "micro-dev"]),
    ("families", ["qwen2-bpe", "llama-bpe", "neox-bpe"]),
    ("profiles", ["micro"]),
])
def test_ls_lists_the_registered_names(cli: dict[str, Result], kind: str, names: list[str]) -> None:
    res = cli[f"ls-{kind}"]
    assert res.returncode == 0, res.stderr
    for name in names:
        assert name in res.stdout, f"{name} missing from `ls {kind}`:\n{res.stdout}"
    _assert_wrote_nothing(res)


def test_ls_families_shows_each_flaw(cli: dict[str, Result]) -> None:
    for flaw in ("no-carry", "skip-last", "no-borrow"):
        assert flaw in cli["ls-families"].stdout


def test_ls_with_unknown_kind_exits_2(cli: dict[str, Result]) -> None:
    res = cli["ls-nope"]
    assert res.returncode == 2
    line = _error_line(res)
    assert "'nope'" in line
    for kind in ("methods", "cohorts", "benchmarks", "families"):
        assert kind in line


@pytest.mark.parametrize("case", ["no-torch-methods", "no-torch-all-kinds"])
def test_ls_never_imports_torch(cli: dict[str, Result], case: str) -> None:
    res = cli[case]
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "ok"


# ----------------------------------------------------------------------------------------------- table
def test_table_on_an_empty_results_dir_says_there_are_no_runs(cli: dict[str, Result]) -> None:
    res = cli["table-empty"]
    assert res.returncode == 0, res.stderr
    assert "No runs found" in res.stdout
    assert [p.name for p in (res.cwd / "empty-results").iterdir()] == [".keep"]  # no table.md / table.csv


def test_table_with_unknown_metric_exits_2(cli: dict[str, Result]) -> None:
    res = cli["table-bad-metric"]
    assert res.returncode == 2
    line = _error_line(res)
    assert "bogus" in line and "pass_k" in line


def test_eval_help_says_it_takes_hub_ids_and_folders_of_any_vlm() -> None:
    from typer.testing import CliRunner

    from corl_bench.cli import app

    res = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 0, res.output
    for said in ("hub id owner/name", "optionally @revision", "vision-language model", "its own processor",
                 "a model entry (smol, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)",
                 "micro family", "run directory"):
        assert said in text, said
