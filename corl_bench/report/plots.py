"""Plots of run directories (matplotlib, PNG): training dynamics of one run, gains over base of a sweep.

    plot_run(run_dir, out_dir)        -> out_dir/<run dir name>.png   (reward, pseudo-label accuracy, peer
                                         agreement, entropy, length, eval accuracy at every evaluation point)
    plot_gains(results_dir, out_png)  -> one panel per backbone: Δ pass@1 (final − base) per benchmark and method

Evaluation accuracy is recomputed from the stored predictions of every phase (``base`` = step 0,
``step-NNNNNN`` = after N steps, ``final`` = after run.json's ``steps``) with
:func:`corl_bench.eval.metrics.score_predictions` and the benchmark's own grader, exactly as tables do.

Figures are built on matplotlib's Agg canvas directly (no pyplot, no global backend switch), and matplotlib is
imported inside the functions: importing this module is free and never touches torch.
"""

from __future__ import annotations

import io
import json
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from corl_bench.record import RunRecord
from corl_bench.results import RunDir, atomic_write_bytes, phase_step, read_jsonl

logger = logging.getLogger(__name__)

__all__ = [
    "EVAL_METRICS",
    "TRAIN_PANELS",
    "RunPlotError",
    "eval_points",
    "gains_png",
    "plot_gains",
    "plot_run",
    "read_run",
    "run_title",
    "run_png",
    "score_file",
]

RowsOrDir = str | Path | Sequence[Any]


class RunPlotError(ValueError):
    """A run directory that cannot be plotted; ``str(e)`` names the file and the fix."""


@dataclass(frozen=True)
class Panel:
    """One training-dynamics panel: a metrics.jsonl key and how to draw it."""

    key: str
    title: str
    ylabel: str
    fraction: bool  # values in [0, 1]: fixed y range
    companion: str = ""  # a second key drawn dotted (moving average only) when it is not constantly 1
    companion_label: str = ""


TRAIN_PANELS: tuple[Panel, ...] = (
    Panel("reward/mean", "reward", "mean reward", False),
    Panel("reward/accuracy", "reward accuracy (vs hidden truth)", "fraction", True),
    Panel("label/accuracy", "pseudo-label accuracy (vs hidden truth)", "fraction", True, "label/coverage",
          "coverage (share of prompts with a label)"),
    Panel("peer/agreement", "peer agreement", "fraction", True),
    Panel("policy/entropy", "policy entropy", "mean per token", False),
    Panel("len/mean", "response length", "tokens", False),
    Panel("len/clipped_ratio", "clipped responses (hit the token cap)", "fraction", True),
)
EVAL_METRICS: tuple[tuple[str, str, str, str], ...] = (  # (score key, label, line style, marker)
    ("greedy", "greedy", "-", "o"), ("avg_k", "pass@1", "--", "s"), ("maj_k", "maj@k", ":", "^"))
GAIN_LABELS = {"greedy": "greedy", "avg_k": "pass@1", "maj_k": "maj@k", "pass_k": "pass@k"}
MAX_EVAL_PANELS = 3  # more benchmarks than this: one panel with their mean
DPI = 90


def run_title(record: RunRecord) -> str:
    """``method × cohort · seed N · tag T`` of a run record (status appended unless finished)."""
    parts = [f"{record.method} × {record.cohort}", f"seed {record.seed if record.seed is not None else '?'}"]
    if record.tag:
        parts.append(f"tag {record.tag}")
    if record.status != "finished":
        parts.append(f"status {record.status or 'unknown'}")
    return " · ".join(parts)


