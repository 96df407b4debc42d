"""Render a paper-style :class:`corl_bench.report.layout.PaperTable`: rich, markdown, LaTeX, CSV, HTML.

Public API (no torch):

* :func:`render_text` ``(table, fmt) -> str`` - ``fmt`` one of md, latex, csv, html (ValueError otherwise).
* :func:`to_markdown`, :func:`to_latex`, :func:`to_html`, :func:`to_csv` ``(table) -> str`` - the same, one each.
  ``to_html`` is a self-contained ``<table>`` fragment (inline styles only, ``<b>`` / ``<u>`` marks) that a page
  can embed; with paper tables to show on their own a second ``<table>`` follows.
* :func:`to_rich` ``(table) -> rich.table.Table`` and :func:`print_rich` ``(console, table)`` (table, notes,
  footer, paper tables) for the terminal.

Every format carries the footer (protocol) and the --reference notes. Marks: md ``**x**`` / ``<u>x</u>``, LaTeX
``\\textbf`` / ``\\underline`` (booktabs), HTML ``<b>`` / ``<u>``, rich bold / underline, CSV a ``marks`` column.
CSV holds raw numbers (percent, 4 decimals; mean and sd in separate columns), one row per (block, row), then
the footer as ``#`` lines, then (paper tables on their own) a blank line and each paper table as a further CSV.
A vision-language table (``PaperTable.kind`` "vlm") is titled as such; one that follows a text table
(``PaperTable.also``) comes after it (and its paper tables) in every format, in CSV after a blank line.
"""

from __future__ import annotations

import csv
import html as html_lib
import io
from dataclasses import dataclass
from typing import Optional, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from corl_bench.console import print_wide
from corl_bench.report.cells import MISSING, VLM, PaperTable, cell_text, fmt_signed
from corl_bench.report.reference import PAPER_ENS_VLM_PROTOCOL, PAPER_PROTOCOL, PAPER_VLM_PROTOCOL, PaperBlock

__all__ = ["FORMAT_SUFFIXES", "Grid", "print_rich", "render_text", "to_csv", "to_html", "to_latex",
           "to_markdown", "to_rich"]

#: --out suffix -> format (when --format is not given).
FORMAT_SUFFIXES: dict[str, str] = {".md": "md", ".markdown": "md", ".tex": "latex", ".csv": "csv",
                                   ".html": "html", ".htm": "html"}
TITLE = "corl-bench results (paper style)"
VLM_TITLE = "corl-bench results, vision-language (paper style)"
PAPER_TITLE = "Paper (Co-RL): main LLM table, values as printed"
PAPER_FOOTER = ("Values and marks as printed in the paper (bold = best label-free, underline = second; Base and "
                "GT-Reward not ranked); source: corl_bench/report/paper-results.json.", PAPER_PROTOCOL + ".")
