"""Training checkpoints that hold everything a bit-identical resume needs, written so a crash never corrupts one.

Layout under ``<run>/checkpoints/``::

    step-000020/                 a complete checkpoint: training resumes at step 20
        agent-<name>.pt          weights, AdamW state, KL reference, auxiliary models (Agent.state_dict(),
                                 torch.save), written by the agent itself (Agent.checkpoint)
        writers.json             agent -> the file it wrote, its size, and the host, process and Ray node that
                                 wrote it (what Agent.checkpoint returned; the state itself never crosses)
        state.pt                 step, data-stream position, method state, Python / NumPy / torch RNG states
        COMPLETE                 written last; a folder without it is an interrupted write and is ignored
    latest                       the name of the newest complete checkpoint (replaced atomically)

Writing: everything goes into ``.tmp-step-000020-<pid>/``, each file is fsynced, ``COMPLETE`` is written, the folder
is fsynced and renamed into place, ``latest`` is replaced atomically, and only then are older checkpoints removed —
so at every instant the previous good checkpoint exists. Each agent writes (and on resume reads) its own file from
the process it lives in (:meth:`corl_bench.train.boundary.AgentGroup.checkpoint`): weights and optimiser state never
pass through the controller. With ``run.backend=ray`` on several machines the run directory (so the checkpoint
folder) must therefore be on a filesystem every node shares; an agent that does not see the folder the controller
made says so (:func:`write_agent_state`). Rollout sampling needs no RNG state of its own: every
generate call is seeded from (run seed, agent, step), so restoring the step restores the samplers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import re
import shutil
import socket
from pathlib import Path
from typing import Any, Sequence

from corl_bench.results import RunDir
from corl_bench.train.boundary import AgentGroup, AgentHandle, CheckpointFile

log = logging.getLogger(__name__)
COMPLETE = "COMPLETE"
_STEP_DIR = re.compile(r"^step-(\d{6})$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_synced(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path``, flushed and fsynced before it returns."""
    import torch

    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def write_agent_state(state: dict[str, Any], path: Path, agent: str) -> CheckpointFile:
    """An agent's ``state`` saved to ``path`` (fsynced) by the calling process, the agent's own; returns what it
    wrote and from where. The folder is the controller's: when it is not there, this process does not share the
    controller's filesystem (one-line error naming the fix)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise RuntimeError(f"agent {agent} on {socket.gethostname()} cannot see the checkpoint folder {path.parent} "
                           "the controller made: put run.output_dir on a filesystem every Ray node shares (the agents "
                           "write their own checkpoints)")
    save_synced(state, path)
    return CheckpointFile(file=path.name, bytes=path.stat().st_size, host=socket.gethostname(), pid=os.getpid())


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, step: int, agents: AgentGroup | Sequence[AgentHandle],
                    trainer_state: dict[str, Any], keep: int = 1) -> Path:
    """Write the checkpoint to resume at ``step``; keeps the newest ``keep`` complete ones (>= 1). The agents write
    their own files into the temporary folder (on a multi-node Ray cluster ``run_dir`` must be on a shared
    filesystem); the controller writes only ``state.pt`` (``trainer_state``, the step and its RNG states)."""
    root = RunDir(run_dir).checkpoints_dir
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    writers = AgentGroup.of(agents).checkpoint(tmp)
    with open(tmp / "writers.json", "w") as f:
        json.dump({name: dataclasses.asdict(w) for name, w in writers.items()}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    save_synced({**trainer_state, "step": step, "rng": rng_state()}, tmp / "state.pt")
    with open(tmp / COMPLETE, "w") as f:
        f.write(f"{step}\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    final = root / name
    if final.exists():  # a complete checkpoint of the same step (a rerun after a crash right after the rename)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    latest_tmp = root / f".latest-{os.getpid()}"
    latest_tmp.write_text(name + "\n")
    os.replace(latest_tmp, root / "latest")
    _fsync_dir(root)
    for old in complete_checkpoints(run_dir)[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return final


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first."""
    root = RunDir(run_dir).checkpoints_dir
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name) and (p / COMPLETE).is_file()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (``latest`` if it names a complete one, else the newest found)."""
    found = complete_checkpoints(run_dir)
    pointer = RunDir(run_dir).checkpoints_dir / "latest"
    if pointer.is_file():
        named = RunDir(run_dir).checkpoints_dir / pointer.read_text().strip()
        if named in found:
            return max(found[-1], named, key=lambda p: p.name)
    return found[-1] if found else None


def load_checkpoint(path: Path, agents: AgentGroup | Sequence[AgentHandle]) -> dict[str, Any]:
    """Restore every agent (each reads its own file where it lives) and the RNGs; returns the trainer state
    (``step`` = the next step to run)."""
    import torch

    from corl_bench.errors import ConfigError

    if not (path / "state.pt").is_file():  # never resume with the stream at 0 and fresh RNG (TRL PR#5911)
        raise ConfigError(f"checkpoint {path} is marked complete but has no state.pt (the step, data position and "
                          f"RNG state), so it cannot resume exactly; move {path.name} aside to resume from an "
                          "earlier checkpoint, or start the run again with --fresh")
    AgentGroup.of(agents).restore(path)
    state = torch.load(path / "state.pt", weights_only=False)
    set_rng_state(state.pop("rng"))
    return state


def run_fingerprint(run_dir: Path) -> dict[str, Any]:
    """What a run produced that must not depend on interruptions: metrics (timings dropped), samples, predictions
    and final weights (the resume acceptance test and ``scripts/kill_test.py`` compare these)."""
    import json

    from safetensors.torch import load_file

    rd = RunDir(run_dir)
    metrics = [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
               for x in rd.metrics_path.read_text().splitlines() if x.strip()]
    samples = rd.samples_path.read_text() if rd.samples_path.is_file() else ""
    preds = {str(p.relative_to(rd.path)): p.read_text() for p in sorted(rd.eval_root.rglob("*.jsonl"))}
    weights = {p.parent.name: load_file(p)
               for p in sorted(rd.final_checkpoint("*").parent.glob("*/model.safetensors"))}
    return {"metrics": metrics, "samples": samples, "predictions": preds, "weights": weights}


def fingerprint_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of the parts that differ (empty = bit-identical)."""
    import torch

    out = [key for key in ("metrics", "samples", "predictions") if a[key] != b[key]]
    if a["weights"].keys() != b["weights"].keys() or any(
            a["weights"][ag].keys() != b["weights"][ag].keys() or
            not all(torch.equal(a["weights"][ag][k], b["weights"][ag][k]) for k in a["weights"][ag])
            for ag in a["weights"]):
        out.append("weights")
    return out
