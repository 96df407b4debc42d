"""Check the collapse alarm against the hidden truth on finished micro runs (issue 14, item 7).

    python scripts/collapse_check.py RUN_DIR [RUN_DIR ...] [--set monitor.diversity_drop=0.4 ...] [--json out.json]

For every agent of every run: when the label-free alarm fires (replayed from metrics.jsonl with the given monitor
settings, so thresholds can be varied without retraining; the run's own event rows are shown beside it), and what
the hidden truth says:

* **collapsed**: final sampled pass@1 or greedy accuracy on the first benchmark below half of base (the micro
  study's rule, results/micro-study/collapse.md, on either metric);
* **degraded**: final pass@1 or greedy more than 5 points below base, but not collapsed;
* **ok**: otherwise;
* **turn**: the step at which the 5-step trailing mean of ``reward/true_mean`` (the hidden-truth accuracy of the
  trained rollouts) peaks, and the first step at which it falls below half of its mean over steps 0-4.

A collapsed agent with an alarm is a hit, without one a miss; an ok agent with an alarm is a false alarm. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corl_bench.config import load_config  # noqa: E402
from corl_bench.report.collect import collect_results  # noqa: E402
from corl_bench.results import RunDir  # noqa: E402
from corl_bench.train.monitor import CollapseMonitor  # noqa: E402


def trailing(values: list[Optional[float]], width: int = 5) -> list[Optional[float]]:
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1): i + 1] if v is not None]
        out.append(sum(window) / len(window) if window else None)
    return out


def truth_turn(true_mean: list[Optional[float]]) -> tuple[Optional[int], Optional[int]]:
    """(step of the peak of the trailing mean, first step it falls below half of the steps-0-4 mean)."""
    smooth = trailing(true_mean)
    valid = [(i, v) for i, v in enumerate(smooth) if v is not None and i >= 4]
    peak = max(valid, key=lambda p: p[1])[0] if valid else None
    early = [v for v in true_mean[:5] if v is not None]
    base = sum(early) / len(early) if early else None
    fall = next((i for i, v in valid if base and v < 0.5 * base), None)
    return peak, fall


def truth_of(base: Optional[float], final: Optional[float], base_g: Optional[float],
             final_g: Optional[float]) -> str:
    """The hidden truth of one agent from its held-out scores: collapsed (pass@1 or greedy below half of base),
    degraded (either more than 5 points below base, not collapsed), ok, or ? (a score is missing)."""
    if None in (base, final, base_g, final_g):
        return "?"
    pairs = ((base, final), (base_g, final_g))
    return ("collapsed" if any(y < 0.5 * x for x, y in pairs) else
            "degraded" if any(y < x - 0.05 for x, y in pairs) else "ok")


def confusion(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    """(truly bad, alarm fired) per agent -> counts, precision (alarms that were right) and recall (bad agents the
    alarm caught); None where the denominator is zero."""
    tp = sum(bad and fired for bad, fired in pairs)
    fp = sum(fired and not bad for bad, fired in pairs)
    fn = sum(bad and not fired for bad, fired in pairs)
    tn = sum(not bad and not fired for bad, fired in pairs)
    return {"agents": len(pairs), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None}


def replay_alarms(rd: RunDir, cfg: Any) -> dict[str, Any]:
    """agent -> the first alarm the label-free monitor (``cfg.monitor``) fires on this run's logged steps."""
    metrics = [r for r in rd.metrics() if "agent" in r and "step" in r and not r.get("event")]
    steps = sorted({r["step"] for r in metrics})
    by_step = [{r["agent"]: r for r in metrics if r["step"] == s} for s in steps]
    fired: dict[str, Any] = {}
    for a in CollapseMonitor(cfg.monitor).replay(by_step):
        fired.setdefault(a.agent, a)
    return fired


def check(run_dirs: list[Path], overrides: list[str]) -> list[dict[str, Any]]:
    cfg = load_config(None, overrides)
    rows = []
    collected: dict[Path, Any] = {}  # one grading pass per results folder, not one per run
    for path in run_dirs:
        rd = RunDir(path)
        record = rd.record()
        metrics = rd.metrics()
        steps = sorted({r["step"] for r in metrics if "step" in r})
        by_step = [{r["agent"]: r for r in metrics if r.get("step") == s and "agent" in r} for s in steps]
        fired = replay_alarms(rd, cfg)
        logged = {e["agent"]: e["step"] for e in rd.events()}
        if path.parent not in collected:
            collected[path.parent] = collect_results(path.parent, selected=False).results
        results = {r.agent: r for r in collected[path.parent] if r.run_id == record.run_id}
        for agent in record.agent_names:
            res = results.get(agent)
            bench = next(iter(res.final)) if res else None
            b = res.base.get(bench) if res else None
            f = res.final.get(bench) if res else None
            base, final = (b.avg_k if b else None), (f.avg_k if f else None)
            base_g, final_g = (b.greedy if b else None), (f.greedy if f else None)
            truth = truth_of(base, final, base_g, final_g)
            peak, fall = truth_turn([by_step[i].get(agent, {}).get("reward/true_mean") for i in range(len(steps))])
            alarm = fired.get(agent)
            verdict = {("collapsed", True): "hit", ("collapsed", False): "miss", ("ok", True): "false alarm",
                       ("ok", False): "correct silence", ("degraded", True): "alarm (degraded)",
                       ("degraded", False): "silent (degraded)"}.get((truth, alarm is not None), "?")
            rows.append({"run": record.run_id, "method": record.method, "cohort": record.cohort, "agent": agent,
                         "base": base, "final": final, "base_greedy": base_g, "final_greedy": final_g,
                         "truth": truth, "truth_peak": peak, "truth_half": fall,
                         "alarm_step": alarm.step if alarm else None,
                         "symptoms": list(alarm.symptoms) if alarm else [],
                         "signals": alarm.signals if alarm else None,
                         "logged_step": logged.get(agent), "verdict": verdict})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    def pct(x: Optional[float]) -> str:
        return "–" if x is None else f"{100 * x:.1f}"

    def step(x: Optional[int]) -> str:
        return "–" if x is None else str(x)

    out = ["| run | agent | pass@1 base → final | greedy base → final | hidden truth | truth peak / half step | "
           "alarm step (symptoms) | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sym = f" ({' + '.join(r['symptoms'])})" if r["symptoms"] else ""
        out.append(f"| {r['method']} {r['cohort']} | {r['agent']} | {pct(r['base'])} → {pct(r['final'])} | "
                   f"{pct(r['base_greedy'])} → {pct(r['final_greedy'])} | "
                   f"{r['truth']} | {step(r['truth_peak'])} / {step(r['truth_half'])} | "
                   f"{step(r['alarm_step'])}{sym} | {r['verdict']} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="e.g. monitor.window=5")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = check(args.runs, args.overrides)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