#: paper-results.json key -> (title, footer) of each paper table shown on its own.
PAPER_GRIDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "llmMain": (PAPER_TITLE, PAPER_FOOTER),
    "vlmSmall": ("Paper (Co-RL): vision-language table, small tier (vlmSmall), values as printed",
                 (PAPER_FOOTER[0], PAPER_VLM_PROTOCOL + ".")),
    "vlmLarge": ("Paper (Co-RL): vision-language table, large tier (vlmLarge), values as printed",
                 (PAPER_FOOTER[0], PAPER_VLM_PROTOCOL + ".")),
    "ensVLM": ("Paper (Co-RL): test-time ensemble control, vision-language (ensVLM), values as printed",
               ("Values and marks as printed in the paper; source: corl_bench/report/paper-results.json.",
                PAPER_ENS_VLM_PROTOCOL + ".")),
    "n3": ("Paper (Co-RL): three-agent ring (n3), values as printed",
           (PAPER_FOOTER[0], "One ring of three agents (Qwen2.5-3B, Llama-3.2-3B-Instruct, Qwen3-1.7B-Base; ring order "
            "unverified); Base, GT-Reward and TTRL repeated from the main table where the backbone overlaps; its "
            "Co-RL rows stand beside our Co-RL (three agents) rows in the table above.", PAPER_PROTOCOL + ".")),
    "comas": ("Paper (Co-RL): CoMAS-protocol comparison (comas), values as printed",
              ("Values and marks as printed in the paper; source: corl_bench/report/paper-results.json.",
               "CoMAS's own suite, driver and graders, not the main table's protocol; the Base, MAPoRL, TTRL and "
               "CoMAS rows are quoted from the CoMAS paper; the backbone pair is not stated, so no row of ours is "
               "placed beside it.")),
    "ensLLM": ("Paper (Co-RL): test-time ensemble control, text (ensLLM), values as printed",
               ("Values and marks as printed in the paper; source: corl_bench/report/paper-results.json.",
                "Paper: maj@8 at T 0.6; an (ensemble) row votes over 4 rollouts of each model of the pair. Column "
                "names are not in the paper's data: GSM8K, MATH-500, AMC is the order its protocol text gives "
                "(unverified); Avg is their mean (checked on every row).")),
    "decPool": ("Paper (Co-RL): pre-RL error-overlap probe (decPool), values as printed",
                ("Values as printed in the paper; source: corl_bench/report/paper-results.json.",
                 "Paper: 500 MATH level 3-5 problems, zero-shot, one sample per problem at T 0.8, rule-based "
                 "grading. kappa = Cohen's kappa of the right/wrong vectors; c = exactly one right, w = both wrong "
                 "with the same answer, u = at least one right (the paper does not define u; the reading that "
                 "reproduces its kappa), in percent. Rows (ours) come from `corl-bench probe`.")),
}
#: The label column's header per paper table (default "Method").
FIRST_HEADER: dict[str, str] = {"ensLLM": "Setting", "decPool": "Pair"}
#: Paper tables whose blocks have no backbone: their CSV names the block by its heading and says whose a row is.
HEADED_TABLES = frozenset({"comas", "ensLLM", "decPool"})


@dataclass(frozen=True)
class Cell:
    text: str
    mark: str = ""  # "b", "u" or ""


@dataclass(frozen=True)
class GridRow:
    cells: tuple[Cell, ...]
    kind: str = ""  # base, reference, label-free, control, unknown, paper


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[GridRow, ...]


@dataclass(frozen=True)
class Grid:
    """A format-neutral table: headers, titled sections of rows, footer lines. Column 0 is the label."""

    title: str
    headers: tuple[str, ...]
    sections: tuple[Section, ...]
    footer: tuple[str, ...] = ()


def _grid(table: PaperTable) -> Grid:
    headers = ("Method", "n", *(c.header for c in table.columns))
    sections = []
    for block in table.blocks:
        rows = []
        for row in block.rows:
            marks = row.marks or ("",) * len(table.columns)
            cells = [Cell(row.label), Cell("" if row.kind == "paper" else str(len(row.seeds)))]
            cells += [Cell(cell_text(stat, table.show_se), mark) for stat, mark in zip(row.cells, marks)]
            cells.append(Cell(fmt_signed(row.delta), marks[-1]))
            rows.append(GridRow(tuple(cells), row.kind))
        sections.append(Section(block.title, tuple(rows)))
    return Grid(VLM_TITLE if table.kind == VLM else TITLE, headers, tuple(sections), table.notes + table.footer)


def _paper_tables(blocks: Sequence[PaperBlock]) -> list[list[PaperBlock]]:
    """The blocks grouped into their paper tables (runs of the same ``table`` key)."""
    out: list[list[PaperBlock]] = []
    for block in blocks:
        if out and out[-1][0].table == block.table:
            out[-1].append(block)
        else:
            out.append([block])
    return out


