"""``corl-bench eval``: score a run's agents, a checkpoint folder or a named model on benchmark specs.

Targets:

* a run directory (holds ``run.json``): every agent's ``checkpoints/final/<agent>`` (``--phase final``) or its base
  model (``--phase base``: the micro family checkpoint); predictions go to ``<run>/eval/<phase>/<agent>/``, next to
  the micro evaluation, so ``corl-bench table`` shows the new benchmarks as more columns of the same rows;
  ``RUN_DIR:agent`` picks one agent (by name, or by family when exactly one agent has it);
* anything :func:`corl_bench.eval.models.load_model` understands (a ``save_pretrained`` folder, ``smol``, a micro
  family): predictions go to ``<out>/eval/final/<name>/`` with a ``run.json`` of method ``base``, so the model
  appears as a Base row in ``corl-bench table``.

Each agent directory keeps ``eval_manifest.json``: per benchmark, its version and the decoding used. Resuming with
different decoding is refused (the rows would mix protocols).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from corl_bench.eval.specs import BenchmarkSpec, Decoding, get_spec
from corl_bench.config import ConfigError
from corl_bench.results import atomic_write_text, environment_record, now_iso, write_json

log = logging.getLogger(__name__)
MANIFEST = "eval_manifest.json"


def run_target(target: str) -> tuple[Path, str | None] | None:
    """``(run directory, agent or None)`` when ``target`` is a run directory or ``RUN_DIR:agent``; else None."""
    path = Path(target)
    if (path / "run.json").is_file():
        return path, None
    if ":" in target:
        run, agent = target.rsplit(":", 1)
        if agent and (Path(run) / "run.json").is_file():
            return Path(run), agent
    return None


def select_agents(run: Path, info: dict[str, Any], agent: str | None) -> list[dict[str, Any]]:
    """The run's agents, or the one named ``agent`` (an agent name, or a family only one agent has)."""
    agents = list(info.get("agents", []))
    if agent is None:
        return agents
    exact = [a for a in agents if a.get("name") == agent]
    by_family = [a for a in agents if a.get("family") == agent]
    if exact or len(by_family) == 1:
        return exact or by_family
    names = ", ".join(str(a.get("name")) for a in agents)
    if by_family:
        raise ConfigError(f"{run}: {len(by_family)} agents have family {agent} ({names}); name one: {run}:<agent>")
    raise ConfigError(f"{run} has no agent {agent!r}; its agents: {names}")


def targets(target: str, phase: str, out: Path | None) -> list[tuple[str, str, Path]]:
    """(agent name, model reference, predictions dir) for every model to evaluate."""
    path = Path(target)
    run = run_target(target)
    if run is not None:
        path = run[0]
        info = json.loads((path / "run.json").read_text(encoding="utf-8"))
        found = []
        for agent in select_agents(path, info, run[1]):
            ref = (str(path / "checkpoints" / "final" / agent["name"]) if phase == "final" else agent["family"])
            if phase == "final" and not Path(ref).is_dir():
                raise ConfigError(f"{path}: agent {agent['name']} has no final checkpoint ({ref}); was the run "
                                  "finished with run.save_checkpoints?")
            found.append((agent["name"], ref, path / "eval" / phase / agent["name"]))
        return found
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.name if path.exists() else target).strip("-") or "model"
    root = out or Path("results") / "evals" / name
    return [(name, target, root / "eval" / "final" / name)]


def _write_base_run(root: Path, name: str, ref: str, seed: int) -> None:
    """A run.json that makes a stand-alone evaluation a Base row of ``corl-bench table``."""
    info_path = root / "run.json"
    if info_path.is_file():
        return
    write_json(root / "env.json", environment_record(seed))
    write_json(info_path, {"run_id": root.name, "method": "base", "cohort": "eval", "profile": "pretrained",
                           "seed": seed, "status": "finished", "started_at": now_iso(), "model": ref,
                           "agents": [{"name": name, "family": ref}], "phases": ["final"]})