def read_run(run_dir: str | Path) -> RunRecord:
    """The run record of ``run_dir/run.json``; RunPlotError if it is missing or not a run description (no method
    or cohort)."""
    run = RunDir(run_dir)
    run_dir, path = run.path, run.info_path
    try:
        record = run.record()
    except FileNotFoundError:
        raise RunPlotError(f"{run_dir} has no run.json; pass a run directory (results/runs/<run_id>)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunPlotError(f"{path} is not readable JSON ({exc}); the run is damaged, re-run it") from None
    except ValueError:  # valid JSON, not an object
        record = None
    if record is None or record.method is None or record.cohort is None:
        raise RunPlotError(f"{path} lacks 'method' or 'cohort'; the run is damaged, re-run it")
    return record


def _load_metrics(run_dir: Path) -> dict[str, dict[int, dict[str, Any]]] | None:
    """agent -> step -> metrics row (the last row wins when a resumed run logged a step twice); None if absent."""
    run = RunDir(run_dir)
    if not run.metrics_path.is_file():
        return None
    rows = run.metrics(error=RunPlotError)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        step, agent = row.get("step"), row.get("agent")
        if isinstance(step, int) and not isinstance(step, bool) and isinstance(agent, str):
            out.setdefault(agent, {})[step] = row
    return out


def _alarm_steps(run_dir: Path) -> dict[str, int]:
    """agent -> the step its collapse alarm fired (the event rows of metrics.jsonl; {} when none or unreadable)."""
    try:
        events = RunDir(run_dir).events()
    except (OSError, ValueError):
        return {}
    return {str(e["agent"]): int(e["step"]) for e in events
            if e.get("event") == "collapse-alarm" and isinstance(e.get("step"), int) and "agent" in e}


@lru_cache(maxsize=1)
def _grader_factory() -> Callable[[str], Any]:
    from corl_bench.eval.specs import get_spec
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.registries import BENCHMARKS

    return lambda bench: row_grader(get_spec(bench)) if bench in BENCHMARKS else None


@lru_cache(maxsize=1024)
def _score_cached(path: str, mtime_ns: int, size: int) -> dict[str, float | None]:
    from corl_bench.eval.metrics import score_predictions

    p = Path(path)
    rows = read_jsonl(p, RunPlotError, path)
    if not rows:
        raise RunPlotError(f"{path} is empty; re-run `corl-bench eval` on the run")
    try:
        scores = score_predictions(rows, _grader_factory()(p.stem))
    except ValueError as exc:
        raise RunPlotError(f"{path}: {exc}") from None
    return {**scores.metrics(), "k": float(scores.k)}


def score_file(path: str | Path) -> dict[str, float | None]:
    """Scores (greedy, avg_k, maj_k, pass_k, ..., k) of one predictions file, regraded; cached per file version."""
    st = Path(path).stat()
    return _score_cached(str(path), st.st_mtime_ns, st.st_size)


def eval_points(run_dir: str | Path, record: RunRecord,
                warnings: list[str] | None = None) -> dict[str, dict[str, list[tuple[int, dict]]]]:
    """benchmark -> agent -> [(step, scores)] sorted by step, from every phase under ``eval/``.

    ``final`` sits at run.json's ``steps`` (or one past the last evaluated step when ``steps`` is missing).
    An unreadable predictions file is left out and described in ``warnings``.
    """
    run = RunDir(run_dir)
    out: dict[str, dict[str, list[tuple[int, dict]]]] = {}
    phases = run.phases()
    known = [phase_step(p, None) for p in phases]
    steps = record.steps if record.steps is not None else max([s for s in known if s is not None] + [0]) + 1
    for phase in phases:
        x = phase_step(phase, steps)
        if x is None:
            logger.info("%s: unknown evaluation phase %r ignored", run.path, phase)
            continue
        for agent in run.evaluated_agents(phase):
            for bench in run.benchmarks(phase, agent):
                try:
                    scores = score_file(run.predictions_path(phase, agent, bench))
                except (RunPlotError, OSError) as exc:
                    (warnings if warnings is not None else []).append(str(exc))
                    logger.warning("%s", exc)
                    continue
                out.setdefault(bench, {}).setdefault(agent, []).append((x, scores))
    for per_agent in out.values():
        for points in per_agent.values():
            points.sort(key=lambda p: p[0])
    return out


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    """Centred mean over ``window`` points (shrinking at the edges; NaN gaps skipped)."""
    half = window // 2
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - half): i + half + 1] if not math.isnan(v)]
        out.append(sum(chunk) / len(chunk) if chunk else math.nan)
    return out


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _figure(width: float, height: float) -> Any:
    """A Figure on the Agg canvas (never pyplot: no global state, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    """PNG bytes of ``fig``, reduced to a 256-colour palette (line plots look the same at ~1/3 of the size)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    try:
        from PIL import Image

        small = io.BytesIO()
        image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
        image.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(small, format="PNG", optimize=True)
        return small.getvalue()
    except Exception:
        logger.debug("PNG palette reduction failed", exc_info=True)
        return buf.getvalue()


