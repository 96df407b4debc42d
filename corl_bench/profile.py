"""The profile contract: where a run's models, training prompts and benchmarks come from.

A profile is a subclass of :class:`Profile`, registered in :data:`corl_bench.registries.PROFILES` under the name
``model.profile`` takes (``micro``, ``micro-visual``, ``hf``; a plugin registers through the ``corl_bench.profiles``
entry-point group) and built as ``cls(model_cfg)``. A cohort agent's ``family`` names the model the profile loads
for it (a micro family such as ``qwen2-bpe``; for ``hf`` a model entry, a folder or a hub id). What belongs to a
profile is said where it is defined, never by a name in the core: a benchmark spec's ``profile`` names the profile
that serves its generated suite, a registered model family's ``profile`` names the one that builds it, and a spec's
``modality`` says whether it has images.

The contract is closed: the core calls every hook below on every profile, and :class:`Profile` gives each optional
hook a documented default, so a profile overrides what it needs and nothing is looked up by ``getattr`` or by
signature. Six methods have no default (``check_agent``, ``load``, ``training_problems``, ``render``, ``benchmark``
and the class attribute ``name``).

Class-level hooks (classmethods) run in ``corl-bench validate`` and before ``corl-bench run`` writes anything, so
they must not load models or read data; everything else runs in the training run (or in an agent's worker process,
which builds its own profile instance and calls :meth:`Profile.configure` before :meth:`Profile.load`).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterator, Mapping, Protocol, Sequence

from corl_bench.rollout.request import Request, prompt_text

ProgressFn = Callable[[str, int, int], None]
"""``progress(model, done, total)`` while a profile prepares (builds, downloads) a model."""


class Problem(Protocol):
    """A training problem: an id shared by every view of it and the hidden answer (diagnostics only)."""

    id: str
    answer: str


class BenchItem(Protocol):
    """A benchmark problem as a profile serves it: id, gold answer and its prompt in a view (a ``str`` or a
    :class:`~corl_bench.rollout.base.Request` with images). Items without ``prompt()`` (the ``hf`` profile's
    :class:`corl_bench.eval.items.Item`) are rendered by the benchmark spec's template with the agent's tokenizer
    (chat template), exactly as ``corl-bench eval`` renders them."""

    id: str
    gold: str

    def prompt(self, view: str = "original") -> Any: ...


class Profile:
    """Base class of every profile. Subclass it, set :attr:`name`, implement the methods marked *required* and
    override any default hook whose default does not fit."""

    name: ClassVar[str] = ""
    """the registered name (``model.profile``)"""
    images: ClassVar[bool] = False
    """the profile's requests carry images: ``validate`` refuses a rollout engine or memory option without an image
    path (``supports_images``); the default of :meth:`takes_images`"""

    def __init__(self, model_cfg: Any = None) -> None:
        self.model_cfg = model_cfg

    # ------------------------------------------------------------------ checks without I/O (validate = run)
    @classmethod
    def check_agent(cls, agent: Any) -> None:
        """*Required.* Raise a one-line ConfigError unless this profile can build a model for ``agent`` (an
        :class:`~corl_bench.config.AgentSpec`: ``family``, ``prompt``, ...)."""
        raise NotImplementedError(f"profile {cls.name!r} ({cls.__qualname__}) must implement check_agent")

    @classmethod
    def check_benchmark(cls, name: str, spec: Any) -> None:
        """Raise a one-line ConfigError unless this profile can evaluate benchmark ``name`` (``spec``: its
        :class:`corl_bench.eval.specs.BenchmarkSpec`). Default: the generated suites this profile serves
        (``spec.profile == cls.name``)."""
        if spec.profile != cls.name:
            from corl_bench.config import ConfigError

            raise ConfigError(f"eval.benchmarks: {name!r} is not a suite of the {cls.name} profile; set "
                              f"eval.benchmarks to one of {', '.join(cls.default_benchmarks()) or 'its suites'}")

    @classmethod
    def check_data(cls, cfg: Any) -> None:
        """Validate the run's ``data`` section against this profile (no I/O beyond checking that files exist).
        Default: a profile that generates its problems refuses ``data.train``."""
        if cfg.data.train:
            from corl_bench.config import ConfigError

            raise ConfigError(f"data.train={cfg.data.train!r}: the {cls.name} profile generates its own training "
                              "problems; unset data.train (or use a profile that reads training sets, e.g. hf)")

    @classmethod
    def takes_images(cls, agent: Any) -> bool | None:
        """Whether ``agent``'s model takes images, read without loading it (None: not known before it is
        downloaded). Default: :attr:`images`."""
        return cls.images

    @classmethod
    def own_image_codec(cls, agent: Any) -> bool:
        """Whether a vision-language ``agent``'s model carries corl-bench's own image codec rather than a Hugging Face
        processor (then vLLM cannot load it), read without loading it. Default: True (every micro visual family)."""
        return True

    @classmethod
    def default_benchmarks(cls) -> tuple[str, ...]:
        """What a run evaluates when ``eval.benchmarks`` is not set. Default: () = the config's own
        default."""
        return ()

    @classmethod
    def dev_benchmark(cls) -> str | None:
        """The registered benchmark that is this profile's labelled dev split, disjoint from every test set
        (``micro-dev``); ``eval.select=dev`` and ``label-free`` decide on it (:mod:`corl_bench.train.select`).
        Default: None, and validation refuses those rules."""
        return None

    @classmethod
    def fill_defaults(cls, cfg: Any, method_cls: Any) -> tuple[Any, list[str]]:
        """``(cfg, notes)``: the config with this profile's own values in the keys nobody set (hf: the sizes of a
        CPU step), one note per value filled (``validate`` prints them). Decide "unset" with ``cfg.is_set(key)``,
        never by comparing a value with the global default: a value the user wrote is the value that runs, even
        when it equals the default. Default: unchanged, no notes."""
        return cfg, []

    @classmethod
    def check_memory(cls, cfg: Any, method_cls: Any) -> list[str]:
        """Notes on whether a training step fits the devices (a one-line ResourceError when it cannot). Default:
        none."""
        return []

    @classmethod
    def compute_weights(cls, cfg: Any) -> list[int | None]:
        """Each cohort agent's weights that take part in a matrix product per token (layers and LM head): how the
        agents' step costs compare, for ``run.backend=auto`` (:mod:`corl_bench.train.parallel`). Default: unknown."""
        return [None] * len(cfg.cohort.agents)

    @classmethod
    def fetch(cls, cfg: Any) -> None:
        """Download what the run needs from the hub before the run directory is written (hf). Default: nothing."""

    def check_writable(self, models: Sequence[str]) -> None:
        """Raise a one-line ConfigError if preparing ``models`` would have to write where it cannot. Default: no
        check (nothing is written)."""

    # ------------------------------------------------------------------ the run
    def configure(self, cfg: Any) -> None:
        """The run's whole resolved config, given once before anything is loaded (data sources, benchmarks, seeds).
        Default: nothing to configure."""

    def missing(self, models: Sequence[str]) -> list[str]:
        """The models :meth:`prepare` still has to build or fetch (cheap; nothing is loaded). Default: none."""
        return []

    def prepare(self, models: Sequence[str], progress: ProgressFn | None = None) -> Any:
        """Build or fetch what is missing (the micro warm start); a no-op when everything is there (the default)."""
        return None

    def load(self, model: str, device: str | None = None) -> tuple[Any, Any]:
        """*Required.* ``(model in eval mode on device, left-padding tokenizer with a pad token)`` for a cohort
        agent's ``family``; ``device`` None or ``cpu``: the CPU, ``auto``: a GPU when one is visible."""
        raise NotImplementedError(f"profile {self.name!r} must implement load")

    def training_problems(self, seed: int) -> Iterator[Problem]:
        """*Required.* The unlabeled training stream (identical for every agent of a run)."""
        raise NotImplementedError(f"profile {self.name!r} must implement training_problems")

    def render(self, problem: Any, view: str, model: str | None = None, prompt: str = "") -> Request:
        """*Required.* The request an agent is given for a training problem: ``view`` (original | rephrased),
        ``model`` the agent's ``family`` (a profile that renders a chat template needs to know whose), ``prompt`` the
        agent's prompt format ("" = the profile's default)."""
        raise NotImplementedError(f"profile {self.name!r} must implement render")

    def stop_strings(self, prompt: str) -> tuple[str, ...]:
        """Where generation stops for an agent asked in prompt format ``prompt``. Default: nowhere special."""
        return ()

    def follow_up(self, request: Request, reply: str, user: str, model: str | None = None, prompt: str = ""
                  ) -> Request:
        """The request that continues a conversation (a verifier turn): ``request`` as the agent was asked (its
        rendered first turn), the agent's ``reply``, then the user turn ``user``, ending where the next reply
        starts; ``model`` and ``prompt`` as in :meth:`render`. Default (no chat template): plain text,
        ``request + reply + "\n\n" + user + "\n"``; the request's images are kept."""
        return Request(text=f"{prompt_text(request)}{reply}\n\n{user}\n", images=getattr(request, "images", ()))

    def rephraser(self) -> Any:
        """The rephrased view's source when it needs loading (hf: a model that rephrases), else None (default)."""
        return None

    def decontaminate(self, benchmarks: Mapping[str, Sequence[Any]]) -> dict[str, Any] | None:
        """Given ``{name: items}`` of every benchmark the run evaluates, drop overlapping training problems before
        the first one is drawn; the returned report lands in run.json (``contamination``). Default: None (the
        profile's problems cannot overlap: nothing to report)."""
        return None

    def benchmark(self, name: str) -> Sequence[BenchItem]:
        """*Required.* The items of benchmark ``name`` (after :meth:`check_benchmark` accepted it)."""
        raise NotImplementedError(f"profile {self.name!r} must implement benchmark")


