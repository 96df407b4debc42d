"""One set of flags: validate takes every flag of run and prints the config run would run; one spelling per concept
(old spellings hidden, still working, with a deprecation line); --version; help on every option; method and cohort
names read case- and punctuation-insensitively; Ctrl-C prints the command that resumes; sweep --cell/--rerun; the
studies' version pins that ``make install`` applies."""

from __future__ import annotations

import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperOption
import yaml
from typer.testing import CliRunner

from corl_bench.cli import app
from corl_bench.config import ConfigError, dump_config, load_config
from corl_bench.registries import METHODS, Registry, RegistryError

REPO = Path(__file__).resolve().parents[1]
COMMAND = typer.main.get_command(app)


def _commands(group=COMMAND, prefix: str = "") -> dict:
    """Every leaf command of the app (typer ships its own click: its classes, not click's)."""
    out = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out.update(_commands(cmd, f"{prefix}{name} "))
        else:
            out[prefix + name] = cmd
    return out


def _flags(cmd, hidden: bool = False) -> set[str]:
    return {o for p in cmd.params if isinstance(p, TyperOption) and (hidden or not p.hidden)
            for o in (*p.opts, *p.secondary_opts)}


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args)


# ------------------------------------------------------------------ 1. validate takes what run takes
def test_validate_takes_every_flag_of_run():
    cmds = _commands()
    run, validate = _flags(cmds["run"], hidden=True), _flags(cmds["validate"], hidden=True)
    assert {"--steps", "--seed", "--output-dir", "--run-id", "--resume", "--fresh", "-b"} <= run
    assert validate - run == {"--elsewhere"}
    assert run <= validate


SETTINGS = ["-m", "Co-RL", "-c", "Cross-Family", "--steps", "2", "--seed", "3", "--run-id", "mine", "-b",
            "micro-test", "--set", "grpo.lr=1e-5"]


def test_validate_prints_the_config_run_would_run(tmp_path, monkeypatch):
    from corl_bench.train import runner

    ran = []
    monkeypatch.setattr(runner, "run", lambda cfg, **kw: ran.append(runner.resolve(cfg).config) or tmp_path)
    args = [*SETTINGS, "--output-dir", str(tmp_path / "runs")]
    assert _invoke(["run", *args]).exit_code == 0
    res = _invoke(["validate", *args])
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.stdout)
    assert printed == yaml.safe_load(dump_config(ran[0]))
    assert printed["method"]["name"] == "corl" and printed["cohort"]["name"] == "cross-family"
    assert printed["run"]["steps"] == 2 and printed["run"]["run_id"] == "mine"
    assert printed["eval"]["benchmarks"] == ["micro-test"]
    assert f"run would start a new run directory under {tmp_path / 'runs'}" in res.output


def test_validate_says_which_run_it_would_resume(tmp_path):
    from corl_bench.record import RunRecord
    from corl_bench.results import RunDir
    from corl_bench.train.runner import resolve

    args = [*SETTINGS, "--output-dir", str(tmp_path / "runs")]
    cfg = resolve(load_config(None, ["method.name=corl", "cohort.name=cross-family", "run.steps=2", "run.seed=3",
                                     "run.run_id=mine", "eval.benchmarks=[micro-test]", "grpo.lr=1e-5",
                                     f"run.output_dir={tmp_path / 'runs'}"])).config
    rd = RunDir(tmp_path / "runs" / "mine")
    rd.path.mkdir(parents=True)
    rd.config_path.write_text(dump_config(cfg))
    rd.write_record(RunRecord(run_id="mine", method="corl", cohort="cross-family", status="running"))
    assert f"run would resume the interrupted run {rd.path}" in _invoke(["validate", *args]).output
    assert "run would start a new run directory" in _invoke(["validate", *args, "--fresh"]).output
    res = _invoke(["validate", "--resume", str(rd.path)])
    assert res.exit_code == 0 and f"run would resume {rd.path} from its last checkpoint" in res.output
    res = _invoke(["validate", "--resume", str(rd.path), "--steps", "5"])
    assert res.exit_code == 2 and "cannot resume" in res.output and "run.steps (2 -> 5)" in res.output


