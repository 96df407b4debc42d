"""We-Math's four-dimensional metrics, computed from per-item prediction rows.

Definition (We-Math/We-Math @ a57a0e8, ``README.md`` "Metric for Reasoning Evaluation" and
``evaluation/four_dimensional_metrics.py``; Qiao et al., *We-Math: Does Your Large Multimodal Model Achieve
Human-like Mathematical Reasoning?*, arXiv:2407.01284). testmini holds 525 composite problems, each decomposed into
one-step sub-problems: 360 two-step problems (rows with ``key`` ``2steps_1``, ``2steps_2``, ``2steps_multi``) and 165
three-step ones (``3steps_1`` .. ``3steps_3``, ``3steps_multi``), all rows of a problem sharing its ``ID``
(``we_math_id`` here). With *sub* = the one-step answers and *multi* = the composite answer:

* **IK** insufficient knowledge: some sub wrong and multi wrong;
* **IG** inadequate generalization: every sub right, multi wrong;
* **CM** complete mastery — strict: every sub right and multi right; loose: some sub right and multi right;
* **RM** rote memorization — strict: some sub wrong and multi right; loose: every sub wrong and multi right.

IK, IG and CM are reported as shares of the problems; RM as a share of the problems whose multi is right
(``RM / (CM + RM)``, strict and loose each with its own CM and RM), exactly as the official script does. The score
is ``(n - 0.5 IG - RM - IK) / n`` (strict and loose; the script hard-codes n = 525). A problem whose rows are not all
present (a ``--max-problems`` subset) is left out and counted in ``incomplete``. The per-item right/wrong comes from
our grader (the official script matches the option letter after "Answer"), from one decoding's rows: ``greedy`` (the
paper's protocol) or, without greedy rows, sample 0.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

log = logging.getLogger(__name__)

Grade = Callable[[Mapping[str, Any]], "tuple[Optional[str], bool]"]


def _steps(key: str) -> tuple[str, str] | None:
    """``("2steps", "1")`` for key ``2steps_1``, ``("3steps", "multi")`` for ``3steps_multi``; None otherwise."""
    kind, _, part = str(key).rpartition("_")
    if kind in ("2steps", "3steps") and (part == "multi" or part.isdigit()):
        return kind, part
    return None


def four_dimensional(correct: Mapping[tuple[str, str], bool]) -> dict[str, Any]:
    """The metrics from ``(we_math_id, key) -> right?`` (see the module docstring)."""
    groups: dict[str, dict[str, bool]] = {}
    for (wid, key), ok in correct.items():
        if _steps(key) is not None:
            groups.setdefault(str(wid), {})[str(key)] = bool(ok)
    counts = {"IK": 0, "IG": 0, "CM_strict": 0, "CM_loose": 0, "RM_strict": 0, "RM_loose": 0}
    n = incomplete = 0
    for wid, keys in sorted(groups.items()):
        kind = _steps(next(iter(keys)))[0]  # type: ignore[index]
        need = [f"{kind}_{i}" for i in range(1, int(kind[0]) + 1)]
        if any(k not in keys for k in need) or f"{kind}_multi" not in keys or any(_steps(k)[0] != kind for k in keys):
            incomplete += 1
            continue
        n += 1
        subs, multi = [keys[k] for k in need], keys[f"{kind}_multi"]
        all_right, any_right = all(subs), any(subs)
        if not multi:
            counts["IG" if all_right else "IK"] += 1
        else:
            counts["CM_strict"] += all_right
            counts["CM_loose"] += any_right
            counts["RM_strict"] += not all_right
            counts["RM_loose"] += not any_right
    if incomplete:
        log.warning("We-Math metrics: %d problem(s) without all their sub-problem rows were left out", incomplete)

    def share(x: int, of: int) -> float | None:
        return x / of if of else None

    out: dict[str, Any] = {"problems": n, "incomplete": incomplete, "counts": counts,
                           "IK": share(counts["IK"], n), "IG": share(counts["IG"], n),
                           "CM_strict": share(counts["CM_strict"], n), "CM_loose": share(counts["CM_loose"], n),
                           "RM_strict": share(counts["RM_strict"], counts["CM_strict"] + counts["RM_strict"]),
                           "RM_loose": share(counts["RM_loose"], counts["CM_loose"] + counts["RM_loose"])}
    for mode in ("strict", "loose"):
        out[f"score_{mode}"] = share(n - 0.5 * counts["IG"] - counts[f"RM_{mode}"] - counts["IK"], n) if n else None
    return out


def from_rows(rows: Iterable[Mapping[str, Any]], grade: Grade | None = None, decoding: str | None = None
              ) -> dict[str, Any]:
    """:func:`four_dimensional` of prediction rows that carry ``meta: {we_math_id, key}``. ``grade(row)`` gives
    ``(extracted, right?)`` (default: the stored ``correct``); ``decoding``: ``greedy`` or ``sampled`` (sample 0);
    None = greedy when there are greedy rows."""
    rows = list(rows)
    if decoding is None:
        decoding = "greedy" if any(r.get("decoding") == "greedy" for r in rows) else "sampled"
    correct: dict[tuple[str, str], bool] = {}
    for row in rows:
        if row.get("decoding") != decoding or (decoding == "sampled" and int(row.get("sample_index", 0)) != 0):
            continue
        meta = row.get("meta") or {}
        if meta.get("we_math_id") is None or meta.get("key") is None:
            raise ValueError(f"row {row.get('problem_id')!r} has no meta.we_math_id / meta.key; We-Math metrics "
                             "need predictions made with record_fields: [we_math_id, key]")
        ok = grade(row)[1] if grade is not None else bool(row.get("correct"))
        correct[(str(meta["we_math_id"]), str(meta["key"]))] = ok
    return {**four_dimensional(correct), "decoding": decoding}


def metrics_from_file(path: Path, spec: Any, ids: set[str] | None = None) -> dict[str, Any]:
    """The metrics of a predictions file, re-graded with the spec's grader (as tables are)."""
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.results import read_jsonl

    rows = [r for r in read_jsonl(Path(path)) if ids is None or str(r["problem_id"]) in ids]
    return from_rows(rows, row_grader(spec))


def describe(m: Mapping[str, Any]) -> str:
    """One line: ``We-Math (525 problems, greedy): score strict 41.2 / loose 50.1; IK 30.1 IG 8.0 CM 40.2/49.1 ..."""
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    return (f"We-Math ({m['problems']} problems, {m.get('decoding', '?')}): score strict {pct(m['score_strict'])} / "
            f"loose {pct(m['score_loose'])}; IK {pct(m['IK'])} IG {pct(m['IG'])} CM strict {pct(m['CM_strict'])} "
            f"loose {pct(m['CM_loose'])} RM strict {pct(m['RM_strict'])} loose {pct(m['RM_loose'])}")
