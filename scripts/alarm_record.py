"""The collapse alarm's record against the held-out truth, per agent, on the real and the micro studies' runs (issue 38,
item 3). Used by scripts/real_study.py (collapse.md).

The alarm is replayed from each run's metrics.jsonl with the default monitor settings (scripts/collapse_check.py),
and the alarm each run recorded while training (run.json ``collapse_alarms``) is counted beside it. The truth is the
held-out suite (real: arith-heldout, against the Base cell of the same seed, since the real runs evaluate only their
final weights; micro: the run's own base evaluation of its first benchmark):

* **collapsed**: final sampled pass@1 or greedy accuracy below half of base (``collapse_check.truth_of``);
* **harmed**: collapsed, or either metric more than 5 points below base.

Precision = alarmed agents that were truly bad / alarmed agents; recall = truly bad agents alarmed / truly bad agents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from collapse_check import check, confusion, replay_alarms, truth_of

RULES = {"collapsed": ("collapsed",), "harmed": ("collapsed", "degraded")}


def _pp(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def real_rows(root: Path, heldout: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per agent of every trained real run: scores vs the same seed's Base, replayed and recorded alarms."""
    from corl_bench.config import load_config
    from corl_bench.results import find_runs

    cfg = load_config(None, [])
    base = {(s.seed, s.family): s.final for s in heldout if s.tag == "base"}
    final = {(s.method, s.cohort, s.tag, s.seed, s.agent): s for s in heldout}
    rows = []
    for run in find_runs(root / "runs"):
        rec = run.record()
        if not rec.finished or not rec.steps:
            continue
        fired = replay_alarms(run, cfg)
        recorded = {a["agent"] for a in rec.collapse_alarms or ()}
        for agent in rec.agents:
            s = final.get((rec.method, rec.cohort, rec.tag or "", rec.seed, agent.name))
            b = base.get((rec.seed, agent.family))
            if s is None or b is None:
                continue
            alarm = fired.get(agent.name)
            rows.append({"study": "real", "run": run.name, "agent": agent.name, "base": b["avg_k"],
                         "final": s.final["avg_k"], "base_greedy": b["greedy"], "final_greedy": s.final["greedy"],
                         "truth": truth_of(b["avg_k"], s.final["avg_k"], b["greedy"], s.final["greedy"]),
                         "alarm_step": alarm.step if alarm else None,
                         "symptoms": list(alarm.symptoms) if alarm else [], "recorded": agent.name in recorded})
    return rows


def micro_rows(root: Path) -> list[dict[str, Any]]:
    from corl_bench.results import RunDir, find_runs

    dirs = [r.path for r in find_runs(root / "runs") if r.record().finished and r.record().steps]
    rows = check(dirs, [])
    recorded = {(RunDir(d).record().run_id, a["agent"]) for d in dirs for a in RunDir(d).record().collapse_alarms or ()}
    for r in rows:
        r["study"], r["recorded"] = "micro", (r["run"], r["agent"]) in recorded
    return rows


SIGNALS = (("answer diversity (1 − majority ratio)", "vote/majority_ratio"), ("policy entropy", "policy/entropy"),
           ("length", "len/mean"), ("peer agreement", "peer/agreement"))


def root_of(roots: Sequence[tuple[str, Path]], study: str) -> Path:
    return next(root for name, root in roots if name == study)


def signal_ratios(run_dir: Path, agent: str, split: int = 5) -> list[str]:
    """'first → last (ratio)' for each of SIGNALS and the hidden-truth rollout accuracy of one agent."""
    from corl_bench.results import RunDir

    rows = [r for r in RunDir(run_dir).metrics() if r.get("agent") == agent]

    def mean(key: str, early: bool) -> Optional[float]:
        vals = [r[key] for r in rows if r.get(key) is not None and (r["step"] < split) == early]
        if not vals:
            return None
        m = sum(vals) / len(vals)
        return 1 - m if key == "vote/majority_ratio" else m

    out = []
    for key in [k for _, k in SIGNALS] + ["reward/true_mean"]:
        a, b = mean(key, True), mean(key, False)
        ratio = f" ({b / a:.2f})" if a and b is not None else ""
        out.append("–" if a is None or b is None else f"{a:.3g} → {b:.3g}{ratio}")
    return out


