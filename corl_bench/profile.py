"""The profile protocol: where a run's models, training prompts and benchmarks come from.

A profile is registered in :data:`corl_bench.registries.PROFILES` under the name ``model.profile`` takes (``micro``,
``hf``; a plugin registers through the ``corl_bench.profiles`` entry-point group) and built as ``Profile(model_cfg)``.
A cohort agent's ``family`` field names the model the profile loads for it (a micro family such as ``qwen2-bpe``; for
``hf`` a model entry, a folder or a hub id).

The class-level checks run in ``corl-bench validate`` and before ``corl-bench run`` writes anything, so they must
not load models or read data. Everything else runs in the training run.

Optional hooks (a profile without them behaves as before; the runner looks them up with ``getattr``):

* ``check_data(cls, cfg)`` (classmethod): validate the run's ``data`` section against this profile (no I/O beyond
  checking that files exist);
* ``configure(self, cfg)``: the run's whole resolved config, given once before anything is loaded (data sources,
  benchmarks, seeds);
* ``decontaminate(self, benchmarks) -> dict | None``: given ``{name: items}`` of every benchmark the run evaluates,
  drop overlapping training problems before the first one is drawn; the returned report lands in run.json
  (``contamination``).
* ``dev_benchmark(cls) -> str | None`` (classmethod): the registered benchmark that is this profile's labelled dev
  split, disjoint from every test set (``micro-dev`` for micro); ``eval.select=dev`` and ``label-free`` decide on
  it (:mod:`corl_bench.train.select`). Without the hook, or when it returns None, validation refuses those rules.
* ``default_benchmarks(cls) -> tuple[str, ...]`` (classmethod): what a run evaluates when ``eval.benchmarks`` is left
  at its default (``micro-visual`` evaluates ``micro-visual-test``, not the text ``micro-test``).
* ``images`` (class attribute, default False): the profile's requests carry images, so ``validate`` refuses a rollout
  engine without an image path (``supports_images``).
* ``takes_images(cls, agent) -> bool | None`` (classmethod): whether the agent's model takes images, read without
  loading it (None: not known yet); validation refuses an image benchmark for a text model and an engine or memory
  option without an image path for a vision-language one. Without the hook, ``images`` decides.

:func:`load_for` and :func:`render_for` call ``load`` and ``render`` with the agent's device and model where the
profile accepts them, and without where it predates them.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar, Iterator, Protocol, Sequence, runtime_checkable

from corl_bench.rollout.base import Request

ProgressFn = Callable[[str, int, int], None]
"""``progress(model, done, total)`` while a profile prepares (builds, downloads) a model."""


class Problem(Protocol):
    """A training problem: an id shared by every view of it and the hidden answer (diagnostics only)."""

    id: str
    answer: str


class BenchItem(Protocol):
    """A benchmark problem as a profile serves it: id, gold answer and its prompt text in a view. Items without
    ``prompt()`` (the ``hf`` profile's :class:`corl_bench.eval.items.Item`) are rendered by the benchmark spec's
    template with the agent's tokenizer (chat template), exactly as ``corl-bench eval`` renders them."""

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
    def check_benchmark(cls, name: str, spec: Any) -> None:
        """Raise a one-line ConfigError unless this profile can evaluate benchmark ``name`` (``spec``: its
        :class:`corl_bench.eval.specs.BenchmarkSpec`, read by attribute)."""
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

    def load(self, model: str, device: str | None = None) -> tuple[Any, Any]:
        """(model in eval mode on ``device``, left-padding tokenizer with a pad token) for a cohort agent's
        ``family``; ``device`` None or ``cpu``: the CPU, ``auto``: a GPU when one is visible."""
        ...

    # ---------------------------------------------------------------- data
    def training_problems(self, seed: int) -> Iterator[Problem]:
        """The unlabeled training stream (identical for every agent of a run)."""
        ...

    def render(self, problem: Any, view: str, model: str | None = None) -> Request:
        """The request an agent in ``view`` (original | rephrased) is given for a training problem; ``model`` is the
        agent's ``family`` (a profile that renders a chat template needs to know whose)."""
        ...

    def benchmark(self, name: str) -> Sequence[BenchItem]:
        """The items of benchmark ``name`` (after :meth:`check_benchmark` accepted it)."""
        ...


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def load_for(profile: Any, model: str, device: str | None) -> tuple[Any, Any]:
    """``profile.load(model, device=device)``; a profile whose ``load`` takes no device gets ``load(model)``."""
    if _accepts(profile.load, "device"):
        return profile.load(model, device=device)
    return profile.load(model)


def render_for(profile: Any, problem: Any, agent: Any) -> Request:
    """``profile.render(problem, agent.view, model=agent.family[, prompt=agent.prompt])``; a two-argument ``render``
    gets (problem, view)."""
    if _accepts(profile.render, "model"):
        if getattr(agent, "prompt", "") and _accepts(profile.render, "prompt"):
            return profile.render(problem, agent.view, model=agent.family, prompt=agent.prompt)
        return profile.render(problem, agent.view, model=agent.family)
    return profile.render(problem, agent.view)


def stop_for(profile: Any, agent: Any) -> tuple[str, ...]:
    """The stop strings of the agent's prompt format (``profile.stop_strings(prompt)``, optional); () by default."""
    prompt = getattr(agent, "prompt", "")
    hook = getattr(profile, "stop_strings", None)
    return tuple(hook(prompt)) if prompt and hook is not None else ()


def selection_benchmark(rule: str, profile_cls: Any, benchmarks: Sequence[str]) -> str | None:
    """The benchmark a rule is decided on: the profile's dev split (dev, label-free), the first evaluated benchmark
    (test-oracle), None (final). Here, beside the profile protocol, because validation of a profile's benchmarks
    (``hf``) and training's selection (:mod:`corl_bench.train.select`, which re-exports it) both use it."""
    if rule in ("dev", "label-free"):
        named = getattr(profile_cls, "dev_benchmark", None)
        return named() if callable(named) else None
    if rule == "test-oracle":
        return benchmarks[0] if benchmarks else None
    return None
