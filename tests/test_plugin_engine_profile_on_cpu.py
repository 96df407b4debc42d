"""A plugin package adds a rollout engine and a whole third profile — its own model families, its own generated
benchmark suite and its own cohort — through entry points (``corl_bench.engines``, ``corl_bench.profiles``,
``corl_bench.families``, ``corl_bench.benchmarks``, ``corl_bench.cohorts``) with zero edits to corl-bench: they are
listed, validated against, trained with, evaluated and tabulated. The profile subclasses
:class:`corl_bench.profile.Profile` and overrides only what the contract requires (plus its default suite), so every
other hook runs on its documented default. The engine's weight-sync hook is called after every update of every agent.
"""

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
"""corl-plugin-toy: an engine that logs its weight syncs, and a third profile ("toy"): two tiny random models of its
own families, single-digit sums as its training stream and its generated suite toy-test, and the cohort toy-pair."""

import os
import random
from dataclasses import dataclass
from typing import ClassVar

from corl_bench.config import AgentSpec, CohortConfig, ConfigError
from corl_bench.eval.specs import spec_from_yaml
from corl_bench.profile import Profile
from corl_bench.rollout import Request
from corl_bench.rollout.hf import HFEngine


class CountingEngine(HFEngine):
    def sync_weights(self, model):
        with open(os.environ["TOY_SYNC_LOG"], "a") as f:
            f.write(f"{type(model).__name__}\\n")


@dataclass(frozen=True)
class ToyFamily:
    profile: ClassVar[str] = "toy"
    name: str
    arch: str
    seed: int


TOY_A, TOY_B = ToyFamily("toy-a", "Qwen2Config", 0), ToyFamily("toy-b", "LlamaConfig", 1)


@dataclass(frozen=True)
class Sum:
    id: str
    a: int
    b: int

    @property
    def answer(self):
        return str(self.a + self.b)

    def text(self, view):
        return f"{self.a}+{self.b}=" if view == "original" else f"{self.b} plus {self.a} is"


def sums(prefix, seed, n=None):
    rng, i = random.Random(seed), 0
    while n is None or i < n:
        yield Sum(f"{prefix}-{i}", rng.randrange(10), rng.randrange(10))
        i += 1


@dataclass(frozen=True)
class Item:
    id: str
    problem: Sum
    gold: str

    def prompt(self, view="original"):
        return self.problem.text(view) + "\\n"


TOY_TEST = spec_from_yaml("corl_plugin_toy:toy-test", """
name: toy-test
version: "1"
profile: toy
task: math
source: {generator: corl_plugin_toy, suite: toy-test, size: 6, seed: 7}
prompt: "{problem}\\n"
extractor: qwen
grader: math
decoding: {greedy: true, samples: 2, temperature: 1.0, top_p: 1.0, max_new_tokens: 6}
metrics: [greedy, avg@k, maj@k, pass@k]
""")
TOY_PAIR = CohortConfig(name="toy-pair", profile="toy", description="toy-a x toy-b",
                        agents=(AgentSpec("a0", "toy-a"), AgentSpec("a1", "toy-b", seed_offset=1)))


class BareProfile:  # the old open contract: no base class
    name = "bare"