def _message(ax: Any, title: str, text: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.45", fontsize=10, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("0.85")


def _series(by_step: Mapping[int, Mapping[str, Any]], steps: Sequence[int], key: str) -> list[float]:
    """Values of ``key`` at ``steps`` (NaN where absent, null or not a number)."""
    values = [by_step[s].get(key) for s in steps]
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan for v in values]


def _train_panel(ax: Any, panel: Panel, metrics: dict | None, agents: Sequence[str], colors: Mapping[str, Any],
                 record: RunRecord, window: int) -> None:
    if metrics is None:
        _message(ax, panel.title, "no metrics.jsonl in this run")
        return
    drawn = companion = False
    for agent in agents:
        by_step = metrics.get(agent, {})
        steps = sorted(by_step)
        ys = _series(by_step, steps, panel.key)
        if all(math.isnan(y) for y in ys):
            continue
        drawn = True
        color = colors[agent]
        if len(ys) >= 5 and window > 1:
            ax.plot(steps, ys, color=color, alpha=0.25, lw=1)
            ax.plot(steps, _moving_average(ys, window), color=color, lw=2)
        else:
            ax.plot(steps, ys, color=color, lw=2, marker="o", ms=3)
        extra = _series(by_step, steps, panel.companion) if panel.companion else []
        if any(not math.isnan(y) and y < 0.99 for y in extra):  # e.g. labels only where peers agree
            ax.plot(steps, _moving_average(extra, window if len(extra) >= 5 else 1), color=color, lw=1.3, ls=":")
            companion = True
    if not drawn:
        _message(ax, panel.title, f"not logged by {record.method}")
        return
    if companion:
        from matplotlib.lines import Line2D

        ax.legend([Line2D([], [], color="0.2", lw=2), Line2D([], [], color="0.2", lw=1.3, ls=":")],
                  ["accuracy", panel.companion_label], fontsize=7.5, loc="lower left", framealpha=0.8)
    ax.set_title(panel.title, fontsize=10)
    ax.set_ylabel(panel.ylabel, fontsize=9)
    if panel.fraction:
        ax.set_ylim(-0.03, 1.03)


