#!/usr/bin/env python
"""The real-model study's audit (issue 38, item 2): every figure of results/real-study.md's "What ran, and what the
data show" section, recomputed from the stored cells. Trains nothing.

    python scripts/realstudy_audit.py                 # writes results/real-study/audit.md

``audit.md``: the rollout size as run, same-family Co-RL per agent, the peers' label accuracy, Gemma under every
reward, the SmolLM2 ranking, every verdict without the 100 held-out items the pilot looked at, the answer rule
(token cap, and the verdicts under the "first committed answer" rule), and the runs' provenance (commit, resume,
which commits between them touch training). The collapse alarm's record (precision and recall against the held-out
truth, issue 38 item 3) is in collapse.md, written by ``scripts/real_study.py --analyse-only`` with
scripts/alarm_record.py. Needs only the committed cells under results/; git for the provenance section.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

REAL = REPO / "results" / "real-study" / "sweep"
CLAIMS = REPO / "results" / "real-study" / "claims.yaml"
HELDOUT, TRANSFER = "arith-heldout", "arith-transfer"
PILOT_ITEMS = 100
"""the learning-rate / temperature pilot scored the first 100 items of arith-heldout (in the suite's order)"""
TRAINING_PATHS = ("corl_bench/train", "corl_bench/rollout", "corl_bench/method.py", "corl_bench/advantages.py",
                  "corl_bench/hf", "corl_bench/models", "corl_bench/cohorts", "corl_bench/config.py",
                  "corl_bench/profile.py", "corl_bench/grading", "corl_bench/eval", "corl_bench/placement.py",
                  "corl_bench/hostmem.py", "corl_bench/registries.py", "sweeps/real-study.yaml")
"""what decides what a run trains and how it is scored (the provenance section lists commits touching these)"""

log = logging.getLogger("realstudy_audit")

# ---------------------------------------------------------------------------------------------- pure functions

_NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
_COMMIT = re.compile(r"\\boxed\{\s*" + _NUM + r"|\banswer(?:\s+is)?\s*[:=]?\s*\$?\**\s*" + _NUM
                     + r"|=\s*\$?\**\s*" + _NUM + r"|\b(?:is|equals)\s+\$?\**\s*" + _NUM, re.IGNORECASE)


def first_committed_answer(text: str) -> Optional[str]:
    """The first number the completion commits to: the number right after the earliest of ``\\boxed{``, ``answer
    is`` / ``answer:``, ``=``, or the words ``is`` / ``equals`` (optional ``$`` or ``**`` between); None when no
    number follows any of them. Commas inside a number are dropped ("1,000" -> "1000")."""
    m = _COMMIT.search(text or "")
    if m is None:
        return None
    return next(g for g in m.groups() if g is not None).replace(",", "")


def same_number(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two answers are the same number (False when either is missing or not a number)."""
    try:
        return a is not None and b is not None and float(a) == float(b)
    except ValueError:
        return False


def precision_recall(pairs: Iterable[tuple[bool, bool]]) -> dict[str, Any]:
    """(truly bad, alarm fired) per agent -> counts and precision / recall (see collapse_check.confusion)."""
    from collapse_check import confusion

    return confusion(list(pairs))


def pilot_ids(n: int = PILOT_ITEMS) -> set[str]:
    """The ids of the first ``n`` arith-heldout items in the suite's order (what the pilot scored)."""
    from corl_bench.hf.arith import heldout_rows

    return {pid for pid, _, _ in heldout_rows()[:n]}


# ------------------------------------------------------------------------------------------------- loading

def _runs(root: Path) -> list[Any]:
    from corl_bench.results import find_runs

    return [r for r in find_runs(root / "runs") if r.record().finished]


def first_committed_grader(benchmark: str) -> Callable[[dict], tuple[Optional[str], bool]]:
    """A row grader for score_predictions: the first committed answer against the gold; the benchmark's own
    extraction where the completion commits to none."""
    from corl_bench.report.collect import row_grader_for

    default = row_grader_for(benchmark)

    def grade(row: dict) -> tuple[Optional[str], bool]:
        got = first_committed_answer(str(row.get("completion") or ""))
        if got is None:
            return default(row)
        return got, same_number(got, str(row["gold"]))

    return grade


def agent_scores(root: Path, bench: str, *, grader: Any = None, drop: frozenset[str] = frozenset()) -> list[Any]:
    """AgentScores (corl_bench.report.study) of every finished run's agents on one benchmark, graded by ``grader``
    (default: the benchmark's), without the items in ``drop``."""
    from corl_bench.eval.metrics import score_predictions
    from corl_bench.report.collect import row_grader_for
    from corl_bench.report.study import AgentScores

    grade = grader or row_grader_for(bench)
    out = []
    for run in _runs(root):
        rec = run.record()
        for agent in rec.agents or ():
            phases = {}
            for phase in ("final", "base"):
                rows = [r for r in run.predictions(phase, agent.name, bench) if r["problem_id"] not in drop] \
                    if bench in run.benchmarks(phase, agent.name) else []
                phases[phase] = score_predictions(rows, grade).metrics() if rows else {}
            if phases["final"]:
                out.append(AgentScores(rec.method, rec.cohort, rec.tag or "", agent.name, agent.family or "",
                                       rec.seed, {k: v for k, v in phases["final"].items() if v is not None},
                                       {k: v for k, v in phases["base"].items() if v is not None}))
    return out


def _pick(scores: list[Any], method: str, cohort: str, tag: str = "", family: str | None = None,
          agent: str | None = None) -> dict[int, Any]:
    return {s.seed: s for s in scores if (s.method, s.cohort, s.tag) == (method, cohort, tag)
            and (family is None or s.family == family) and (agent is None or s.agent == agent)}


def _pp(x: Optional[float], signed: bool = False) -> str:
    return "–" if x is None else (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}")


def _seeds(values: dict[int, float], signed: bool = True) -> str:
    return ", ".join(f"s{k}: {_pp(v, signed)}" for k, v in sorted(values.items()))


CROSS, SAME, BASE = "smol-cross-family-arith", "smol-same-family-native", ("gt-reward", "smol-cross-family-arith",
                                                                          "base")


# ------------------------------------------------------------------------------------------------- sections

def rollout_size(runs: list[Any]) -> str:
    """Prompts x samples per step as each run's config.yaml has it, and whether every logged per-step fraction has
    that denominator (prompts x samples)."""
    import yaml

    lines = ["| run | prompts/step | samples/prompt | per-step fractions (`reward/true_mean`) that are multiples of "
             "1 / (prompts × samples) | that need twice the samples |", "|---|---:|---:|---|---:|"]
    sizes = set()
    for run in runs:
        cfg = yaml.safe_load(run.config_path.read_text())
        p, k = cfg["rollout"]["prompts_per_step"], cfg["rollout"]["samples_per_prompt"]
        sizes.add((p, k))
        rows = run.metrics() if run.record().steps else []
        vals = [r["reward/true_mean"] for r in rows if r.get("reward/true_mean") is not None]
        fits = sum(abs(v * p * k - round(v * p * k)) < 1e-6 for v in vals)
        finer = sum(abs(v * p * k - round(v * p * k)) >= 1e-6 and abs(2 * v * p * k - round(2 * v * p * k)) < 1e-6
                    for v in vals)
        lines.append(f"| {run.name} | {p} | {k} | {fits} of {len(vals)} | {finer} |")
    head = "; ".join(f"{p} prompts × {k} samples" for p, k in sorted(sizes))
    return f"Rollout size as run: **{head}** (config.yaml of every run).\n\n" + "\n".join(lines) + "\n"


def same_family(real: list[Any], heldout: list[Any]) -> str:
    """Per agent of same-family Co-RL: which one samples like the cross-family SmolLM2 (equal step-0 metrics), its
    held-out change from Base by seed, and each peer's label accuracy (label/accuracy over all steps)."""
    by = {(r.record().method, r.record().cohort, r.record().seed): r for r in real if not r.record().tag}
    base = _pick(heldout, *BASE, family="smol")
    out = ["| agent | step-0 rollouts equal the cross-family SmolLM2's (seeds) | greedy Δ vs Base by seed | mean | "
           "pass@1 Δ by seed | mean |", "|---|---|---|---:|---|---:|"]
    twin = {}
    for agent in ("a0-smol", "a1-smol"):
        same_seeds = []
        for seed in sorted(base):
            cross, same = by.get(("corl", CROSS, seed)), by.get(("corl", SAME, seed))
            if cross is None or same is None:
                continue
            c0 = next(r for r in cross.metrics() if r["step"] == 0 and r["agent"] == "a0-smol")
            s0 = next(r for r in same.metrics() if r["step"] == 0 and r["agent"] == agent)
            keys = ("reward/true_mean", "len/mean", "policy/entropy", "vote/majority_ratio")
            if all(c0.get(k) == s0.get(k) for k in keys):
                same_seeds.append(seed)
        twin[agent] = same_seeds
        final = _pick(heldout, "corl", SAME, agent=agent)
        cols = []
        for metric in ("greedy", "avg_k"):
            d = {s: final[s].final[metric] - base[s].final[metric] for s in final if s in base}
            cols += [_seeds(d), _pp(statistics.fmean(d.values()), True)]
        out.append(f"| {agent} | {', '.join(map(str, same_seeds)) or 'none'} | " + " | ".join(cols) + " |")

    lab = ["", "Each SmolLM2's labels (its peer's majority vote) against the hidden answers: `label/accuracy`, mean "
           "over the 10 steps, percent:", "", "| cell | agent | by seed | range |", "|---|---|---|---|"]
    for cohort, agents in ((CROSS, ("a0-smol", "a1-gemma")), (SAME, ("a0-smol", "a1-smol"))):
        for agent in agents:
            acc = {}
            for seed in sorted(base):
                run = by.get(("corl", cohort, seed))
                if run is not None:
                    vals = [r["label/accuracy"] for r in run.metrics()
                            if r["agent"] == agent and r.get("label/accuracy") is not None]
                    acc[seed] = statistics.fmean(vals)
            lab.append(f"| corl × {cohort} | {agent} | {_seeds(acc, False)} | {_pp(min(acc.values()))}–"
                       f"{_pp(max(acc.values()))} |")
    gemma_b = _pick(heldout, *BASE, family="gemma3-270m")
    gap = {s: gemma_b[s].final["greedy"] - base[s].final["greedy"] for s in base if s in gemma_b}
    lab += ["", f"The peer's own accuracy: Base Gemma minus Base SmolLM2 on arith-heldout, greedy: {_seeds(gap)} "
            "(the cross-family SmolLM2's peer is Gemma; the same-family SmolLM2's peer is a SmolLM2 at Base)."]
    return "\n".join(out + lab) + "\n"


def gemma_under_every_reward(heldout: list[Any]) -> str:
    base = _pick(heldout, *BASE, family="gemma3-270m")
    lines = ["| cell (Gemma agent) | greedy Δ by seed | mean | pass@1 Δ by seed | mean |", "|---|---|---:|---|---:|"]
    for method in ("gt-reward", "ttrl", "corl", "corl-frozen-peer"):
        final = _pick(heldout, method, CROSS, family="gemma3-270m")
        cols = []
        for metric in ("greedy", "avg_k"):
            d = {s: final[s].final[metric] - base[s].final[metric] for s in final if s in base}
            cols += [_seeds(d), _pp(statistics.fmean(d.values()), True)]
        lines.append(f"| {method} | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def smol_ranking(heldout: list[Any]) -> str:
    """Every trained SmolLM2 agent's final greedy score on arith-heldout, best first."""
    rows = sorted((s for s in heldout if s.family == "smol" and s.tag != "base"), key=lambda s: -s.final["greedy"])
    lines = ["| rank | run | agent | greedy |", "|---:|---|---|---:|"]
    lines += [f"| {i} | {s.method} × {s.cohort} s{s.seed} | {s.agent} | {_pp(s.final['greedy'])} |"
              for i, s in enumerate(rows, 1)]
    return "\n".join(lines) + "\n"


def verdict_table(by_rule: dict[str, list[Any]], claims: Any) -> str:
    """Each claim's verdict (mean Δ, verdict) on arith-heldout under every rule side by side."""
    from corl_bench.report.study import claim_comparisons

    comps = {rule: claim_comparisons(scores, metrics=("greedy", "avg_k"), claims=claims)
             for rule, scores in by_rule.items()}
    rules = list(comps)
    lines = ["| claim | backbone | metric | " + " | ".join(rules) + " |",
             "|---|---|---|" + "---|" * len(rules)]
    first = comps[rules[0]]
    for c in first:
        cells = []
        for rule in rules:
            m = next((x for x in comps[rule] if (x.claim, x.family, x.metric) == (c.claim, c.family, c.metric)), None)
            cells.append("–" if m is None else f"{_pp(m.mean, True)} ({', '.join(_pp(d, True) for d in m.diffs)}): "
                                               f"**{m.verdict}**")
        lines.append(f"| {c.claim} | {c.family} | {'pass@1' if c.metric == 'avg_k' else c.metric} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def answer_rule(heldout: list[Any], committed: list[Any], base_runs: list[Any]) -> str:
    """The token cap on Base's greedy answers, and the headline under both answer rules."""
    lines = ["| Base run | agent | greedy answers at the 32-token cap (unfinished) | cap hit, of the wrong ones |",
             "|---|---|---:|---:|"]
    grade = first_committed_grader(HELDOUT)
    changed = {}
    for run in base_runs:
        for agent in run.agents():
            rows = [r for r in run.predictions("final", agent["name"], HELDOUT) if r["decoding"] == "greedy"]
            capped = [r for r in rows if r.get("finished") is False]
            wrong = [r for r in rows if not r["correct"]]
            lines.append(f"| {run.name} | {agent['name']} | {len(capped)}/{len(rows)} = "
                         f"{100 * len(capped) / len(rows):.1f} % | "
                         f"{sum(r.get('finished') is False for r in wrong)}/{len(wrong)} |")
            n = sum(grade(r)[1] != bool(r["correct"]) for r in rows)
            changed[(run.name, agent["name"])] = (n, len(rows))
    lines += ["", "Greedy answers whose grade the first-committed-answer rule changes (Base): "
              + "; ".join(f"{r} {a}: {n}/{t}" for (r, a), (n, t) in changed.items()), ""]
    base_c, base_d = _pick(committed, *BASE, family="smol"), _pick(heldout, *BASE, family="smol")
    lines += ["| rule | Base SmolLM2 greedy (s0, s1, s2) | Co-RL cross-family SmolLM2 greedy | Δ by seed | mean Δ |",
              "|---|---|---|---|---:|"]
    for rule, scores, b in (("last number (as graded)", heldout, base_d), ("first committed answer", committed, base_c)):
        corl = _pick(scores, "corl", CROSS, family="smol")
        d = {s: corl[s].final["greedy"] - b[s].final["greedy"] for s in corl if s in b}
        lines.append(f"| {rule} | {', '.join(_pp(b[s].final['greedy']) for s in sorted(b))} | "
                     f"{', '.join(_pp(corl[s].final['greedy']) for s in sorted(corl))} | {_seeds(d)} | "
                     f"{_pp(statistics.fmean(d.values()), True)} |")
    return "\n".join(lines) + "\n"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(runs: list[Any]) -> str:
    lines = ["| run | env.json commit | uncommitted changes (+dirty) | created | resumed at | per-step "
             "`engine/logp_gap_*` (metrics first committed in 1575819) |", "|---|---|---|---|---|---|"]
    commits: dict[str, str] = {}
    dirty = 0
    for run in sorted(runs, key=lambda r: json.loads(r.env_path.read_text())["created_at"]):
        env, rec = json.loads(run.env_path.read_text()), run.record()
        sha, _, flag = env["git_commit"].partition("+")
        dirty += flag == "dirty"
        commits.setdefault(sha, env["created_at"])
        gap = [r["step"] for r in run.metrics() if "engine/logp_gap_mean" in r] if rec.steps else []
        lines.append(f"| {run.name} | {sha[:7]} | {'yes' if flag == 'dirty' else '–'} | {env['created_at'][11:19]} | "
                     f"{', '.join(t[11:19] for t in rec.resumed_at or ()) or '–'} | "
                     f"{'steps ' + str(min(gap)) + '–' + str(max(gap)) if gap else '–'} |")
    resumed = sum(bool(r.record().resumed_at) for r in runs)
    lines += ["", f"{len(runs)} runs at **{len(commits)} commits**, {dirty} of them with uncommitted changes in the "
              f"working tree; **{resumed} resumed** (run.json `resumed_at`; the commit of a resume is not recorded). "
              "The commits, in the order the runs used them:", ""]
    for sha in commits:
        lines.append(f"- {_git('log', '-1', '--format=%h %ci %s', sha).strip()[:150] or sha[:7] + ' (not in this clone)'}")
    order = list(commits)
    first, last = order[0], order[-1]
    touched = _git("log", "--format=%h %ci %s", f"{first}..{last}", "--", *TRAINING_PATHS)
    lines += ["", f"Commits after {first[:7]} up to {last[:7]} that touch training or scoring "
              f"({', '.join(TRAINING_PATHS)}):", ""]
    for line in touched.strip().splitlines() or ["(git history not available here)"]:
        sha = line.split()[0]
        files = _git("show", "--stat=200", "--format=", sha, "--", *TRAINING_PATHS).strip().splitlines()[:-1]
        lines.append(f"- {line[:160]}  \n  files: {', '.join(f.split('|')[0].strip() for f in files)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "results" / "real-study")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from corl_bench.report.study import load_claims
    from corl_bench.results import atomic_write_text

    if not (REAL / "runs").is_dir():
        log.error("no real-study cells under %s", REAL)
        return 1
    runs = _runs(REAL)
    claims = load_claims(CLAIMS)
    pilot = frozenset(pilot_ids())
    heldout = agent_scores(REAL, HELDOUT)
    no_pilot = agent_scores(REAL, HELDOUT, drop=pilot)
    committed = agent_scores(REAL, HELDOUT, grader=first_committed_grader(HELDOUT))
    base_runs = [r for r in runs if r.record().tag == "base"]
    from corl_bench.hf.arith import heldout_rows

    pilot_rows = heldout_rows()[:PILOT_ITEMS]
    sections = [
        "# The real-model study, audited from its stored cells (issue 38)\n\nGenerated by "
        "`python scripts/realstudy_audit.py`; every figure of results/real-study.md's section \"What ran, and what the "
        "data show\" is here. Percent; Δ = change from Base paired by seed. Nothing was retrained.\n",
        "## Rollout size as run\n\n" + rollout_size(runs),
        "## Same-family Co-RL, per agent\n\n" + same_family(runs, heldout),
        "## Gemma under every reward (arith-heldout)\n\n" + gemma_under_every_reward(heldout),
        "## Every trained SmolLM2, ranked (arith-heldout greedy)\n\n" + smol_ranking(heldout),
        f"## Verdicts with and without the pilot's items\n\nThe pilot scored the first {PILOT_ITEMS} arith-heldout "
        f"items in the suite's order ({pilot_rows[0][1]!r} … {pilot_rows[-1][1]!r}); the right column drops them "
        f"({len(pilot_rows)} items; {401 - PILOT_ITEMS} remain). Δ mean (per seed): verdict.\n\n"
        + verdict_table({"all 401 items": heldout, f"without the pilot's {PILOT_ITEMS}": no_pilot}, claims),
        "## The answer rule\n\nLast number (the suite's grader) vs the first committed answer (`first_committed_answer`"
        ": the number right after the earliest `\\boxed{`, `answer is`/`answer:`, `=`, `is` or `equals`; the "
        "suite's own extraction where the completion commits to none).\n\n" + answer_rule(heldout, committed, base_runs)
        + "\nEvery verdict under both rules (arith-heldout):\n\n"
        + verdict_table({"last number": heldout, "first committed answer": committed}, claims),
        "## Provenance\n\n" + provenance(runs),
    ]
    atomic_write_text(args.out / "audit.md", "\n".join(sections))
    log.warning("wrote %s", args.out / "audit.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
