"""A value the user writes is the value that runs (issue 38, item 1).

A profile's defaults (the hf profile's CPU sizes, its default suites, its memory fit; a cohort's profile) fill only
the keys nobody set. Before, "unset" was decided by comparing a value with the global default, so the real-model
study's ``rollout.samples_per_prompt: 8`` (equal to the global default) ran as the CPU default 4. Checked here through
every way a value is written — a config file, a sweep's ``set:``, a cell's ``set:``, ``--set`` and a flag — and that a
sweep's resolved cell config equals what ``validate`` prints for the same cell, and that a sweep refuses to count a
finished cell that ran with another config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from corl_bench.config import Config, ConfigError, RolloutConfig, dump_config, load_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


@pytest.fixture()
def hf_sets(tiny_folder, tmp_path, monkeypatch) -> list[str]:
    """An hf run on the CPU with one tiny agent and the fixtures' data; nothing else set."""
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    return ["method.name=ttrl", "cohort.name=mine", "cohort.profile=hf",
            f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]", "eval.benchmarks=[gsm8k]",
            f"data.data_dir={FIXTURES}", "data.train=gsm8k-train", f"run.output_dir={tmp_path / 'runs'}"]


def _resolve(cfg: Config):
    from corl_bench.train.runner import resolve

    return resolve(cfg)


def test_an_unset_key_takes_the_profiles_cpu_default_and_an_explicit_default_value_is_kept(hf_sets):
    assert RolloutConfig().samples_per_prompt == 8  # the global default the study wrote explicitly
    unset = _resolve(load_config(None, hf_sets))
    assert unset.config.rollout.samples_per_prompt == 4  # the hf profile's CPU default fills the unset key
    assert any(n.startswith("rollout.samples_per_prompt=4 ") and "was not set" in n for n in unset.notes)
    written = _resolve(load_config(None, [*hf_sets, "rollout.samples_per_prompt=8", "eval.samples=4"]))
    assert written.config.rollout.samples_per_prompt == 8 and written.config.eval.samples == 4
    assert not any(n.startswith(("rollout.samples_per_prompt", "eval.samples=")) for n in written.notes)
    assert written.config.rollout.prompts_per_step == 8 and written.config.eval.max_problems == 10  # others: filled


def test_a_config_file_keeps_an_explicit_default_value(hf_sets, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rollout: {samples_per_prompt: 8, max_new_tokens: 256}\neval: {max_problems: 0}\n")
    cfg = _resolve(load_config(path, hf_sets)).config
    assert (cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens, cfg.eval.max_problems) == (8, 256, 0)
    assert cfg.rollout.prompts_per_step == 8  # not written: the CPU default


def test_the_memory_fit_and_the_default_suites_leave_what_was_written(hf_sets):
    fitted = _resolve(load_config(None, hf_sets))
    assert fitted.config.memory.micro_batch > 0 and any("memory.micro_batch=" in n for n in fitted.notes)
    kept = _resolve(load_config(None, [*hf_sets, "memory.micro_batch=0"]))
    assert kept.config.memory.micro_batch == 0 and not any("memory.micro_batch=" in n for n in kept.notes)
    suites = [s for s in hf_sets if not s.startswith("eval.benchmarks")]
    from corl_bench.errors import checking_for_elsewhere

    from corl_bench.hf.profile import CPU_BENCHMARKS, MATH_SUITE

    assert _resolve(load_config(None, suites)).config.eval.benchmarks == CPU_BENCHMARKS  # unset: the CPU's suite
    with checking_for_elsewhere():  # the fixtures hold gsm8k only: a missing suite copy is a warning here
        written = _resolve(load_config(None, [*suites, f"eval.benchmarks=[{','.join(MATH_SUITE)}]"]))
    assert written.config.eval.benchmarks == MATH_SUITE  # written equal to the profile's own suite: kept
    with pytest.raises(ConfigError, match="micro-profile suite"):  # micro-test is the global default, but written
        _resolve(load_config(None, [*suites, "eval.benchmarks=[micro-test]"]))


def test_a_written_profile_is_not_replaced_by_the_cohorts(hf_sets):
    assert _resolve(load_config(None, hf_sets)).config.model.profile == "hf"  # unset: the cohort's profile
    with pytest.raises(ConfigError, match="defined for profile 'hf', not 'micro'"):
        _resolve(load_config(None, [*hf_sets, "model.profile=micro"]))


def test_set_keys_record_every_written_key_and_are_never_dumped(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("grpo: {lr: 1.0e-6, micro_batch: 2}\nrollout: {engine_options: {prefix_cache: true}}\n")
    cfg = load_config(path, ["run.steps=3", "method.options.vote_k=4"])
    assert cfg.set_keys == {"grpo.lr", "memory.micro_batch", "rollout.engine_options", "run.steps", "method.options"}
    assert "set_keys" not in cfg.to_dict() and "set_keys" not in dump_config(cfg)
    assert load_config(None, ["run.steps=50"]) == load_config(None, [])
    with pytest.raises(ConfigError, match="set_keys"):
        load_config(None, ["set_keys=[run.steps]"])


def test_a_config_built_in_code_counts_a_non_default_value_as_set():
    cfg = Config(rollout=RolloutConfig(samples_per_prompt=2))
    assert cfg.is_set("rollout.samples_per_prompt") and not cfg.is_set("rollout.prompts_per_step")
    assert cfg.replace(set_keys=frozenset({"rollout.prompts_per_step"})).is_set("rollout.prompts_per_step")


def _sweep(tmp_path: Path, sets: dict, cells: list | None = None) -> Path:
    spec = {"name": "explicit", "output_dir": str(tmp_path / "sweep"), "methods": ["ttrl"], "cohorts": ["mine"],
            "seeds": [0], "set": sets, **({"cells": cells} if cells else {})}
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(spec))
    return path


def _split(sets: list[str]) -> dict:
    return {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in sets)}


