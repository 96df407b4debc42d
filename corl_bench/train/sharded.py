"""An agent that spans several worker processes ("ranks"): one model trained together, sharded by PyTorch FSDP2.

``ranks`` (a cohort agent's) / ``run.ranks_per_agent`` > 1 — or, by default, an agent with more than one GPU — starts
that many ranks for the agent (:func:`corl_bench.config.agent_resources`): Ray actors in one placement group with
``run.backend=ray`` (one GPU each on a GPU cluster), spawned local processes with ``run.backend=local``. Each rank
builds the same model from the same seed and wraps it with ``torch.distributed.fsdp.fully_shard`` (FSDP2: every
module named in the model's ``_no_split_modules``, i.e. each transformer block, then the root), so each rank holds
1/R of the parameters, gradients and AdamW state. The process group is gloo on CPU, NCCL on CUDA. The sharding is
PyTorch's; nothing here gathers or scatters parameters by hand.

One update (:meth:`ShardedAgent.step_micro` is :meth:`Agent.step_micro` with two hooks):

- the controller's handle (:class:`ShardedAgentHandle`) splits the scored samples into R contiguous slices, one per
  rank (and each update's advantages the same way);
- every rank scores its slice; the update's loss denominators (``grpo.loss_agg``: the global token count, the
  count of non-empty sequences, or N * L) come from the token counts of *all* ranks (an all-gather), so each rank's
  loss is its exact share of the 1-rank loss and the shares sum to it;
- FSDP reduce-scatters the gradients with a *sum* (``set_gradient_divide_factor(1.0)``, not its default mean), so
  each rank's gradient shard is the 1-rank gradient; the clipping norm is the global one (DTensor); one AdamW step
  on each shard. The reported loss, KL, entropy, token count and log-prob gap are all-reduced (every rank returns
  the same statistics).

Rollouts: the hf engine samples a whole request batch from one seeded stream, so splitting generation over ranks
would change the samples. Rank 0 therefore generates, from a full copy of the policy it refreshes after each
optimiser step (the full tensors of the sharded parameters: an all-gather every rank joins); the results equal the
1-rank agent's. This copy also serves ``save`` (a ``save_pretrained`` folder). The other ranks keep no full copy
(they join the all-gather and drop what it returns) unless an auxiliary model follows the policy by EMA (then every
rank needs it). When rank 0's engine is vLLM on a GPU, the copy is only what the weight sync reads, so it lives in
host memory, not on the GPU (for Qwen2.5-7B in fp32, 30 GB off the GPU). The KL reference and auxiliary models are
full frozen copies on every rank (deviation from a fully sharded design: they are not sharded).

Checkpoints: ``checkpoint(dir)`` writes ``dir/agent-<name>.dcp/`` with ``torch.distributed.checkpoint`` (DCP), every
rank writing its own shards of the weights and AdamW state (``get_state_dict``: keyed by parameter name, not by
rank layout; :mod:`corl_bench.train.dcp`), so a checkpoint resumes bit-identically on the same number of ranks and
loads on any other number — including one plain :class:`~corl_bench.train.agent.Agent` (``Agent.restore`` reads such
a folder when there is no ``agent-<name>.pt``).

Not supported with ranks > 1 (refused with a message): LoRA, ``memory.logit_chunk``, ``memory.shared_prefix`` (they
call parts of the model outside the FSDP root's forward); ``memory.micro_batch`` only when every rank gets the same
number of micro-batches (each forward is a collective).

Reference: PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``, the torchtitan recipe: shard each block, then the
root; clip with the DTensor total norm) and DCP (``torch.distributed.checkpoint.state_dict``); verl and OpenRLHF
split a step's rollouts over data-parallel ranks the same way.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from corl_bench.hostmem import keep_for_process
from corl_bench.train.agent import Agent, MicroBatch, PolicyForward
from corl_bench.train.boundary import BOUNDARY, POLICY, CheckpointFile, UpdateStats
from corl_bench.train.dcp import agent_state, dcp_folder, load_distributed

log = logging.getLogger(__name__)


def _reduce(values: list[float], op: Any = None) -> list[float]:
    """``values`` all-reduced over the ranks (sum, or ``op``), in float64 (on the device NCCL needs)."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op if op is not None else dist.ReduceOp.SUM)
    return t.tolist()


