"""``corl-bench report DIR``: one self-contained HTML page about every run under a results (or sweep) directory.

The page holds a header (name, number of runs, date, corl-bench version and commit), the results table (scores
recomputed from stored predictions), the gains-over-base figure, and per run a collapsible section with its
training-dynamics figure and a few logged sample completions (prompt, completion, extracted answer,
pseudo-label, hidden truth, reward). Images are inline PNG data URIs and the CSS is inline: the file makes no
external request and can be mailed or attached as it is. Every piece of run data is HTML-escaped. A damaged run
is listed under "Warnings" instead of failing the page. The file is written atomically.

Never imports torch; the cost is regrading predictions and drawing with matplotlib (seconds per run).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corl_bench.report.collect import rel_path
from corl_bench.results import RunDir, atomic_write_text, find_runs

logger = logging.getLogger(__name__)

__all__ = ["ReportError", "build_report", "find_run_dirs", "render_report", "sample_rows"]

SAMPLE_FIELDS: tuple[tuple[str, str], ...] = (
    ("step", "step"), ("prompt", "prompt"), ("completion", "completion"), ("extracted", "extracted"),
    ("pseudo_label", "pseudo-label"), ("truth", "truth"), ("reward", "reward"))

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1600px;padding:16px 24px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:14px 0 6px}
.meta{color:#555;font-size:13px} .meta span{margin-right:18px}
.warn{background:#fff7e0;border:1px solid #f0c36d;border-radius:4px;padding:6px 12px} .warn li{margin:2px 0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px;margin:4px 0 8px}
th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top} th{background:#f4f4f4;text-align:left}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.pos{color:#0a6b2a} td.neg{color:#b00020}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;max-width:560px}
td.ok{background:#e8f6ec} td.bad{background:#fdecee}
details{border:1px solid #ddd;border-radius:4px;margin:6px 0;padding:4px 10px}
summary{cursor:pointer;font-weight:600} summary .meta{font-weight:normal}
img{max-width:100%;height:auto;display:block;margin:6px 0}
.note{color:#666;font-size:12px}
"""


class ReportError(ValueError):
    """The report cannot be built; ``str(e)`` says why and how to fix it."""


def _e(value: Any) -> str:
    """HTML-escaped text of ``value`` ("–" for None)."""
    return "–" if value is None else html.escape(str(value), quote=True)


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def find_run_dirs(results_dir: Path) -> list[Path]:
    """Every directory under ``results_dir`` (itself included) holding a run.json, sorted."""
    return [run.path for run in find_runs(results_dir)]


def _tables_html(collected: Any) -> str:
    """The paper-style results tables (:func:`corl_bench.report.table.html`: one block per backbone, paper row order, best
    label-free value bold and second underlined, protocol footer) for pass@1, greedy and maj@k, from what
    :func:`corl_bench.report.table.collect_results` read (so predictions are regraded once)."""
    from corl_bench.report.table import html

    if not collected.results:
        return '<p class="note">No run has final predictions yet.</p>'
    return "<div class='scroll'>" + html(collected, metrics=("avg_k", "greedy", "maj_k")) + "</div>"


