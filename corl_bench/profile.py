"""The profile protocol: where a run's models, training prompts and benchmarks come from.

A profile is registered in :data:`corl_bench.registries.PROFILES` under the name ``model.profile`` takes (``micro``;
a plugin registers through the ``corl_bench.profiles`` entry-point group) and built as ``Profile(model_cfg)``. A
cohort agent's ``family`` field names the model the profile loads for it (a micro family such as ``qwen2-bpe``).

The class-level checks run in ``corl-bench validate`` and before ``corl-bench run`` writes anything, so they must
not load models or read data. Everything else runs in the training run.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from corl_bench.rollout.base import Request

ProgressFn = Callable[[str, int, int], None]
"""``progress(model, done, total)`` while a profile prepares (builds, downloads) a model."""


class Problem(Protocol):
    """A training problem: an id shared by every view of it and the hidden answer (diagnostics only)."""

    id: str
    answer: str


class BenchItem(Protocol):
    """A benchmark problem as a profile serves it: id, gold answer and its prompt text in a view."""

    id: str
    gold: str

    def prompt(self, view: str = "original") -> str: ...


@runtime_checkable
class Profile(Protocol):
    name: ClassVar[str]

    def __init__(self, model_cfg: Any = None) -> None: ...

    # ---------------------------------------------------------------- checks without I/O (validate = run)
    @classmethod
    def check_agent(cls, agent: Any) -> None:
        """Raise a one-line ConfigError unless this profile can build a model for ``agent`` (an AgentSpec)."""
        ...

    @classmethod
    def check_benchmark(cls, name: str, spec: Mapping[str, Any]) -> None:
        """Raise a one-line ConfigError unless this profile can evaluate benchmark ``name``."""
        ...

    def check_writable(self, models: Sequence[str]) -> None:
        """Raise a one-line ConfigError if preparing ``models`` would have to write where it cannot."""
        ...

    # ---------------------------------------------------------------- models
    def missing(self, models: Sequence[str]) -> list[str]:
        """The models that :meth:`prepare` still has to build or fetch (cheap; no model is loaded)."""
        ...

    def prepare(self, models: Sequence[str], progress: ProgressFn | None = None) -> Any:
        """Build or fetch what is missing (the micro warm start); a no-op when everything is there."""
        ...

    def load(self, model: str) -> tuple[Any, Any]:
        """(model in eval mode, left-padding tokenizer with a pad token) for a cohort agent's ``family``."""
        ...

    # ---------------------------------------------------------------- data
    def training_problems(self, seed: int) -> Iterator[Problem]:
        """The unlabeled training stream (identical for every agent of a run)."""
        ...

    def render(self, problem: Any, view: str) -> Request:
        """The request an agent in ``view`` (original | rephrased) is given for a training problem."""
        ...

    def benchmark(self, name: str) -> Sequence[BenchItem]:
        """The items of benchmark ``name`` (after :meth:`check_benchmark` accepted it)."""
        ...