class ShardedAgent(Agent):
    """One rank of an agent whose policy is sharded with FSDP2 over the default process group (module docstring).

    Built like an :class:`Agent` from the plain model (so the rollout engine, KL reference and auxiliary models are
    plain copies), then the policy is a deep copy wrapped with ``fully_shard`` and AdamW is built over its shards."""

    def __init__(self, spec: Any, model: Any, tokenizer: Any, grpo_cfg: Any, **kwargs: Any) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        mem = kwargs.get("memory")
        lora = spec.lora_rank if spec.lora_rank is not None else (mem.lora_rank if mem is not None else 0)
        refused = [what for what, on in (("LoRA", lora), ("memory.logit_chunk", mem and mem.logit_chunk),
                                          ("memory.shared_prefix", mem and mem.shared_prefix)) if on]
        if refused:
            raise ValueError(f"agent {spec.name}: {refused[0]} is not supported on a sharded agent (ranks > 1); turn "
                             "it off or set ranks: 1")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if self.rank != 0:  # only rank 0 generates: the others get the light in-process engine (never a vLLM)
            kwargs = {**kwargs, "backend": "hf", "engine_options": {}}
        super().__init__(spec, model, tokenizer, grpo_cfg, **kwargs)
        # the rollout engine's (and save()'s) full copy, refreshed after every step: rank 0's, and every rank's when
        # an auxiliary model follows it (EMA); in host memory when rank 0's engine is vLLM on a GPU (module docstring)
        keep_full = self.rank == 0 or bool(self.auxiliary)
        self.full = self.model if keep_full else None
        device = next(self.model.parameters()).device
        if keep_full and kwargs.get("backend") == "vllm" and device.type == "cuda":
            self.full = self.model.to("cpu")  # first, so the GPU never holds two full copies
        policy = copy.deepcopy(self.full).to(device).train() if keep_full else self.model.train()
        mesh = init_device_mesh(device.type, (self.world,))
        blocks = set(getattr(policy, "_no_split_modules", None) or ())
        for module in list(policy.modules())[1:]:
            if type(module).__name__ in blocks:
                fully_shard(module, mesh=mesh)
        fully_shard(policy, mesh=mesh)
        for module in policy.modules():  # sum, not mean: each rank's loss is already its share of the whole
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
        self.model = policy
        self.optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=self.lr,
                                           betas=grpo_cfg.betas, weight_decay=grpo_cfg.weight_decay)

    # ------------------------------------------------------------------ the update's hooks
    def _denominators(self, counts: torch.Tensor, width: int, max_len: int | None) -> tuple[float, float]:
        """The denominators of the whole batch: every rank's token counts, in rank order (the 1-rank order)."""
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, (counts.cpu(), width))
        return super()._denominators(torch.cat([c for c, _ in gathered]), max(w for _, w in gathered), max_len)

    def _apply_gradients(self) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        if isinstance(grad_norm, DTensor):  # the norm over every shard (the same on every rank)
            grad_norm = grad_norm.full_tensor()
        if not bool(torch.isfinite(grad_norm)):
            from corl_bench.train.agent import NumericalError

            self.optimizer.zero_grad(set_to_none=True)
            raise NumericalError("gradients", self.name, detail=f"grad norm {float(grad_norm)}")
        self.optimizer.step()
        self.model.eval()
        self._sync_full()
        return grad_norm

    @torch.no_grad()
    def _sync_full(self) -> None:
        """The full copy takes the sharded policy's weights (an all-gather per parameter); the engine follows."""
        from torch.distributed.tensor import DTensor

        full = dict(self.full.named_parameters()) if self.full is not None else None
        for name, p in self.model.named_parameters():
            whole = p.full_tensor() if isinstance(p, DTensor) else p  # a collective: every rank joins
            if full is not None:
                full[name].copy_(whole)
        if full is not None:
            self.engines[POLICY].sync_weights(self.full)

    def _update_stats(self, batches: Sequence[MicroBatch | PolicyForward], counts: torch.Tensor,
                      totals: torch.Tensor, gaps: list[torch.Tensor], grad_norm: torch.Tensor) -> UpdateStats:
        """The statistics of the whole update: sums over the ranks (the 1-rank values up to float rounding)."""
        entropy = torch.cat([b.entropy for b in batches]).double().cpu()
        n_tok = counts.double().cpu()
        gap = torch.cat(gaps).cpu() if gaps else torch.empty(0, dtype=torch.float64)
        loss, pg_loss, kl, clip, ent, tokens, gap_sum, gap_n = _reduce(
            totals.tolist() + [float((entropy * n_tok).sum()), float(n_tok.sum()), float(gap.sum()), gap.numel()])
        (gap_max,) = _reduce([float(gap.max()) if gap.numel() else -1.0], dist.ReduceOp.MAX)
        gap_mean = gap_sum / gap_n if gap_n else None
        if gap_mean is not None:
            self._watch_gap(gap_mean)
        return UpdateStats(loss=loss, pg_loss=pg_loss, kl=kl, clip_fraction=clip, grad_norm=float(grad_norm),
                           entropy=ent / max(tokens, 1.0), n_tokens=int(tokens), logp_gap_mean=gap_mean,
                           logp_gap_max=gap_max if gap_n else None)

    # ------------------------------------------------------------------ the rest of the boundary
    @torch.no_grad()
    def update_auxiliary(self, name: str, alpha: float) -> None:
        """EMA of auxiliary ``name`` toward the policy's full copy (refreshed after every step)."""
        if name not in self.auxiliary:
            raise RuntimeError(f"agent {self.name} has no auxiliary model {name!r}")
        module = self.auxiliary[name]
        for t, p in zip(module.parameters(), self.full.parameters()):
            t.mul_(1.0 - alpha).add_(p.detach(), alpha=alpha)
        if name in self.engines:
            self.engines[name].sync_weights(module)

    def checkpoint(self, directory: Path) -> CheckpointFile:
        """Every rank writes its shards into ``directory/agent-<name>.dcp/`` (torch.distributed.checkpoint); returns
        the folder, its size once every rank has written, and this rank's host, process and Ray node."""
        import torch.distributed.checkpoint as dcp

        folder = dcp_folder(directory, self.name)
        if not folder.parent.is_dir():
            raise RuntimeError(f"agent {self.name} (rank {self.rank}) on {socket.gethostname()} cannot see the "
                               f"checkpoint folder {folder.parent} the controller made: put run.output_dir on a "
                               "filesystem every node shares (the ranks write their own shards)")
        dcp.save(agent_state(self), checkpoint_id=str(folder))
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        return CheckpointFile(file=folder.name, bytes=size, host=socket.gethostname(), pid=os.getpid(), node=_node())

    def restore(self, directory: Path) -> None:
        """Read back ``agent-<name>.dcp/`` (written on any number of ranks) into this rank's shards."""
        folder = dcp_folder(directory, self.name)
        if not folder.is_dir():
            raise FileNotFoundError(f"agent {self.name}: no sharded checkpoint {folder} (a checkpoint written with "
                                    "ranks: 1 is agent-<name>.pt; resume it with the same ranks)")
        load_distributed(self, folder, sync_engines=False)
        self._sync_full()
        for name, engine in self.engines.items():
            if name != POLICY:
                engine.sync_weights(self.auxiliary[name])

    def save(self, path: Path) -> None:
        """The policy (its full copy) as a ``save_pretrained`` folder, written by rank 0."""
        if self.rank == 0:
            model, self.model = self.model, self.full
            try:
                super().save(path)
            finally:
                self.model = model

    def state_dict(self) -> dict[str, Any]:
        raise RuntimeError(f"agent {self.name} is sharded: its state is written with checkpoint(dir) (DCP)")