def _paper_grid(blocks: Sequence[PaperBlock], notes: Sequence[tuple[str, str]] = ()) -> Grid:
    headers = (FIRST_HEADER.get(blocks[0].table, "Method"), *blocks[0].columns)
    sections = tuple(Section(b.title,
                             tuple(GridRow((Cell(r.label),) + tuple(Cell(v, m) for v, m in zip(r.printed, r.marks)),
                                           "paper" if r.source == "paper" else r.source) for r in b.rows))
                     for b in blocks)
    title, footer = PAPER_GRIDS.get(blocks[0].table, PAPER_GRIDS["llmMain"])
    return Grid(title, headers, sections, footer + tuple(line for key, line in notes if key == blocks[0].table))


def _paper_only(table: PaperTable) -> bool:
    """A table of the paper's numbers alone (``corl-bench table --reference paper`` without runs)."""
    return not table.blocks and bool(table.paper_blocks or table.side)


def _grids(table: PaperTable) -> list[Grid]:
    grids = [] if _paper_only(table) else [_grid(table)]
    grids += [_paper_grid(blocks, table.side_notes) for blocks in _paper_tables(table.paper_blocks + table.side)]
    for more in table.also:
        grids += _grids(more)
    return grids


# ------------------------------------------------------------------------------------------ markdown
def _md_cell(cell: Cell) -> str:
    text = cell.text.replace("|", "\\|")
    if cell.mark == "b" and text != MISSING:
        return f"**{text}**"
    if cell.mark == "u" and text != MISSING:
        return f"<u>{text}</u>"
    return text


def _grid_markdown(grid: Grid) -> str:
    out = [f"**{grid.title}**", ""]
    align = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(grid.headers))) + "|"
    for section in grid.sections:
        out += [f"### {section.title}", "", "| " + " | ".join(h.replace("|", "\\|") for h in grid.headers) + " |",
                align]
        out += ["| " + " | ".join(_md_cell(c) for c in row.cells) + " |" for row in section.rows]
        out.append("")
    out += [f"- {line}" for line in grid.footer]
    return "\n".join(out) + "\n"


def to_markdown(table: PaperTable) -> str:
    """GitHub-flavoured markdown: one table per block under a ``###`` heading, marks as **x** and <u>x</u>, then
    the notes and footer as a list (and the paper's tables, when shown on their own)."""
    return "\n".join(_grid_markdown(g) for g in _grids(table))


