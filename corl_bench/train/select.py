"""Checkpoint selection without test labels: which evaluated phase of a run its tables report (``eval.select``).

A run evaluates ``base``, every ``eval.every`` steps (phases ``step-NNNNNN``) and ``final``. The candidates are the
``step-*`` phases and ``final`` (the base model is never a candidate). The rules:

``final`` (default)
    The final checkpoint; nothing is selected, nothing extra is evaluated, run.json gets no ``selection``.
``dev``
    Highest sampled pass@1 (greedy accuracy when ``eval.samples=0``) on the profile's labelled dev split
    (``Profile.dev_benchmark()``: ``micro-dev`` for micro), which is disjoint from every test set and never
    shown in tables. Its predictions are stored under ``selection/<phase>/<agent>/``.
``label-free``
    Highest *peer agreement* on the same held-out split, its gold answers never read (the evaluator stores them
    with the predictions; the criterion looks only at the extracted answers): per problem, the agent's
    majority answer over its samples (its greedy answer when ``eval.samples=0``) equals a peer's; the share of
    problems, averaged over the other agents of the run. Needs at least two agents. Phases evaluated after the
    step at which the agent's collapse alarm fired (:mod:`corl_bench.train.monitor`) are not candidates: two
    collapsed agents can agree on one wrong answer. When every candidate is excluded, the earliest phase is
    taken.
``test-oracle``
    Highest sampled pass@1 on the first of ``eval.benchmarks`` (the paper selected on in-loop MATH-500). The test
    set chose the checkpoint, so the reported number is optimistic; every table footer says so.

Ties go to the later phase, so a flat criterion reports what ``final`` would. Selection is per agent; run.json
records the rule, the benchmark, the criterion, and per agent the chosen phase, its step and every candidate's
value. The functions here are pure (numbers and prediction rows in, a decision out) except :func:`select_run`,
which reads the stored predictions of a run directory, and :class:`Selector`, the runner's side (it evaluates the
selection split at each candidate phase and writes the record when the run ends).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from corl_bench.config import SELECT_RULES, ConfigError
from corl_bench.profile import selection_benchmark  # beside the profile contract: the profiles use it too

log = logging.getLogger(__name__)

__all__ = ["CRITERIA", "SELECTION_DIR", "best_phase", "candidate_phases", "check_selection", "majority_answers",
           "peer_agreement", "phase_of_step", "select_run"]

SELECTION_DIR = "selection"
"""Predictions of the selection split live at ``<run>/selection/<phase>/<agent>/<benchmark>.jsonl``: outside
``eval/``, so no table ever shows them."""

CRITERIA = {
    "dev": "sampled pass@1 on the labelled dev split",
    "label-free": "agreement of the agent's majority answer with its peers' on the held-out split (labels unread), "
                  "phases before a collapse alarm",
    "test-oracle": "sampled pass@1 on the first evaluated benchmark (the test set)",
}

_STEP = re.compile(r"^step-(\d+)$")


def phase_of_step(phase: str, steps: int) -> Optional[int]:
    """Training steps behind a phase: ``step-000020`` -> 20, ``final`` -> ``steps``, ``base`` -> 0; else None."""
    if phase == "final":
        return steps
    if phase == "base":
        return 0
    m = _STEP.match(phase)
    return int(m.group(1)) if m else None


def candidate_phases(phases: Iterable[str]) -> list[str]:
    """The phases a rule may choose from, oldest first: every ``step-NNNNNN``, then ``final`` (base is never one)."""
    phases = list(phases)
    steps = sorted((p for p in phases if _STEP.match(p)), key=lambda p: int(p.split("-")[1]))
    return steps + (["final"] if "final" in phases else [])


def best_phase(values: Mapping[str, Optional[float]], order: Sequence[str]) -> Optional[str]:
    """The phase of ``order`` with the highest value (None values and phases without a value are skipped); ties go
    to the later phase in ``order``. None when no phase has a value."""
    best, best_value = None, None
    for phase in order:
        v = values.get(phase)
        if v is None:
            continue
        if best_value is None or v >= best_value:
            best, best_value = phase, v
    return best


def majority_answers(rows: Iterable[Mapping[str, Any]]) -> dict[str, Optional[str]]:
    """problem id -> the plurality of the extracted answers of its sampled rows (ties: the first seen; None when no
    sample has an answer); problems without sampled rows use their greedy row's answer. Gold is never read."""
    sampled: dict[str, list[Optional[str]]] = {}
    greedy: dict[str, Optional[str]] = {}
    for r in rows:
        pid = str(r.get("problem_id"))
        answer = r.get("extracted")
        answer = None if answer in (None, "") else str(answer)
        if r.get("decoding") == "greedy":
            greedy[pid] = answer
        else:
            sampled.setdefault(pid, []).append(answer)
    out: dict[str, Optional[str]] = {}
    for pid in dict.fromkeys([*sampled, *greedy]):
        valid = [a for a in sampled.get(pid, []) if a is not None]
        if pid in sampled:
            out[pid] = Counter(valid).most_common(1)[0][0] if valid else None
        else:
            out[pid] = greedy[pid]
    return out


