"""Devices and dtypes of ``model.device`` / ``model.dtype`` (and an agent's ``device``), resolved at load time (moved
from ``corl_bench.hf.device``, issue 23: every profile, evaluation and training use it).

Torch is imported inside the functions only, so config validation and ``corl-bench ls`` stay torch-free.
"""

from __future__ import annotations

from typing import Any

from corl_bench.config import ConfigError, MachineError


def resolve_device(device: str | None) -> str:
    """``auto`` (or None) -> ``cuda`` when a GPU is visible, else ``cpu``; a CUDA device that is not there is a
    one-line ConfigError."""
    import torch

    device = device or "auto"
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if index >= count:
            raise MachineError(f"device {device} is not available (torch sees {count} CUDA device(s)); set "
                               "model.device=auto or cpu, or the agent's device")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """The torch dtype of ``model.dtype`` on ``device``: ``auto`` = bf16 on CUDA, fp32 elsewhere."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    except KeyError:
        raise ConfigError(f"model.dtype must be float32, bfloat16 or auto (got {dtype!r})") from None