def sample_rows(run_dir: Path, agent: str, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` logged samples of ``agent`` from its last logged step in ``run_dir/samples.jsonl`` ([] if none)."""
    run = RunDir(run_dir)
    if n <= 0 or not run.samples_path.is_file():
        return []
    rows = [r for r in run.samples() if r.get("agent") == agent]
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    if not steps:
        return rows[:n]
    last = max(steps)
    return [r for r in rows if r.get("step") == last][:n]


def _samples_html(run_dir: Path, agents: Sequence[str], n: int) -> str:
    parts = []
    for agent in agents:
        samples = sample_rows(run_dir, agent, n)
        if not samples:
            continue
        head = "".join(f"<th>{label}</th>" for _, label in SAMPLE_FIELDS)
        body = []
        for s in samples:
            cells = []
            for key, _ in SAMPLE_FIELDS:
                value = s.get(key)
                if key in ("prompt", "completion"):
                    cells.append(f"<td><pre>{_e(value)}</pre></td>")
                elif key in ("extracted", "pseudo_label") and value is not None and s.get("truth") is not None:
                    cls = "ok" if str(value) == str(s["truth"]) else "bad"
                    cells.append(f'<td class="{cls}">{_e(value)}</td>')
                elif key == "reward" and isinstance(value, (int, float)):
                    cells.append(f'<td class="num">{value:.3g}</td>')
                else:
                    cells.append(f"<td>{_e(value)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        parts.append(f"<h3>samples of {_e(agent)} (last logged step)</h3><div class='scroll'><table><tr>{head}</tr>"
                     + "".join(body) + "</table></div>")
    if not parts:
        return '<p class="note">No samples logged (run.log_samples_every = 0, or the run stopped early).</p>'
    return "\n".join(parts) + ('<p class="note">green: equal to the hidden truth, red: not; the method never sees '
                               "the truth.</p>")


def _run_section(run_dir: Path, rel: str, n_samples: int, warnings: list[str]) -> tuple[tuple, str]:
    """(sort key, <details> HTML) of one run; problems go to ``warnings``."""
    from corl_bench.report.plots import RunPlotError, read_run, run_png, run_title

    try:
        record = read_run(run_dir)
    except RunPlotError as exc:
        warnings.append(f"{rel}: {exc}")
        return ("~", "", "", -1, rel), (f"<details><summary>{_e(rel)} <span class='meta'>damaged</span></summary>"
                                        f"<p class='note'>{_e(exc)}</p></details>")
    plot_warnings: list[str] = []
    try:
        figure = _img(run_png(run_dir, plot_warnings), f"training dynamics of {rel}")
    except Exception as exc:
        logger.debug("cannot plot %s", run_dir, exc_info=True)
        figure = f"<p class='note'>no figure: {_e(exc)}</p>"
        warnings.append(f"{rel}: no training-dynamics figure ({type(exc).__name__}: {exc})")
    warnings.extend(f"{rel}: {w}" for w in plot_warnings)
    try:
        samples = _samples_html(run_dir, record.agent_names, n_samples)
    except (OSError, ValueError) as exc:
        samples = f"<p class='note'>samples unreadable: {_e(exc)}</p>"
        warnings.append(f"{rel}: samples.jsonl unreadable ({exc})")
    steps = record.steps if record.steps is not None else "?"
    meta = f"{len(record.agent_names)} agent(s) · {steps} steps · {record.status or 'unknown'}"
    html_ = (f"<details><summary>{_e(run_title(record))} <span class='meta'>— {_e(rel)} · {_e(meta)}</span></summary>\n"
             f"{figure}\n{samples}\n</details>")
    return (record.method, record.cohort, record.tag or "", record.seed if record.seed is not None else -1, rel), html_


def _version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("corl-bench")
    except Exception:  # noqa: BLE001 - not installed: the source tree's version
        from corl_bench import __version__

        return __version__


def render_report(results_dir: str | Path, *, samples_per_agent: int = 3, title: str = "") -> str:
    """The report page of every run under ``results_dir`` as an HTML string; ReportError if there is no run."""
    from corl_bench.results import git_commit
    from corl_bench.report.collect import aggregate, collect_results

    root = Path(results_dir)
    if not root.is_dir():
        raise ReportError(f"{root} is not a directory; pass a results directory (e.g. results/ or a sweep's "
                          "output_dir)")
    run_dirs = find_run_dirs(root)
    if not run_dirs:
        raise ReportError(f"{root} has no runs (no run.json below it); create some with `corl-bench run` or "
                          "`corl-bench sweep`")
    if samples_per_agent < 0:
        raise ReportError(f"samples per agent must be >= 0 (got {samples_per_agent}); pass --samples 3")
    name = title or root.resolve().name
    collected = collect_results(root)
    rows, table_warnings = aggregate(collected)
    warnings = list(table_warnings)

    try:
        from corl_bench.report.plots import gains_png

        gains = _img(gains_png(rows, title=f"{name}: gains over base, pass@1 (final − base; error bars: sd over "
                               "seeds)"), "gains over base")
    except ValueError as exc:
        gains = f"<p class='note'>No gains figure: {_e(exc)}</p>"
    except Exception as exc:
        logger.debug("gains figure failed", exc_info=True)
        gains = f"<p class='note'>No gains figure: {_e(type(exc).__name__)}: {_e(exc)}</p>"
        warnings.append(f"gains figure failed ({type(exc).__name__}: {exc})")

    sections = []
    for run_dir in run_dirs:
        logger.info("report: %s", run_dir)
        sections.append(_run_section(run_dir, rel_path(run_dir, root), samples_per_agent, warnings))
    sections.sort(key=lambda s: tuple(str(x) if not isinstance(x, int) else f"{x:09d}" for x in s[0]))

    commit = git_commit()
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = [f"{len(run_dirs)} run(s)", f"{len(rows)} table row(s)", now, f"corl-bench {_version()}"]
    if commit:
        meta.append(f"commit {commit}")
    warn_html = ("<h2>Warnings</h2><ul class='warn'>" + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>"
                 if warnings else "")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>corl-bench report: {_e(name)}</title><style>{CSS}</style></head><body>",
        f"<h1>corl-bench report: {_e(name)}</h1>",
        "<p class='meta'>" + "".join(f"<span>{_e(m)}</span>" for m in meta) + f"<span>{_e(root.resolve())}</span></p>",
        warn_html,
        "<h2>Results</h2>", _tables_html(collected),
        "<h2>Gains over base</h2>", gains,
        "<h2>Runs</h2>",
        ("<p class='note'>Per run: reward, reward accuracy and pseudo-label accuracy against the hidden truth, peer "
         "agreement, entropy, length and evaluation accuracy at every evaluation point; then sample completions "
         "from the last logged step.</p>"),
        *(html_ for _, html_ in sections),
        "</body></html>", ""])


def build_report(results_dir: str | Path, out: str | Path | None = None, *, samples_per_agent: int = 3,
                 title: str = "") -> Path:
    """Write the report of ``results_dir`` to ``out`` (default ``results_dir/report.html``) atomically; return it."""
    text = render_report(results_dir, samples_per_agent=samples_per_agent, title=title)
    path = Path(out) if out is not None else Path(results_dir) / "report.html"
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ReportError(f"cannot write {path} ({exc.strerror or exc}); pass --out to a writable file") from None
    return path
