"""The project's registries: methods, cohorts, profiles, model families and benchmarks.

Nothing heavy is imported until a name is fetched: methods are discovered by importing the (torch-free) modules of
``corl_bench.trainers`` and ``corl_bench.baselines``, plus the ``corl_bench.methods`` entry-point group for
third-party packages; cohorts and benchmarks are YAML files; families and profiles are small records.
So ``corl-bench ls`` never imports torch.

Extra cohort YAML files can live in any directory listed in ``$CORL_BENCH_COHORTS`` (``os.pathsep``-separated).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from corl_bench.config import AgentSpec, CohortConfig, ConfigError
from corl_bench.registry import Registry


def cohort_from_yaml(path: Path | str, text: str | None = None) -> CohortConfig:
    """Parse one cohort file into a CohortConfig (one-line ConfigError on a bad file)."""
    text = Path(path).read_text(encoding="utf-8") if text is None else text
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"cohort file {path} is not valid YAML; fix its syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list) or not data.get("name"):
        raise ConfigError(f"cohort file {path} needs a name and a list of agents (name, family, view, seed_offset)")
    try:
        agents = tuple(AgentSpec(**a) for a in data["agents"])
    except TypeError as e:
        raise ConfigError(f"cohort file {path}: bad agent entry ({e}); each agent needs name and family") from None
    return CohortConfig(name=str(data["name"]), agents=agents, profile=str(data.get("profile", "micro")),
                        description=str(data.get("description", "")))


def _load_builtin_cohorts(reg: Registry[CohortConfig]) -> None:
    files = [(f.name, f.read_text(encoding="utf-8")) for f in resources.files("corl_bench.cohorts").iterdir()
             if f.name.endswith(".yaml")]
    for extra in filter(None, os.environ.get("CORL_BENCH_COHORTS", "").split(os.pathsep)):
        files += [(str(p), p.read_text(encoding="utf-8")) for p in sorted(Path(extra).glob("*.yaml"))]
    for name, text in sorted(files):
        cohort = cohort_from_yaml(name, text)
        reg.register(cohort.name, cohort)


def _load_builtin_benchmarks(reg: Registry[dict[str, Any]]) -> None:
    for f in sorted(resources.files("corl_bench.benchmarks").iterdir(), key=lambda f: f.name):
        if f.name.endswith(".yaml"):
            spec = yaml.safe_load(f.read_text(encoding="utf-8"))
            reg.register(spec["name"], spec)


def _load_micro_families(reg: Registry[Any]) -> None:
    from corl_bench.micro.families import BUILTIN_FAMILIES  # pure Python, no torch

    for name, fam in BUILTIN_FAMILIES.items():
        reg.register(name, fam)


METHODS: Registry[Any] = Registry("method", discover=("corl_bench.trainers", "corl_bench.baselines"),
                                  entry_point_group="corl_bench.methods")
COHORTS: Registry[CohortConfig] = Registry("cohort", loaders=(_load_builtin_cohorts,))
BENCHMARKS: Registry[dict[str, Any]] = Registry("benchmark", loaders=(_load_builtin_benchmarks,))
FAMILIES: Registry[Any] = Registry("model family", loaders=(_load_micro_families,))
PROFILES: Registry[Any] = Registry("profile")
PROFILES.register_lazy("micro", "corl_bench.micro.profile:MicroProfile")
