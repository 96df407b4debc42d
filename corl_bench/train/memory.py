"""The memory options of the training step, on any Hugging Face causal LM (all opt-in; see ``GRPOConfig``):

* :class:`SplitLM` — the model split into its backbone (final hidden states) and its LM head (with the model's own
  logit soft-capping / scaling), so the agent can apply the head chunk by chunk (``memory.logit_chunk``) instead of
  materialising (N, T, V) logits; checked once against the model's own logits;
* :func:`enable_gradient_checkpointing` — ``memory.gradient_checkpointing``: recompute each decoder layer in
  backward (non-reentrant);
* :func:`autocast` — ``memory.autocast=bfloat16``: bf16 forward passes over fp32 weights (mixed precision);
* :func:`apply_lora` / :func:`merged_state_dict` — LoRA adapters (``peft``, imported lazily) injected into the
  model in place, the base frozen; the merged weights are what ``Agent.save`` writes and what an EMA teacher
  follows.

Nothing here runs unless one of those options is set, so the default training step is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Sequence

import torch
from torch import Tensor


log = logging.getLogger(__name__)

__all__ = ["PEFT_INSTALL", "SplitLM", "apply_lora", "enable_gradient_checkpointing"]

PEFT_INSTALL = "pip install -c constraints-cpu.txt peft"


class SplitLM:
    """A causal LM as backbone + head: ``head(hidden(ids, att))`` equals ``model(ids, att).logits``.

    The backbone is ``model.base_model`` (``model.model`` for Llama/Qwen2/Gemma, ``gpt_neox``, ``transformer``, ...)
    and its ``last_hidden_state`` (after the final norm); the head is ``model.get_output_embeddings()`` (tied
    embeddings included) followed by the model's logit post-processing: Gemma-2/3 ``final_logit_softcapping``
    (``cap * tanh(z / cap)``, skipped when None), Cohere's ``logit_scale`` and Granite's ``logits_scaling``. An
    architecture that does something else is caught by :meth:`check`, which the agent runs once per model.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        backbone = getattr(model, "base_model", model)
        self.backbone = model.get_decoder() if backbone is model else backbone
        self.lm_head = model.get_output_embeddings()
        if self.lm_head is None:
            raise RuntimeError(f"memory.logit_chunk: {type(model).__name__} has no output embeddings (LM head); "
                               "set memory.logit_chunk=0")
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        scale = getattr(model, "logit_scale", None)
        self.scale = float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else None
        self.divide = getattr(cfg, "logits_scaling", None)
        self.checked = False

    def hidden(self, ids: Tensor, att: Tensor, vision: dict[str, Tensor] | None = None) -> Tensor:
        """(N, L) ids and attention mask (and a vision-language batch's image inputs) -> (N, L, H) final hidden
        states (with grad when enabled)."""
        return self.backbone(input_ids=ids, attention_mask=att, use_cache=False, **(vision or {})).last_hidden_state

    def head(self, h: Tensor) -> Tensor:
        """(..., H) hidden states -> (..., V) logits exactly as the model's forward computes them."""
        z = self.lm_head(h)
        if self.scale is not None:
            z = z * self.scale
        if self.divide is not None:
            z = z / self.divide
        if self.softcap is not None:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z

    @torch.no_grad()
    def check(self, ids: Tensor, att: Tensor, positions: int = 16, vision: dict[str, Tensor] | None = None) -> None:
        """Compare ``head(hidden(...))`` with the model's own logits on one sequence (a vision-language batch: on the
        whole batch, whose image inputs cannot be cut to one row); raise if they differ."""
        if self.checked:
            return
        was_training = self.model.training
        self.model.eval()
        try:
            if vision:
                i, a = ids, att
            else:
                n = int(att[0].sum().clamp(max=positions))
                i, a = ids[:1, :n], att[:1, :n]
            ref = self.model(input_ids=i, attention_mask=a, use_cache=False, **(vision or {})).logits.float()
            got = self.head(self.hidden(i, a, vision)).float()
        finally:
            self.model.train(was_training)
        err = float((ref - got).abs().max()) if ref.numel() else 0.0
        if ref.shape != got.shape or err > 1e-3 * (1.0 + float(ref.abs().max())):
            raise RuntimeError(f"memory.logit_chunk: the split LM head of {type(self.model).__name__} does not "
                               f"reproduce its logits (max difference {err:.3g}); set memory.logit_chunk=0")
        self.checked = True


def autocast(setting: str, model: Any) -> Any:
    """``memory.autocast``: for ``bfloat16`` a ``torch.autocast`` context on the model's device type, so the forward
    passes inside it run their matmuls in bf16 while the parameters (and so gradients and AdamW state) keep their
    fp32 dtype; no cast cache, so no bf16 copy of the weights outlives a layer (gradient checkpointing and FSDP2 keep
    their memory). The log-softmax and entropy of :mod:`corl_bench.train.grpo` upcast to fp32. ``off``: a no-op."""
    if setting == "off":
        return contextlib.nullcontext()
    if setting != "bfloat16":
        raise ValueError(f"memory.autocast={setting} reached training unresolved; resolve the config first "
                         "(corl_bench.train.runner.resolve decides what auto means on this machine)")
    return torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16, cache_enabled=False)


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute every decoder layer in backward (non-reentrant; active while the model is in train mode)."""
    kwargs = {"use_reentrant": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            raise RuntimeError(f"memory.gradient_checkpointing: {type(model).__name__} does not support it; set "
                               "memory.gradient_checkpointing=false")


def apply_lora(model: Any, rank: int, alpha: float, dropout: float, targets: Sequence[str], seed: int) -> Any:
    """Inject LoRA adapters into ``model`` in place (``peft``) and freeze everything else; returns ``model``.

    targets: ``("all-linear",)`` (every linear layer but the LM head) or module names (``q_proj``, ...). The
    adapters' initial values come from ``seed`` (inside a forked RNG: the global stream is untouched); B starts
    at 0, so the model computes exactly what it did before.
    """
    try:
        import peft
    except ImportError:
        raise RuntimeError(f"LoRA (memory.lora_rank > 0) needs peft: {PEFT_INSTALL}") from None
    target: str | list[str] = "all-linear" if tuple(targets) == ("all-linear",) else list(targets)
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target,
                          task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.manual_seed(seed)
        wrapped = peft.get_peft_model(model, cfg)
    base = wrapped.get_base_model()
    base._corl_lora = True  # a plain flag (the peft wrapper is not kept: the adapters live in the modules)
    n_train = sum(p.numel() for p in base.parameters() if p.requires_grad)
    log.info("LoRA r=%d alpha=%g on %s: %d trainable parameters", rank, alpha, target, n_train)
    return base
