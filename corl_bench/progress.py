"""Rich progress for a run (one bar per phase with ETA) and the closing summary table."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from corl_bench.table import print_wide


class RunProgress:
    """Context manager around ``rich.progress.Progress`` with the phases of a run."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]{task.description:<22}"), BarColumn(bar_width=30),
                                 MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), TextColumn("{task.fields[status]}"), console=self.console,
                                 transient=False)
        self._logged: dict[TaskID, int] = {}

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def add(self, description: str, total: int) -> TaskID:
        task = self.progress.add_task(description, total=total, status="")
        self._logged[task] = -1
        return task

    def advance(self, task: TaskID, n: int, status: str | None = None) -> None:
        if status is None:
            self.progress.advance(task, n)
        else:
            self.progress.update(task, advance=n, status=status)
        if not self.console.is_terminal:  # logs and CI: a plain line at every 10 % instead of a live bar
            t = self.progress.tasks[task]
            decile = int(10 * t.completed / t.total) if t.total else 10
            if decile > self._logged.get(task, -1):
                self._logged[task] = decile
                left = t.time_remaining
                eta = f", eta {left:.0f} s" if left is not None and t.completed < t.total else ""
                self.console.log(f"{t.description}: {int(t.completed)}/{int(t.total or 0)} "
                                 f"({t.elapsed or 0:.0f} s{eta}) {t.fields.get('status', '')}".rstrip())

    def warm_start(self, profile: Any, families: list[str]) -> None:
        """Build missing micro checkpoints with one bar per family (no bar when everything is cached)."""
        missing = profile.missing(families) if hasattr(profile, "missing") else []
        if not missing:
            return
        tasks: dict[str, TaskID] = {}

        def report(family: str, done: int, total: int) -> None:
            if family not in tasks:
                tasks[family] = self.add(f"warm start {family}", total)
            self.advance(tasks[family], done - int(self.progress.tasks[tasks[family]].completed))

        t = time.perf_counter()
        profile.ensure_checkpoints(families, progress=report)
        self.console.log(f"warm start of {', '.join(missing)} took {time.perf_counter() - t:.0f} s "
                         f"(cached for later runs)")


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


def summary_table(console: Console | None, info: dict, scores: dict, history: list) -> Table:
    """Per agent and benchmark: base → final (greedy, pass@1, maj@k) and the label-free diagnostics at the end."""
    console = console or Console(stderr=True)
    table = Table(title=f"{info['method']} · {info['cohort']} · seed {info['seed']} · "
                        f"{info.get('wall_seconds', 0):.0f} s · {info['run_id']}")
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
    timings = " · ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in info.get("timings", {}).items())
    console.print(f"time per phase: {timings}")
    console.print("diagnostics: mean over the last 20 % of steps (reward in its own units); "
                  "scores in %, recomputed from "
                  "eval/<phase>/<agent>/*.jsonl")
    return table