def check_profile_class(name: str, cls: Any) -> None:
    """A one-line ConfigError unless ``cls`` (registered as profile ``name``) subclasses :class:`Profile`."""
    if not (isinstance(cls, type) and issubclass(cls, Profile)):
        from corl_bench.config import ConfigError

        raise ConfigError(f"model.profile={name!r}: {getattr(cls, '__qualname__', cls)!r} is not a profile; make it "
                          "subclass corl_bench.profile.Profile (its default hooks close the contract)")


def pooled(stream: Iterator[Any], seed: int, pool_size: int) -> Iterator[Any]:
    """``stream`` as a run trains on it: unchanged, or (``data.train_pool`` = N > 0) its first N problems in epochs,
    each epoch shuffled by ``Random((run seed, epoch))`` so that a resumed run replays exactly the same order; a
    ConfigError (before the first draw) when the stream holds fewer than N."""
    if not pool_size:
        return stream
    import random
    from itertools import count, islice

    from corl_bench.config import ConfigError

    pool = list(islice(stream, pool_size))
    if len(pool) < pool_size:
        raise ConfigError(f"data.train_pool={pool_size} but the training set has {len(pool)} problems; "
                          f"set data.train_pool={len(pool)} or less")

    def epochs() -> Iterator[Any]:
        for epoch in count():
            order = list(range(len(pool)))
            random.Random(f"{seed}:{epoch}").shuffle(order)
            yield from (pool[i] for i in order)

    return epochs()


