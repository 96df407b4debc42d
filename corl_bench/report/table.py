"""``corl-bench table``: the paper-style results table of a results directory, printed and written to files.

The table is built in layers whose imports point one way (none of them imports torch or transformers):

* :mod:`corl_bench.report.collect` - read the run directories and regrade their predictions
  (:func:`collect_results`, :func:`collect`, :class:`Row`, :class:`AgentResult`, :class:`RunProtocol`, ...);
* :mod:`corl_bench.report.layout` - blocks, rows in the order and with the labels the methods declare, marks,
  footer (imports collect);
* :mod:`corl_bench.report.render` - md / LaTeX / CSV / HTML / rich (imports collect and layout);
* this module - :func:`main` (what ``corl-bench table`` does: print, write files) and :func:`html` (the table as an
  embeddable HTML fragment); it imports all three.

Files are written with :func:`corl_bench.results.atomic_write_text`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console

from corl_bench.report.collect import (DEFAULT_METRICS, FORMATS, Collected, Row, aggregate, check_metrics,
                                       collect_results, find_runs)
from corl_bench.report.layout import build, check_reference, paper_table
from corl_bench.report.cells import PaperTable
from corl_bench.report.render import FORMAT_SUFFIXES, print_rich, render_text
from corl_bench.results import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["html", "main"]


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


def main(
    results_dir: str | Path = "results",
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
) -> list[Row]:
    """``corl-bench table``: print the paper-style table (rich, or ``fmt`` text when ``fmt`` is given without
    ``out``), its footer and the warnings; write ``out`` in ``fmt`` (default: from its suffix, else md)
    atomically, or else ``table.md`` and ``table.csv`` into ``out_dir`` (default: the results dir). Warnings and
    "wrote" lines go to ``err_console`` (default: ``console``). Without runs, ``reference="paper"`` (or a
    ``backbone``) prints the paper's tables on their own (written only to ``out``).
    ``se``: each cell also shows the evaluation's standard error ("62.3 ± 1.2 [se 0.8]"; the CSV always has it).
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
                  fmt if out is None else None, targets, console, err)
            _say(err, f"No runs found under {results_dir}; the paper's tables are shown on their own.")
            return []
        _say(console, f"No runs found under {results_dir}; start one with `corl-bench run`.")
        return []
    collected = collect_results(results_dir)
    table = build(collected, metrics=metrics, reference=reference, backbone=backbone, root=results_dir, se=se)
    if not table.blocks:
        for warning in table.warnings:
            _say(err, f"warning: {warning}", "yellow")
        _say(console, f"No usable results under {results_dir} (see the warnings above).")
        return []
    if out is not None:
        targets = [(Path(out), fmt or "md")]
    else:
        where = Path(out_dir) if out_dir is not None else results_dir
        targets = [(where / "table.md", "md"), (where / "table.csv", "csv")]
    _show(table, fmt if out is None else None, targets, console, err)
    return aggregate(collected)[0]


def _show(table: PaperTable, fmt: Optional[str], targets: Sequence[tuple[Path, str]], console: Console,
          err: Console) -> None:
    """Print ``table`` (``fmt`` text, or rich when ``fmt`` is None), then its warnings; write each (path, format)."""
    if fmt is not None:
        console.out(render_text(table, fmt), highlight=False, end="")
    else:
        print_rich(console, table)
    for warning in table.warnings:
        _say(err, f"warning: {warning}", "yellow")
    for path, kind in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, render_text(table, kind))
        except OSError as exc:
            _say(err, f"warning: cannot write {path} ({exc.strerror or exc}); choose another place with "
                 "--out FILE or --output-dir DIR", "yellow")
            continue
        _say(err, f"wrote {path}")
