"""One run end to end: resolve and validate the config, build agents, evaluate, train, evaluate, summarise.

``resolve`` does every check that can fail *before* anything is written, so a bad method, cohort, option or field
leaves ``results/`` untouched.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_bench.config import Config, ConfigError, dump_config
from corl_bench.registries import BENCHMARKS, COHORTS, FAMILIES, METHODS, PROFILES
from corl_bench.registry import RegistryError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    config: Config  # cohort expanded
    method_cls: type
    options: Any


def _lookup(registry: Any, name: str, field: str) -> Any:
    try:
        return registry.get(name)
    except RegistryError as e:
        raise ConfigError(f"{field}: {e}") from None


def resolve(cfg: Config) -> Plan:
    """Validate everything that involves registries; return the resolved plan. Writes nothing."""
    _lookup(PROFILES, cfg.model.profile, "model.profile")
    method_cls = _lookup(METHODS, cfg.method.name, "method.name")
    cohort = cfg.cohort
    if not cohort.agents:
        cohort = _lookup(COHORTS, cohort.name, "cohort.name")
    if cohort.profile and cohort.profile != cfg.model.profile:
        raise ConfigError(f"cohort {cohort.name!r} is defined for profile {cohort.profile!r}, not "
                          f"{cfg.model.profile!r}; pick a cohort of that profile (corl-bench ls cohorts)")
    for agent in cohort.agents:
        _lookup(FAMILIES, agent.family, f"cohort agent {agent.name!r} family")
    method_cls.check_cohort(cohort.agents, cohort.name)
    options = method_cls.parse_options(cfg.method.options)
    method_cls(options, cohort.agents).generation_n(cfg.rollout.samples_per_prompt)  # option/rollout consistency
    for b in cfg.eval.benchmarks:
        spec = _lookup(BENCHMARKS, b, "eval.benchmarks")
        if spec.get("profile", cfg.model.profile) != cfg.model.profile:
            raise ConfigError(f"eval.benchmarks: {b!r} belongs to profile {spec.get('profile')!r}, not "
                              f"{cfg.model.profile!r}")
    return Plan(cfg.replace(cohort=cohort), method_cls, options)


def default_run_id(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{cfg.method.name}-{cfg.cohort.name}-s{cfg.run.seed}-{stamp}"


def run(cfg: Config, *, console: Any = None) -> Path:
    """Train and evaluate one (method, cohort, seed) cell; returns the run directory."""
    import torch

    from corl_bench.agent import Agent
    from corl_bench.evaluation import eval_seed, evaluate, n_generations
    from corl_bench.progress import RunProgress, summary_table
    from corl_bench.results import environment_record, new_run_dir, now_iso, write_json
    from corl_bench.trainer import Trainer

    plan = resolve(cfg)
    cfg = plan.config
    torch.set_num_threads(cfg.model.threads or (os.cpu_count() or 1))
    torch.manual_seed(cfg.run.seed)
    run_dir = new_run_dir(Path(cfg.run.output_dir), cfg.run.run_id or default_run_id(cfg))
    started = time.time()
    (run_dir / "config.yaml").write_text(dump_config(cfg), encoding="utf-8")
    write_json(run_dir / "env.json", environment_record(cfg.run.seed))
    info = {"run_id": run_dir.name, "method": cfg.method.name, "cohort": cfg.cohort.name,
            "profile": cfg.model.profile, "seed": cfg.run.seed, "status": "running", "started_at": now_iso(),
            "agents": [{"name": a.name, "family": a.family, "view": a.view} for a in cfg.cohort.agents],
            "steps": cfg.run.steps, "phases": [], "timings": {}}
    write_json(run_dir / "run.json", info)
    profile = PROFILES.get(cfg.model.profile)(cfg.model)
    try:
        with RunProgress(console) as prog:
            t0 = time.perf_counter()
            families = [a.family for a in cfg.cohort.agents]
            prog.warm_start(profile, families)
            agents = [Agent(spec, *profile.load(spec.family), cfg.grpo, backend=cfg.rollout.backend,
                            temperature=cfg.rollout.temperature, teacher=plan.method_cls.teacher)
                      for spec in cfg.cohort.agents]
            method = plan.method_cls(plan.options, cfg.cohort.agents)
            info["teachers"] = method.teachers()
            info["timings"]["models"] = time.perf_counter() - t0
            benches = {b: (str(BENCHMARKS.get(b).get("version", "0")), profile.benchmark(b))
                       for b in cfg.eval.benchmarks}
            total_gen = sum(n_generations(cfg.eval, len(items)) for _, items in benches.values()) * len(agents)
            scores: dict[str, dict[str, Any]] = {}

            def run_eval(phase: str) -> None:
                t = time.perf_counter()
                task = prog.add(f"eval {phase}", total_gen)
                for a in agents:
                    scores.setdefault(phase, {})[a.name] = evaluate(
                        a, benches, cfg.eval, out_dir=run_dir / "eval" / phase / a.name,
                        seed=eval_seed(cfg.run.seed, a.spec.seed_offset), progress=lambda n: prog.advance(task, n))
                info["phases"].append(phase)
                info["timings"][f"eval_{phase}"] = time.perf_counter() - t
                write_json(run_dir / "run.json", info)

            if cfg.eval.before:
                run_eval("base")
            trainer = Trainer(cfg, agents, method, profile, run_dir)
            t = time.perf_counter()
            task = prog.add("train", cfg.run.steps)
            history = []
            for step in range(cfg.run.steps):
                result = trainer.step(step)
                trainer.write(result)
                history.append(result.metrics)
                prog.advance(task, 1, status=_status_line(result.metrics))
            info["timings"]["train"] = time.perf_counter() - t
            run_eval("final")
            if cfg.run.save_checkpoints:
                for a in agents:
                    a.save(run_dir / "checkpoints" / "final" / a.name)
    except BaseException as e:
        info.update(status="failed", error=f"{type(e).__name__}: {e}", finished_at=now_iso(),
                    wall_seconds=time.time() - started)
        write_json(run_dir / "run.json", info)
        raise
    info.update(status="finished", finished_at=now_iso(), wall_seconds=time.time() - started)
    write_json(run_dir / "run.json", info)
    summary_table(console, info, scores, history)
    return run_dir


def _status_line(metrics: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for name, m in metrics.items():
        lab = m.get("label/accuracy")
        parts.append(f"{name.split('-')[0]} r={m['reward/mean']:.2f}" + (f" lbl={lab:.2f}" if lab is not None else ""))
    return "  ".join(parts)
