"""Two runs of the same grid cell under one results directory: keep the newer, and say so in one line.

Public API (no torch): :func:`newest_of_each_cell` ``(loaded) -> (kept, lines)`` over (run directory, its results,
its :class:`corl_bench.report.collect.RunProtocol`) triples; :func:`cell_key` (method, cohort, tag, seed, evaluated
model, agents: what makes two runs the same cell); :func:`started` (when a run started: run.json ``started_at``, else
``finished_at``, else the time run.json was written). :func:`corl_bench.report.collect.collect_results` uses it.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from corl_bench.record import RunRecord
from corl_bench.results import RunDir

logger = logging.getLogger(__name__)

__all__ = ["cell_key", "newest_of_each_cell", "started"]

Loaded = tuple[RunDir, Any, Any]  # (run directory, its AgentResults, its RunProtocol: .record and .rel are read)


def cell_key(record: RunRecord) -> tuple[Any, ...]:
    """What makes two runs the same cell of a grid: method, cohort, tag, seed, evaluated model and agents."""
    agents = tuple((a.name, a.family or "") for a in record.agents or ())
    return record.method, record.cohort, record.tag or "", record.seed, record.model or "", agents


def started(run: RunDir, record: RunRecord) -> tuple[float, str]:
    """(seconds since the epoch, "YYYY-MM-DD HH:MM") of when a run started: run.json ``started_at``, else
    ``finished_at``, else the time run.json was last written."""
    import datetime as dt

    for stamp in (record.started_at, record.finished_at):
        try:
            when = dt.datetime.fromisoformat(stamp) if stamp else None
        except ValueError:
            when = None
        if when is not None:
            when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
            return when.timestamp(), stamp[:16].replace("T", " ")  # type: ignore[index]
    try:
        mtime = run.info_path.stat().st_mtime
    except OSError:
        return 0.0, "unknown"
    return mtime, dt.datetime.fromtimestamp(mtime, dt.timezone.utc).strftime("%Y-%m-%d %H:%M") + " (file time)"


def newest_of_each_cell(loaded: Sequence[Loaded]) -> tuple[list[Loaded], list[str]]:
    """The runs with only the newest of each cell kept (in their order; the newest by :func:`started`, ties by
    path), and one line per run set aside naming the kept run, the other and how to see it (``-r`` its directory)."""
    cells: dict[tuple[Any, ...], list[int]] = {}
    for i, (_, _, info) in enumerate(loaded):
        cells.setdefault(cell_key(info.record), []).append(i)
    aside: set[int] = set()
    lines = []
    for indices in cells.values():
        if len(indices) < 2:
            continue
        times = {i: started(loaded[i][0], loaded[i][2].record) for i in indices}
        ordered = sorted(indices, key=lambda i: (-times[i][0], loaded[i][2].rel))
        keep = ordered[0]
        record, rel = loaded[keep][2].record, loaded[keep][2].rel
        cell = f"{record.method} / {record.cohort}" + (f" [{record.tag}]" if record.tag else "") + \
            f" / seed {record.seed}" + (f" / {record.model}" if record.model else "")
        for other in ordered[1:]:
            aside.add(other)
            newer = "newer" if times[keep][0] > times[other][0] else "same start time; first by path"
            lines.append(f"duplicate run {cell}: kept {rel} ({newer}, started {times[keep][1]}), set aside "
                         f"{loaded[other][2].rel} (started {times[other][1]}); see it with -r {loaded[other][0].path}")
    return [run for i, run in enumerate(loaded) if i not in aside], lines
