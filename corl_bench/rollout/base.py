"""The rollout interface every engine implements: requests in, completions with token ids and log-probs out.

:class:`Request` is the one prompt type of the project (engines, agents, profiles, methods): rendered text *or*
token ids, plus optional images for vision-language models. Everything here is plain, picklable data, so an engine
or the agent that owns it can live in another process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

from corl_bench.rollout.request import Prompt, as_requests

__all__ = ["Completion", "InProcessEngine", "RolloutEngine", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    """completions per prompt"""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 40
    greedy: bool = False
    """argmax decoding (n must be 1)"""
    seed: int = 0
    """sampling seed: same prompts + same seed -> same completions; agents use different seeds"""
    logprobs: bool = True
    """return per-token logprobs of the sampled tokens under softmax(logits / temperature)"""
    stop: tuple[str, ...] = ()
    """stop at the first of these strings; the text is cut before it and the completion counts as finished"""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1 (got {self.n})")
        if self.greedy and self.n != 1:
            raise ValueError("greedy decoding gives one completion per prompt; set n=1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (got {self.temperature}); use greedy=True for argmax")


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]
    """generated tokens, up to and including EOS when it was produced"""
    logprobs: tuple[float, ...]
    """one per token in token_ids (empty when not requested)"""
    text: str
    """decoded completion without special tokens"""
    finished: bool
    """False when the completion hit max_new_tokens without EOS (a clipped generation)"""

    @property
    def n_tokens(self) -> int:
        """The completion's length in tokens of its model's tokenizer (``len(token_ids)``, EOS counted when it was
        produced): what a length penalty should count, not ``len(text)`` (characters). Every engine fills
        ``token_ids`` (hf, fast, vllm, the sharded and Ray agents'), so this holds for any of them."""
        return len(self.token_ids)


@runtime_checkable
class RolloutEngine(Protocol):
    """A rollout backend, registered in :data:`corl_bench.registries.ENGINES` under the name ``rollout.backend``
    takes (``hf``, ``fast``; a plugin registers through the ``corl_bench.engines`` entry-point group).

    ``Engine(model, tokenizer, **options)`` builds it for one agent's policy. The agent calls :meth:`sync_weights`
    after every update of ``model``: engines that read the live module (``hf``, ``fast``) do nothing there; an
    engine holding its own copy of the weights (vLLM) loads the new ones.
    """

    supports_images: ClassVar[bool]

    def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """Completions for every request: result[p] has params.n completions of requests[p]."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Called after every optimiser (or EMA) update of ``model``, before the next generate."""
        ...


class InProcessEngine:
    """Base of engines that generate with the agent's own ``transformers`` module: nothing to sync."""

    supports_images: ClassVar[bool] = False

    def sync_weights(self, model: Any) -> None:  # the engine reads the live module
        return None

    @property
    def processor(self) -> Any:
        """The engine's :class:`corl_bench.rollout.encode.Processor` (its tokenizer and, for a VLM, its codec)."""
        proc = self.__dict__.get("_processor")
        if proc is None:
            from corl_bench.rollout.encode import Processor

            proc = self.__dict__["_processor"] = Processor.of(self.tokenizer)  # type: ignore[attr-defined]
        return proc

    def encode(self, requests: Sequence[Prompt], device: Any) -> dict[str, Any]:
        """Left-padded ``input_ids`` and ``attention_mask`` (B, L) of a batch of requests on ``device``, plus the image
        inputs of a vision-language model when requests carry images (:mod:`corl_bench.rollout.encode`).

        Images are refused by engines without an image path."""
        from corl_bench.rollout.encode import encode, left_padded

        reqs = as_requests(requests)
        if any(r.images for r in reqs) and not self.supports_images:
            raise ValueError(f"the {type(self).__name__} engine has no image input; set rollout.backend=hf for "
                             "vision-language agents")
        return left_padded(self.processor, encode(self.processor, reqs), device)