def _eval_panel(ax: Any, title: str, per_agent: Mapping[str, list[tuple[int, dict]]], agents: Sequence[str],
                colors: Mapping[str, Any]) -> None:
    from matplotlib.lines import Line2D

    k = None
    for agent in agents:
        points = per_agent.get(agent, [])
        for key, _label, style, marker in EVAL_METRICS:
            xy = [(x, s.get(key)) for x, s in points if s.get(key) is not None]
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], color=colors[agent], ls=style, marker=marker, ms=4,
                        lw=1.5)
        k = k or next((int(s["k"]) for _, s in points if s.get("k")), None)
    labels = [label.replace("@k", f"@{k}") if k else label for _, label, _, _ in EVAL_METRICS]
    handles = [Line2D([], [], color="0.2", ls=style, marker=marker, ms=4) for _, _, style, marker in EVAL_METRICS]
    ax.legend(handles, labels, fontsize=8, loc="lower left", framealpha=0.8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("accuracy (fraction)", fontsize=9)
    ax.set_ylim(-0.03, 1.03)


def _mean_over_benchmarks(evals: Mapping[str, Mapping[str, list[tuple[int, dict]]]]) -> dict[str, list[tuple[int, dict]]]:
    """agent -> [(step, scores averaged over every benchmark evaluated at that step)]."""
    out: dict[str, list[tuple[int, dict]]] = {}
    n = len(evals)
    for agent in {a for per_agent in evals.values() for a in per_agent}:
        by_x: dict[int, list[dict]] = {}
        for per_agent in evals.values():
            for x, scores in per_agent.get(agent, []):
                by_x.setdefault(x, []).append(scores)
        points = []
        for x in sorted(by_x):
            if len(by_x[x]) != n:
                continue  # a phase that misses a benchmark would bias the mean
            mean = {}
            for key, *_ in EVAL_METRICS:
                vals = [s.get(key) for s in by_x[x]]
                mean[key] = None if any(v is None for v in vals) else sum(vals) / n
            points.append((x, mean))
        out[agent] = points
    return out


def run_png(run_dir: str | Path, warnings: list[str] | None = None) -> bytes:
    """The training-dynamics figure of one run as PNG bytes (see :func:`plot_run`); RunPlotError if unreadable."""
    run_dir, record = Path(run_dir), read_run(run_dir)
    metrics = _load_metrics(run_dir)
    evals = eval_points(run_dir, record, warnings)
    agents = list(record.agent_names)
    for extra in sorted({a for a in (metrics or {})} | {a for per in evals.values() for a in per}):
        if extra not in agents:
            agents.append(extra)
    colors = dict(zip(agents, _colors(len(agents))))
    last_step = max((s for per in (metrics or {}).values() for s in per), default=0)
    x_max = max(record.steps or 0, last_step)
    window = max(3, round(x_max / 12)) | 1  # odd, ~8% of the run

    benches = sorted(evals)
    if len(benches) > MAX_EVAL_PANELS:
        eval_panels = [(f"eval accuracy (mean of {len(benches)} benchmarks)", _mean_over_benchmarks(evals))]
    else:
        eval_panels = [(f"eval accuracy: {b}", evals[b]) for b in benches]
    n_panels = len(TRAIN_PANELS) + max(1, len(eval_panels))
    ncols = 4
    nrows = math.ceil(n_panels / ncols)
    fig = _figure(4.3 * ncols, 3.0 * nrows + 1.0)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, panel in zip(axes, TRAIN_PANELS):
        _train_panel(ax, panel, metrics, agents, colors, record, window)
    rest = axes[len(TRAIN_PANELS):]
    if not eval_panels:
        _message(rest[0], "eval accuracy", "no predictions under eval/")
    for ax, (title, per_agent) in zip(rest, eval_panels):
        _eval_panel(ax, title, per_agent, agents, colors)
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    alarms = _alarm_steps(run_dir)
    for ax in axes[:n_panels]:
        if ax.has_data():
            for agent, step in alarms.items():  # the collapse alarm: a dashed line at the step it fired
                ax.axvline(step, color=colors.get(agent, "0.3"), ls="--", lw=1.2, alpha=0.9)
            ax.set_xlim(-0.02 * max(x_max, 1), x_max * 1.02 + 0.5)
            ax.set_xlabel("training step", fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)

    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[a], lw=2) for a in agents]
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.8 / height), h_pad=1.2, w_pad=1.2)  # before the header: it ignores it
    fig.suptitle(run_title(record), fontsize=13, y=1 - 0.06 / height, va="top")
    marked = f"; dashed vertical: collapse alarm ({', '.join(f'{a} at step {s}' for a, s in alarms.items())})" \
        if alarms else ""
    fig.text(0.5, 1 - 0.33 / height, f"{run_dir.name} — faint: per step, bold: moving average over "
             f"{window} steps; eval: x = steps trained (base = 0){marked}", ha="center", va="top", fontsize=8.5,
             color="0.35")
    if handles:
        fig.legend(handles, agents, loc="upper center", ncol=min(len(agents), 6), fontsize=9, frameon=False,
                   bbox_to_anchor=(0.5, 1 - 0.47 / height))
    return _png(fig)


