"""The project's registries (methods, engines, profiles, cohorts, model families, benchmarks, answer extractors,
graders, data converters) and the generic :class:`Registry` they are made of.

Nothing heavy is imported until a name is fetched. Files register themselves with a decorator
(``@METHODS.register("corl")``); a registry imports every module of its ``discover`` packages on first lookup or
listing, so no central list is needed. Entry points (``corl_bench.methods``, ``corl_bench.engines``,
``corl_bench.profiles``, ``corl_bench.extractors``, ``corl_bench.graders``, ``corl_bench.converters``) and ``"module:attr"`` placeholders are imported only when their name is fetched, so
``corl-bench ls`` never imports torch. Cohorts and benchmarks are YAML files (benchmarks are parsed into frozen,
validated :class:`corl_bench.eval.specs.BenchmarkSpec` objects when the registry is first read); families are small
records.
Modelled on lm-evaluation-harness's ``Registry``::

    METHODS.register_lazy("ttrl", "corl_bench.baselines.ttrl:TTRL")
    METHODS.names()          # ['corl', 'ttrl', ...] -- nothing heavy imported
    METHODS.get("CoRL")      # CoRL (case-insensitive, '_' == '-'; "did you mean" on a typo)
    METHODS.primary("Co-RL") # 'corl': with no exact match, punctuation and spaces are ignored too (one candidate
                             # or a one-line error naming them)

Extra cohort YAML files can live in any directory listed in ``$CORL_BENCH_COHORTS`` (``os.pathsep``-separated).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import pkgutil
import re
import threading
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Generic, Sequence, TypeVar, overload

import yaml

from corl_bench.config import AgentSpec, CohortConfig, ConfigError

__all__ = ["BENCHMARKS", "COHORTS", "CONVERTERS", "ENGINES", "EXTRACTORS", "FAMILIES", "GRADERS", "METHODS", "PROFILES",
           "Registry", "RegistryError", "load_object"]

T = TypeVar("T")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class RegistryError(KeyError):
    """Lookup or registration failure; ``str(e)`` is a clean one-line message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _one_line(exc: BaseException) -> str:
    """``"ExcType: message"`` on one line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def load_object(target: str) -> Any:
    """Import ``"module.path:attr"`` (``attr`` may be dotted) and return the attribute.

    Raises ``ValueError`` for a malformed target and ``ImportError`` with a one-line
    message when the module or attribute cannot be loaded.
    """
    _split_target(target)
    try:
        return _import_target(target)
    except Exception as exc:  # noqa: BLE001 - any failure becomes one clear line
        raise ImportError(f"cannot load {target!r}: {_one_line(exc)}") from exc


def _split_target(target: str) -> tuple[str, str]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"invalid target {target!r}: expected 'module.path:attr'")
    return module_name, attr


def _import_target(target: str) -> Any:
    module_name, attr = _split_target(target)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _canon(name: str) -> str:
    """Lookup key: case-insensitive, '_' and '-' equivalent."""
    return name.strip().lower().replace("_", "-")


def _loose(name: str) -> str:
    """Second-chance key: case-, punctuation- and space-insensitive (``Co-RL`` and ``co_rl`` read as ``corl``)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _qualified(obj: Any) -> str | None:
    """``module:qualname`` of a class/function, the target of a placeholder, else None."""
    if isinstance(obj, _Lazy):
        return obj.target
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}:{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


@dataclass(frozen=True)
class _Lazy:
    """Placeholder for an object imported on first ``get``."""

    target: str
    loader: Callable[[], Any]


@dataclass
class _Entry:
    name: str  # as registered (display form)
    value: Any
    aliases: list[str] = field(default_factory=list)


class Registry(Generic[T]):
    """Thread-safe mapping of names to objects of one ``kind`` ("method", "cohort", ...).

    ``discover`` lists dotted packages whose public modules are imported once, on the
    first lookup or listing; ``entry_point_group`` names an ``importlib.metadata``
    entry-point group whose entries become lazy placeholders; ``loaders`` are callables
    that register data-defined entries (cohort YAML files) at discovery time.
    """

    def __init__(self, kind: str, *, discover: Sequence[str] = (), entry_point_group: str | None = None,
                 loaders: Sequence[Callable[["Registry[T]"], None]] = ()) -> None:
        self.kind = kind
        self._discover_pkgs = tuple(discover)
        self._loaders = tuple(loaders)  # data-defined entries (e.g. cohort YAML files), run once at discovery
        self._group = entry_point_group
        self._entries: dict[str, _Entry] = {}
        self._aliases: dict[str, str] = {}  # canonical alias -> canonical primary name
        self._frozen = False
        self._discovered = False
        self._discovering = False
        self._lock = threading.RLock()  # guards the tables
        self._discover_lock = threading.RLock()  # serialises discovery; imports run outside _lock

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"

    # -- registration -----------------------------------------------------------------
    @overload
    def register(self, name: str, obj: None = None, *, aliases: Sequence[str] = ()) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, obj: T, *, aliases: Sequence[str] = ()) -> T: ...

    def register(self, name: str, obj: T | None = None, *, aliases: Sequence[str] = ()) -> Callable[[T], T] | T:
        """Bind ``name`` (and ``aliases``) to ``obj``; without ``obj``, return a decorator."""
        for n in (name, *aliases):
            self._check_name(n)
        if obj is None:
            def decorator(target: T) -> T:
                self._add(name, target, aliases)
                return target
            return decorator
        self._add(name, obj, aliases)
        return obj

    def register_lazy(self, name: str, target: str) -> None:
        """Bind ``name`` to ``"module.path:attr"``, imported only when ``name`` is fetched."""
        self._check_name(name)
        _split_target(target)
        self._add(name, _Lazy(target, lambda: _import_target(target)), ())

    def unregister(self, name: str) -> None:
        """Remove ``name`` and its aliases (meant for tests)."""
        with self._lock:
            if self._frozen:
                raise RegistryError(f"{self.kind} registry is frozen; cannot unregister {name!r}")
            key = self._resolve(name)
            if key is None:
                raise RegistryError(f"unknown {self.kind} {name!r}; nothing to unregister")
            for alias in self._entries.pop(key).aliases:
                self._aliases.pop(_canon(alias), None)

    def freeze(self) -> None:
        """Run discovery, then refuse any further (new) registration or removal."""
        self._ensure_discovered()
        with self._lock:
            self._frozen = True

    # -- lookup -----------------------------------------------------------------------
    def get(self, name: str) -> T:
        """Return the object bound to ``name``, importing a lazy placeholder if needed."""
        self._ensure_discovered()
        with self._lock:
            key = self._resolve(name, loose=True) if isinstance(name, str) else None
            if key is None:
                raise RegistryError(self._unknown_message(name))
            entry = self._entries[key]
            value = entry.value
        if not isinstance(value, _Lazy):
            return value
        try:
            loaded = value.loader()
        except Exception as exc:  # noqa: BLE001
            raise RegistryError(f"cannot load {self.kind} {entry.name!r} from {value.target!r}: {_one_line(exc)}") from exc
        with self._lock:
            if entry.value is value:  # the import may already have self-registered the real object
                entry.value = loaded
            return entry.value

    def names(self) -> list[str]:
        """Sorted primary names, after discovery, without loading any placeholder."""
        self._ensure_discovered()
        with self._lock:
            return sorted(e.name for e in self._entries.values())

    def items(self) -> list[tuple[str, T]]:
        """Sorted ``(name, object)`` pairs; loads every placeholder."""
        return [(n, self.get(n)) for n in self.names()]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self._ensure_discovered()
        with self._lock:
            try:
                return self._resolve(name, loose=True) is not None
            except RegistryError:  # ambiguous: get() says which names it could be
                return False

    def primary(self, name: str) -> str:
        """The registered (display) name that ``name`` resolves to (an alias, other case or '-'/'_' spelling);
        the registry's one-line :class:`RegistryError` for an unknown name. Nothing is loaded."""
        self._ensure_discovered()
        with self._lock:
            key = self._resolve(name, loose=True) if isinstance(name, str) else None
            if key is None:
                raise RegistryError(self._unknown_message(name))
            return self._entries[key].name

    def target(self, name: str) -> str | None:
        """``"module:attr"`` that ``name`` is bound to, without loading it: a placeholder's target, or where the
        registered class or function is defined; None for a registered data object (a cohort, a spec)."""
        self._ensure_discovered()
        with self._lock:
            key = self._resolve(name) if isinstance(name, str) else None
            if key is None:
                raise RegistryError(self._unknown_message(name))
            return _qualified(self._entries[key].value)

    # -- internals --------------------------------------------------------------------
    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"invalid {self.kind} name {name!r}: use lowercase letters, digits, '-' and '_'")

    def _resolve(self, name: str, loose: bool = False) -> str | None:
        """The canonical key of ``name`` (case-insensitive, '_' == '-'), else None; ``loose``: failing that, the one
        entry whose name or alias equals it with punctuation and spaces ignored (RegistryError naming the candidates
        when several do). Registration never matches loosely."""
        key = _canon(name)
        found = key if key in self._entries else self._aliases.get(key)
        if found is not None or not loose or not _loose(name):
            return found
        want = _loose(name)
        hits = sorted({k for k, e in self._entries.items() if any(_loose(n) == want for n in (e.name, *e.aliases))})
        if len(hits) > 1:
            names = " or ".join(repr(self._entries[k].name) for k in hits)
            raise RegistryError(f"{self.kind} {name!r} is ambiguous: it reads as {names}; write one of them exactly")
        return hits[0] if hits else None

    def _add(self, name: str, obj: Any, aliases: Sequence[str]) -> None:
        with self._lock:
            key = self._resolve(name)
            if key is not None:
                entry = self._entries[key]
                ident = _qualified(obj)
                if entry.value is obj or (ident is not None and ident == _qualified(entry.value)):
                    if isinstance(entry.value, _Lazy) and not isinstance(obj, _Lazy):
                        entry.value = obj  # the real object replaces its placeholder
                    return
                raise RegistryError(self._taken(name, entry))
            if self._frozen:
                raise RegistryError(f"{self.kind} registry is frozen; cannot register {name!r}")
            primary = _canon(name)
            for alias in aliases:
                owner = self._resolve(alias)
                if owner is not None or _canon(alias) == primary:
                    raise RegistryError(self._taken(alias, self._entries.get(owner or "") or _Entry(name, obj)))
            self._entries[primary] = _Entry(name, obj, list(aliases))
            for alias in aliases:
                self._aliases[_canon(alias)] = primary

    def _taken(self, name: str, entry: _Entry) -> str:
        by = _qualified(entry.value) or repr(entry.value)[:80]
        return f"{self.kind} {name!r} is already registered (by {by}); pick another name"

    def _unknown_message(self, name: object) -> str:
        valid = sorted(e.name for e in self._entries.values())
        candidates = {_canon(n): n for n in (*valid, *(a for e in self._entries.values() for a in e.aliases))}
        query = _canon(name) if isinstance(name, str) else ""
        close = difflib.get_close_matches(query, list(candidates), n=1, cutoff=0.6)
        hint = f"; did you mean {candidates[close[0]]!r}?" if close else ";"
        return f"unknown {self.kind} {name!r}{hint} valid: {', '.join(valid) or '(none)'}"

    def _ensure_discovered(self) -> None:
        if self._discovered:
            return
        with self._discover_lock:
            if self._discovered or self._discovering:  # _discovering: re-entered from an imported module
                return
            self._discovering = True
            try:
                for package in self._discover_pkgs:
                    self._import_package(package)
                for loader in self._loaders:
                    loader(self)
                self._load_entry_points()
                self._discovered = True
            finally:
                self._discovering = False

    def _import_package(self, package: str) -> None:
        current = package
        try:
            paths = getattr(importlib.import_module(package), "__path__", None)
            for info in pkgutil.iter_modules(paths or []):
                if not info.name.startswith("_"):
                    current = f"{package}.{info.name}"
                    importlib.import_module(current)
        except Exception as exc:  # noqa: BLE001
            raise RegistryError(f"cannot import {current!r} while discovering {self.kind}s: {_one_line(exc)}") from exc

    def _load_entry_points(self) -> None:
        if not self._group:
            return
        for ep in importlib.metadata.entry_points(group=self._group):
            try:
                self._check_name(ep.name)
                self._add(ep.name, _Lazy(ep.value, ep.load), ())
            except (ValueError, RegistryError) as exc:
                warnings.warn(f"skipping entry point {ep.name!r} ({self._group}): {exc}", RuntimeWarning, stacklevel=3)



