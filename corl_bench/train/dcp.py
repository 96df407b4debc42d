"""An agent's state in torch.distributed.checkpoint (DCP) form: what a sharded agent (:mod:`corl_bench.train.sharded`)
writes from every rank, and what any agent — sharded on any number of ranks, or a plain
:class:`~corl_bench.train.agent.Agent` in one process — reads back (DCP reshards by parameter name).

Layout: ``<checkpoint>/agent-<name>.dcp/`` (one ``.distcp`` file per writing rank and a ``.metadata`` file), beside
the ``agent-<name>.pt`` files of plain agents. Reference: ``torch.distributed.checkpoint`` with
``torch.distributed.checkpoint.state_dict.get_state_dict`` / ``set_state_dict`` (weights and optimiser state keyed by
parameter name, not by rank layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corl_bench.train.boundary import POLICY, checkpoint_file


def dcp_folder(directory: Path, name: str) -> Path:
    """``<directory>/agent-<name>.dcp``: a sharded agent's checkpoint folder (DCP: one file per rank + metadata)."""
    return checkpoint_file(directory, name).with_suffix(".dcp")


def agent_state(agent: Any) -> dict[str, Any]:
    """The agent's state as DCP reads and writes it: weights and AdamW state keyed by parameter name (sharded
    DTensors on a sharded agent, plain tensors on a plain one), the frozen reference and auxiliary models."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(agent.model, agent.optimizer)
    return {"model": model, "optimizer": optim,
            "reference": agent.reference.state_dict() if agent.reference is not None else {},
            "auxiliary": {n: m.state_dict() for n, m in agent.auxiliary.items() if m is not agent.reference}}


def load_distributed(agent: Any, folder: Path, *, sync_engines: bool = True) -> None:
    """Load a DCP checkpoint written by a sharded agent into ``agent`` (a plain one, or one rank of a sharded one:
    DCP reshards by parameter name)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = agent_state(agent)
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(agent.model, agent.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    if agent.reference is not None:
        agent.reference.load_state_dict(state["reference"])
    for name, sd in state["auxiliary"].items():
        agent.auxiliary[name].load_state_dict(sd)
    if sync_engines:
        for name, engine in agent.engines.items():
            engine.sync_weights(agent.model if name == POLICY else agent.auxiliary[name])