def test_a_sweep_keeps_an_explicit_default_value_and_its_cell_config_is_what_validate_prints(hf_sets, tmp_path,
                                                                                              monkeypatch):
    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.train.sweep import Cell, cell_config, load_sweep

    base = {k: v for k, v in _split(hf_sets).items() if k not in ("method.name", "cohort.name")}
    spec = load_sweep(_sweep(tmp_path, {**base, "rollout.samples_per_prompt": 8}, cells=[
        {"method": "ttrl", "cohort": "mine", "tag": "k8", "set": {"rollout.max_new_tokens": 256}}]))
    plain = _resolve(cell_config(spec, Cell("ttrl", "mine", 0))).config
    tagged = _resolve(cell_config(spec, Cell("ttrl", "mine", 0, "k8", (("rollout.max_new_tokens", 256),)))).config
    assert plain.rollout.samples_per_prompt == 8 and plain.rollout.max_new_tokens == 128  # sweep set / CPU default
    assert tagged.rollout.samples_per_prompt == 8 and tagged.rollout.max_new_tokens == 256  # the cell's set: kept
    cell = Cell("ttrl", "mine", 0)
    args = ["validate", "--method", "ttrl", "--cohort", "mine"]
    for key, value in {**spec.set, "run.seed": 0, "run.output_dir": str(Path(spec.output_dir) / "runs"),
                       "run.run_id": cell.run_id}.items():
        args += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    printed = res.output[:res.output.index("hf profile:")]
    assert yaml.safe_load(printed) == yaml.safe_load(dump_config(plain))
    assert "rollout.max_new_tokens=128 (its CPU default; rollout.max_new_tokens was not set)" in res.output


def test_a_flag_is_a_written_key(hf_sets):
    from corl_bench.cli_flags import RunFlags, load_run_config

    cfg = load_run_config(RunFlags(method="ttrl", cohort="mine", seed=0, steps=50, set_=tuple(hf_sets[2:])))
    assert {"method.name", "cohort.name", "run.seed", "run.steps"} <= cfg.set_keys


def test_a_sweep_refuses_a_finished_cell_that_ran_with_another_config(hf_sets, tmp_path):
    from corl_bench.record import RunRecord
    from corl_bench.results import RunDir
    from corl_bench.train.sweep import check_finished, load_sweep, plan

    base = {k: v for k, v in _split(hf_sets).items() if k not in ("method.name", "cohort.name")}
    spec = load_sweep(_sweep(tmp_path, {**base, "rollout.samples_per_prompt": 8, "run.steps": 1}))
    cells, _ = plan(spec)
    from corl_bench.train.sweep import cell_config

    ran = _resolve(cell_config(spec, cells[0])).config
    run = RunDir(Path(spec.output_dir) / "runs" / cells[0].run_id)
    run.path.mkdir(parents=True)
    run.config_path.write_text(dump_config(ran))
    run.write_record(RunRecord(run_id=cells[0].run_id, method="ttrl", cohort="mine", status="finished"))
    check_finished(spec, cells)  # the same config: counted as finished
    as_before = ran.replace(rollout=RolloutConfig(**{**ran.to_dict()["rollout"], "samples_per_prompt": 4}))
    run.config_path.write_text(dump_config(as_before))  # what the bug ran: 4 samples where the sweep says 8
    with pytest.raises(ConfigError) as e:
        check_finished(spec, cells)
    assert "\n" not in str(e.value) and "rollout.samples_per_prompt (4 -> 8)" in str(e.value)