def render_for(profile: Profile, problem: Any, agent: Any) -> Request:
    """The request ``agent`` (an AgentSpec) is given for ``problem``."""
    return profile.render(problem, agent.view, model=agent.family, prompt=agent.prompt)


def stop_for(profile: Profile, agent: Any) -> tuple[str, ...]:
    """The stop strings of ``agent``'s prompt format; () when it has none."""
    return tuple(profile.stop_strings(agent.prompt)) if agent.prompt else ()


class AskedItem:
    """A benchmark item as ``agent`` is asked a training problem (a spec with ``ask_as_trained``): the item's id and
    gold, and the request the profile renders for it in the agent's prompt format (original view)."""

    __slots__ = ("id", "gold", "request", "meta", "images", "choices")

    def __init__(self, item: Any, request: Request) -> None:
        self.id, self.gold, self.request = item.id, item.gold, request
        self.meta, self.images, self.choices = getattr(item, "meta", {}) or {}, (), ()

    def prompt(self, view: str = "original") -> Request:
        return self.request


def asked_items(profile: Profile, spec: Any, items: Sequence[Any], agent: Any) -> Sequence[Any]:
    """``items`` as ``agent`` (an AgentSpec) is asked them: rendered by the profile in the agent's own prompt format
    when the spec says ``ask_as_trained``, else unchanged (the spec's template renders them)."""
    if not spec.ask_as_trained:
        return items
    return [AskedItem(it, profile.render(it, "original", model=agent.family, prompt=agent.prompt)) for it in items]


def asked_decoding(profile: Profile, spec: Any, decoding: Any, agent: Any) -> Any:
    """``decoding`` with the agent's stop strings added when the spec says ``ask_as_trained``."""
    stops = stop_for(profile, agent) if spec.ask_as_trained else ()
    if not stops:
        return decoding
    import dataclasses

    return dataclasses.replace(decoding, stop=tuple(dict.fromkeys((*decoding.stop, *stops))))


def selection_benchmark(rule: str, profile_cls: type[Profile], benchmarks: Sequence[str]) -> str | None:
    """The benchmark a rule is decided on: the profile's dev split (dev, label-free), the first evaluated benchmark
    (test-oracle), None (final). Here, beside the profile contract, because validation of a profile's benchmarks
    (``hf``) and training's selection (:mod:`corl_bench.train.select`) both use it."""
    if rule in ("dev", "label-free"):
        return profile_cls.dev_benchmark()
    if rule == "test-oracle":
        return benchmarks[0] if benchmarks else None
    return None
