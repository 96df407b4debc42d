"""``corl-bench table``: the paper-style results table of a results directory, printed and written to files.

The table is built in layers whose imports point one way (none of them imports torch or transformers):

* :mod:`corl_bench.report.collect` - read the run directories and regrade their predictions
  (:func:`collect_results`, :func:`collect`, :class:`Row`, :class:`AgentResult`, :class:`RunProtocol`, ...);
* :mod:`corl_bench.report.layout` - blocks, rows in the order and with the labels the methods declare, marks,
  footer (imports collect);
* :mod:`corl_bench.report.render` - md / LaTeX / CSV / HTML / rich (imports collect and layout);
* this module - :func:`main` (what ``corl-bench table`` does: print, write files) and :func:`html` (the table as an
  embeddable HTML fragment); it imports all three. Where the runs are: ``results/runs`` by default (the user's own
  runs), a committed study by name (:func:`study_dir`, :func:`studies`: a directory directly under ``results/`` that
  holds runs, other than ``runs/``). Warnings are printed in full or as one line (:func:`warnings_summary`, by
  :func:`warning_kind`); a run set aside for a newer one of the same cell is always named. A benchmark that a
  ``contamination.json`` (``corl-bench probe contamination``) flags as recited gets ``‡`` and a footer line
  (:func:`corl_bench.report.contamination.mark_table`).

Files are written with :func:`corl_bench.results.atomic_write_text`.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console

from corl_bench.report import contamination as contamination_mod
from corl_bench.report.collect import (DEFAULT_METRICS, FORMATS, Collected, Row, aggregate, check_metrics,
                                       collect_results, find_runs)
from corl_bench.report.layout import build, check_reference, paper_table
from corl_bench.report.cells import PaperTable
from corl_bench.report.render import FORMAT_SUFFIXES, print_rich, render_text
from corl_bench.results import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["RESULTS_ROOT", "RUNS_DIR", "WARNING_KINDS", "html", "main", "studies", "study_dir", "warning_kind",
           "warnings_summary"]

RESULTS_ROOT = Path("results")  # where studies live, one directory each (relative to the working directory)
RUNS_DIR = "runs"  # results/runs: where `corl-bench run` writes the user's own runs (the table's default)
SHOWN_NOTICES = 3  # "set aside" lines printed without --warnings


def html(source: str | Path | Collected, *, metrics: Sequence[str] = DEFAULT_METRICS,
         reference: Optional[str] = None, backbone: Optional[str] = None) -> str:
    """The paper-style table of every run under a results directory (or of what :func:`collect_results` returned,
    to avoid regrading twice) as a self-contained HTML ``<table>`` fragment, with the paper's table appended as a
    second ``<table>`` when ``reference="paper"`` finds nothing to compare; ValueError (one line) on a bad metric,
    reference or backbone. Its warnings are logged."""
    table = build(source, metrics=metrics, reference=reference, backbone=backbone)
    for warning in table.warnings:
        logger.warning("%s", warning)
    return render_text(table, "html")


def _say(console: Console, text: str, style: Optional[str] = None) -> None:
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------ where the runs are
def studies(root: str | Path = RESULTS_ROOT) -> list[str]:
    """The committed studies under ``root``: every directory directly under it, other than ``runs/`` (where
    ``corl-bench run`` writes the user's own runs), that holds at least one run; sorted names."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and d.name != RUNS_DIR and find_runs(d))


def study_dir(name: str, root: str | Path = RESULTS_ROOT) -> Path:
    """The directory of study ``name``: ``root/name`` (``corl-bench table --study NAME``); ValueError (one line
    naming the known studies, with "did you mean") when no directory of that name under ``root`` holds runs."""
    root = Path(root)
    if name == RUNS_DIR or name in studies(root):
        return root / name
    known = studies(root)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    what = f"{root / name} holds no runs" if (root / name).is_dir() else f"{name!r} is not a study"
    raise ValueError(f"--study {name}: {what}; {hint}studies under {root}/: {', '.join(known) or '(none)'} "
                     "(or pass any directory of runs with -r DIR)")


# ------------------------------------------------------------------------------------------ warnings
#: (phrase in a warning, what a summary calls warnings of that kind); the first phrase found names the kind.
WARNING_KINDS: tuple[tuple[str, str], ...] = (
    ("duplicate run ", "duplicate runs set aside"),
    (" comes from ", "seeds found in several cohorts"),
    ("skipping ", "unreadable runs skipped"),
    ("no run has base-phase predictions", "blocks without Base"),
    ("has no predictions for phase base", "runs without a base-phase evaluation"),
    ("has no predictions for phase", "runs without predictions"),
    ("have no predictions for phase", "agents without predictions"),
    ("has status", "unfinished runs"),
    ("lack some of", "rows missing a benchmark"),
    ("sampled completions per problem but its spec", "benchmarks with fewer samples than their spec"),
    ("environments differ", "environment differences"),
    ("no readable env.json", "environment differences"),
    ("runs differ in", "settings that differ between runs"),
    ("runs were made with", "settings that differ between runs"),
    ("predictions come from versions", "benchmark versions"),
    ("stored predictions are version", "benchmark versions"),
    ("not registered here", "methods not registered here"),
    ("selected their checkpoint on the test set", "checkpoints selected on the test set"),
    ("has no config.yaml", "runs without a readable config.yaml"),
    ("cannot read config.yaml", "runs without a readable config.yaml"),
    ("is empty; ignored", "empty predictions files"),
    ("selected phase", "selected phases without predictions"),
    ("paper_row", "unknown paper rows"),
    ("lack some of", "rows missing a benchmark"),
)


def warning_kind(warning: str) -> str:
    """What kind of warning ``warning`` is, in a few words (:data:`WARNING_KINDS`; "other" when none matches)."""
    return next((kind for phrase, kind in WARNING_KINDS if phrase in warning), "other")


def warnings_summary(warnings: Sequence[str]) -> str:
    """One line: "12 warnings (3 kinds): 8 rows missing a benchmark, ...; --warnings shows them"."""
    counts: dict[str, int] = {}
    for warning in warnings:
        kind = warning_kind(warning)
        counts[kind] = counts.get(kind, 0) + 1
    kinds = sorted(counts.items(), key=lambda item: (-item[1], item[0] == "other", item[0]))
    n = len(warnings)
    return (f"{n} warning{'s' if n != 1 else ''} ({len(kinds)} kind{'s' if len(kinds) != 1 else ''}): "
            + ", ".join(f"{count} {kind}" for kind, count in kinds) + "; --warnings shows them")


def _say_warnings(table: PaperTable, err: Console, show_warnings: bool) -> None:
    """The notices (a run set aside for another: each in full, up to :data:`SHOWN_NOTICES`), then every other
    warning (``show_warnings``) or one summary line."""
    notices = list(dict.fromkeys(table.notices))
    for line in notices[:SHOWN_NOTICES] if not show_warnings else notices:
        _say(err, f"note: {line}", "yellow")
    if len(notices) > SHOWN_NOTICES and not show_warnings:
        _say(err, f"note: {len(notices) - SHOWN_NOTICES} more run(s) set aside for another; --warnings lists them",
             "yellow")
    rest = [w for w in table.warnings if w not in set(notices)]
    if show_warnings:
        for warning in rest:
            _say(err, f"warning: {warning}", "yellow")
    elif rest:
        _say(err, warnings_summary(rest), "yellow")


def main(
    results_dir: str | Path = RESULTS_ROOT / RUNS_DIR,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    out_dir: str | Path | None = None,
    fmt: Optional[str] = None,
    out: str | Path | None = None,
    reference: Optional[str] = None,
    backbone: Optional[str] = None,
    console: Optional[Console] = None,
    err_console: Optional[Console] = None,
    se: bool = False,
    show_warnings: bool = True,
    contamination: str | Path | None = None,
) -> list[Row]:
    """``corl-bench table``: print the paper-style table of the runs under ``results_dir`` (default
    ``results/runs``, the user's own runs; rich, or ``fmt`` text when ``fmt`` is given without ``out``), its footer
    and the warnings; write ``out`` in ``fmt`` (default: from its suffix, else md) atomically, or else ``table.md``
    and ``table.csv`` into ``out_dir`` (default: the results dir). Warnings and "wrote" lines go to ``err_console``
    (default: ``console``): every warning with ``show_warnings``, else one summary line, after the lines that say a
    run was set aside for another (always shown). Without runs, ``reference="paper"`` (or a ``backbone``) prints the
    paper's tables on their own (written only to ``out``).
    ``se``: each cell also shows the evaluation's standard error ("62.3 ± 1.2 [se 0.8]"; the CSV always has it).
    ``contamination``: a ``contamination.json`` whose recited benchmarks get ``‡`` and a footer line (default: every
    one :func:`corl_bench.report.contamination.find_reports` finds for ``results_dir``).
    Returns the aggregated rows of :func:`collect` ([] when there is nothing to show); ValueError (one line)
    on a bad metric, format, reference or backbone."""
    console = console or Console()
    err = err_console or console
    metrics = check_metrics(metrics)
    check_reference(reference, backbone)
    if out is not None and fmt is None:
        fmt = FORMAT_SUFFIXES.get(Path(out).suffix.lower(), "md")
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)} (e.g. --format md)")
    results_dir = Path(results_dir)
    if not find_runs(results_dir):
        if reference == "paper" or backbone is not None:  # the paper's tables on their own
            targets = [] if out is None else [(Path(out), fmt or "md")]
            _show(paper_table(backbone, root=results_dir if results_dir.is_dir() else None),
                  fmt if out is None else None, targets, console, err, show_warnings)
            _say(err, f"No runs found under {results_dir}; the paper's tables are shown on their own.")
            return []
        known = studies(results_dir.parent) if results_dir.name == RUNS_DIR else []
        hint = f"; or open a committed study: --study {known[0]} (studies: {', '.join(known)})" if known else ""
        _say(console, f"No runs found under {results_dir}; start one with `corl-bench run`{hint}.")
        return []
    collected = collect_results(results_dir)
    table = build(collected, metrics=metrics, reference=reference, backbone=backbone, root=results_dir, se=se)
    reports = [Path(contamination)] if contamination is not None else contamination_mod.find_reports(results_dir)
    table = contamination_mod.mark_table(table, contamination_mod.recited(reports))
    if not table.blocks:
        _say_warnings(table, err, show_warnings)
        _say(console, f"No usable results under {results_dir} (see the warnings above).")
        return []
    if out is not None:
        targets = [(Path(out), fmt or "md")]
    else:
        where = Path(out_dir) if out_dir is not None else results_dir
        targets = [(where / "table.md", "md"), (where / "table.csv", "csv")]
    _show(table, fmt if out is None else None, targets, console, err, show_warnings)
    return aggregate(collected)[0]


def _show(table: PaperTable, fmt: Optional[str], targets: Sequence[tuple[Path, str]], console: Console,
          err: Console, show_warnings: bool = True) -> None:
    """Print ``table`` (``fmt`` text, or rich when ``fmt`` is None), then its warnings; write each (path, format)."""
    if fmt is not None:
        console.out(render_text(table, fmt), highlight=False, end="")
    else:
        print_rich(console, table)
    _say_warnings(table, err, show_warnings)
    for path, kind in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, render_text(table, kind))
        except OSError as exc:
            _say(err, f"warning: cannot write {path} ({exc.strerror or exc}); choose another place with "
                 "--out FILE or --output-dir DIR", "yellow")
            continue
        _say(err, f"wrote {path}")
