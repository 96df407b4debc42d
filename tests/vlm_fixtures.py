"""Hand-built run directories of the micro visual world for tests/test_report_vlm_on_cpu.py (no model is ever run).

The files are those a real run writes (run.json, config.yaml, ``eval/<phase>/<agent>/<benchmark>.jsonl`` with the
evaluator's row keys). Every benchmark has 5 problems x 2 samples, so sampled pass@1 is (correct samples) x 10 % and
greedy is (correct problems) x 20 %. Stored ``extracted`` / ``correct`` fields are deliberately wrong (always the gold
answer, always True): the table must regrade every completion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import yaml

PROBLEMS, K = 5, 2
QV, LV = "a0-qwen2vl-micro", "a1-llava-micro"
FAMILIES = {QV: "qwen2vl-micro", LV: "llava-micro"}
BENCH = "micro-visual-test"
DECODING = {"benchmarks": [BENCH], "samples": K, "temperature": 1.0, "greedy": True, "max_problems": 0,
            "max_new_tokens": 40, "before": True}

Counts = dict[str, dict[str, tuple[int, int]]]  # agent -> benchmark -> (correct samples of 10, greedy of 5)


def _completion(gold: str, ok: bool) -> str:
    return f"The picture shows it, so the answer is \\boxed{{{gold if ok else '999'}}}"


def write_rows(path: Path, bench: str, sampled: int, greedy: int, *, with_samples: bool = True) -> None:
    """Greedy rows first, then the sampled ones, as the evaluator writes them."""
    rows: list[dict[str, Any]] = []
    for i in range(PROBLEMS):
        gold = str(10 + i)
        base = {"benchmark": bench, "benchmark_version": "1", "problem_id": f"{bench}-{i:04d}",
                "prompt": "<image>\nHow many squares are shaded?\n", "extracted": gold, "gold": gold,
                "correct": True, "finished": True, "n_tokens": 12}
        rows.append({**base, "decoding": "greedy", "sample_index": 0, "completion": _completion(gold, i < greedy)})
    if with_samples:
        for i in range(PROBLEMS):
            gold = str(10 + i)
            for j in range(K):
                rows.append({"benchmark": bench, "benchmark_version": "1", "problem_id": f"{bench}-{i:04d}",
                             "decoding": "sampled", "sample_index": j, "prompt": "<image>\nHow many?\n",
                             "completion": _completion(gold, i * K + j < sampled), "extracted": gold, "gold": gold,
                             "correct": True, "finished": True, "n_tokens": 12})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_vlm_run(root: Path, run_id: str, method: str, cohort: str, seed: int, agents: dict[str, str],
                 final: Counts, base: Optional[Counts] = None, *, profile: str = "micro-visual", steps: int = 30,
                 with_samples: bool = True, train: str = "", paper_row: str = "") -> Path:
    """A finished run; ``agents`` maps agent name -> family (in ring order); ``train``: config.yaml data.train,
    ``paper_row``: run.json paper_row (both left out when empty)."""
    run_dir = root / "runs" / run_id
    run_dir.mkdir(parents=True)
    meta = {"run_id": run_id, "method": method, "cohort": cohort, "profile": profile, "seed": seed, "tag": "",
            "status": "finished", "steps": steps, "phases": ["base", "final"], "timings": {},
            "agents": [{"name": n, "family": f, "view": "original"} for n, f in agents.items()],
            **({"paper_row": paper_row} if paper_row else {})}
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    benches = sorted({b for per in final.values() for b in per})
    cfg = {"method": {"name": method, "options": {}}, "cohort": {"name": cohort},
           "model": {"profile": profile}, "eval": {**DECODING, "benchmarks": benches},
           "run": {"seed": seed, "steps": steps}, **({"data": {"train": train}} if train else {})}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    for phase, counts in (("final", final), ("base", base or {})):
        for agent, per_bench in counts.items():
            for bench, (sampled, greedy) in per_bench.items():
                write_rows(run_dir / "eval" / phase / agent / f"{bench}.jsonl", bench, sampled, greedy,
                           with_samples=with_samples)
    return run_dir


def build_visual_world(root: Path) -> Path:
    """Expected pass@1 (greedy) in percent:

    qwen2vl-micro: Base 40 (40) from the TTRL run; TTRL 60 (60) Δ +20; Co-RL (visual-cross-family) 80 (80) Δ +40.
    llava-micro: Base 20 (20) from the Co-RL run; Co-RL 60 (60) Δ +40; MM-UPT 50 (40) Δ +30.
    """
    qb, lb = {BENCH: (4, 2)}, {BENCH: (2, 1)}
    make_vlm_run(root, "corl-visual-cross-family-s0", "corl", "visual-cross-family", 0, FAMILIES,
                 {QV: {BENCH: (8, 4)}, LV: {BENCH: (6, 3)}}, {QV: qb, LV: lb})
    make_vlm_run(root, "ttrl-visual-single-s0", "ttrl", "visual-single", 0, {QV: FAMILIES[QV]},
                 {QV: {BENCH: (6, 3)}}, {QV: qb})
    make_vlm_run(root, "mm-upt-visual-single-s0", "mm-upt", "visual-single", 0, {LV: FAMILIES[LV]},
                 {LV: {BENCH: (5, 2)}}, {LV: lb})
    return root
