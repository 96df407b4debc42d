"""Hand-built results directories for tests/test_table_on_cpu.py (no model is ever run).

Two worlds:

* :func:`build_results` - the original small fixture (two benchmarks alpha / beta with mixed greedy and sampled
  patterns) used by the ``collect`` tests.
* :func:`build_world` - the paper-style fixture: every benchmark has 5 problems x 2 samples, so a benchmark's
  sampled pass@1 is (correct samples) x 10 % and greedy is (correct problems) x 20 %. Its expected numbers are
  spelled out in the comments of :data:`WORLD`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

AGENTS = [{"name": "a0-qwen2-bpe", "family": "qwen2-bpe", "view": "original"},
          {"name": "a1-llama-sp", "family": "llama-sp", "view": "original"}]
GOLDS = {"alpha": ["3", "12", "7", "40"], "beta": ["5", "9"]}

# Per benchmark: greedy correctness per problem; samples default to SAMPLES (k = 2 everywhere).
# sample values: True = right answer, False = the wrong answer 999, None = no answer at all.
SAMPLES: list[list[Optional[bool]]] = [[True, True], [True, False], [False, True], [None, False]]
# alpha (4 problems): avg@2 = (1 + .5 + .5 + 0) / 4 = 50 %; maj@2 = 1, 1 (tie -> first seen), 0, 0 = 50 %;
# pass@2 = 75 %.  beta (2 problems, first two patterns): avg@2 = 75 %, maj@2 = 100 %, pass@2 = 100 %.
DECODING = {"benchmarks": ["alpha", "beta"], "samples": 2, "temperature": 1.0, "greedy": True, "max_problems": 0,
            "max_new_tokens": 40, "before": True}
T, F = True, False


def completion(gold: str, ok: Optional[bool]) -> str:
    if ok is None:
        return "I am not sure what to say."
    return f"so the result is \\boxed{{{gold if ok else '999'}}}"


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_predictions(path: Path, bench: str, greedy: Sequence[bool],
                      samples: Sequence[Sequence[Optional[bool]]] = SAMPLES) -> None:
    """One greedy row and len(samples[i]) sampled rows per problem; stored `correct` always True."""
    rows: list[dict[str, Any]] = []
    for i, gold in enumerate(GOLDS[bench]):
        base = {"benchmark": bench, "benchmark_version": "1", "problem_id": f"{bench}-{i:04d}",
                "prompt": "q", "extracted": gold, "gold": gold, "correct": True, "finished": True,
                "n_tokens": 9}
        rows.append({**base, "decoding": "greedy", "sample_index": 0,
                     "completion": completion(gold, greedy[i])})
        for j, ok in enumerate(samples[i % len(samples)]):
            rows.append({**base, "decoding": "sampled", "sample_index": j,
                         "completion": completion(gold, ok), "finished": j == 0})
    _write_rows(path, rows)


def write_config(run_dir: Path, method: str, cohort: str, seed: int, steps: int = 50,
                 decoding: Optional[dict[str, Any]] = None) -> None:
    cfg = {"method": {"name": method, "options": {}}, "cohort": {"name": cohort},
           "eval": dict(decoding or DECODING), "run": {"seed": seed, "steps": steps}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")


def make_run(results: Path, run_id: str, method: str, seed: int, agents: list[dict[str, str]],
             greedy: dict[str, dict[str, dict[str, list[bool]]]], status: str = "finished") -> Path:
    """greedy: phase -> agent name -> benchmark -> per-problem greedy correctness."""
    run_dir = results / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {"run_id": run_id, "method": method, "cohort": "cross-family", "profile": "micro", "seed": seed,
            "status": status, "agents": agents, "phases": ["base", "final"], "wall_seconds": 12.5}
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    write_config(run_dir, method, "cross-family", seed)
    for phase, per_agent in greedy.items():
        for agent, per_bench in per_agent.items():
            for bench, flags in per_bench.items():
                write_predictions(run_dir / "eval" / phase / agent / f"{bench}.jsonl", bench, flags)
    return run_dir


def build_results(root: Path) -> Path:
    """Two seeds of a 2-agent corl run and one ttrl run (greedy percentages in comments)."""
    a1 = {"alpha": [T, F, F, F], "beta": [T, F]}  # 25 / 50, same before and after
    make_run(root, "corl-s0", "corl", 0, AGENTS, {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, F, F], "beta": [T, F]}, "a1-llama-sp": a1},  # 50 / 50
        "base": {"a0-qwen2-bpe": {"alpha": [T, F, F, F], "beta": [F, F]}, "a1-llama-sp": a1},  # 25 / 0
    })
    make_run(root, "corl-s1", "corl", 1, AGENTS, {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, T, T], "beta": [F, T]}, "a1-llama-sp": a1},  # 100 / 50
        "base": {"a0-qwen2-bpe": {"alpha": [F, F, T, F], "beta": [F, T]}, "a1-llama-sp": a1},  # 25 / 50
    })
    make_run(root, "ttrl-s0", "ttrl", 0, AGENTS[:1], {
        "final": {"a0-qwen2-bpe": {"alpha": [T, T, T, F], "beta": [T, T]}},  # 75 / 100
        "base": {"a0-qwen2-bpe": {"alpha": [T, T, F, F], "beta": [T, F]}},  # 50 / 50
    })
    return root


# ------------------------------------------------------------------------------------------ paper-style world
PROBLEMS, K = 5, 2


def write_counts(path: Path, bench: str, sampled: int, greedy: int = 0, version: str = "1") -> None:
    """5 problems x 2 samples: the first ``sampled`` samples (problem-major) and ``greedy`` problems are right."""
    rows: list[dict[str, Any]] = []
    for i in range(PROBLEMS):
        gold = str(10 + i)
        base = {"benchmark": bench, "benchmark_version": version, "problem_id": f"{bench}-{i}", "prompt": "q",
                "gold": gold, "correct": True, "finished": True, "n_tokens": 5}
        rows.append({**base, "decoding": "greedy", "sample_index": 0, "completion": completion(gold, i < greedy)})
        for j in range(K):
            rows.append({**base, "decoding": "sampled", "sample_index": j,
                         "completion": completion(gold, i * K + j < sampled)})
    _write_rows(path, rows)


Counts = dict[str, dict[str, tuple[int, int]]]  # agent -> benchmark -> (correct samples of 10, greedy of 5)


def make_world_run(root: Path, run_id: str, method: str, cohort: str, seed: int, agents: dict[str, str],
                   final: Counts, base: Optional[Counts] = None, *, tag: str = "", steps: int = 50,
                   decoding: Optional[dict[str, Any]] = None, version: str = "1") -> Path:
    """A finished run; ``agents`` maps agent name -> family (in ring order)."""
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {"run_id": run_id, "method": method, "cohort": cohort, "profile": "micro", "seed": seed, "tag": tag,
            "status": "finished", "steps": steps, "phases": ["base", "final"],
            "agents": [{"name": n, "family": f, "view": "original"} for n, f in agents.items()]}
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    write_config(run_dir, method, cohort, seed, steps, decoding)
    for phase, counts in (("final", final), ("base", base or {})):
        for agent, per_bench in counts.items():
            for bench, (sampled, greedy) in per_bench.items():
                write_counts(run_dir / "eval" / phase / agent / f"{bench}.jsonl", bench, sampled, greedy, version)
    return run_dir


Q, L = "a0-qwen2-bpe", "a1-llama-bpe"
Q_BASE = {"alpha": (5, 2), "beta": (3, 1)}  # pass@1 50 / 30, avg 40
Q1_BASE = {"alpha": (4, 2), "beta": (4, 2)}  # the second same-family agent's own base: 40 / 40
L_BASE = {"alpha": (2, 1), "beta": (2, 1)}  # 20 / 20, avg 20


def ab(alpha: int, beta: int) -> dict[str, tuple[int, int]]:
    return {"alpha": (alpha, 0), "beta": (beta, 0)}


# run id -> (method, cohort, seed, agents, final counts, tag). Expected pass@1 (percent) per row, qwen2-bpe block:
#   Base (seeds 0, 1 from gt-reward, seed 2 from corl cross-family): 50 ± 0 | 30 ± 0 | avg 40
#   GT-Reward     s0 80/80, s1 90/70 -> 85.0 ± 7.1 | 75.0 ± 7.1 | 80.0 ± 0.0 | Δ +40.0   (reference: unmarked)
#   TTRL          s0 60/40, s1 40/40 -> 50.0 ± 14.1 | 40.0 ± 0.0 | 45.0 ± 7.1 | Δ +5.0  (u on alpha? no: 50 < 70)
#   TTRL [budget-matched]  100/100 (control: unmarked)
#   Co-RL (same family) a0  70/50 avg 60 Δ +20 ; a1 70/30 avg 50 Δ +10
#   Co-RL (cross-family) s0-s2 80/60 -> 80.0 ± 0.0 | 60.0 ± 0.0 | 70.0 ± 0.0 | Δ +30.0 (bold everywhere)
#   Random reward 100/100 (control: unmarked)
#   my-method (cross-family) 70/50 avg 60 Δ +20 (an unregistered method, e.g. an uninstalled plugin: not ranked)
# llama-bpe block: Base 20/20 (from ttrl cross-family s0); TTRL 30/30 Δ +10 (u); Co-RL (cross-family) s0-s2
#   40/50/60 -> 50.0 ± 10.0, Δ +30 (b); my-method 10/10 Δ -10.
# TTRL x cross-family s0 also holds a qwen2-bpe agent (10/10): dropped in favour of TTRL x single s0 (warning).
WORLD: dict[str, tuple[str, str, int, dict[str, str], Counts, str]] = {
    "gt-reward-single-s0": ("gt-reward", "single", 0, {Q: "qwen2-bpe"}, {Q: ab(8, 8)}, ""),
    "gt-reward-single-s1": ("gt-reward", "single", 1, {Q: "qwen2-bpe"}, {Q: ab(9, 7)}, ""),
    "ttrl-single-s0": ("ttrl", "single", 0, {Q: "qwen2-bpe"}, {Q: ab(6, 4)}, ""),
    "ttrl-single-s1": ("ttrl", "single", 1, {Q: "qwen2-bpe"}, {Q: ab(4, 4)}, ""),
    "ttrl-cross-family-s0": ("ttrl", "cross-family", 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                             {Q: ab(1, 1), L: ab(3, 3)}, ""),
    "ttrl-single-budget-matched-s0": ("ttrl", "single", 0, {Q: "qwen2-bpe"}, {Q: ab(10, 10)}, "budget-matched"),
    "corl-same-family-s0": ("corl", "same-family", 0, {Q: "qwen2-bpe", "a1-qwen2-bpe": "qwen2-bpe"},
                            {Q: ab(7, 5), "a1-qwen2-bpe": ab(7, 3)}, ""),
    **{f"corl-cross-family-s{s}": ("corl", "cross-family", s, {Q: "qwen2-bpe", L: "llama-bpe"},
                                   {Q: ab(8, 6), L: ab(4 + s, 4 + s)}, "") for s in range(3)},
    "random-reward-single-s0": ("random-reward", "single", 0, {Q: "qwen2-bpe"}, {Q: ab(10, 10)}, ""),
    "my-method-cross-family-s0": ("my-method", "cross-family", 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                                  {Q: ab(7, 5), L: ab(1, 1)}, ""),
}


def build_world(root: Path, only: Optional[Sequence[str]] = None) -> Path:
    """The runs of :data:`WORLD` (or only those named) under ``root``; every agent has its family's base."""
    bases = {Q: Q_BASE, "a1-qwen2-bpe": Q1_BASE, L: L_BASE}
    for run_id, (method, cohort, seed, agents, final, tag) in WORLD.items():
        if only is None or run_id in only:
            make_world_run(root, run_id, method, cohort, seed, agents, final, {a: bases[a] for a in agents},
                           tag=tag)
    return root
