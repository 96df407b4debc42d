"""The run record: what ``run.json`` holds, as one typed, frozen dataclass.

:class:`RunRecord` is the only shape of ``run.json``. The runner builds and updates one (``dataclasses.replace``),
:meth:`corl_bench.results.RunDir.write_record` writes it and :meth:`corl_bench.results.RunDir.record` reads it back;
every reader (table, plots, report, study, probe, resume, the end-of-run summary, scripts) reads this class instead of
a dict.

The JSON is the one runs have always written: the same keys in the same order, each written only when it is set
(``None`` = not recorded), so run directories written before this class existed read unchanged and a run written now
reads in old tools. Reading is tolerant: a missing key is ``None``; a key of the wrong type is ``None`` too and its raw
value is kept in :attr:`RunRecord.invalid` (strict readers such as the table turn that into a one-line warning, see
:meth:`RunRecord.problem`); keys this version does not know are kept in :attr:`RunRecord.extra`. Both are written
back unchanged, so rewriting an old record (a resume) loses nothing.

No imports from the rest of the project: this module sits below :mod:`corl_bench.results`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = ["AgentEntry", "RunRecord", "STATUSES", "VOLATILE"]

#: What ``status`` holds: ``running`` while a process writes the run (or after it was killed), ``finished``,
#: ``failed`` (an exception ended it; ``error`` says which).
STATUSES = ("running", "finished", "failed")


#: Fields that say when, where and how fast a run ran (and what it was named after), not what it produced: two runs of one
#: config differ in them and nothing else (:meth:`RunRecord.comparable`).
VOLATILE = frozenset({"run_id", "started_at", "finished_at", "wall_seconds", "timings", "resumed_at", "actors",
                       "resolved"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class AgentEntry:
    """One agent of the cohort as run.json lists it (cohort order): its name, model family and prompt view."""

    name: str
    family: Optional[str] = None
    view: Optional[str] = None  # "original" | "rephrased"; None in stand-alone evaluations (corl-bench eval)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know

    @classmethod
    def from_dict(cls, raw: Any) -> Optional["AgentEntry"]:
        """The entry of one ``agents`` item; None unless it is an object with a non-empty string ``name``."""
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            return None
        family, view = raw.get("family"), raw.get("view")
        return cls(raw["name"], family if isinstance(family, str) else None, view if isinstance(view, str) else None,
                   {k: v for k, v in raw.items() if k not in ("name", "family", "view")})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.family is not None:
            out["family"] = self.family
        if self.view is not None:
            out["view"] = self.view
        return {**out, **self.extra}


#: field -> the JSON type it must have (checked on reading); fields not listed hold any JSON value.
_KINDS: dict[str, tuple[str, Any]] = {
    **{k: ("str", lambda v: isinstance(v, str)) for k in (
        "run_id", "method", "cohort", "profile", "tag", "status", "started_at", "model", "paper_row", "stopped",
        "error", "finished_at")},
    "seed": ("int", _is_int),
    **{k: ("int", lambda v: _is_int(v) and v >= 0) for k in ("steps", "stopped_after_step")},
    "wall_seconds": ("float", _is_number),
    "phases": ("list", lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v)),
    **{k: ("list", lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v)) for k in (
        "resumed_at", "resolved")},
    "timings": ("dict", lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values())),
    "collapse_alarms": ("list", lambda v: isinstance(v, list)),
    "agents": ("list", lambda v: False),  # reached only when it is not a list
}


@dataclass(frozen=True)
class RunRecord:
    """run.json of one run directory. ``None`` = not recorded (the key is absent from the file).

    Field order is the key order of the file a training run writes. Mutable JSON values (``teachers``,
    ``selection``, ...) are kept as read; treat them as read-only and ``replace`` the record to change them."""

    run_id: Optional[str] = None  # the directory name
    method: Optional[str] = None  # registered method name ("base" for a stand-alone evaluation)
    cohort: Optional[str] = None
    profile: Optional[str] = None
    seed: Optional[int] = None
    tag: Optional[str] = None  # variant label (run.tag), "" = none
    status: Optional[str] = None  # one of STATUSES
    started_at: Optional[str] = None  # ISO time the run was created
    model: Optional[str] = None  # the evaluated model of a stand-alone evaluation (corl-bench eval)
    agents: Optional[tuple[AgentEntry, ...]] = None  # cohort order (the ring order of Co-RL)
    steps: Optional[int] = None  # run.steps: the steps the run was started for
    phases: Optional[tuple[str, ...]] = None  # evaluation phases written, in the order they were (re)written
    timings: Optional[Mapping[str, float]] = None  # phase -> seconds (models, eval_<phase>, train)
    paper_row: Optional[str] = None  # the paper row its cohort reproduces (cohort.paper_row)
    resolved: Optional[tuple[str, ...]] = None  # what resolving the config filled in or estimated (validate's notes)
    teachers: Any = None  # method.teachers(): agent -> the agents it learns from
    contamination: Any = None  # the profile's decontamination report
    collapse_alarms: Optional[tuple[Any, ...]] = None  # [] = watched and silent; None = not watched
    stopped: Optional[str] = None  # "collapse" when run.stop_on_collapse ended the run early
    stopped_after_step: Optional[int] = None  # steps trained when it stopped early
    rephrase: Any = None  # the rephrased view's model, cache and statistics (hf profile)
    selection: Any = None  # eval.select: rule, benchmark and each agent's chosen phase
    resumed_at: Optional[tuple[str, ...]] = None  # ISO time of each resume
    actors: Any = None  # run.backend=ray: agent -> where its actor ran (Ray node id, host, pid, device, resources)
    error: Optional[str] = None  # why a failed run failed (one line)
    finished_at: Optional[str] = None
    wall_seconds: Optional[float] = None  # wall time over all of the run's processes
    invalid: Mapping[str, Any] = field(default_factory=dict)  # key -> raw value of a known key of the wrong type
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know, as read

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "RunRecord":
        """The record of a run.json object; never raises (see the module docstring for what is tolerated)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("invalid", "extra")]
        values: dict[str, Any] = {}
        invalid: dict[str, Any] = {}
        for name in names:
            if name not in raw or raw[name] is None:
                continue
            value = raw[name]
            if name == "agents" and isinstance(value, list):  # well-formed entries kept, the raw list if any is not
                entries = [AgentEntry.from_dict(a) for a in value]
                if any(e is None for e in entries):
                    invalid[name] = value
                values[name] = tuple(e for e in entries if e is not None)
                continue
            kind = _KINDS.get(name)
            if kind is not None and not kind[1](value):
                invalid[name] = value
                continue
            if name in ("phases", "resumed_at", "collapse_alarms", "resolved"):
                value = tuple(value)
            elif name == "timings":
                value = dict(value)
            values[name] = value
        extra = {k: v for k, v in raw.items() if k not in names}
        return cls(**values, invalid=invalid, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The run.json object: every recorded field in field order (invalid values as read), then unknown keys."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("invalid", "extra"):
                continue
            value = getattr(self, f.name)
            if f.name in self.invalid:
                out[f.name] = self.invalid[f.name]
            elif value is None:
                continue
            elif f.name == "agents":
                out[f.name] = [a.to_dict() for a in value]
            elif isinstance(value, tuple):
                out[f.name] = list(value)
            elif isinstance(value, Mapping):
                out[f.name] = dict(value)
            else:
                out[f.name] = value
        return {**out, **self.extra}

    def comparable(self) -> dict[str, Any]:
        """:meth:`to_dict` without the :data:`VOLATILE` fields: equal for two runs that produced the same thing."""
        return {k: v for k, v in self.to_dict().items() if k not in VOLATILE}

    # ------------------------------------------------------------------ reading
    def problem(self, key: str) -> Optional[str]:
        """Why ``key`` cannot be used (``has no 'seed'``, ``field 'seed' should be int (got 'x')``); None if it can.
        Strict readers prefix ``run.json`` and skip the run."""
        if key in self.invalid:
            kind = _KINDS.get(key, ("value",))[0]
            return f"field {key!r} should be {kind} (got {self.invalid[key]!r})"
        if getattr(self, key, None) is None:
            return f"has no {key!r}"
        return None

    @property
    def agent_names(self) -> tuple[str, ...]:
        """The names of the well-formed agent entries, in cohort order."""
        return tuple(a.name for a in self.agents or ())

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def selection_rule(self) -> Optional[str]:
        """``selection.rule`` when the record has a readable one (eval.select), else None."""
        sel = self.selection
        return sel["rule"] if isinstance(sel, Mapping) and isinstance(sel.get("rule"), str) else None

    # ------------------------------------------------------------------ updating (the runner)
    def replace(self, **changes: Any) -> "RunRecord":
        """A copy with ``changes`` (a field set to None is dropped from the file); its invalid raw values of the
        changed keys are forgotten."""
        invalid = {k: v for k, v in self.invalid.items() if k not in changes}
        return dataclasses.replace(self, **changes, invalid=invalid)

    def with_phase(self, phase: str, seconds: float) -> "RunRecord":
        """The record after evaluation ``phase`` was (re)written in ``seconds``: the phase moves to the end."""
        phases = tuple(p for p in self.phases or () if p != phase) + (phase,)
        return self.replace(phases=phases, timings={**(self.timings or {}), f"eval_{phase}": seconds})

    def with_timing(self, key: str, seconds: float, *, add: bool = False) -> "RunRecord":
        """The record with ``timings[key]`` set to ``seconds`` (``add``: added to what it holds)."""
        timings = dict(self.timings or {})
        timings[key] = timings.get(key, 0.0) + seconds if add else seconds
        return self.replace(timings=timings)
