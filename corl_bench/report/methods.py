"""How each method's runs appear in tables, read from the method's own description (:mod:`corl_bench.method`).

A method class says, as class attributes, its ``label``, its ``kind`` (:meth:`~corl_bench.method.Method.method_kind`:
label-free, uses-labels or control), whether its agents train independently (``independent_agents``), its per-cohort
row suffixes (``cohort_labels``) and its place in the row order (``table_order``). The table layout reads them from
:data:`corl_bench.registries.METHODS` (method files are torch-free, so this stays cheap) and never names a method.

A run whose method this installation cannot describe — not registered (an uninstalled plugin, a renamed method) or
with an invalid ``kind`` — is still shown: its row is labelled with the raw name and its cohort
(``"my-method (cross-family)"``), sorted after every registered method, of kind :data:`UNKNOWN` and **not ranked**
(nothing says whether it is label-free, so it cannot be called the best label-free method); the table warns once
per such method.

Public API: :func:`describe` ``(name) -> MethodView``, :func:`registered` ``() -> list[MethodView]``,
:func:`row_labels` ``() -> {(method, cohort or ANY): label}`` in row order.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any, Optional

logger = logging.getLogger(__name__)

__all__ = ["ANY", "UNKNOWN", "MethodView", "describe", "registered", "row_labels"]

ANY = "*"  # row_labels(): any cohort
UNKNOWN = "unknown"  # the kind of a method that cannot be described here (shown, never ranked)
KINDS = ("label-free", "uses-labels", "control", UNKNOWN)


@dataclass(frozen=True)
class MethodView:
    """What the table needs to know about one method (by its run.json name)."""

    name: str
    kind: str  # label-free | uses-labels | control | unknown
    label: str = ""  # the method's label ("Co-RL"); "" for an unknown method (rows use the raw name and cohort)
    independent: bool = False  # each agent trains alone: its rows go to its own family's block
    order: int = sys.maxsize  # table_order; unknown methods sort after every registered one
    cohorts: tuple[str, ...] = ()  # cohort_labels keys, in row order
    cls: Any = None  # the registered class (None when unknown)
    problem: str = ""  # why the method is unknown (for the warning)

    @property
    def known(self) -> bool:
        return self.kind != UNKNOWN

    @property
    def per_cohort(self) -> bool:
        """Whether the method names its cohorts itself (``cohort_labels``)."""
        return bool(self.cohorts)

    def row(self, cohort: str, paper_row: str = "") -> tuple[tuple[int, int], str]:
        """(sort key, base label) of this method trained on ``cohort``: ``(table_order, index of the cohort in
        cohort_labels, or their count)`` and ``Method.row_label(cohort)``. A run whose cohort names the paper row it
        reproduces (run.json ``paper_row``) is labelled like that row's named cohort
        (:func:`corl_bench.method.labelled_cohort`)."""
        if not self.known:
            return (self.order, 0), f"{self.name} ({cohort})"
        from corl_bench.method import labelled_cohort, mirrored_cohort  # loaded with the method class already

        cohort = labelled_cohort(cohort, paper_row)
        kind = cohort if cohort in self.cohorts else mirrored_cohort(cohort)  # a VLM cohort: its text twin
        index = self.cohorts.index(kind) if kind in self.cohorts else len(self.cohorts)
        try:
            if getattr(self.cls, "label", "") or getattr(self.cls, "name", ""):
                return (self.order, index), str(self.cls.row_label(cohort))
        except Exception:  # noqa: BLE001 - a broken plugin must not break the table
            logger.debug("row_label of method %s failed", self.name, exc_info=True)
        # a class that sets neither label nor name: Method.row_label with the registered name
        suffix = dict(self.cls.cohort_labels).get(kind, cohort) if self.cohorts else ""
        return (self.order, index), self.label + (f" ({suffix})" if self.cohorts else "")


def _view(name: str, cls: Any) -> MethodView:
    """The view of a registered class (a Method subclass); UNKNOWN with a reason if it describes itself badly."""
    try:
        return MethodView(name, cls.method_kind(), str(cls.label or cls.name or name), bool(cls.independent_agents),
                          int(cls.table_order), tuple(cls.cohort_labels), cls)
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the table
        logger.debug("cannot read the description of method %s", name, exc_info=True)
        return MethodView(name, UNKNOWN, problem=" ".join(f"{type(exc).__name__}: {exc}".split()))


def describe(name: str) -> MethodView:
    """How runs of method ``name`` appear in tables (UNKNOWN when it is not registered or cannot be loaded)."""
    from corl_bench.registries import METHODS, RegistryError

    try:
        if name not in METHODS:
            return MethodView(name, UNKNOWN, problem="not registered here (an uninstalled plugin?)")
        cls = METHODS.get(name)
    except (RegistryError, ImportError) as exc:
        return MethodView(name, UNKNOWN, problem=str(exc))
    return _view(name, cls)


def registered() -> list[MethodView]:
    """Every registered method that loads, in row order (table_order, then name); broken plugins are skipped."""
    from corl_bench.registries import METHODS, RegistryError

    views = []
    for name in METHODS.names():
        try:
            views.append(_view(name, METHODS.get(name)))
        except (RegistryError, ImportError):
            logger.debug("skipping method %s", name, exc_info=True)
    return sorted((v for v in views if v.known), key=lambda v: (v.order, v.name))


def row_labels() -> dict[tuple[str, str], str]:
    """(method, cohort) -> row label for every registered method, in row order; cohort :data:`ANY` for a method
    with one label whatever the cohort. A read-only view of what the methods declare (built anew on each call)."""
    out: dict[tuple[str, str], str] = {}
    for view in registered():
        for cohort in view.cohorts or (ANY,):
            out[(view.name, cohort)] = view.row(cohort)[1]
    return out


def unranked_labels() -> tuple[list[str], list[str]]:
    """(labels of the registered uses-labels methods, labels of the registered controls), in row order."""
    views = registered()
    return ([v.label for v in views if v.kind == "uses-labels"], [v.label for v in views if v.kind == "control"])


def unofficial_labels(methods: "set[str] | list[str]") -> list[str]:
    """Labels of those ``methods`` (run.json names) implemented from a paper without public code
    (``Method.official = False``), in row order: the table's footnote names them."""
    return [v.label for v in registered() if v.name in methods and v.cls is not None
            and not getattr(v.cls, "official", True)]


def unknown_warning(view: MethodView, run_ids: "Optional[list[str]]" = None) -> str:
    """One line about rows of a method that cannot be described here."""
    where = f" (runs {', '.join(run_ids[:3])}{' and more' if len(run_ids) > 3 else ''})" if run_ids else ""
    return (f"method {view.name!r}{where}: {view.problem}; its rows are labelled with the raw name and not ranked")