def check_manifest(agent_dir: Path, spec: BenchmarkSpec, dec: Decoding, model: str, engine: str) -> None:
    path = agent_dir / MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry = {"version": spec.version, "decoding": json.loads(json.dumps(dec.__dict__, default=list)),
             "prompt": spec.prompt, "chat_template": spec.chat_template, "extractor": spec.extractor,
             "grader": spec.grader, "engine": engine, "model": model}
    old = manifest.get(spec.name)
    if old is not None:
        changed = sorted(k for k in entry if k != "model" and old.get(k) != entry[k])
        if changed:
            raise ConfigError(f"{agent_dir / (spec.name + '.jsonl')} was made with a different {', '.join(changed)}; "
                              "evaluate into another directory (--out) or delete those predictions")
    manifest[spec.name] = entry
    agent_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def run_eval(target: str, benchmarks: Sequence[str], *, data_dir: str | None = None, phase: str = "final",
             out: Path | None = None, seed: int = 0, max_problems: int | None = None,
             overrides: dict[str, Any] | None = None, engine: str = "ours", code_timeout: float = 10.0,
             workers: int = 2, chunk: int = 32, report: Callable[[str], None] = log.info) -> dict[str, dict[str, Any]]:
    """Evaluate every target model on every benchmark; returns agent -> benchmark -> scores (as dicts)."""
    from corl_bench.eval.items import build_items
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.evaluator import evaluate_spec, with_overrides
    from corl_bench.eval.models import load_model

    if phase not in ("final", "base"):
        raise ConfigError(f"--phase must be final or base (got {phase!r})")
    if engine not in ("ours", "lm-eval"):
        raise ConfigError(f"--engine must be ours or lm-eval (got {engine!r})")
    specs = [get_spec(b) for b in benchmarks]
    micro = [s.name for s in specs if s.profile == "micro"]
    if micro:
        raise ConfigError(f"{', '.join(micro)}: micro suites are evaluated by `corl-bench run`; pick data benchmarks "
                          "(corl-bench ls benchmarks)")
    data = {}
    for spec in specs:  # load (and validate) all data before any model is loaded or anything is written
        items = build_items(spec, load_rows(spec, data_dir))
        data[spec.name] = items[:max_problems] if max_problems else items
    found = targets(target, phase, out)
    results: dict[str, dict[str, Any]] = {}
    for name, ref, agent_dir in found:
        if run_target(target) is None:
            _write_base_run(agent_dir.parent.parent.parent, name, ref, seed)
        model, tok = load_model(ref)
        for spec in specs:
            dec = with_overrides(spec.decoding, **(overrides or {}))
            check_manifest(agent_dir, spec, dec, ref, engine)
            items = data[spec.name]
            path = agent_dir / f"{spec.name}.jsonl"
            if engine == "lm-eval":
                from corl_bench.eval.lmeval_bridge import evaluate_with_lm_eval
                scores = evaluate_with_lm_eval(model, tok, spec, items, out_path=path, decoding=dec, seed=seed)
            else:
                scores = evaluate_spec(model, tok, spec, items, out_path=path, seed=seed, decoding=dec,
                                       code_timeout=code_timeout, workers=workers, chunk=chunk)
            lo, hi = avg_ci(path, spec, {it.id for it in items})
            results.setdefault(name, {})[spec.name] = {**scores.__dict__, "avg_k_ci95": [lo, hi]}
            report(f"{name} {spec.key}: n={scores.n_problems} k={scores.k} avg@k={_pct(scores.avg_k)} "
                   f"[95% CI {_pct(lo)}-{_pct(hi)}] "
                   f"greedy={_pct(scores.greedy)} maj@k={_pct(scores.maj_k)} pass@k={_pct(scores.pass_k)} "
                   f"no-answer={_pct(scores.extraction_failure)} clipped={_pct(scores.clipped)}")
    return results


def avg_ci(path: Path, spec: BenchmarkSpec, ids: set[str]) -> tuple[float | None, float | None]:
    """Bootstrap 95 % interval of avg@k over problems (each problem's mean over its samples), from the rows."""
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.eval.metrics import bootstrap_ci
    from corl_bench.results import read_jsonl

    grade = row_grader(spec)
    per: dict[str, list[float]] = {}
    for row in read_jsonl(path):
        if str(row["problem_id"]) in ids and row["decoding"] == "sampled":
            per.setdefault(str(row["problem_id"]), []).append(float(grade(row)[1]))
    if not per:
        return None, None
    return bootstrap_ci([sum(v) / len(v) for v in per.values()])


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"