# ------------------------------------------------------------------------------------- the project's registries
def cohort_from_yaml(path: Path | str, text: str | None = None) -> CohortConfig:
    """Parse one cohort file into a CohortConfig (one-line ConfigError on a bad file)."""
    text = Path(path).read_text(encoding="utf-8") if text is None else text
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"cohort file {path} is not valid YAML; fix its syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list) or not data.get("name"):
        raise ConfigError(f"cohort file {path} needs a name and a list of agents (name, family, view, seed_offset)")
    try:
        agents = tuple(AgentSpec(**a) for a in data["agents"])
    except TypeError as e:
        raise ConfigError(f"cohort file {path}: bad agent entry ({e}); each agent needs name and family") from None
    return CohortConfig(name=str(data["name"]), agents=agents, profile=str(data.get("profile") or ""),
                        description=str(data.get("description", "")), paper_row=str(data.get("paper_row") or ""))


def _load_builtin_cohorts(reg: Registry[CohortConfig]) -> None:
    files = [(f.name, f.read_text(encoding="utf-8")) for f in resources.files("corl_bench.cohorts").iterdir()
             if f.name.endswith(".yaml")]
    for extra in filter(None, os.environ.get("CORL_BENCH_COHORTS", "").split(os.pathsep)):
        files += [(str(p), p.read_text(encoding="utf-8")) for p in sorted(Path(extra).glob("*.yaml"))]
    for name, text in sorted(files):
        cohort = cohort_from_yaml(name, text)
        reg.register(cohort.name, cohort)


