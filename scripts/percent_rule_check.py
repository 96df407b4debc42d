#!/usr/bin/env python
"""How many grades the percent rule changes: stored predictions and reference solutions, graded with and without it.

    python scripts/percent_rule_check.py results/evals results/runs            # every predictions .jsonl below
    python scripts/percent_rule_check.py --references math500,gsm8k --data-dir ../shared/data

Predictions are regraded from their completions with their benchmark spec's extractor; "without" grades with
``verifier.is_equivalent`` (the grader before the rule), "with" with the spec's ``math`` grader
(``verifier.is_correct``). ``--references`` grades each benchmark's own reference solutions (the ``solution``
field) as if they were predictions: every change there is a false negative the rule removes. Prints one line per
benchmark and the changed rows.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from corl_bench.eval.specs import get_spec
from corl_bench.registries import EXTRACTORS
from corl_bench.grading.verifier import is_correct, is_equivalent


def _rows_of(paths: list[Path]) -> list[dict]:
    rows = []
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
        for f in files:
            for line in f.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and {"benchmark", "completion", "gold"} <= row.keys():
                    rows.append(row)
    return rows


def _reference_rows(names: list[str], data_dir: str | None) -> list[dict]:
    from corl_bench.eval.data import load_rows

    rows = []
    for name in names:
        for r in load_rows(get_spec(name), data_dir):
            if r.get("solution"):
                rows.append({"benchmark": name, "problem_id": r.get("id"), "completion": str(r["solution"]),
                             "gold": str(r["answer"])})
    return rows


def compare(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = defaultdict(lambda: {"rows": 0, "math_rows": 0, "right": 0, "changed": []})
    for row in rows:
        name = str(row["benchmark"])
        stats = out[name]
        stats["rows"] += 1
        try:
            spec = get_spec(name)
        except Exception:  # noqa: BLE001 - a benchmark no longer registered: skip its rows
            continue
        if spec.grader != "math":
            continue
        stats["math_rows"] += 1
        pred = EXTRACTORS.get(spec.extractor)(str(row.get("completion") or ""))
        gold = str(row["gold"])
        before, after = bool(pred is not None and is_equivalent(pred, gold)), bool(pred is not None and
                                                                                  is_correct(pred, gold))
        stats["right"] += after
        if before != after:
            stats["changed"].append((row.get("problem_id"), pred, gold, before, after))
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="predictions files or folders (searched for *.jsonl)")
    ap.add_argument("--references", default="", help="comma list of benchmarks whose reference solutions to grade")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    rows = _rows_of(args.paths)
    refs = [b.strip() for b in args.references.split(",") if b.strip()]
    results = {f"{k} (predictions)": v for k, v in compare(rows).items()}
    results.update({f"{k} (reference solutions)": v for k, v in compare(_reference_rows(refs, args.data_dir)).items()})
    for name, s in sorted(results.items()):
        print(f"{name}: {s['math_rows']} graded rows, {s['right']} right with the rule, {len(s['changed'])} changed "
              f"({sum(1 for c in s['changed'] if c[4])} wrong -> right, {sum(1 for c in s['changed'] if c[3])} "
              f"right -> wrong)")
        for pid, pred, gold, before, after in s["changed"]:
            print(f"    {pid}: extracted {pred!r}, gold {gold!r}: {before} -> {after}")


if __name__ == "__main__":
    main()