# ---------------------------------------------------------------------- one rank's process
@dataclass(frozen=True)
class Recipe:
    """How every rank builds the agent: ``load(device) -> (model, tokenizer)`` (picklable), the Agent's arguments,
    the torch seed set before loading (the same on every rank), torch threads, and ``cpu`` or ``cuda``."""

    spec: Any
    load: Callable[[str], tuple[Any, Any]]
    grpo: Any
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    threads: int = 1
    device: str = "cpu"


class RankHost:
    """What one rank runs (a Ray actor or a spawned process): joins the process group, builds its
    :class:`ShardedAgent`, serves the boundary's calls."""

    agent: ShardedAgent

    def address(self) -> str:
        """A rendezvous address on this host (rank 0's): ``tcp://<ip>:<free port>``."""
        try:
            import ray

            host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        except ImportError:
            host = "127.0.0.1"
        return f"tcp://{host}:{free_port()}"

    def setup(self, recipe: Recipe, rank: int, world: int, init_method: str, local_device: int = 0) -> None:
        memory = recipe.agent_kwargs.get("memory")
        keep_for_process(getattr(memory, "keep_host_memory", True))  # a process for this rank (corl_bench.hostmem)
        torch.set_num_threads(max(1, recipe.threads))
        device = "cpu"
        if recipe.device.startswith("cuda"):
            device = f"cuda:{local_device}"
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device != "cpu" else "gloo", init_method=init_method, rank=rank,
                                world_size=world)
        torch.manual_seed(recipe.seed)
        model, tok = recipe.load(device)
        self.agent = ShardedAgent(recipe.spec, model, tok, recipe.grpo, **recipe.agent_kwargs)

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        if method not in BOUNDARY:
            raise AttributeError(f"{method} is not part of the agent boundary ({', '.join(BOUNDARY)})")
        return getattr(self.agent, method)(*args, **kwargs)

    def tokenizer(self) -> Any:
        return self.agent.tokenizer

    def where(self) -> dict[str, Any]:
        """Where this rank runs: rank, Ray node id ("" outside Ray), host, pid, torch threads, device, and where its
        full copy of the policy is (None: it keeps none)."""
        full = self.agent.full
        return {"rank": self.agent.rank, "node": _node(), "host": socket.gethostname(), "pid": os.getpid(),
                "threads": torch.get_num_threads(), "device": str(self._device()),
                "full_copy": None if full is None else str(next(full.parameters()).device)}

    def _device(self) -> Any:
        """This rank's compute device (where its shards live)."""
        from torch.distributed.tensor import DTensor

        p = next(self.agent.model.parameters())
        return p.to_local().device if isinstance(p, DTensor) else p.device

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _node() -> str:
    """The Ray node id of this process ("" when it is not a Ray worker)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def split(n: int, world: int) -> list[tuple[int, int]]:
    """R contiguous slices of n samples, sizes differing by at most one (the first ones larger)."""
    if n < world:
        raise RuntimeError(f"{n} samples cannot be split over {world} ranks; give the sharded agent at least one "
                           "sample per rank (rollout.prompts_per_step * rollout.samples_per_prompt >= ranks)")
    base, extra = divmod(n, world)
    out, start = [], 0
    for r in range(world):
        end = start + base + (1 if r < extra else 0)
        out.append((start, end))
        start = end
    return out