def peer_agreement(votes: Mapping[str, Mapping[str, Optional[str]]]) -> dict[str, Optional[float]]:
    """agent -> mean over the other agents of the share of shared problems where both have an answer and the
    answers are equal (exact strings, as the training votes compare). None for an agent without peers or without
    shared problems."""
    out: dict[str, Optional[float]] = {}
    for name, mine in votes.items():
        shares = []
        for other, theirs in votes.items():
            if other == name:
                continue
            shared = [p for p in mine if p in theirs]
            if shared:
                shares.append(sum(mine[p] is not None and mine[p] == theirs[p] for p in shared) / len(shared))
        out[name] = sum(shares) / len(shares) if shares else None
    return out


def check_selection(cfg: Any, profile_cls: Any, n_agents: int) -> Optional[str]:
    """One-line ConfigError unless ``cfg.eval.select`` can be carried out; returns the selection benchmark (None for
    ``final``). Reads nothing: it runs in ``corl-bench validate``."""
    rule, ev = cfg.eval.select, cfg.eval
    if rule not in SELECT_RULES:
        raise ConfigError(f"eval.select must be one of {', '.join(SELECT_RULES)} (got {rule!r}); set eval.select=final")
    if rule == "final":
        return None
    if not ev.every or ev.every >= cfg.run.steps:
        raise ConfigError(f"eval.select={rule} needs intermediate evaluations to choose from (eval.every="
                          f"{ev.every} with run.steps={cfg.run.steps} gives none); set eval.every=10 (or "
                          "eval.select=final)")
    bench = selection_benchmark(rule, profile_cls, ev.benchmarks)
    if rule in ("dev", "label-free"):
        if bench is None:
            raise ConfigError(f"eval.select={rule} needs a held-out dev split but profile "
                              f"{profile_cls.name!r} names none; use eval.select=final "
                              "(or test-oracle, which selects on the test set)")
        if bench in ev.benchmarks:
            raise ConfigError(f"eval.select={rule}: the dev split {bench} is also in eval.benchmarks, so it would "
                              f"select on a test set; remove {bench} from eval.benchmarks")
    if rule == "label-free" and n_agents < 2:
        raise ConfigError("eval.select=label-free compares an agent with its peers and the cohort has 1 agent; use "
                          "a cohort with 2+ agents, or eval.select=dev")
    return bench


def _criterion(rule: str, phase: str, agents: Sequence[str], read_rows: Any, grade: Any,
               samples: int) -> dict[str, Optional[float]]:
    """agent -> criterion value of one phase (None where the predictions are missing)."""
    rows = {}
    for a in agents:
        try:
            rows[a] = read_rows(phase, a)
        except FileNotFoundError:
            rows[a] = None
    if rule == "label-free":
        votes = {a: majority_answers(r) for a, r in rows.items() if r}
        agree = peer_agreement(votes)
        return {a: agree.get(a) for a in agents}
    out: dict[str, Optional[float]] = {}
    for a, r in rows.items():
        if not r:
            out[a] = None
            continue
        scores = grade(r)
        out[a] = scores.avg_k if samples and scores.avg_k is not None else scores.greedy
    return out