# ------------------------------------------------------------------------------------------ LaTeX
_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_UNICODE = {"±": r"$\pm$", "–": "--", "—": "---", "Δ": r"$\Delta$", "−": "$-$", "×": r"$\times$",
                  "→": r"$\rightarrow$", "≥": r"$\geq$", "≤": r"$\leq$"}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped and common symbols as math."""
    out = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)
    for uni, tex in _LATEX_UNICODE.items():
        out = out.replace(uni, tex)
    return out


def _latex_cell(cell: Cell) -> str:
    text = latex_escape(cell.text)
    if cell.mark == "b" and cell.text != MISSING:
        return rf"\textbf{{{text}}}"
    if cell.mark == "u" and cell.text != MISSING:
        return rf"\underline{{{text}}}"
    return text


def _grid_latex(grid: Grid) -> str:
    n = len(grid.headers)
    out = [f"% {grid.title}; needs \\usepackage{{booktabs}}", r"\begin{tabular}{l" + "r" * (n - 1) + "}",
           r"\toprule", " & ".join(latex_escape(h) for h in grid.headers) + r" \\"]
    for section in grid.sections:
        out += [r"\midrule", rf"\multicolumn{{{n}}}{{l}}{{\textit{{{latex_escape(section.title)}}}}} \\"]
        out += [" & ".join(_latex_cell(c) for c in row.cells) + r" \\" for row in section.rows]
    out += [r"\bottomrule", r"\end{tabular}"]
    if grid.footer:
        out += ["", r"\par\smallskip{\footnotesize", *(latex_escape(line) + r"\par" for line in grid.footer), "}"]
    return "\n".join(out) + "\n"


def to_latex(table: PaperTable) -> str:
    """A booktabs ``tabular`` (one ``\\multicolumn`` section row per block, \\textbf / \\underline marks) followed
    by the notes and footer in ``\\footnotesize``."""
    return "\n".join(_grid_latex(g) for g in _grids(table))


# ------------------------------------------------------------------------------------------ HTML
def _html_cell(cell: Cell, numeric: bool) -> str:
    text = html_lib.escape(cell.text)
    if cell.mark == "b" and cell.text != MISSING:
        text = f"<b>{text}</b>"
    elif cell.mark == "u" and cell.text != MISSING:
        text = f"<u>{text}</u>"
    style = ' style="text-align:right;padding:2px 8px"' if numeric else ' style="text-align:left;padding:2px 8px"'
    return f"<td{style}>{text}</td>"


def _grid_html(grid: Grid) -> str:
    n = len(grid.headers)
    out = ['<table class="corl-bench-table" style="border-collapse:collapse;font-variant-numeric:tabular-nums">',
           f'<caption style="font-weight:bold;text-align:left">{html_lib.escape(grid.title)}</caption>',
           '<thead><tr style="border-bottom:2px solid #444">'
           + "".join(f'<th style="padding:2px 8px;text-align:{"left" if i == 0 else "right"}">'
                     f"{html_lib.escape(h)}</th>" for i, h in enumerate(grid.headers)) + "</tr></thead>"]
    for section in grid.sections:
        out.append("<tbody>")
        out.append(f'<tr class="block" style="border-top:1px solid #888"><th colspan="{n}" '
                   f'style="text-align:left;padding:4px 8px;font-style:italic">{html_lib.escape(section.title)}'
                   "</th></tr>")
        for row in section.rows:
            style = ' style="color:#666"' if row.kind in ("base", "paper") else ""
            out.append(f'<tr class="{html_lib.escape(row.kind or "row")}"{style}>'
                       + "".join(_html_cell(c, i > 0) for i, c in enumerate(row.cells)) + "</tr>")
        out.append("</tbody>")
    if grid.footer:
        out.append(f'<tfoot><tr style="border-top:2px solid #444"><td colspan="{n}" '
                   'style="font-size:smaller;padding:4px 8px">'
                   + "<br>".join(html_lib.escape(line) for line in grid.footer) + "</td></tr></tfoot>")
    out.append("</table>")
    return "\n".join(out) + "\n"


def to_html(table: PaperTable) -> str:
    """A self-contained ``<table>`` fragment (inline styles, <b>/<u> marks, the notes and footer in <tfoot>),
    followed by the paper's table as a second ``<table>`` when it is shown on its own."""
    return "".join(_grid_html(g) for g in _grids(table))


# ------------------------------------------------------------------------------------------ CSV
def _raw(value: Optional[float]) -> str:
    return "" if value is None else f"{100.0 * value:.4f}"


def _paper_csv(blocks: Sequence[PaperBlock], notes: Sequence[tuple[str, str]] = ()) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    datasets = any(b.dataset for b in blocks)  # vision-language blocks: one per training set
    side = blocks[0].table in HEADED_TABLES
    first = ["block" if side else "backbone", *(["dataset"] if datasets else [])]
    writer.writerow([*first, "row", *(["source"] if side else []), *blocks[0].columns, "marks"])
    for block in blocks:
        for prow in block.rows:
            marks = "; ".join(f"{c}={m}" for c, m in zip(block.columns, prow.marks) if m)
            writer.writerow([block.title if side else block.backbone, *([block.dataset] if datasets else []),
                             prow.label, *([prow.source] if side else []), *prow.printed, marks])
    footer = PAPER_GRIDS.get(blocks[0].table, PAPER_GRIDS["llmMain"])[1]
    footer += tuple(line for key, line in notes if key == blocks[0].table)
    return buf.getvalue() + "".join(f"# {line}\n" for line in footer)


