"""The rollout interface shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


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


class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """Completions for every prompt: result[p] has params.n completions of prompts[p]."""
        ...
