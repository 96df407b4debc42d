"""Resuming a run: is a run directory the same config (:func:`check_resumable`), which interrupted run a config
continues (:func:`find_interrupted`), and its metrics cut back to the checkpoint it resumes from
(:func:`restore_history`).

A resumed run ends bit-identical to one that was never interrupted: the checkpoint restores weights, optimiser,
data and RNG state (:mod:`corl_bench.train.checkpoint`), and rows written after it are dropped here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corl_bench.config import Config, ConfigError
from corl_bench.record import RunRecord
from corl_bench.results import RunDir, atomic_write_text, is_event, read_complete_rows

__all__ = ["RESUME_IGNORES", "check_resumable", "config_diff", "find_interrupted", "restore_history",
           "stored_config"]


#: Config fields that only say how a run is shown, never how it trains: a run resumes whatever they hold now (a run
#: started before ``cohort.paper_row`` existed resumes under a cohort that names its paper row; its record keeps
#: what it was started with).
RESUME_IGNORES = frozenset({"cohort.paper_row"})


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "",
                ignore: frozenset[str] = frozenset()) -> list[str]:
    """Dotted paths whose values differ between two config dicts, with both values (paths in ``ignore`` skipped)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b, path = old.get(key), new.get(key), f"{prefix}{key}"
        if path in ignore:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, path + ".", ignore)
        elif a != b:
            out.append(f"{path} ({a!r} -> {b!r})")
    return out


def stored_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.yaml as the current code reads it: fields added since the run was started take their
    defaults, so a run written by an older version resumes when nothing it set has changed."""
    import yaml

    from corl_bench.config import config_from_dict

    path = RunDir(run_dir).config_path
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no config.yaml; it is not a corl-bench run directory")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return config_from_dict(raw).to_dict()
    except ConfigError as e:
        raise ConfigError(f"{path} no longer loads ({e}); start a new run") from None


def check_resumable(run_dir: Path, cfg: Config) -> RunRecord:
    """The run record of ``run_dir`` if ``cfg`` is the config it was started with; one-line ConfigError naming
    changes."""
    changed = config_diff(stored_config(run_dir), cfg.to_dict(), ignore=RESUME_IGNORES)
    if changed:
        shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise ConfigError(f"cannot resume {run_dir}: the config changed: {shown}; resume with the original config "
                          "or start a new run")
    return RunDir(run_dir).record()


def find_interrupted(output_dir: Path, cfg: Config) -> Path | None:
    """The newest run under ``output_dir`` that did not finish and was started with exactly this config."""
    if not output_dir.is_dir():
        return None
    want = cfg.to_dict()
    found = []
    for rd in (RunDir(p) for p in output_dir.iterdir() if p.is_dir()):
        try:
            if rd.is_run() and not rd.record().finished and not config_diff(
                    stored_config(rd.path), want, ignore=RESUME_IGNORES):
                found.append(rd.path)
        except (OSError, ValueError, ConfigError):
            continue
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def restore_history(run_dir: Path, start: int) -> list[dict[str, dict[str, Any]]]:
    """metrics.jsonl cut back to the steps before ``start`` (rows written after the checkpoint are dropped);
    returns the kept rows as per-step {agent: metrics} for the summary."""
    rd = RunDir(run_dir)
    by_step: dict[int, dict[str, Any]] = {}
    for path in (rd.metrics_path, rd.samples_path):
        if not path.is_file():
            continue
        rows = [r for r in read_complete_rows(path)[0] if r.get("step", 0) < start]
        atomic_write_text(path, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows))
        if path == rd.metrics_path:
            for r in rows:
                if not is_event(r):  # a collapse alarm is kept in the file but is not a step's metrics
                    by_step.setdefault(r["step"], {})[r["agent"]] = r
    return [by_step[s] for s in sorted(by_step)]