def to_csv(table: PaperTable) -> str:
    """One row per (block, row): labels, n, seeds, runs, then mean, sd over seeds, the evaluation's standard error
    (``se``: sd over problems / sqrt(problems), mean over seeds) and, per benchmark column, the share cut at the token
    cap (``clipped``) (percent, 4 decimals) per column, Avg,
    Δ and a ``marks`` column ("header=b; ..."); then the footer as ``#`` lines (read with ``comment="#"``); then each
    paper table shown on its own and each table in ``table.also``, after a blank line."""
    if _paper_only(table):
        return "\n".join(_paper_csv(blocks, table.side_notes)
                         for blocks in _paper_tables(table.paper_blocks + table.side))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    cols = table.columns
    header = ["block", "backbone", "row", "kind", "method", "cohorts", "tag", "agent", "n", "seeds", "runs"]
    for col in cols[:-1]:
        header += [col.header, f"{col.header} sd", f"{col.header} se"]
        header += [f"{col.header} clipped"] if col.kind == "value" else []
    writer.writerow(header + [cols[-1].header, "marks"])
    for block in table.blocks:
        for row in block.rows:
            cells: list[str] = []
            for col, stat in zip(cols, row.cells):
                cells += [_raw(stat.mean), _raw(stat.sd), _raw(stat.se)]
                cells += [_raw(stat.clipped)] if col.kind == "value" else []
            marks = "; ".join(f"{c.header}={m}" for c, m in zip(cols, row.marks) if m)
            writer.writerow([block.name, block.backbone or "", row.label, row.kind, row.method,
                             " ".join(row.cohorts), row.tag, row.agent, "" if row.kind == "paper" else len(row.seeds),
                             " ".join(map(str, row.seeds)), " ".join(row.run_ids), *cells,
                             "" if row.delta is None else f"{100.0 * row.delta:.4f}", marks])
    text = buf.getvalue() + "".join(f"# {line}\n" for line in table.notes + table.footer)
    for blocks in _paper_tables(table.paper_blocks + table.side):
        text += "\n" + _paper_csv(blocks, table.side_notes)
    for more in table.also:
        text += "\n" + to_csv(more)
    return text


def render_text(table: PaperTable, fmt: str) -> str:
    """``table`` in ``fmt`` (md, latex, csv or html); ValueError naming the valid formats otherwise."""
    renderers = {"md": to_markdown, "latex": to_latex, "csv": to_csv, "html": to_html}
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(renderers)} (e.g. --format md)")
    return renderers[fmt](table)


# ------------------------------------------------------------------------------------------ rich
_ROW_STYLES = {"base": "dim", "paper": "italic dim", "control": "", "reference": "", "ours": "bold"}


def _grid_rich(grid: Grid) -> Table:
    out = Table(title=grid.title, title_justify="left")
    for i, header in enumerate(grid.headers):
        out.add_column(header.replace(" ", "\n", 1) if i > 1 else header, justify="left" if i == 0 else "right",
                       no_wrap=True)
    for k, section in enumerate(grid.sections):
        out.add_row(Text(section.title, style="bold cyan"), *[""] * (len(grid.headers) - 1))
        for j, row in enumerate(section.rows):
            cells = []
            for cell in row.cells:
                style = {"b": "bold", "u": "underline"}.get(cell.mark if cell.text != MISSING else "", "")
                cells.append(Text(cell.text, style=style))
            out.add_row(*cells, style=_ROW_STYLES.get(row.kind, ""),
                        end_section=j == len(section.rows) - 1 and k < len(grid.sections) - 1)
    return out


def to_rich(table: PaperTable) -> Table:
    """Our paper-style table as one rich Table with a section per block (bold / underline marks)."""
    return _grid_rich(_grid(table))


def print_rich(console: Console, table: PaperTable) -> None:
    """Print the rich table at its natural width, then the notes, the footer and any paper tables shown alone."""
    for grid in _grids(table):
        print_wide(console, _grid_rich(grid))
        for line in grid.footer:
            console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)

