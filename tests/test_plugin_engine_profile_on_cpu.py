"""A throwaway rollout engine and a throwaway profile from a plugin package (entry points in the
``corl_bench.engines`` and ``corl_bench.profiles`` groups) are listed, validated against and trained with — no
edit to corl-bench. The engine's weight-sync hook is called after every update of every agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "corl-bench"

PLUGIN = '''
"""corl-plugin-toy: an engine that logs its weight syncs, and a profile of tiny random models on micro problems."""

import os

from corl_bench.config import ConfigError
from corl_bench.rollout import Request
from corl_bench.rollout.hf import HFEngine


class CountingEngine(HFEngine):
    def sync_weights(self, model):
        with open(os.environ["TOY_SYNC_LOG"], "a") as f:
            f.write(f"{type(model).__name__}\\n")


class ToyProfile:
    name = "toy"
    MODELS = {"toy-a": 0, "toy-b": 1}

    def __init__(self, model_cfg=None):
        self.model_cfg = model_cfg

    @classmethod
    def check_agent(cls, agent):
        if agent.family not in cls.MODELS:
            raise ConfigError(f"cohort agent {agent.name!r}: the toy profile has models {sorted(cls.MODELS)}")

    @classmethod
    def check_benchmark(cls, name, spec):
        if name != "micro-test":
            raise ConfigError(f"eval.benchmarks: the toy profile evaluates micro-test only (got {name!r})")

    def check_writable(self, models):
        return None

    def missing(self, models):
        return []

    def prepare(self, models, progress=None):
        return None

    def load(self, model):
        from tests.conftest import build_tiny

        return build_tiny("qwen2-bpe", seed=self.MODELS[model])

    def training_problems(self, seed):
        from corl_bench.micro.tasks import problem_stream

        return problem_stream(seed)

    def render(self, problem, view):
        from corl_bench.micro.warmstart import render_prompt

        return Request(text=render_prompt(problem.text(view)))

    def benchmark(self, name):
        from corl_bench.micro.profile import MicroProfile

        return MicroProfile(self.model_cfg).benchmark(name)
'''

ENTRY_POINTS = """[corl_bench.engines]
counting = corl_plugin_toy:CountingEngine

[corl_bench.profiles]
toy = corl_plugin_toy:ToyProfile
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """An 'installed' plugin distribution: the package and its dist-info (entry points) on a path of its own."""
    root = tmp_path_factory.mktemp("toy-site")
    (root / "corl_plugin_toy").mkdir()
    (root / "corl_plugin_toy" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "corl_plugin_toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: corl-plugin-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _env(site: Path, tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CORL_BENCH_CACHE"] = str(tmp / "cache")
    env["TOY_SYNC_LOG"] = str(tmp / "syncs.log")
    env["COLUMNS"] = "200"
    return env


def _cli(args: list[str], site: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], env=_env(site, tmp), cwd=tmp, capture_output=True, text=True,
                          timeout=600)


RUN = ["--method", "corl", "--steps", "2", "--set", "model.profile=toy", "--set", "rollout.backend=counting",
       "--set", "cohort.name=toy-pair",
       "--set", "cohort.agents=[{name: a0, family: toy-a}, {name: a1, family: toy-b, seed_offset: 1}]",
       "--set", "rollout.prompts_per_step=2", "--set", "rollout.samples_per_prompt=4",
       "--set", "rollout.max_new_tokens=8", "--set", "eval.max_problems=4", "--set", "eval.samples=2",
       "--set", "eval.max_new_tokens=8", "--set", "run.checkpoint_every=0"]


def test_the_plugin_engine_and_profile_are_listed(site, tmp_path):
    engines, profiles = _cli(["ls", "engines"], site, tmp_path), _cli(["ls", "profiles"], site, tmp_path)
    assert engines.returncode == 0 and profiles.returncode == 0, engines.stderr + profiles.stderr
    assert "counting" in engines.stdout.split() and "hf" in engines.stdout.split()
    assert "toy" in profiles.stdout.split() and "micro" in profiles.stdout.split()


def test_validation_asks_the_plugin_profile(site, tmp_path):
    bad = [a.replace("toy-b", "toy-c") for a in RUN if a not in ("--steps", "2")]
    res = _cli(["validate", *bad], site, tmp_path)
    assert res.returncode == 2 and "the toy profile has models" in res.stderr, res.stderr
    res = _cli(["validate", "--set", "rollout.backend=countin"], site, tmp_path)
    assert res.returncode == 2 and "did you mean 'counting'" in res.stderr, res.stderr


@pytest.mark.slow
def test_a_run_trains_with_the_plugin_engine_and_profile(site, tmp_path):
    res = _cli(["run", *RUN, "--output-dir", str(tmp_path / "runs")], site, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["profile"] == "toy"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2 * 2
    syncs = (tmp_path / "syncs.log").read_text().splitlines()
    assert len(syncs) == 2 * 2  # after every update of every agent
