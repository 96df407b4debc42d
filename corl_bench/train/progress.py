"""Rich progress for a run (one bar per phase with ETA) and the closing summary table.

In a terminal the phases are live bars. Elsewhere (CI logs, ``nohup``, ``| tee``) nothing live is drawn: each phase
writes a plain timestamped line at its first step and at every 10 %, and the summary table has no heavy rules.
"""

from __future__ import annotations

import time
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, Task, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from corl_bench.console import print_wide
from corl_bench.record import RunRecord


def stamp() -> str:
    """Local time as plain log lines show it, e.g. ``2026-12-01 15:04:05``."""
    return time.strftime("%Y-%m-%d %H:%M:%S")


def plain_line(task: Task) -> str:
    """``eval base: 120/1200 (12 s, eta 100 s) status`` for a task (no timestamp)."""
    left = task.time_remaining
    eta = f", eta {left:.0f} s" if left is not None and task.completed < (task.total or 0) else ""
    return (f"{task.description}: {int(task.completed)}/{int(task.total or 0)} "
            f"({task.elapsed or 0:.0f} s{eta}) {task.fields.get('status', '')}").rstrip()


def duration(seconds: float) -> str:
    """``41 s`` below two minutes, ``12 min 05 s`` below two hours, else ``2 h 03 min``."""
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_seconds(done: float, total: float, elapsed: float) -> float | None:
    """Seconds left if the remaining ``total - done`` units take as long each as the ``done`` ones did (None before
    the first unit is done)."""
    if done <= 0 or elapsed < 0:
        return None
    return max(0.0, elapsed * (total - done) / done)


class Eta:
    """Work done out of ``total`` units since construction, the time elapsed and the time left, as one log line:
    ``6/20 problems in 41 s, ETA 95 s``. The estimate is linear in the units (every unit as long as the mean
    of the done ones), so it is rough while few are done and when units differ (a larger model's generations).
    ``done``: units finished before this process started (a resumed run's steps): counted, not timed."""

    def __init__(self, total: int, unit: str, done: int = 0, clock: Any = time.perf_counter) -> None:
        self.total, self.unit, self.clock = total, unit, clock
        self.done = self.first = done
        self.start = clock()

    def advance(self, n: int = 1) -> None:
        self.done += n

    def line(self) -> str:
        elapsed = self.clock() - self.start
        left = eta_seconds(self.done - self.first, self.total - self.first, elapsed)
        eta = "" if left is None else ", done" if self.done >= self.total else f", ETA {duration(left)}"
        return f"{self.done}/{self.total} {self.unit} in {duration(elapsed)}{eta}"