class ToyProfile(Profile):
    name = "toy"

    @classmethod
    def check_agent(cls, agent):
        from corl_bench.registries import FAMILIES

        if agent.family not in FAMILIES or FAMILIES.get(agent.family).profile != cls.name:
            raise ConfigError(f"cohort agent {agent.name!r}: the toy profile has models toy-a, toy-b")

    @classmethod
    def default_benchmarks(cls):
        return ("toy-test",)

    def load(self, model, device=None):
        import torch
        import transformers

        from corl_bench.micro.families import build_tokenizer
        from corl_bench.registries import FAMILIES

        fam = FAMILIES.get(model)
        tok = build_tokenizer("char", ["0123456789+= plusi\\n\\\\boxed{}"])
        cfg = getattr(transformers, fam.arch)(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                              max_position_embeddings=64, bos_token_id=tok.bos_token_id,
                                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        torch.manual_seed(fam.seed)
        return transformers.AutoModelForCausalLM.from_config(cfg).eval(), tok

    def training_problems(self, seed):
        return sums("train", seed)

    def render(self, problem, view, model=None, prompt=""):
        return Request(text=problem.text(view) + "\\n")

    def benchmark(self, name):
        from corl_bench.registries import BENCHMARKS

        spec = BENCHMARKS.get(name)
        self.check_benchmark(name, spec)
        src = spec.source
        return [Item(p.id, p, p.answer) for p in sums(src.suite, src.seed, src.size)]
'''

ENTRY_POINTS = """[corl_bench.engines]
counting = corl_plugin_toy:CountingEngine

[corl_bench.profiles]
toy = corl_plugin_toy:ToyProfile
bare = corl_plugin_toy:BareProfile

[corl_bench.families]
toy-a = corl_plugin_toy:TOY_A
toy-b = corl_plugin_toy:TOY_B

[corl_bench.benchmarks]
toy-test = corl_plugin_toy:TOY_TEST

[corl_bench.cohorts]
toy-pair = corl_plugin_toy:TOY_PAIR
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


RUN = ["--method", "corl", "--steps", "2", "--set", "rollout.backend=counting", "--set", "cohort.name=toy-pair",
       "--set", "rollout.prompts_per_step=2", "--set", "rollout.samples_per_prompt=4",
       "--set", "rollout.max_new_tokens=8", "--set", "eval.max_problems=4", "--set", "eval.samples=2",
       "--set", "eval.max_new_tokens=8", "--set", "run.checkpoint_every=0"]


def test_the_plugin_engine_profile_families_suite_and_cohort_are_listed(site, tmp_path):
    out = {kind: _cli(["ls", kind], site, tmp_path) for kind in ("engines", "profiles", "families", "benchmarks",
                                                                 "cohorts")}
    assert all(r.returncode == 0 for r in out.values()), {k: r.stderr for k, r in out.items()}
    assert "counting" in out["engines"].stdout.split() and "hf" in out["engines"].stdout.split()
    assert "toy" in out["profiles"].stdout.split() and "micro" in out["profiles"].stdout.split()
    families = {line.split()[0]: line.split() for line in out["families"].stdout.splitlines() if line.strip()}
    assert "toy" in str(families.get("toy-a")) and "qwen2-bpe" in out["families"].stdout
    assert "toy-test" in out["benchmarks"].stdout and "toy-pair" in out["cohorts"].stdout


def test_validation_asks_the_plugin_profile(site, tmp_path):
    res = _cli(["validate", *RUN[4:]], site, tmp_path)  # the cohort says its profile; the profile its suite
    assert res.returncode == 0, res.stderr
    bad = [*RUN[4:], "--set", "model.profile=toy",
           "--set", "cohort.agents=[{name: a0, family: toy-a}, {name: a1, family: toy-c, seed_offset: 1}]"]
    res = _cli(["validate", *bad], site, tmp_path)
    assert res.returncode == 2 and "the toy profile has models" in res.stderr, res.stderr
    res = _cli(["validate", *RUN[4:], "--set", "eval.benchmarks=[gsm8k]"], site, tmp_path)
    assert res.returncode == 2 and "not a suite of the toy profile" in res.stderr, res.stderr  # the default check
    res = _cli(["validate", "--set", "model.profile=bare"], site, tmp_path)
    assert res.returncode == 2 and "make it subclass corl_bench.profile.Profile" in res.stderr, res.stderr
    res = _cli(["validate", "--set", "rollout.backend=countin"], site, tmp_path)
    assert res.returncode == 2 and "did you mean 'counting'" in res.stderr, res.stderr


@pytest.mark.slow
def test_a_run_trains_and_evaluates_with_the_plugin_engine_and_profile(site, tmp_path):
    res = _cli(["run", *RUN, "--output-dir", str(tmp_path / "runs")], site, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["profile"] == "toy"
    assert "- toy-test" in (run_dir / "config.yaml").read_text()  # the profile's default suite
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2 * 2
    syncs = (tmp_path / "syncs.log").read_text().splitlines()
    assert len(syncs) == 2 * 2  # after every update of every agent
    preds = sorted(run_dir.rglob("toy-test.jsonl"))  # base and final, each agent
    assert len(preds) == 4 and all(len(p.read_text().splitlines()) == 4 * (1 + 2) for p in preds)  # 4 items x (greedy + 2)
    table = _cli(["table", "--results-dir", str(tmp_path / "runs")], site, tmp_path)
    assert table.returncode == 0 and "toy-test" in table.stdout, table.stderr + table.stdout