def record_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Precision and recall per study (and pooled), per truth rule, for the replayed and the recorded alarm."""
    out = ["| study | agents | truth rule | truly bad | alarm | fired | hits | false alarms | missed | precision | "
           "recall |", "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    studies = sorted({r["study"] for r in rows}, reverse=True) + ["both"]
    for study in studies:
        part = [r for r in rows if study in ("both", r["study"]) and r["truth"] != "?"]
        for rule, bad in RULES.items():
            for kind, key in (("replayed", lambda r: r["alarm_step"] is not None), ("recorded", lambda r: r["recorded"])):
                c = confusion([(r["truth"] in bad, key(r)) for r in part])
                out.append(f"| {study} | {c['agents']} | {rule} | {c['tp'] + c['fn']} | {kind} | {c['tp'] + c['fp']} | "
                           f"{c['tp']} | {c['fp']} | {c['fn']} | {_pp(c['precision'])} | {_pp(c['recall'])} |")
    return out


def alarm_markdown(roots: Sequence[tuple[str, Path]], heldout: Sequence[Any]) -> str:
    rows: list[dict[str, Any]] = []
    for study, root in roots:
        rows += real_rows(root, heldout) if study == "real" else micro_rows(root)
    lines = ["The collapse alarm against the held-out truth, per agent (generated by "
             "`python scripts/real_study.py --analyse-only`; rules in scripts/alarm_record.py). **collapsed**: final "
             "pass@1 or greedy below half of base; **harmed**: collapsed or either more than 5 points below base. "
             "*replayed*: the alarm recomputed from metrics.jsonl with today's default monitor settings; "
             "*recorded*: what the run's own alarm logged while training.", ""]
    lines += record_table(rows)
    agree = sum((r["alarm_step"] is not None) == r["recorded"] for r in rows)
    lines += ["", f"Replayed and recorded alarm agree on {agree} of {len(rows)} agents.", "",
              "Alarms per cell (agents alarmed / agents; in brackets the cell's collapsed agents, alarmed or not):", "",
              "| study | method | alarmed | collapsed |", "|---|---|---:|---:|"]
    for study in sorted({r["study"] for r in rows}, reverse=True):
        part = [r for r in rows if r["study"] == study]
        for method in sorted({r["run"].rsplit("-s", 1)[0] for r in part}):
            of = [r for r in part if r["run"].rsplit("-s", 1)[0] == method]
            lines.append(f"| {study} | {method} | {sum(r['alarm_step'] is not None for r in of)} / {len(of)} | "
                         f"({sum(r['truth'] == 'collapsed' for r in of)}) |")
    lines += ["", "Per agent of the real study (arith-heldout; base = the Base cell of the same seed):", "",
              "| run | agent | pass@1 base → final | greedy base → final | truth | alarm (replayed) | recorded |",
              "|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["study"] == "real"):
        alarm = "–" if r["alarm_step"] is None else f"step {r['alarm_step']} ({' + '.join(r['symptoms'])})"
        lines.append(f"| {r['run']} | {r['agent']} | {_pp(r['base'])} → {_pp(r['final'])} | {_pp(r['base_greedy'])} → "
                     f"{_pp(r['final_greedy'])} | {r['truth']} | {alarm} | {'yes' if r['recorded'] else '–'} |")
    bad = [r for r in rows if r["study"] == "real" and r["truth"] == "collapsed"]
    if bad:
        lines += ["", "What the alarm saw on the real study's collapsed agents: each label-free signal's mean over the "
                  "last five steps (5–9) against its mean over the first five (0–4), the ratio the monitor compares "
                  "with its thresholds (diversity, entropy, length ≤ 0.67; peer agreement ≤ 0.5; entropy ≥ 1.2 for "
                  "dissolution), beside the hidden-truth rollout accuracy no label-free signal sees:", "",
                  "| run | agent | " + " | ".join(n for n, _ in SIGNALS) + " | rollout accuracy (truth) | alarm |",
                  "|---|---|" + "---|" * (len(SIGNALS) + 2)]
        for r in bad:
            cols = signal_ratios(root_of(roots, "real") / "runs" / r["run"], r["agent"])
            alarm = "–" if r["alarm_step"] is None else f"step {r['alarm_step']}"
            lines.append(f"| {r['run']} | {r['agent']} | " + " | ".join(cols) + f" | {alarm} |")
        lines += ["", "What a label-free signal cannot see: every signal is compared with the agent's own first steps, "
                  "so a model that is confidently wrong from the start (near-zero entropy, a firm majority, short "
                  "answers) and stays so — or grows a little surer of wrong answers — moves none of them past a "
                  "threshold while its hidden-truth accuracy falls. Only a held-out evaluation sees that collapse; "
                  "the alarm says \"look at this run\", not \"this run collapsed\"."]
    micro = [r for r in rows if r["study"] == "micro" and r["truth"] in RULES["harmed"]]
    if micro:
        lines += ["", "Micro study, the truly bad agents (the rest are in `scripts/collapse_check.py "
                  "results/micro-study/sweep/runs/*`):", "", "| run | agent | pass@1 base → final | greedy base → final"
                  " | truth | alarm (replayed) |", "|---|---|---|---|---|---|"]
        for r in micro:
            alarm = "–" if r["alarm_step"] is None else f"step {r['alarm_step']} ({' + '.join(r['symptoms'])})"
            lines.append(f"| {r['run']} | {r['agent']} | {_pp(r['base'])} → {_pp(r['final'])} | "
                         f"{_pp(r['base_greedy'])} → {_pp(r['final_greedy'])} | {r['truth']} | {alarm} |")
    return "\n".join(lines) + "\n"