# ------------------------------------------------------------------ 2. one spelling per concept
def test_one_spelling_per_concept_in_every_command():
    for name, cmd in _commands().items():
        shown = _flags(cmd)
        assert not shown & {"--out-dir", "--dest", "--json"}, f"{name}: an old spelling is visible"
        if "--out" in shown:
            assert "-o" in shown, f"{name}: --out without -o"
        if "--benchmarks" in shown or "--benchmark" in shown:
            assert "-b" in shown, f"{name}: no -b"
            assert {"--benchmarks", "--benchmark"} <= _flags(cmd, hidden=True), f"{name}: one spelling refused"


def test_the_old_table_spelling_still_works_with_a_deprecation_line(tmp_path, monkeypatch, caplog):
    from corl_bench.report import table

    seen = []
    monkeypatch.setattr(table, "main", lambda results_dir, **kw: seen.append(kw["out_dir"]))
    with caplog.at_level(logging.WARNING):
        assert _invoke(["table", "--out-dir", str(tmp_path / "a")]).exit_code == 0
    assert "--out-dir is deprecated; use --output-dir" in caplog.text
    assert _invoke(["table", "--output-dir", str(tmp_path / "b")]).exit_code == 0
    assert seen == [tmp_path / "a", tmp_path / "b"]
    res = _invoke(["table", "--output-dir", "x", "--out-dir", "y"])
    assert res.exit_code == 2 and "--output-dir x and --out-dir y disagree" in res.output


def test_data_prepare_takes_out_and_the_old_dest(tmp_path, monkeypatch, caplog):
    from corl_bench.eval import data

    seen = []
    monkeypatch.setattr(data, "prepare", lambda specs, dest, data_dir: seen.append((specs[0].name, dest))
                        or {"benchmarks": {}})
    assert _invoke(["data", "prepare", "-b", "gsm8k", "--out", str(tmp_path / "a")]).exit_code == 0
    with caplog.at_level(logging.WARNING):
        assert _invoke(["data", "prepare", "--benchmark", "gsm8k", "--dest", str(tmp_path / "b")]).exit_code == 0
    assert "--dest is deprecated; use --out" in caplog.text
    assert seen == [("gsm8k", tmp_path / "a"), ("gsm8k", tmp_path / "b")]
    res = _invoke(["data", "prepare", "-b", "gsm8k"])
    assert res.exit_code == 2 and "pass --benchmarks/-b and --out" in res.output


def test_probe_takes_one_benchmark_under_either_spelling():
    res = _invoke(["probe", "qwen2-bpe", "neox-bpe", "--benchmarks", "micro-test,gsm8k", "--from-predictions"])
    assert res.exit_code == 2 and "pass one benchmark with --benchmark/-b" in res.output


# ------------------------------------------------------------------ 3. --version
def test_version_prints_the_package_version_and_the_commit():
    from importlib.metadata import version

    res = _invoke(["--version"])
    assert res.exit_code == 0
    assert res.output.startswith(f"corl-bench {version('corl-bench')}")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert f"(git {head.stdout.strip()}" in res.output


# ------------------------------------------------------------------ 4. help everywhere
def test_every_option_and_argument_of_every_command_has_help():
    cmds = _commands()
    assert len(cmds) >= 10
    missing = [f"{name} {p.name}" for name, cmd in cmds.items() for p in cmd.params
               if not (getattr(p, "help", None) or "").strip()]
    assert missing == []
    assert (COMMAND.params and all(p.help for p in COMMAND.params))  # --version


# ------------------------------------------------------------------ 5. names
def test_method_and_cohort_names_ignore_case_and_punctuation(caplog):
    from corl_bench.train.runner import resolve

    assert METHODS.primary("Co-RL") == "corl" and METHODS.primary("GT_Reward") == "gt-reward"
    assert "co rl" in METHODS
    with caplog.at_level(logging.WARNING):
        cfg = resolve(load_config(None, ["method.name=Co-RL", "cohort.name=Cross-Family"])).config
    assert (cfg.method.name, cfg.cohort.name) == ("corl", "cross-family")
    assert "method 'Co-RL' read as 'corl'" in caplog.text and "cohort 'Cross-Family' read as 'cross-family'" \
        in caplog.text
    from corl_bench.train.session import default_run_id

    assert default_run_id(cfg).startswith("corl-cross-family-s0-")