def select_run(run_dir: Path, rule: str, benchmark: str, *, agents: Sequence[str], steps: int, samples: int,
               alarm_steps: Optional[Mapping[str, int]] = None) -> Optional[dict[str, Any]]:
    """The ``selection`` record of run.json for a finished run: which phase each agent reports under ``rule``.

    Reads the predictions of every candidate phase (``selection/`` for dev and label-free, ``eval/`` for
    test-oracle) and grades them with the benchmark's spec. ``alarm_steps``: agent -> the step after which its
    collapse alarm fired (label-free excludes later phases). None for ``final``."""
    if rule == "final":
        return None
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.eval.metrics import score_predictions
    from corl_bench.eval.specs import get_spec
    from corl_bench.results import RunDir, read_jsonl

    rd = RunDir(run_dir)
    grader = row_grader(get_spec(benchmark))
    root = rd.eval_root if rule == "test-oracle" else rd.selection_root
    phases = candidate_phases(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def read_rows(phase: str, agent: str) -> list[dict[str, Any]]:
        return read_jsonl(root / phase / agent / f"{benchmark}.jsonl")

    values: dict[str, dict[str, Optional[float]]] = {a: {} for a in agents}
    for phase in phases:
        for a, v in _criterion(rule, phase, agents, read_rows, lambda r: score_predictions(r, grader),
                               samples).items():
            values[a][phase] = v
    record: dict[str, Any] = {"rule": rule, "benchmark": benchmark, "criterion": CRITERIA[rule], "agents": {}}
    for a in agents:
        order = list(phases)
        excluded: list[str] = []
        alarm = (alarm_steps or {}).get(a)
        if rule == "label-free" and alarm is not None:
            keep = [p for p in order if (phase_of_step(p, steps) or 0) <= alarm]
            excluded = [p for p in order if p not in keep]
            order = keep or order[:1]
        chosen = best_phase(values[a], order)
        if chosen is None:
            log.warning("no %s values for agent %s; reporting the final checkpoint", rule, a)
            chosen = "final"
        record["agents"][a] = {"phase": chosen, "step": phase_of_step(chosen, steps),
                               "values": {p: values[a].get(p) for p in phases},
                               **({"excluded_after_alarm": excluded} if excluded else {})}
    return record


class Selector:
    """The runner's side of ``eval.select`` for one run: evaluates the selection split at each candidate phase
    (dev, label-free) and writes the ``selection`` record of run.json when the run ends."""

    def __init__(self, cfg: Any, profile: Any, run_dir: Path) -> None:
        self.cfg = cfg
        self.rule = cfg.eval.select
        self.benchmark = selection_benchmark(self.rule, type(profile), cfg.eval.benchmarks)
        self.run_dir = Path(run_dir)
        self.split = self.benchmark is not None and self.rule in ("dev", "label-free")
        self.items = list(profile.benchmark(self.benchmark))[: cfg.eval.max_problems or None] if self.split else []

    def generations(self, phase: str, n_agents: int) -> int:
        """Completions :meth:`evaluate` adds to the evaluation of ``phase`` (for its progress bar)."""
        if not self.split or phase == "base":
            return 0
        from corl_bench.eval.evaluator import n_generations

        return n_generations(self.cfg.eval, len(self.items)) * n_agents

    def evaluate(self, phase: str, agents: Sequence[Any], advance: Any = None) -> None:
        """Every agent on the selection split at ``phase`` (not base), with the run's evaluation decoding and seed
        rule, into ``selection/<phase>/<agent>/<benchmark>.jsonl``. The split's labels grade dev; label-free reads
        only the extracted answers."""
        if not self.generations(phase, len(agents)):
            return
        from corl_bench.eval.evaluator import eval_seed, evaluate, run_decoding
        from corl_bench.eval.specs import get_spec
        from corl_bench.results import RunDir

        spec = get_spec(self.benchmark)
        rd = RunDir(self.run_dir)
        for a in agents:
            evaluate(a.generate, spec, self.items, out_path=rd.selection_path(phase, a.name, self.benchmark),
                     decoding=run_decoding(self.cfg.eval, spec), seed=eval_seed(self.cfg.run.seed, a.spec.seed_offset),
                     resume=False, tokenizer=getattr(a, "tokenizer", None), progress=advance)

    def record(self, agents: Sequence[str], steps_done: int,
               alarm_steps: Optional[Mapping[str, int]] = None) -> Optional[dict[str, Any]]:
        """The ``selection`` record for run.json (None for ``final``); logs what was selected."""
        if self.rule == "final" or self.benchmark is None:
            return None
        record = select_run(self.run_dir, self.rule, self.benchmark, agents=agents, steps=steps_done,
                            samples=self.cfg.eval.samples, alarm_steps=alarm_steps)
        for name, choice in (record or {}).get("agents", {}).items():
            log.info("eval.select=%s: %s reports %s", self.rule, name, choice["phase"])
        return record