class RunProgress:
    """Context manager around ``rich.progress.Progress`` with the phases of a run.

    The live display runs only when the console is a terminal; otherwise the Progress is disabled (it still keeps
    the tasks' counts and speeds) and :meth:`advance` logs plain timestamped lines instead."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.progress = Progress(TextColumn("[bold]{task.description:<22}"), BarColumn(bar_width=30),
                                 MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), TextColumn("{task.fields[status]}"), console=self.console,
                                 transient=False, disable=not self.live)
        self._logged: dict[TaskID, int] = {}

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def say(self, text: str) -> None:
        """A message beside the bars (terminal) or one plain timestamped line (logs)."""
        if self.live:
            self.console.log(text)
        else:
            self.console.print(f"{stamp()} {text}", markup=False, highlight=False, soft_wrap=True)

    def alarm(self, text: str) -> None:
        """A warning that must not be missed (the collapse alarm): bold red beside the bars in a terminal, one plain
        timestamped line in logs."""
        if self.live:
            self.console.log(Text(text, style="bold red"))
        else:
            self.say(text)

    def add(self, description: str, total: int) -> TaskID:
        task = self.progress.add_task(description, total=total, status="")
        self._logged[task] = -1
        return task

    def advance(self, task: TaskID, n: int, status: str | None = None) -> None:
        if status is None:
            self.progress.advance(task, n)
        else:
            self.progress.update(task, advance=n, status=status)
        if not self.live:
            self._log_decile(task)

    def _log_decile(self, task: TaskID) -> None:
        """A plain line at the first step and at every further 10 % of ``task``."""
        t = self.progress.tasks[task]
        decile = int(10 * t.completed / t.total) if t.total else 10
        if decile > self._logged.get(task, -1):
            self._logged[task] = decile
            self.say(plain_line(t))

    def warm_start(self, profile: Any, families: list[str]) -> None:
        """Build missing micro checkpoints with one bar per family (no bar when everything is cached)."""
        missing = profile.missing(families)
        if not missing:
            return
        tasks: dict[str, TaskID] = {}

        def report(family: str, done: int, total: int) -> None:
            if family not in tasks:
                tasks[family] = self.add(f"warm start {family}", total)
            self.advance(tasks[family], done - int(self.progress.tasks[tasks[family]].completed))

        t = time.perf_counter()
        profile.prepare(families, progress=report)
        self.say(f"warm start of {', '.join(missing)} took {time.perf_counter() - t:.0f} s (cached for later runs)")


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _raw(x: float | None) -> str:
    """Rewards are not percentages (RENT's is a negative entropy, Intuitor's a KL in nats)."""
    return "—" if x is None else f"{x:.3f}"


def _arrow(before: float | None, after: float | None) -> str:
    if before is None:
        return _fmt(after)
    return f"{_fmt(before)} → {_fmt(after)}"


def _tail_mean(history: list[dict[str, dict[str, float | None]]], agent: str, key: str) -> float | None:
    """Mean of a diagnostic over the last 20 % of steps."""
    if not history:
        return None
    tail = history[-max(1, len(history) // 5):]
    vals = [h[agent].get(key) for h in tail if h.get(agent, {}).get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def _alarm_text(row: dict) -> str:
    signals = row.get("signals") or {}
    parts = [f"{name} {s['baseline']:.3g} -> {s['now']:.3g}" for name, s in signals.items()
             if isinstance(s, dict) and s.get("baseline") is not None and s.get("now") is not None]
    shape = f"{row['shape']}, " if row.get("shape") else ""
    return (f"{row.get('agent')} at step {row.get('step')}: {shape}{' + '.join(row.get('symptoms') or ())}"
            + (f" ({', '.join(parts)})" if parts else ""))


SELECTION_TEXT = {"dev": "selected on {benchmark} (labelled, disjoint from test)",
                  "label-free": "selected label-free by peer agreement on {benchmark} (labels unread)",
                  "test-oracle": "selected on the test set {benchmark} (test-oracle): optimistic"}


def run_notes(record: RunRecord) -> list[str]:
    """The end-of-run lines about the collapse alarm, an early stop and the reported checkpoint, from the run
    record."""
    lines = []
    alarms = record.collapse_alarms
    if alarms is None:
        lines.append("collapse alarm: off (monitor.collapse_alarm=false)")
    elif not alarms:
        lines.append("collapse alarm: silent (label-free signals against each agent's first steps)")
    else:
        lines += [f"collapse alarm: {_alarm_text(a)}" for a in alarms]
    if record.stopped == "collapse":
        lines.append(f"stopped early after {record.stopped_after_step} of {record.steps} steps on the "
                     "collapse alarm (run.stop_on_collapse); final = the weights at the stop")
    sel = record.selection
    if isinstance(sel, dict) and sel.get("rule") in SELECTION_TEXT:
        chosen = []
        for agent, c in (sel.get("agents") or {}).items():
            value = (c.get("values") or {}).get(c.get("phase"))
            chosen.append(f"{agent} {c.get('phase')}" + (f" ({_fmt(value)})" if value is not None else ""))
        lines.append("checkpoint: " + SELECTION_TEXT[sel["rule"]].format(benchmark=sel.get("benchmark")) + " — "
                     + ", ".join(chosen) + "; the table above shows final")
    else:
        lines.append("checkpoint: final")
    return lines


def summary_table(console: Console | None, record: RunRecord, scores: dict, history: list) -> Table:
    """Per agent and benchmark: base → final (greedy, pass@1, maj@k) and the label-free diagnostics at the end."""
    console = console or Console(stderr=True)
    table = Table(title=f"{record.method} · {record.cohort} · seed {record.seed} · "
                        f"{record.wall_seconds or 0:.0f} s · {record.run_id}",
                  box=box.HEAVY_HEAD if console.is_terminal else box.SIMPLE,  # logs: no heavy rules (━)
                  show_edge=console.is_terminal)
    for col in ("agent", "benchmark", "greedy", "pass@1", "maj@k", "label acc", "peer agree", "reward"):
        table.add_column(col, justify="left" if col in ("agent", "benchmark") else "right")
    base, final = scores.get("base", {}), scores.get("final", {})
    for agent in final:
        for bench, s in final[agent].items():
            b = base.get(agent, {}).get(bench)
            table.add_row(agent, bench, _arrow(b.greedy if b else None, s.greedy),
                          _arrow(b.avg_k if b else None, s.avg_k), _arrow(b.maj_k if b else None, s.maj_k),
                          _fmt(_tail_mean(history, agent, "label/accuracy")),
                          _fmt(_tail_mean(history, agent, "peer/agreement")),
                          _raw(_tail_mean(history, agent, "reward/mean")))
    print_wide(console, table)
    whole = not console.is_terminal  # a log line is never broken at 80 columns
    for line in run_notes(record):
        console.print(line, soft_wrap=whole, markup=False, highlight=False)
    timings = " · ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in (record.timings or {}).items())
    console.print(f"time per phase: {timings}", soft_wrap=whole)
    console.print("diagnostics: mean over the last 20 % of steps (reward in its own units); "
                  "scores in %, recomputed from "
                  "eval/<phase>/<agent>/*.jsonl", soft_wrap=whole)
    return table
