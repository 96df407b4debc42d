"""The one prompt type of the project (engines, agents, profiles, methods): :class:`Request`, rendered text *or* token
ids, plus optional images for vision-language models; plain, picklable data. Re-exported by
:mod:`corl_bench.rollout.base` and :mod:`corl_bench.rollout` (its own module so the request encoder,
:mod:`corl_bench.rollout.encode`, needs nothing of the engines).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union


@dataclass(frozen=True)
class Request:
    """What a model is asked: the rendered prompt as ``text`` or as ``token_ids`` (exactly one), and ``images``
    (PIL images or paths, in the order the prompt refers to them; empty for text models)."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    images: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError("a Request needs exactly one of text or token_ids")
        if self.token_ids is not None and not isinstance(self.token_ids, tuple):
            object.__setattr__(self, "token_ids", tuple(self.token_ids))
        if not isinstance(self.images, tuple):
            object.__setattr__(self, "images", tuple(self.images))

    def __str__(self) -> str:
        return self.text if self.text is not None else f"<{len(self.token_ids or ())} token ids>"


Prompt = Union[Request, str]
"""What engines and agents accept: a :class:`Request`, or plain text (taken as ``Request(text=...)``)."""


def as_request(prompt: Prompt) -> Request:
    return prompt if isinstance(prompt, Request) else Request(text=str(prompt))


def as_requests(prompts: Sequence[Prompt]) -> list[Request]:
    return [as_request(p) for p in prompts]


def prompt_text(prompt: Prompt) -> str:
    """The text of a prompt for logs and prediction rows (token-id requests have none: a placeholder)."""
    return str(prompt)