def plot_run(run_dir: str | Path, out_dir: str | Path) -> Path:
    """Write the training dynamics of every agent of one run to ``out_dir/<run dir name>.png``; return the path.

    Panels: reward/mean, label/accuracy (pseudo-labels vs hidden truth), peer/agreement, policy/entropy, len/mean
    (per step, faint, plus a moving average) and evaluation accuracy (greedy, sampled pass@1, maj@k) at every
    evaluation phase. One colour per agent; a metric the method does not log says so in its panel.
    """
    data = run_png(run_dir)
    out = Path(out_dir) / f"{Path(run_dir).resolve().name}.png"
    atomic_write_bytes(out, data)
    return out


# ---------------------------------------------------------------------------------------------------- gains


@dataclass(frozen=True)
class _Bar:
    method: str
    label: str
    n: int
    deltas: tuple[float | None, ...]  # per group (benchmarks, then the average), percentage points
    sds: tuple[float | None, ...]


def _sd(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def _row_label(row: Any) -> str:
    tag = getattr(row, "tag", "") or ""
    return f"{row.method} · {row.cohort}" + (f" · {tag}" if tag else "")


def _seed_mean(scores: Mapping[str, Mapping[str, float | None]], benches: Sequence[str],
               metric: str) -> float | None:
    """Mean of ``metric`` over ``benches`` in one seed's scores; None if any is missing."""
    values = [scores.get(b, {}).get(metric) for b in benches]
    return None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]


def _bar(row: Any, label: str, groups: Sequence[str], benches: Sequence[str], metric: str) -> _Bar:
    deltas, sds = [], []
    for group in groups:
        wanted = benches if group == "average" else [group]
        final = [row.scores.get(b, {}).get(metric) for b in wanted]
        base = [row.base.get(b, {}).get(metric) for b in wanted]
        if any(v is None for v in final + base):
            deltas.append(None)
            sds.append(None)
            continue
        deltas.append(100.0 * (sum(final) - sum(base)) / len(wanted))
        finals = [_seed_mean(s, wanted, metric) for s in row.per_seed]
        bases = [_seed_mean(s, wanted, metric) for s in getattr(row, "base_per_seed", ())]
        if len(bases) == len(finals) and all(b is not None for b in bases):  # sd of the per-seed Δ
            finals = [None if f is None else f - b for f, b in zip(finals, bases)]  # type: ignore[operator]
        sd = _sd([v for v in finals if v is not None])
        sds.append(None if sd is None else 100.0 * sd)
    return _Bar(row.method, label, len(row.seeds), tuple(deltas), tuple(sds))


def _method_colors(bars: Sequence[_Bar]) -> dict[str, Any]:
    """label -> colour: one hue per method, lighter shades for its other cohorts / tags / agents."""
    by_method: dict[str, list[str]] = {}
    for bar in sorted(bars, key=lambda b: (b.method, b.label)):
        if bar.label not in by_method.setdefault(bar.method, []):
            by_method[bar.method].append(bar.label)
    hues = _colors(len(by_method))
    out = {}
    for hue, labels in zip(hues, by_method.values()):
        for j, label in enumerate(labels):
            mix = 0.55 * j / max(1, len(labels) - 1) if len(labels) > 1 else 0.0
            out[label] = tuple(c + (1.0 - c) * mix for c in hue[:3]) + (1.0,)
    return out


def _rows(source: RowsOrDir) -> list[Any]:
    if isinstance(source, (str, Path)):
        from corl_bench.report.collect import collect

        rows, warnings = collect(Path(source))
        for warning in warnings:
            logger.warning("%s", warning)
        if not rows:
            raise ValueError(f"{source} has no usable runs; create some with `corl-bench run` or `corl-bench sweep`")
        return rows
    return list(source)


