"""An agent: one model with its own tokenizer, optimizer, rollout engine, auxiliary models and sampling seed.

The controller talks to an agent only through the calls of :class:`corl_bench.train.boundary.AgentHandle`, whose
arguments and results are plain, picklable data, so an agent can live in another process (a Ray actor owning its own
GPUs) without any method or the trainer changing:

    generate(requests, params, model="policy") -> [[Completion]]   rollouts of the policy or an auxiliary model
    score(samples) -> SampleStats       the training forward pass over (request, completion) samples; returns the
                                        detached per-sample entropy and self-certainty. The autograd graph stays
                                        inside the agent until update(); a second score() before update() adds
                                        its samples to the same update (a method's extra samples)
    update(advantages, max_len) -> UpdateStats    one GRPO step on the scored samples (one advantage each)
    update_auxiliary(name, alpha)       EMA of an auxiliary model toward the policy (Co-rewarding-II's teacher)
    discard()                           drop what was scored (a step that failed before its update)
    checkpoint(dir) / restore(dir)      everything a bit-identical resume needs (weights, AdamW, auxiliary models),
                                        written to and read from dir/agent-<name>.pt by the agent itself
    save(path)                          the policy as a save_pretrained folder (LoRA adapters merged)

Memory (``MemoryConfig``, the config's ``memory:`` section, all off by default): ``micro_batch`` splits score() and
update() into micro-batches with gradient accumulation (score() then keeps no graph: update() recomputes each
micro-batch with grad); ``logit_chunk`` applies the LM head chunk by chunk over the completion positions;
``gradient_checkpointing``; ``lora_rank`` (or the agent's own) trains LoRA adapters only
(:mod:`corl_bench.train.memory`); ``autocast=bfloat16`` runs score()'s and update()'s forward passes under
``torch.autocast`` in bf16 while parameters, gradients and AdamW state stay in their (fp32) dtype.

Agents never share parameters or gradients; Co-RL agents exchange extracted answers only, and that exchange happens
in the method, above this layer.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from corl_bench.method import AuxiliaryModel
from corl_bench.config import AgentSpec, GRPOConfig, MemoryConfig
from corl_bench.models.lora import has_lora, merged_state_dict
from corl_bench.rollout import Completion, Prompt, SamplingParams, make_engine
from corl_bench.rollout.encode import Encoded, Processor, encode
from corl_bench.train import grpo, prefix
from corl_bench.train import memory as memops
from corl_bench.train.boundary import POLICY, CheckpointFile, SampleStats, TrainSample, UpdateStats, checkpoint_file
from corl_bench.train.checkpoint import write_agent_state
from corl_bench.train.optim import BlockAdamW

log = logging.getLogger(__name__)


class NumericalError(RuntimeError):
    """A non-finite value in training; names the agent, the step and the quantity (rewards, advantages, loss ...)."""

    def __init__(self, quantity: str, agent: str, step: int | None = None, detail: str = "") -> None:
        self.quantity, self.agent, self.step, self.detail = quantity, agent, step, detail
        where = f"agent {agent}" + (f", step {step}" if step is not None else "")
        super().__init__(f"non-finite {quantity} ({where}){': ' + detail if detail else ''}; nothing was updated, "
                         "the last good checkpoint is intact — lower grpo.lr or check the method's rewards, then "
                         "resume with --resume")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across a process boundary
        return type(self), (self.quantity, self.agent, self.step, self.detail)


def check_finite(values: Any, quantity: str, agent: str, step: int | None = None) -> None:
    t = torch.as_tensor(values)
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise NumericalError(quantity, agent, step, f"{bad} of {t.numel()} values")


@dataclass
class PolicyForward:
    """What one training-side forward pass yields (N sequences, T positions); stays inside the agent."""

    logp: torch.Tensor  # (N, T) log-probs of the completion tokens, with grad
    mask: torch.Tensor  # (N, T) 1 on completion tokens
    entropy: torch.Tensor  # (N,) mean token entropy per sequence at the rollout temperature (detached)
    self_certainty: torch.Tensor  # (N,) mean token KL(U || p) per sequence (detached)
    ref_logp: torch.Tensor | None = None  # (N, T) under the frozen reference, when grpo.kl_coef > 0
    behaviour: torch.Tensor | None = None  # (N, T) the rollout engine's log-probs, when grpo.behaviour_is_cap > 0


@dataclass
class MicroBatch:
    """One scored micro-batch (``memory.micro_batch`` > 0): its inputs and detached statistics, no autograd graph;
    :meth:`Agent.update` recomputes its forward pass with grad."""

    ids: torch.Tensor  # (n, L) right-padded prompt + completion ids
    att: torch.Tensor  # (n, L) attention mask
    cmask: torch.Tensor  # (n, L) 1 on completion tokens
    entropy: torch.Tensor  # (n,) as PolicyForward.entropy
    self_certainty: torch.Tensor  # (n,)
    shared: prefix.PrefixBatch | None = None  # memory.shared_prefix: the same sequences in the shared layout
    behaviour: torch.Tensor | None = None  # (n, T) the engine's log-probs in the mask's layout (behaviour_is_cap)
    vision: dict[str, torch.Tensor] = field(default_factory=dict)  # a VLM's image inputs of these rows

    @property
    def mask(self) -> torch.Tensor:
        """(n, T) 1 on the completion tokens, in the layout the log-probs come in."""
        return self.shared.mask if self.shared is not None else self.cmask[:, 1:]


def concat_forwards(a: PolicyForward, b: PolicyForward) -> PolicyForward:
    """Stack two forward passes of one agent along the batch: (N1, T1) + (N2, T2) -> (N1+N2, max T), padding masked."""
    width = max(a.logp.shape[1], b.logp.shape[1])

    def pad(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else torch.nn.functional.pad(x, (0, width - x.shape[1]))

    ref = beh = None
    if a.ref_logp is not None and b.ref_logp is not None:
        ref = torch.cat([pad(a.ref_logp), pad(b.ref_logp)])
    if a.behaviour is not None and b.behaviour is not None:
        beh = torch.cat([pad(a.behaviour), pad(b.behaviour)])
    return PolicyForward(logp=torch.cat([pad(a.logp), pad(b.logp)]), mask=torch.cat([pad(a.mask), pad(b.mask)]),
                         entropy=torch.cat([a.entropy, b.entropy]),
                         self_certainty=torch.cat([a.self_certainty, b.self_certainty]), ref_logp=ref,
                         behaviour=beh)


def _frozen_copy(model: Any) -> Any:
    twin = copy.deepcopy(model).eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin


def _image_key(image: Any) -> Any:
    """What makes two prompt images the same for ``memory.shared_prefix``: a path, or a PIL image's pixels."""
    return image if isinstance(image, (str, Path)) else (image.size, image.mode, image.tobytes())