def test_a_config_file_gets_the_registered_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("method: {name: GT_Reward}\ncohort: {name: SINGLE}\n")
    res = _invoke(["validate", str(path)])
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.stdout)
    assert (printed["method"]["name"], printed["cohort"]["name"]) == ("gt-reward", "single")


def test_an_ambiguous_name_is_an_error_naming_the_candidates():
    reg: Registry[int] = Registry("thing")
    reg.register("a-b", 1)
    reg.register("ab", 2)
    assert reg.get("A_B") == 1 and reg.get("AB") == 2  # an exact match wins
    with pytest.raises(RegistryError, match=r"thing 'a\.b' is ambiguous: it reads as 'a-b' or 'ab'"):
        reg.get("a.b")
    assert "a.b" not in reg
    with pytest.raises(RegistryError, match="unknown thing 'zz'"):
        reg.get("zz")


def _sweep(tmp_path: Path, **over) -> Path:
    spec = {"name": "names", "output_dir": str(tmp_path / "sweep"), "methods": ["Co-RL", "TTRL"],
            "cohorts": ["Cross-Family"], "seeds": [0],
            "set": {"model.cache_dir": str(tmp_path / "cache"), "run.steps": 1}, **over}
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_a_sweep_reads_names_as_registered_for_its_run_ids(tmp_path):
    from corl_bench.train.sweep import load_sweep, plan

    spec = load_sweep(_sweep(tmp_path, cells=[{"method": "corl", "cohort": "cross_family", "tag": "x"}]))
    assert spec.methods == ("corl", "ttrl") and spec.cohorts == ("cross-family",)
    cells, _ = plan(spec)
    assert [c.run_id for c in cells] == ["corl-cross-family-s0", "ttrl-cross-family-s0", "corl-cross-family-x-s0"]


