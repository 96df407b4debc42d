"""``corl-bench ls``: one listing per registry kind, printed as a table whose name column is never cut, or as plain
tab-separated rows (a pipe, a log, a narrow terminal). Never imports torch."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

__all__ = ["LISTINGS", "print_listing"]


Listing = tuple[tuple[str, ...], list[tuple[str, ...]]]


def _list_methods(reg) -> Listing:
    rows = [(name, f"{cls.min_agents}+" if cls.max_agents is None else str(cls.min_agents), cls.extra_cost,
             "yes" if cls.uses_labels else "no", "official" if getattr(cls, "official", True) else "unofficial",
             cls.reference) for name, cls in reg.items()]
    return ("name", "agents", "extra cost", "uses labels", "code", "reference"), rows


def _list_cohorts(reg) -> Listing:
    rows = [(name, c.profile, ", ".join(a.name + (f" [{a.view}]" if a.view != "original" else "") for a in c.agents),
             c.description) for name, c in reg.items()]
    return ("name", "profile", "agents (ring order)", "description"), rows


def _list_benchmarks(reg) -> Listing:
    rows = []
    for name, spec in reg.items():  # BenchmarkSpec objects (corl_bench.eval.specs)
        dec, src = spec.decoding, spec.source
        decoding = (("greedy + " if dec.greedy else "") + f"T={dec.temperature} top-p={dec.top_p} "
                    f"≤{dec.max_new_tokens} tok")
        if dec.greedy and dec.samples == 0:
            decoding = f"greedy ≤{dec.max_new_tokens} tok"
        task = spec.task + ("+image" if spec.modality == "image" else "")
        rows.append((name, spec.version, task, str(dec.samples), decoding, f"{spec.extractor}/{spec.grader}",
                     str(src.local or src.suite or "-")))
    return ("name", "version", "task", "k", "decoding", "extractor/grader", "data"), rows


def _list_families(reg) -> Listing:
    """A family has a ``profile`` and an ``arch``; a micro family also a tokenizer kind and a flaw (a plugin's
    family need not)."""
    def flaw(fam: Any) -> str:
        return f"{fam.flaw} ({fam.p_sys})" if hasattr(fam, "flaw") else "-"

    rows = [(name, fam.profile, fam.arch.replace("Config", ""), str(getattr(fam, "tokenizer", "-")), flaw(fam))
            for name, fam in reg.items()]
    return ("name", "profile", "architecture", "tokenizer", "flaw (p_sys)"), rows


def _list_profiles(reg) -> Listing:
    return ("name",), [(name,) for name in reg.names()]


def _list_engines(reg) -> Listing:
    return ("name",), [(name,) for name in reg.names()]


LISTINGS = {"methods": _list_methods, "cohorts": _list_cohorts, "benchmarks": _list_benchmarks,
             "families": _list_families, "profiles": _list_profiles, "engines": _list_engines}


def print_listing(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A rich table whose name column is never cut, or plain tab-separated rows where it would not fit."""
    from rich.table import Table
    from rich.text import Text

    out = Console()
    if out.is_terminal and _table_fits(out.width, columns, rows):
        table = Table(title=title)
        table.add_column(columns[0], no_wrap=True, min_width=max(len(r[0]) for r in [columns, *rows]))
        for col in columns[1:]:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: "[rephrased]" is not markup
        out.print(table)
        return
    for row in (columns, *rows):
        typer.echo("\t".join(" ".join(cell.split()) for cell in row))


def _table_fits(width: int, columns: tuple[str, ...], rows: list[tuple[str, ...]], room: int = 10) -> bool:
    """Whether the whole name column plus ``room`` cells for each other column (less for a column whose longest
    word is shorter) fits: rich then wraps those columns and folds only words longer than the room they get."""
    from rich.cells import cell_len

    cols = list(zip(columns, *rows))
    words = [max(cell_len(w) for cell in col for w in cell.split() or [""]) for col in cols[1:]]
    need = max(cell_len(c) for c in cols[0]) + sum(min(w, room) for w in words) + 3 * len(cols) + 1
    return need <= width