def gains_png(source: RowsOrDir, *, metric: str = "avg_k", title: str = "") -> bytes:
    """The gains figure (see :func:`plot_gains`) as PNG bytes; ValueError if no row has base and final scores."""
    if metric not in GAIN_LABELS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(GAIN_LABELS)}")
    rows = _rows(source)
    benches = sorted({b for row in rows for b in row.scores})
    groups = benches + (["average"] if len(benches) > 1 else [])
    panels: dict[str, list[_Bar]] = {}
    for family in sorted({row.family or "?" for row in rows}):
        members = [row for row in rows if (row.family or "?") == family]
        labels = [_row_label(row) for row in members]
        bars = []
        for row, label in zip(members, labels):
            if labels.count(label) > 1:
                label = f"{label} · {row.agent}"  # e.g. two agents of one backbone in a same-family cohort
            bar = _bar(row, label, groups, benches, metric)
            if any(d is not None for d in bar.deltas):
                bars.append(bar)
        if bars:
            panels[family] = bars
    if not panels:
        raise ValueError("no row has both base and final predictions; run with eval.before=true (the default) "
                         "so base scores exist")
    name = GAIN_LABELS[metric]
    colors = _method_colors([bar for bars in panels.values() for bar in bars])
    most = max(len(bars) for bars in panels.values())
    width = min(20.0, max(9.0, 3.5 + len(groups) * most * 0.38)) + 4.2
    heights = [max(3.2, 0.24 * len(bars) + 1.2) for bars in panels.values()]
    fig = _figure(width, sum(heights) + 0.9)
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights}).ravel()
    axes_width = width - 5.2  # inches left for the bars beside the legend
    for ax, (family, bars) in zip(axes, panels.items()):
        n = len(bars)
        bar_w = 0.8 / n
        rotate = axes_width * bar_w / len(groups) < 0.45
        for i, bar in enumerate(bars):
            xs = [g - 0.4 + bar_w * (i + 0.5) for g in range(len(groups))]
            ys = [math.nan if d is None else d for d in bar.deltas]
            errs = [0.0 if s is None else s for s in bar.sds]
            ax.bar(xs, ys, bar_w * 0.92, yerr=errs if any(errs) else None, capsize=2, color=colors[bar.label],
                   label=f"{bar.label} (n={bar.n})", error_kw={"lw": 0.8, "ecolor": "0.25"})
            if n <= 24:
                for x, y in zip(xs, ys):
                    if not math.isnan(y):
                        ax.annotate(f"{y:+.1f}", (x, y), xytext=(0, 2 if y >= 0 else -2), textcoords="offset points",
                                    ha="center", va="bottom" if y >= 0 else "top", fontsize=6.5,
                                    rotation=90 if rotate else 0)
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, fontsize=9)
        ax.set_xlim(-0.5, len(groups) - 0.5)
        ax.set_title(f"backbone {family}", fontsize=10, loc="left")
        ax.set_ylabel(f"Δ {name} (points)", fontsize=9)
        ax.margins(y=0.18)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    fig.suptitle(title or f"Gains over base: {name}, final − base (error bars: sd over seeds)", fontsize=12,
                 y=1 - 0.08 / fig.get_figheight(), va="top")
    return _png(fig)


def plot_gains(results_dir_or_rows: RowsOrDir, out_path: str | Path, *, metric: str = "avg_k",
               title: str = "") -> Path:
    """Write the gains-over-base figure of a results directory (or of :func:`corl_bench.report.table.collect` rows).

    One panel per backbone (agent family); per benchmark (and their average, with two or more) one bar per
    method · cohort (· tag; · agent when one backbone appears twice in a cohort) with the mean over seeds of
    ``metric`` final minus base, in percentage points; error bars are the sd over seeds of the per-seed Δ (of the
    final score when a seed lacks base scores);
    ``n=`` in the legend is the number of seeds. Returns ``out_path``.
    """
    data = gains_png(results_dir_or_rows, metric=metric, title=title)
    out = Path(out_path)
    atomic_write_bytes(out, data)
    return out