# ------------------------------------------------------------------ 7. Ctrl-C
def test_ctrl_c_in_run_prints_the_command_that_resumes_it(tmp_path, monkeypatch):
    from corl_bench.record import RunRecord
    from corl_bench.results import RunDir
    from corl_bench.train import runner

    def interrupted(cfg, *, on_open=None, **kw):
        run_dir = tmp_path / "runs" / "mine"
        run_dir.mkdir(parents=True)
        RunDir(run_dir).config_path.write_text(dump_config(runner.resolve(cfg).config))
        RunDir(run_dir).write_record(RunRecord(run_id="mine", method="corl", cohort="cross-family", status="running"))
        on_open(run_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    res = _invoke(["run", *SETTINGS, "--output-dir", str(tmp_path / "runs")])
    assert res.exit_code == 2
    line = " ".join(res.output.split())
    command = re.search(r"Resume it from its last checkpoint with: (corl-bench run .*)$", line).group(1)
    assert shlex.split(command)[:3] == ["corl-bench", "run", "--resume"]
    resumed = []
    monkeypatch.setattr(runner, "run", lambda cfg, *, resume=None, **kw: resumed.append(resume) or resume)
    res = _invoke(shlex.split(command)[1:])  # what it prints really resumes that directory
    assert res.exit_code == 0, res.output
    assert resumed == [tmp_path / "runs" / "mine"]


def test_ctrl_c_before_a_run_directory_exists_says_nothing_was_written(monkeypatch):
    from corl_bench.train import runner

    def interrupted(cfg, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    res = _invoke(["run", "-m", "corl", "-c", "cross-family"])
    assert res.exit_code == 2 and "interrupted before training started" in res.output


def test_ctrl_c_in_a_sweep_prints_the_same_sweep_without_rerun(tmp_path, monkeypatch):
    from corl_bench.train import sweep

    def interrupted(spec, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    path = _sweep(tmp_path)
    res = _invoke(["sweep", str(path), "--cell", "corl-cross-family-s0", "--rerun", "--threads", "1"])
    assert res.exit_code == 2
    line = " ".join(res.output.split())
    assert f"corl-bench sweep {path} --threads 1 --cell corl-cross-family-s0" in line
    assert "--rerun" not in line.split("with:")[-1]


# ------------------------------------------------------------------ 9. sweep --cell / --rerun
def test_an_unknown_cell_is_an_error_listing_the_cells(tmp_path):
    path = _sweep(tmp_path)
    res = _invoke(["sweep", str(path), "--dry-run", "--cell", "corl-crossfamily-s0"])
    assert res.exit_code == 2
    line = " ".join(res.output.split())
    assert ("has no cell 'corl-crossfamily-s0'; did you mean 'corl-cross-family-s0'? its cells: "
            "corl-cross-family-s0, ttrl-cross-family-s0") in line
    res = _invoke(["sweep", str(path), "--dry-run", "--cell", "ttrl-cross-family-s0"])
    assert res.exit_code == 0 and res.stdout.split() == ["ttrl-cross-family-s0:", "new"]
    res = _invoke(["sweep", str(path), "--rerun"])
    assert res.exit_code == 2 and "name them with --cell" in res.output


def test_rerun_sets_the_old_cell_aside_and_runs_only_that_cell(tmp_path, monkeypatch):
    from corl_bench.record import RunRecord
    from corl_bench.results import RunDir, find_runs
    from corl_bench.train import sweep

    spec = sweep.load_sweep(_sweep(tmp_path, keep=str(tmp_path / "kept")))
    old = {}
    for root in (spec.output_dir, spec.keep):  # finished, with a config the sweep no longer gives it
        rd = RunDir(Path(root) / "runs" / "corl-cross-family-s0")
        rd.path.mkdir(parents=True)
        rd.config_path.write_text(dump_config(load_config(None, ["run.steps=99"])))
        rd.write_record(RunRecord(run_id=rd.name, method="corl", cohort="cross-family", status="finished"))
        (rd.path / "metrics.jsonl").write_text("{}\n")
        old[root] = rd
    with pytest.raises(ConfigError, match="finished cell .* ran with another config"):
        sweep.run_sweep(spec, only=["corl-cross-family-s0"])
    ran = []
    monkeypatch.setattr(sweep, "_run_cell", lambda spec, cell, out, *a: ran.append(cell.run_id))
    sweep.run_sweep(spec, only=["corl-cross-family-s0"], rerun=True)
    assert ran == ["corl-cross-family-s0"]
    for root, rd in old.items():
        assert not rd.path.exists()
        [aside] = (Path(root) / "replaced").iterdir()
        assert aside.name.startswith("corl-cross-family-s0-")
        assert (aside / "metrics.jsonl").read_text() == "{}\n"  # nothing lost
        assert (aside / sweep.REPLACED_RECORD).is_file() and not (aside / "run.json").exists()
        assert find_runs(root) == []  # tables do not count the old run


# ------------------------------------------------------------------ 6, 10. install: progress and pins
def test_make_install_shows_progress_and_pins_the_studies_versions():
    text = (REPO / "Makefile").read_text()
    recipe = text[text.index("$(VENV)/.installed:"):text.index("install: $(VENV)/.installed")]
    assert " -q " not in recipe
    assert re.search(r'echo "1/\d .*"', recipe)
    assert "-c constraints-study.txt -e \".[test]\"" in recipe and "$(CONSTRAINTS)" in recipe


def test_the_constraints_file_is_what_the_studies_recorded():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import lock_env
    finally:
        sys.path.remove(str(REPO / "scripts"))
    versions = lock_env.recorded_versions([REPO / r for r in lock_env.DEFAULT_RUNS])
    assert versions["transformers"] == "5.24.0" and "torch" not in versions
    assert (REPO / "constraints-study.txt").read_text() == lock_env.render(versions, list(lock_env.DEFAULT_RUNS))