class Agent:
    """One trainable model behind the plain-data boundary described in the module docstring."""

    def __init__(self, spec: AgentSpec, model: Any, tokenizer: Any, grpo_cfg: GRPOConfig, *,
                 backend: str = "hf", temperature: float = 1.0, auxiliary: Sequence[AuxiliaryModel] = (),
                 max_batch: int = 0, engine_options: Any = None, memory: MemoryConfig | None = None,
                 freeze_vision: bool = False) -> None:
        self.spec = spec
        self.name = spec.name
        self.tokenizer = tokenizer
        self.cfg = grpo_cfg
        self.mem = mem = memory if memory is not None else MemoryConfig()
        self.temperature = temperature
        # auxiliary models start as frozen copies of the initial policy; one may double as the KL reference
        self.auxiliary: dict[str, Any] = {}
        self.reference = None
        for aux in auxiliary:
            self.auxiliary[aux.name] = module = _frozen_copy(model)
            if aux.kl_reference:
                self.reference = module
        if grpo_cfg.kl_coef > 0 and self.reference is None:  # the KL anchor: a copy of the initial policy
            self.reference = _frozen_copy(model)
        # the tokenizer and, for a vision-language model, its image codec: every prompt is encoded through it
        self.processor = Processor.of(tokenizer)
        self.lora_rank = spec.lora_rank if spec.lora_rank is not None else mem.lora_rank
        if self.lora_rank:  # adapters in place, base frozen; the copies above stay plain (they follow merged weights)
            model = memops.apply_lora(model, self.lora_rank, mem.lora_alpha or 2.0 * self.lora_rank,
                                      mem.lora_dropout, mem.lora_targets,
                                      seed=(torch.initial_seed() + 7_919 * spec.seed_offset) % 2**63)
        if mem.gradient_checkpointing:
            memops.enable_gradient_checkpointing(model)
        if freeze_vision:  # model.freeze_vision: the vision tower keeps its weights (gets no gradient)
            from corl_bench.models.hf_vlm import freeze_vision_tower

            freeze_vision_tower(model)
        self.model = model
        engine_kwargs = {**(engine_options or {}), **({"max_batch": max_batch} if max_batch > 0 else {})}
        self.engines = {POLICY: make_engine(backend, model, tokenizer, **engine_kwargs)}
        for aux in auxiliary:
            if aux.generates:
                self.engines[aux.name] = make_engine(backend, self.auxiliary[aux.name], tokenizer, **engine_kwargs)
        params = [p for p in model.parameters() if p.requires_grad] if self.lora_rank or freeze_vision \
            else model.parameters()
        self.lr = spec.lr if spec.lr is not None else grpo_cfg.lr
        self.optimizer = BlockAdamW(params, lr=self.lr, betas=grpo_cfg.betas, weight_decay=grpo_cfg.weight_decay)
        self._pending: PolicyForward | None = None
        self._micro: list[MicroBatch] = []  # scored micro-batches (memory.micro_batch > 0): tensors, no graph
        self._gap_base: float | None = None  # the first update's engine-vs-trainer log-prob gap (_watch_gap)
        self._gap_warned = False
        self._splits: dict[int, memops.SplitLM] = {}

    # ------------------------------------------------------------------ rollouts
    def generate(self, requests: Sequence[Prompt], params: SamplingParams, *, model: str = POLICY
                 ) -> list[list[Completion]]:
        """Rollouts of the policy, or of the auxiliary model ``model`` (one declared with ``generates=True``)."""
        if model not in self.engines:
            raise RuntimeError(f"agent {self.name} has no generating model {model!r}; it has {sorted(self.engines)}")
        return self.engines[model].generate(requests, params)

    @torch.no_grad()
    def update_auxiliary(self, name: str, alpha: float) -> None:
        """auxiliary <- alpha * policy + (1 - alpha) * auxiliary (an EMA teacher's sliding average)."""
        if name not in self.auxiliary:
            raise RuntimeError(f"agent {self.name} has no auxiliary model {name!r}")
        module = self.auxiliary[name]
        if has_lora(self.model):  # the auxiliary model is plain: it follows the merged policy weights
            merged = merged_state_dict(self.model)
            for key, t in module.named_parameters():
                t.mul_(1.0 - alpha).add_(merged[key].detach(), alpha=alpha)
        else:
            for t, p in zip(module.parameters(), self.model.parameters()):
                t.mul_(1.0 - alpha).add_(p.detach(), alpha=alpha)
        if name in self.engines:
            self.engines[name].sync_weights(module)

    # ------------------------------------------------------------------ training forward pass
    def _encode(self, prompts: Sequence[Prompt]) -> Encoded:
        """Prompt token ids and, for a vision-language model given images, each prompt's image tensors, from the
        one request encoder the rollout engines use (:mod:`corl_bench.rollout.encode`)."""
        try:
            return encode(self.processor, prompts)
        except ValueError as e:
            raise ValueError(f"agent {self.name}: {e}") from None

    def _prefix_batch(self, prompts: Sequence[Prompt], completions: Sequence[Completion], device: Any
                      ) -> prefix.PrefixBatch:
        """The shared-prefix layout of a batch; with images, prompts group by their ids and their images, and the
        groups' image inputs ride along."""
        enc = self._encode(prompts)
        images = [tuple(getattr(p, "images", ()) or ()) for p in prompts] if enc.visions else None
        b = prefix.build(enc.ids, [c.token_ids for c in completions], self.tokenizer.pad_token_id, device,
                         keys=[tuple(map(_image_key, im)) for im in images] if images else None)
        if enc.visions:
            b.vision = self.processor.codec.collate([enc.visions[r] for r in b.first_rows], b.prompt_ids)
        return b

    def _shared(self, prompts: Sequence[Prompt], completions: Sequence[Completion]) -> prefix.PrefixBatch:
        """The batch in the shared-prefix layout (``memory.shared_prefix``); checked once against the plain pass."""
        b = self._prefix_batch(prompts, completions, next(self.model.parameters()).device)
        if not getattr(self, "_prefix_checked", False):
            self._check_shared(prompts[:4], completions[:4])
            self._prefix_checked = True
        return b

    @torch.no_grad()
    def _check_shared(self, prompts: Sequence[Prompt], completions: Sequence[Completion]) -> None:
        """The cached (shared-prefix) pass must give this model's plain log-probs; refuse the option otherwise.

        The check is about the layout (positions, cache, masks), so fp32 weights are compared in fp32 even under
        ``memory.autocast``: bf16 rounding alone moves single log-probs of a 30-layer model by 0.2 nats."""
        was = self.model.training
        self.model.eval()
        try:
            with torch.autocast(next(self.model.parameters()).device.type, enabled=False):
                ids, att, cmask, vision = self._batch(prompts, completions)
                plain = grpo.logprobs_from_logits(self._token_logits(self.model, ids, att, vision), ids[:, 1:],
                                                  self.temperature)
                plain = plain[cmask[:, 1:].bool()]
                b = self._prefix_batch(prompts, completions, ids.device)
                shared = grpo.logprobs_from_logits(prefix.logits(self.model, b), b.ids,
                                                   self.temperature)[b.att.bool()]
        finally:
            self.model.train(was)
        gap = float((plain - shared).abs().max()) if plain.numel() else 0.0
        tol = 1e-3 if next(self.model.parameters()).dtype == torch.float32 else 5e-2
        if not gap <= tol:
            raise RuntimeError(f"memory.shared_prefix: agent {self.name}'s cached forward differs from its full "
                               f"forward (max log-prob gap {gap:.2e} > {tol:g}); set memory.shared_prefix=false")

    def _batch(self, prompts: Sequence[Prompt], completions: Sequence[Completion]
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Right-padded (prompt + completion) ids, attention mask and completion mask, all (N, L), and the image
        inputs of a vision-language model ({} for text)."""
        tok = self.tokenizer
        enc = self._encode(prompts)
        rows = [(p, list(c.token_ids)) for p, c in zip(enc.ids, completions)]
        width = max(len(p) + len(c) for p, c in rows)
        n = len(rows)
        ids = torch.full((n, width), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((n, width), dtype=torch.long)
        cmask = torch.zeros((n, width), dtype=torch.float32)
        for r, (p, c) in enumerate(rows):
            seq = p + c
            ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            att[r, : len(seq)] = 1
            cmask[r, len(p): len(seq)] = 1.0
        device = next(self.model.parameters()).device
        ids = ids.to(device)
        vision = self.processor.codec.collate(enc.visions, ids) if enc.visions else {}
        return ids, att.to(device), cmask.to(device), vision

    def _token_logits(self, model: Any, ids: torch.Tensor, att: torch.Tensor,
                      vision: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits predicting token t+1 at position t, aligned to targets ids[:, 1:]: (N, L-1, V)."""
        return model(input_ids=ids, attention_mask=att, **(vision or {})).logits[:, :-1, :]

    def _split(self, model: Any, ids: torch.Tensor, att: torch.Tensor,
               vision: dict[str, torch.Tensor] | None = None) -> memops.SplitLM:
        """``model`` as backbone + LM head (checked once against its own logits) for the chunked path."""
        split = self._splits.get(id(model))
        if split is None:
            split = self._splits[id(model)] = memops.SplitLM(model)
        split.check(ids, att, vision=vision)
        return split

    def _chunked(self, model: Any, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor, *, stats: bool,
                 vision: dict[str, torch.Tensor] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``memory.logit_chunk`` > 0: log-probs (N, T) and, if ``stats``, per-sequence entropy and self-certainty (N,)
        from the hidden states of the completion positions only, ``logit_chunk`` positions at a time.

        Positions outside ``mask`` get log-prob 0 (the loss never reads them)."""
        split = self._split(model, ids, att, vision)
        m = mask.bool()
        hidden = split.hidden(ids, att, vision)[:, :-1][m]  # (M, H): the positions that predict completion tokens
        lp, ent, sc = grpo.chunked_token_stats(hidden, split.head, ids[:, 1:][m], self.temperature,
                                               self.mem.logit_chunk, stats=stats)
        zeros = torch.zeros(mask.shape, dtype=lp.dtype, device=lp.device)
        logp = zeros.masked_scatter(m, lp)
        if not stats:
            return logp, None, None
        return (logp, grpo.masked_seq_mean(zeros.masked_scatter(m, ent), mask),
                grpo.masked_seq_mean(zeros.masked_scatter(m, sc), mask))

    def _stats(self, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor,
               vision: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sequence entropy and self-certainty (N,) of the policy, without grad (micro-batched scoring)."""
        with torch.no_grad():
            if self.mem.logit_chunk:
                _, entropy, certainty = self._chunked(self.model, ids, att, mask, stats=True, vision=vision)
                return entropy, certainty
            logits = self._token_logits(self.model, ids, att, vision)
            entropy = grpo.masked_seq_mean(grpo.entropy_from_logits(logits, self.temperature), mask)
            certainty = grpo.masked_seq_mean(grpo.self_certainty_from_logits(logits, self.temperature), mask)
            return entropy, certainty

    def _logp(self, model: Any, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor,
              vision: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """(N, T) log-probs of the completion tokens under ``model`` (with grad when enabled)."""
        if self.mem.logit_chunk:
            return self._chunked(model, ids, att, mask, stats=False, vision=vision)[0]
        return grpo.logprobs_from_logits(self._token_logits(model, ids, att, vision), ids[:, 1:], self.temperature)

    def forward(self, prompts: Sequence[Prompt], completions: Sequence[Completion]) -> PolicyForward:
        """The single training-side forward pass over N = len(completions) sequences (kept inside the agent).

        It yields the log-probs the loss is built from (with grad) and, from the same full-vocabulary logits at the
        rollout temperature, each sequence's mean token entropy (RENT) and self-certainty (Intuitor) — so
        intrinsic rewards need no second pass over the model. With ``memory.logit_chunk`` the logits are computed
        chunk by chunk over the completion positions (:meth:`_chunked`) and never exist for the whole batch.
        """
        if self.mem.shared_prefix:
            return self._forward_shared(self._shared(prompts, completions))
        ids, att, cmask, vision = self._batch(prompts, completions)
        targets, mask = ids[:, 1:], cmask[:, 1:]
        self.model.train()
        if self.mem.logit_chunk:
            logp, entropy, certainty = self._chunked(self.model, ids, att, mask, stats=True, vision=vision)
        else:
            logits = self._token_logits(self.model, ids, att, vision)
            logp = grpo.logprobs_from_logits(logits, targets, self.temperature)
            with torch.no_grad():
                detached = logits.detach()
                entropy = grpo.masked_seq_mean(grpo.entropy_from_logits(detached, self.temperature), mask)
                certainty = grpo.masked_seq_mean(grpo.self_certainty_from_logits(detached, self.temperature), mask)
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp = self._logp(self.reference, ids, att, mask, vision)
        return PolicyForward(logp=logp, mask=mask, entropy=entropy, self_certainty=certainty, ref_logp=ref_logp)

    def _forward_shared(self, b: prefix.PrefixBatch) -> PolicyForward:
        """:meth:`forward` in the shared-prefix layout: (N, Lc) log-probs with grad, statistics, reference."""
        self.model.train()
        mask = b.mask
        logp, ent, cert = grpo.token_stats(prefix.logits(self.model, b), b.ids, self.temperature)
        with torch.no_grad():
            entropy, certainty = grpo.masked_seq_mean(ent, mask), grpo.masked_seq_mean(cert, mask)
            ref_logp = None
            if self.reference is not None:
                ref_logp = grpo.logprobs_from_logits(prefix.logits(self.reference, b), b.ids, self.temperature)
        return PolicyForward(logp=logp, mask=mask, entropy=entropy, self_certainty=certainty, ref_logp=ref_logp)

    def _micro_logp(self, model: Any, b: MicroBatch) -> torch.Tensor:
        """(n, T) log-probs of one scored micro-batch's completion tokens under ``model``, in its layout."""
        if b.shared is not None:
            return grpo.logprobs_from_logits(prefix.logits(model, b.shared), b.shared.ids, self.temperature)
        return self._logp(model, b.ids, b.att, b.cmask[:, 1:], b.vision)

    def score(self, samples: Sequence[TrainSample]) -> SampleStats:
        """Training forward pass over ``samples``; the graph waits inside the agent for :meth:`update`.

        With ``memory.micro_batch`` = m > 0 no graph is kept: the statistics come from a no-grad pass over m samples
        at a time and :meth:`update` recomputes each micro-batch's forward pass with grad (memory follows m)."""
        with memops.autocast(self.mem.autocast, self.model):
            return self._score(samples)

    def _score(self, samples: Sequence[TrainSample]) -> SampleStats:
        if self.mem.micro_batch:
            entropy, certainty = [], []
            for i in range(0, len(samples), self.mem.micro_batch):
                part = samples[i: i + self.mem.micro_batch]
                self.model.train()
                if self.mem.shared_prefix:  # the shared layout only (the plain tensors are not needed)
                    shared = self._shared([s.request for s in part], [s.completion for s in part])
                    with torch.no_grad():
                        _, ent, sc = grpo.token_stats(prefix.logits(self.model, shared), shared.ids, self.temperature)
                        ent, sc = grpo.masked_seq_mean(ent, shared.mask), grpo.masked_seq_mean(sc, shared.mask)
                    empty = torch.empty(0)
                    self._micro.append(MicroBatch(empty, empty, empty, ent, sc, shared))
                    self._micro[-1].behaviour = self._behaviour([s.completion for s in part], shared.mask)
                else:
                    ids, att, cmask, vision = self._batch([s.request for s in part], [s.completion for s in part])
                    ent, sc = self._stats(ids, att, cmask[:, 1:], vision)
                    self._micro.append(MicroBatch(ids, att, cmask, ent, sc, vision=vision))
                    self._micro[-1].behaviour = self._behaviour([s.completion for s in part], cmask[:, 1:])
                entropy += ent.tolist()
                certainty += sc.tolist()
            return SampleStats(entropy=entropy, self_certainty=certainty)
        fwd = self.forward([s.request for s in samples], [s.completion for s in samples])
        fwd.behaviour = self._behaviour([s.completion for s in samples], fwd.mask)
        self._pending = fwd if self._pending is None else concat_forwards(self._pending, fwd)
        return SampleStats(entropy=fwd.entropy.tolist(), self_certainty=fwd.self_certainty.tolist())

    def explore(self, unlearn: Sequence[tuple[Prompt, str]], requests: Sequence[Prompt], params: SamplingParams, *,
                model: str, lr: float, eps: float = 0.01) -> list[list[Completion]]:
        """Rollouts of auxiliary model ``model`` after it was set to the policy and unlearned one step on
        ``unlearn`` (:func:`corl_bench.train.explore.explore`: DCRL's explorer pool)."""
        from corl_bench.train.explore import explore

        return explore(self, model, unlearn, requests, params, lr, eps)

    def likelihood(self, requests: Sequence[Prompt], texts: Sequence[str]) -> list[float]:
        """Mean log-probability (temperature 1) of each text as the reply to its request, under the policy
        (:func:`corl_bench.train.likelihood.text_likelihood`; nothing is kept for the update)."""
        from corl_bench.train.likelihood import text_likelihood

        return text_likelihood(self, requests, texts)

    def _behaviour(self, completions: Sequence[Completion], mask: torch.Tensor) -> torch.Tensor | None:
        """(N, T) the engine's log-probs of each completion's tokens, placed where ``mask`` marks them (None when the
        engine gave none: then ``grpo.behaviour_is_cap`` is refused, and the update reports no log-prob gap)."""
        if any(len(c.logprobs) != len(c.token_ids) for c in completions):
            if not self.cfg.behaviour_is_cap:
                return None
            raise RuntimeError(f"agent {self.name}: grpo.behaviour_is_cap needs the rollout engine's log-probs of "
                               "every token; this engine returned none (set grpo.behaviour_is_cap=0)")
        flat = torch.tensor([lp for c in completions for lp in c.logprobs], dtype=torch.float32, device=mask.device)
        return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_scatter(mask.bool(), flat)

    def _is_weight(self, logp: torch.Tensor, behaviour: torch.Tensor | None, mask: torch.Tensor
                   ) -> torch.Tensor | None:
        if behaviour is None or not self.cfg.behaviour_is_cap:
            return None
        return grpo.truncated_is_weight(logp, behaviour, mask, self.cfg.behaviour_is_cap)

    def discard(self) -> None:
        """Drop scored samples without updating (a step that failed before the update)."""
        self._pending = None
        self._micro = []

    # ------------------------------------------------------------------ update
    def step(self, fwd: PolicyForward, advantages: torch.Tensor, max_len: int | None = None) -> UpdateStats:
        """One GRPO policy step from a :meth:`forward` pass; ``advantages`` is (N,): :meth:`step_micro` with the
        pass as its one micro-batch (its graph is already built, so nothing is recomputed).

        One optimiser step per rollout batch (on-policy, the paper's setting): old log-probs are the current
        ones, so the ratio is 1 and the clip is inactive; the gradient is the group-baselined policy gradient.
        """
        return self.step_micro([fwd], advantages, max_len=max_len)

    def _apply_gradients(self) -> torch.Tensor:
        """Clip the accumulated gradients, check them, take the optimiser step; returns the pre-clip grad norm."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        if not bool(torch.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NumericalError("gradients", self.name, detail=f"grad norm {float(grad_norm)}")
        self.optimizer.step()
        self.model.eval()
        self.engines[POLICY].sync_weights(self.model)
        return grad_norm

    def _loss_inputs(self, b: MicroBatch | PolicyForward) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(n, T) log-probs with grad and the reference's (or None) of one micro-batch: a scored
        :class:`MicroBatch` is recomputed with grad; a :class:`PolicyForward` already holds its graph."""
        if isinstance(b, PolicyForward):
            return b.logp, b.ref_logp
        self.model.train()
        with memops.autocast(self.mem.autocast, self.model):
            logp = self._micro_logp(self.model, b)
            ref_logp = None
            if self.reference is not None:
                with torch.no_grad():
                    ref_logp = self._micro_logp(self.reference, b)
        return logp, ref_logp

    def step_micro(self, batches: Sequence[MicroBatch | PolicyForward], advantages: torch.Tensor,
                   max_len: int | None = None) -> UpdateStats:
        """One GRPO step by gradient accumulation over micro-batches; ``advantages`` is (N,), N = all their
        sequences in order. Each scored micro-batch's forward pass is recomputed with grad (:meth:`_loss_inputs`),
        its share of the whole-batch loss (``grpo.grpo_loss_partial``, normalised by the whole batch's token /
        sequence count) back-propagated, and its graph freed before the next; then one optimiser step. With one
        micro-batch this is exactly the whole-batch step (``grpo.grpo_loss`` is ``grpo_loss_partial`` with one).
        Engines that sleep (``run.placement=timeshare``) sleep now; the weight sync after the step wakes them.
        """
        for engine in self.engines.values():
            if hasattr(engine, "sleep"):
                engine.sleep()
        masks = [b.mask for b in batches]
        counts = torch.cat([m.sum(-1) for m in masks])
        denom, tok_denom = self._denominators(counts, max(m.shape[1] for m in masks), max_len)
        totals = torch.zeros(4, dtype=torch.float64)  # loss, pg_loss, kl, clip_fraction
        gaps = []  # |trainer - engine| log-probs of the sampled tokens, per micro-batch
        self.optimizer.zero_grad(set_to_none=True)
        start = 0
        for b, mask in zip(batches, masks):
            adv = advantages[start: start + mask.shape[0]].to(mask.device)
            start += mask.shape[0]
            logp, ref_logp = self._loss_inputs(b)
            out = grpo.grpo_loss_partial(logp, logp.detach(), adv, mask, denominator=denom,
                                         token_denominator=tok_denom, loss_agg=self.cfg.loss_agg,
                                         clip_low=self.cfg.clip_low, clip_high=self.cfg.clip_high,
                                         kl_coef=self.cfg.kl_coef, ref_logp=ref_logp,
                                         is_weight=self._is_weight(logp, b.behaviour, mask))
            try:
                check_finite(out.loss.detach(), "loss", self.name)
            except NumericalError:
                self.optimizer.zero_grad(set_to_none=True)
                self.model.eval()
                raise
            if b.behaviour is not None:  # the engine's log-probs of the sampled tokens vs this forward pass
                gaps.append((logp.detach() - b.behaviour).abs()[mask.bool()].double())
            out.loss.backward()
            totals += torch.tensor([float(out.loss.detach()), float(out.pg_loss), float(out.kl),
                                    float(out.clip_fraction)], dtype=torch.float64)
            del logp, ref_logp, out
        grad_norm = self._apply_gradients()
        return self._update_stats(batches, counts, totals, gaps, grad_norm)

    def _denominators(self, counts: torch.Tensor, width: int, max_len: int | None) -> tuple[float, float]:
        """The whole update's loss denominator (``grpo.loss_agg``) and token count, from its (N,) token counts and
        padded width T (a sharded agent's ranks hold slices of the batch: :mod:`corl_bench.train.sharded`)."""
        return (grpo.aggregate_denominator(counts, self.cfg.loss_agg, width, max_len),
                grpo.aggregate_denominator(counts, "token-mean", width))

    def _update_stats(self, batches: Sequence[MicroBatch | PolicyForward], counts: torch.Tensor,
                      totals: torch.Tensor, gaps: list[torch.Tensor], grad_norm: torch.Tensor) -> UpdateStats:
        """The update's statistics from its micro-batches, (N,) token counts, summed (loss, pg_loss, kl,
        clip_fraction) shares and per-micro-batch log-prob gaps."""
        entropy = torch.cat([b.entropy for b in batches])
        n_tok = counts.to(entropy.dtype)
        mean_entropy = float((entropy * n_tok).sum() / n_tok.sum().clamp(min=1))
        loss, pg_loss, kl, clip = totals.tolist()
        gap = torch.cat(gaps) if gaps else torch.empty(0)
        gap_mean, gap_max = (float(gap.mean()), float(gap.max())) if gap.numel() else (None, None)
        if gap_mean is not None:
            self._watch_gap(gap_mean)
        return UpdateStats(loss=loss, pg_loss=pg_loss, kl=kl, clip_fraction=clip, grad_norm=float(grad_norm),
                           entropy=mean_entropy, n_tokens=int(counts.sum()), logp_gap_mean=gap_mean,
                           logp_gap_max=gap_max)

    def _watch_gap(self, mean_gap: float) -> None:
        """Warn once when the engine-vs-trainer log-prob gap jumps to 10x its first value (and past 1e-3 nats): the
        engine samples from weights the trainer no longer has (a failed or partial sync, a stale wake)."""
        if self._gap_base is None:
            self._gap_base = mean_gap
        if mean_gap > max(10 * self._gap_base, 1e-3) and not self._gap_warned:
            self._gap_warned = True
            log.warning("agent %s: the rollout engine's log-probs differ from the training forward by %.3g nats per "
                        "token (first step: %.3g): its weights look stale; check the weight sync (engine/logp_gap_*)",
                        self.name, mean_gap, self._gap_base)

    def update(self, advantages: Sequence[float] | torch.Tensor, max_len: int | None = None) -> UpdateStats:
        """One GRPO update on everything scored since the last update, one advantage per scored sample."""
        if self._micro:
            batches, self._micro = self._micro, []
            adv = torch.as_tensor(advantages, dtype=torch.float32).reshape(-1)
            n = sum(b.mask.shape[0] for b in batches)
            if adv.numel() != n:
                raise RuntimeError(f"agent {self.name}: {adv.numel()} advantages for {n} scored samples")
            return self.step_micro(batches, adv, max_len=max_len)
        if self._pending is None:
            raise RuntimeError(f"agent {self.name}: update() without scored samples; call score() first")
        fwd, self._pending = self._pending, None
        adv = torch.as_tensor(advantages, dtype=torch.float32).reshape(-1)
        if adv.numel() != fwd.logp.shape[0]:
            raise RuntimeError(f"agent {self.name}: {adv.numel()} advantages for {fwd.logp.shape[0]} scored samples")
        return self.step(fwd, adv, max_len=max_len)

    # ------------------------------------------------------------------ persistence
    def checkpoint(self, directory: Path) -> CheckpointFile:
        """:meth:`state_dict` written (``torch.save``, fsynced) to ``directory/agent-<name>.pt`` from this process."""
        return write_agent_state(self.state_dict(), checkpoint_file(directory, self.name), self.name)

    def restore(self, directory: Path) -> None:
        """:meth:`load_state_dict` of what :meth:`checkpoint` wrote into ``directory``; a checkpoint written by a
        sharded agent (``agent-<name>.dcp/``, several ranks) is read through torch.distributed.checkpoint, which
        reassembles the shards for this one process (:func:`corl_bench.train.dcp.load_distributed`)."""
        path = checkpoint_file(directory, self.name)
        if not path.exists() and path.with_suffix(".dcp").is_dir():
            from corl_bench.train.dcp import load_distributed

            load_distributed(self, path.with_suffix(".dcp"))
            return
        self.load_state_dict(torch.load(path, weights_only=False))

    def state_dict(self) -> dict[str, Any]:
        """Policy weights, AdamW state, the KL reference and the other auxiliary models (in-process; the
        controller reaches them only through :meth:`checkpoint` / :meth:`restore`)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "reference": self.reference.state_dict() if self.reference is not None else None,
                "auxiliary": {n: m.state_dict() for n, m in self.auxiliary.items() if m is not self.reference}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("reference") is not None:
            if self.reference is None:
                raise RuntimeError(f"checkpoint of agent {self.name} has a reference model but the agent has none")
            self.reference.load_state_dict(state["reference"])
        for name, sd in (state.get("auxiliary") or {}).items():
            if name not in self.auxiliary:
                raise RuntimeError(f"checkpoint of agent {self.name} has auxiliary model {name!r}; the method "
                                   f"declares {sorted(self.auxiliary) or 'none'}")
            self.auxiliary[name].load_state_dict(sd)
        for name, engine in self.engines.items():
            engine.sync_weights(self.model if name == POLICY else self.auxiliary[name])

    def save(self, path: Path) -> None:
        """The policy as a ``save_pretrained`` folder; with LoRA the adapters merged into the base weights (a plain
        model of the base architecture that any loader reads; the adapters alone are in :meth:`state_dict`)."""
        path.mkdir(parents=True, exist_ok=True)
        if has_lora(self.model):
            self.model.save_pretrained(path, state_dict=merged_state_dict(self.model))
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        if self.processor.codec is not None:  # a vision-language model: its image processor and image-token layout
            self.processor.codec.save_pretrained(path)
