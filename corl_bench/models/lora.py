"""LoRA adapters merged into plain weights: the state dict a rollout engine (vLLM's weight sync) or a checkpoint
reader expects from an adapter-carrying model. Moved from ``corl_bench.train.memory`` (issue 23) so the rollout
engines do not import training; ``train.memory`` injects the adapters.
Torch and peft are imported inside the functions only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["has_lora", "merged_state_dict"]


def has_lora(model: Any) -> bool:
    """Whether ``model`` carries LoRA adapters injected by :func:`corl_bench.train.memory.apply_lora`."""
    return bool(getattr(model, "_corl_lora", False))


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The plain state dict of a LoRA-injected model with every adapter merged into its base weight.

    Keys are those of the model without adapters (``...q_proj.weight``, not ``...q_proj.base_layer.weight``);
    values are new tensors for merged weights and the model's own tensors otherwise (do not modify them).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    with torch.no_grad():
        return _merged(model, LoraLayer)


def _merged(model: Any, lora_layer: type) -> dict[str, Any]:
    """:func:`merged_state_dict` under ``no_grad``: every active adapter's delta added to its base weight."""
    deltas = {}
    for name, module in model.named_modules():
        if isinstance(module, lora_layer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A or adapter in getattr(module, "lora_embedding_A", {}):
                    d = module.get_delta_weight(adapter)
                    deltas[f"{name}.weight"] = deltas[f"{name}.weight"] + d if f"{name}.weight" in deltas else d
    out = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        out[plain] = value + deltas[plain].to(value.dtype) if plain in deltas else value
    return out