def _load_builtin_benchmarks(reg: Registry[Any]) -> None:
    """Parse every shipped ``benchmarks/*.yaml`` into a BenchmarkSpec (all files first, so that one bad file
    registers nothing); a bad file is a one-line ConfigError naming it, the field and the fix."""
    spec_from_yaml = load_object("corl_bench.eval.specs:spec_from_yaml")  # light (no torch); by name, as specs
    # itself imports this module for the extractor, grader and converter names
    files = sorted((f for f in resources.files("corl_bench.benchmarks").iterdir() if f.name.endswith(".yaml")),
                   key=lambda f: f.name)
    specs = [spec_from_yaml(f"benchmarks/{f.name}", f.read_text(encoding="utf-8")) for f in files]
    for spec in specs:
        reg.register(spec.name, spec)


def _load_micro_families(reg: Registry[Any]) -> None:
    families = load_object("corl_bench.micro.families:BUILTIN_FAMILIES")  # pure Python, no torch
    visual = load_object("corl_bench.micro.vl_families:VISUAL_FAMILIES")  # the micro visual world's VLMs
    for name, fam in {**families, **visual}.items():
        reg.register(name, fam)


#: Methods (:class:`corl_bench.method.Method` subclasses): trainers/, baselines/, entry points.
METHODS: Registry[Any] = Registry("method", discover=("corl_bench.trainers", "corl_bench.baselines"),
                                  entry_point_group="corl_bench.methods")
