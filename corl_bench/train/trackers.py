"""Experiment trackers (``run.trackers=[wandb]`` / ``[tensorboard]``): mirror each step's metrics.jsonl rows and
every evaluation point to Weights & Biases or TensorBoard. metrics.jsonl and the stored predictions stay the
source of truth; a tracker only copies them, and nothing here runs when ``run.trackers`` is empty.

Tags: ``<agent>/<metric>`` for every numeric field of a metrics row (x-axis: its ``step``), and
``eval/<agent>/<benchmark>/<metric>`` for an evaluation at the step it belongs to (``base`` = 0,
``step-000020`` = 20, ``final`` = the steps trained). The packages are imported only when a tracker is opened.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from corl_bench.config import Config, ConfigError

log = logging.getLogger(__name__)
PACKAGES = {"wandb": "wandb", "tensorboard": "tensorboard"}  # tracker -> the package it needs


class Tracker(Protocol):
    def log_step(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """One training step's metrics.jsonl rows (one per agent)."""

    def log_eval(self, phase: str, step: int, scores: Mapping[str, Mapping[str, Any]]) -> None:
        """One evaluation: {agent: {benchmark: BenchmarkScores}} at training step ``step``."""

    def close(self) -> None:
        ...


def check_trackers(names: Sequence[str]) -> None:
    """One-line ConfigError if a requested tracker's package is not installed (imports nothing)."""
    for name in names:
        if importlib.util.find_spec(PACKAGES[name]) is None:
            raise ConfigError(f"run.trackers: {name} is not installed; pip install {PACKAGES[name]} (or pip install "
                              f"'corl-bench[trackers]'), or drop it from run.trackers")


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def step_scalars(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``<agent>/<metric>`` -> value for every numeric field of the rows (step and agent are the coordinates)."""
    return {f"{row['agent']}/{k}": float(v) for row in rows for k, v in row.items()
            if k not in ("step", "agent") and _numeric(v)}


def eval_scalars(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``eval/<agent>/<benchmark>/<metric>`` -> value (metrics not measured, None, are left out)."""
    out = {}
    for agent, benches in scores.items():
        for bench, sc in benches.items():
            values = sc.metrics() if hasattr(sc, "metrics") else dict(sc)
            out.update({f"eval/{agent}/{bench}/{k}": float(v) for k, v in values.items() if _numeric(v)})
    return out


class TensorBoardTracker:
    """Event files under ``<run_dir>/tensorboard/``; ``start`` > 0 (a resumed run) hides the points logged at or
    after ``start`` before the interruption, so the resumed steps are not drawn twice."""

    def __init__(self, run_dir: Path, start: int = 0) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = Path(run_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir), purge_step=start or None)

    def log_step(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        for tag, value in step_scalars(rows).items():
            self.writer.add_scalar(tag, value, step)

    def log_eval(self, phase: str, step: int, scores: Mapping[str, Mapping[str, Any]]) -> None:
        for tag, value in eval_scalars(scores).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wandb_run_id(run_dir: Path) -> str:
    """A W&B run id from the run directory's name (the same on resume): safe characters, at most 64."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(run_dir).resolve().name)
    if len(name) > 64:
        name = name[:55] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def _wandb_logged_in() -> bool:
    """An API key in the environment or in the netrc file ``wandb login`` writes (for the W&B host in use)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbTracker:
    """One W&B run per run directory (id from its name, ``resume="allow"``: a resumed run continues it).
    WANDB_MODE is respected; when it is unset and no API key is found the run is written offline
    (``wandb sync`` uploads it later). The x-axis of every chart is the training step (``step``)."""

    def __init__(self, cfg: Config, run_dir: Path) -> None:
        import wandb

        kwargs: dict[str, Any] = {}
        if not os.environ.get("WANDB_MODE") and not _wandb_logged_in():
            kwargs["mode"] = "offline"
            log.info("wandb: no API key found (WANDB_API_KEY or wandb login); logging offline under %s, upload "
                     "with: wandb sync", run_dir)
        self.run = wandb.init(dir=str(run_dir), project=os.environ.get("WANDB_PROJECT", "corl-bench"),
                              name=Path(run_dir).name, id=wandb_run_id(run_dir), resume="allow",
                              config=cfg.to_dict(), settings=wandb.Settings(console="off"), **kwargs)
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log_step(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        self.run.log({"step": step, **step_scalars(rows)})

    def log_eval(self, phase: str, step: int, scores: Mapping[str, Mapping[str, Any]]) -> None:
        self.run.log({"step": step, **eval_scalars(scores)})

    def close(self) -> None:
        self.run.finish()


def open_trackers(cfg: Config, run_dir: Path, start: int = 0) -> list[Tracker]:
    """The trackers ``cfg.run.trackers`` names, open; ``start``: the step a resumed run continues from."""
    check_trackers(cfg.run.trackers)
    opened: list[Tracker] = []
    try:
        for name in dict.fromkeys(cfg.run.trackers):
            opened.append(TensorBoardTracker(run_dir, start) if name == "tensorboard" else WandbTracker(cfg, run_dir))
    except BaseException:
        close_trackers(opened)
        raise
    return opened


def close_trackers(trackers: Sequence[Tracker]) -> None:
    """Close every tracker; one that fails to close is logged, not raised (the run's own files are complete)."""
    for tracker in trackers:
        try:
            tracker.close()
        except Exception as e:  # noqa: BLE001 - a tracker must not fail a finished run
            log.warning("closing %s failed: %s", type(tracker).__name__, e)
