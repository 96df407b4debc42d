"""Rollout engines behind one protocol (:class:`RolloutEngine`): requests in, completions with token ids and
log-probs out, and a weight-sync hook called after every update.

Methods never call an engine; agents do. Engines are registered in :data:`corl_bench.registries.ENGINES`
(``hf``: transformers ``generate``; ``fast``: shared prefill, finished rows dropped, an in-place KV cache). A new
backend is one class registered there, or in the ``corl_bench.engines`` entry-point group of a plugin package.
"""

from __future__ import annotations

from typing import Any

from corl_bench.rollout.base import Completion, InProcessEngine, RolloutEngine, SamplingParams
from corl_bench.rollout.request import Prompt, Request, as_request, as_requests, prompt_text


def make_engine(backend: str, model: Any, tokenizer: Any, **kwargs: Any) -> RolloutEngine:
    """The registered engine ``backend`` built for ``model`` (``kwargs``: the engine's own options)."""
    from corl_bench.registries import ENGINES, RegistryError

    try:
        cls = ENGINES.get(backend)
    except RegistryError as e:
        raise ValueError(f"rollout.backend: {e}") from None
    return cls(model, tokenizer, **kwargs)


__all__ = ["Completion", "InProcessEngine", "Prompt", "Request", "RolloutEngine", "SamplingParams", "as_request",
           "as_requests", "make_engine", "prompt_text"]