#: Rollout engines (:class:`corl_bench.rollout.RolloutEngine` classes), by ``rollout.backend``.
ENGINES: Registry[Any] = Registry("rollout engine", entry_point_group="corl_bench.engines")
ENGINES.register_lazy("hf", "corl_bench.rollout.hf:HFEngine")
ENGINES.register_lazy("fast", "corl_bench.rollout.fast:FastEngine")
ENGINES.register_lazy("vllm", "corl_bench.rollout.vllm:VLLMEngine")  # vLLM itself is imported lazily
#: Profiles (:class:`corl_bench.profile.Profile` classes), by ``model.profile``.
PROFILES: Registry[Any] = Registry("profile", entry_point_group="corl_bench.profiles")
PROFILES.register_lazy("micro", "corl_bench.micro.profile:MicroProfile")
PROFILES.register_lazy("hf", "corl_bench.hf.profile:HFProfile")
PROFILES.register_lazy("micro-visual", "corl_bench.micro.vl_profile:MicroVisualProfile")
#: Cohorts (:class:`corl_bench.config.CohortConfig`): ``corl_bench/cohorts/*.yaml``, ``$CORL_BENCH_COHORTS``, entry points.
COHORTS: Registry[CohortConfig] = Registry("cohort", loaders=(_load_builtin_cohorts,),
                                           entry_point_group="corl_bench.cohorts")
