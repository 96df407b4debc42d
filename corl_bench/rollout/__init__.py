"""Rollout engines behind one small interface: a batch of prompts in, completions with token ids and logprobs out.

Methods never call an engine; agents do. Backends: ``hf`` (transformers ``generate`` with KV cache). A vLLM backend
slots in by implementing :class:`RolloutEngine` and registering in :func:`make_engine`.
"""

from __future__ import annotations

from corl_bench.rollout.base import Completion, RolloutEngine, SamplingParams


def make_engine(backend: str, model, tokenizer, **kwargs) -> RolloutEngine:
    if backend == "hf":
        from corl_bench.rollout.hf import HFEngine

        return HFEngine(model, tokenizer, **kwargs)
    if backend == "fast":
        from corl_bench.rollout.fast import FastEngine

        return FastEngine(model, tokenizer, **kwargs)
    raise ValueError(f"unknown rollout backend {backend!r}; valid: hf, fast")


__all__ = ["Completion", "RolloutEngine", "SamplingParams", "make_engine"]
