"""Terminal output shared by training (the run's summary) and reporting (the results table).

A neutral home: training may import it without loading any reporting module.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

__all__ = ["print_wide"]


def print_wide(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width even on a narrow console: numbers are never cut to "…"."""
    width = max(console.width, Measurement.get(console, console.options.update_width(10_000), table).maximum)
    lines = console.render_lines(table, console.options.update_width(width), pad=False, new_lines=True)
    console.print(Segments([seg for line in lines for seg in line]), crop=False, soft_wrap=True, end="")