#: Benchmark specs (:class:`corl_bench.eval.specs.BenchmarkSpec`, frozen and validated), from ``benchmarks/*.yaml``.
BENCHMARKS: Registry[Any] = Registry("benchmark", loaders=(_load_builtin_benchmarks,),
                                     entry_point_group="corl_bench.benchmarks")
#: Model families (the micro profile's; a plugin's own): each says the ``profile`` that builds and loads it.
FAMILIES: Registry[Any] = Registry("model family", loaders=(_load_micro_families,),
                                   entry_point_group="corl_bench.families")
#: Answer extractors (``completion text -> answer or None``), by a spec's ``extractor`` or ``rollout.extractor``.
EXTRACTORS: Registry[Callable[[str], Any]] = Registry("answer extractor", entry_point_group="corl_bench.extractors")
for _name, _target in (("qwen", "corl_bench.grading.verifier:extract_normalized"),
                       ("boxed", "corl_bench.eval.scoring:extract_boxed"),
                       ("flexible", "corl_bench.eval.scoring:extract_flexible"),
                       ("letter", "corl_bench.eval.scoring:extract_letter"),
                       ("first_letter", "corl_bench.eval.scoring:extract_first_letter"),
                       ("code", "corl_bench.eval.scoring:extract_code"),
                       ("answer_tag", "corl_bench.eval.scoring:extract_answer_tag"),
                       ("boxed_abcd", "corl_bench.eval.science:extract_boxed_abcd"),
                       ("math_verify_number", "corl_bench.eval.science:extract_math_verify_number")):
    EXTRACTORS.register_lazy(_name, _target)
#: Graders (``(answer, gold) -> bool``; one with ``uses_choices = True`` also gets the item's options), by a spec's
#: ``grader``.
GRADERS: Registry[Callable[..., bool]] = Registry("grader", entry_point_group="corl_bench.graders")
for _name, _target in (("math", "corl_bench.grading.verifier:is_correct"), ("exact", "corl_bench.eval.scoring:_exact"),
                       ("letter", "corl_bench.eval.scoring:_letter"),
                       ("tests", "corl_bench.eval.scoring:_tests"),
                       ("mc_letter_or_value", "corl_bench.eval.scoring:mc_letter_or_value"),
                       ("rel_tol_5pct", "corl_bench.eval.science:rel_tol_5pct")):
    GRADERS.register_lazy(_name, _target)
#: Data converters (:class:`corl_bench.eval.converters.Converter`): how a spec's hub (or local) rows reach the
#: project's row schema, by a spec's ``source.converter``.
CONVERTERS: Registry[Any] = Registry("data converter", entry_point_group="corl_bench.converters")
for _name in ("columns", "gpqa", "livecodebench", "mathverse", "mathvision", "mathvista", "mmlu", "scibench",
              "wemath"):
    CONVERTERS.register_lazy(_name, f"corl_bench.eval.converters:{_name.upper()}")
del _name, _target
