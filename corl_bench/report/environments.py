"""Where the environments of a table's runs differ (each run's ``env.json``: python, platform, machine, packages,
git commit).

Public API (no torch): :func:`env_differences` ``(runs) -> (summary, details)`` - ``summary`` is one footer line
naming only the keys that differ, with how many runs hold each value ("Environments differ (env.json): transformers
5.24.0 (12 runs) vs 5.25.0 (1 run); git commit (3 commits over 13 runs).") or None when they agree; ``details`` is
one line per differing key naming the runs (for ``corl-bench table --warnings``). ``seed``, ``argv`` and
``created_at`` differ by design and are not compared; the git commit gets a count, not a list of hashes.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from corl_bench.report.collect import ENV_KEYS, RunProtocol

logger = logging.getLogger(__name__)

__all__ = ["env_differences"]

PACKAGE = "package "  # key prefix of a package in the flattened environment
SHOWN_VALUES = 3  # values named in the summary line per key (the rest are counted)


def _flat(run: RunProtocol) -> dict[str, str]:
    """key -> value of one run's env.json ({} when it has none): ENV_KEYS, then one ``package NAME`` per package."""
    if run.environment is None:
        return {}
    return {**dict(run.environment), **{PACKAGE + name: version for name, version in run.packages}}


def _order(key: str) -> tuple[int, str]:
    """python, platform, machine, then packages by name, then the git commit."""
    if key == "git_commit":
        return 3, key
    if key.startswith(PACKAGE):
        return 2, key
    return 1, f"{ENV_KEYS.index(key):02d}" if key in ENV_KEYS else key


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _names(run_ids: Sequence[str], limit: int = 6) -> str:
    more = f" and {len(run_ids) - limit} more" if len(run_ids) > limit else ""
    return ", ".join(run_ids[:limit]) + more


def env_differences(runs: Sequence[RunProtocol]) -> tuple[Optional[str], list[str]]:
    """(one summary line, or None when every run's env.json agrees; one detail line per differing key)."""
    flat = {r.run_id: _flat(r) for r in runs}
    recorded = [rid for rid, values in flat.items() if values]
    unrecorded = [rid for rid, values in flat.items() if not values]
    parts: list[str] = []
    details: list[str] = []
    for key in sorted({k for values in flat.values() for k in values}, key=_order):
        by_value: dict[str, list[str]] = {}
        for rid in recorded:
            by_value.setdefault(flat[rid].get(key, "not recorded"), []).append(rid)
        if len(by_value) < 2:
            continue
        ordered = sorted(by_value.items(), key=lambda item: (-len(item[1]), item[0]))
        name = key[len(PACKAGE):] if key.startswith(PACKAGE) else key.replace("_", " ")
        if key == "git_commit":
            parts.append(f"git commit ({len(ordered)} commits over {_runs(len(recorded))})")
        else:
            shown = " vs ".join(f"{value} ({_runs(len(ids))})" for value, ids in ordered[:SHOWN_VALUES])
            more = f" and {len(ordered) - SHOWN_VALUES} more" if len(ordered) > SHOWN_VALUES else ""
            parts.append(f"{name} {shown}{more}")
        details.append(f"environments differ in {name}: "
                       + "; ".join(f"{value} in {_names(ids)}" for value, ids in ordered))
    if recorded and unrecorded:
        parts.append(f"no env.json in {_runs(len(unrecorded))}")
        details.append(f"no readable env.json in {_names(unrecorded)}; its environment is not compared")
    if not parts:
        return None, []
    return "Environments differ (env.json): " + "; ".join(parts) + ".", details
