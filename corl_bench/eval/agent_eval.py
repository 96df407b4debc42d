"""Evaluation of agents on benchmarks: per-sample predictions first, scores computed from them.

Every agent is evaluated on the benchmark's own wording (the original view), greedily and with ``eval.samples``
sampled completions per problem, with an evaluation seed that is the same before and after training so the two
phases are paired. Each prediction row is written to ``eval/<phase>/<agent>/<benchmark>.jsonl``; scores (greedy
pass@1, sampled pass@1 = avg@k, maj@k, pass@k) are recomputed from those rows by :mod:`corl_bench.eval.metrics`, the
same code ``corl-bench table`` uses.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Sequence

from corl_bench.config import EvalConfig
from corl_bench.eval.metrics import BenchmarkScores, score_predictions
from corl_bench.results import append_jsonl
from corl_bench.rollout import SamplingParams
from corl_bench.eval.verifier import grade

log = logging.getLogger(__name__)


def eval_seed(run_seed: int, seed_offset: int) -> int:
    return (run_seed * 1_000_003 + seed_offset * 7_919 + 424_242) % (2**31)


def predict(agent: Any, items: Sequence[Any], cfg: EvalConfig, *, benchmark: str, version: str, seed: int,
            progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Generate and grade: one row per (problem, decoding, sample)."""
    if cfg.max_problems:
        items = items[: cfg.max_problems]
    prompts = [it.prompt("original") for it in items]
    rows: list[dict[str, Any]] = []

    def add(decoding: str, outs: list[list[Any]]) -> None:
        for it, prompt, comps in zip(items, prompts, outs):
            for k, c in enumerate(comps):
                extracted, correct = grade(c.text, it.gold)
                rows.append({"benchmark": benchmark, "benchmark_version": version, "problem_id": it.id,
                             "decoding": decoding, "sample_index": k, "prompt": prompt, "completion": c.text,
                             "extracted": extracted, "gold": it.gold, "correct": correct, "finished": c.finished,
                             "n_tokens": len(c.token_ids)})
        if progress is not None:
            progress(sum(len(c) for c in outs))

    if cfg.greedy:
        add("greedy", agent.generate(prompts, SamplingParams(n=1, greedy=True, max_new_tokens=cfg.max_new_tokens,
                                                            logprobs=False)))
    if cfg.samples:
        add("sampled", agent.generate(prompts, SamplingParams(n=cfg.samples, temperature=cfg.temperature,
                                                             max_new_tokens=cfg.max_new_tokens, seed=seed,
                                                             logprobs=False)))
    return rows


def evaluate(agent: Any, benchmarks: dict[str, tuple[str, Sequence[Any]]], cfg: EvalConfig, *, out_dir: Path,
             seed: int, progress: Callable[[int], None] | None = None) -> dict[str, BenchmarkScores]:
    """Evaluate one agent on every benchmark (name -> (version, items)); write predictions under ``out_dir``."""
    scores = {}
    for name, (version, items) in benchmarks.items():
        rows = predict(agent, items, cfg, benchmark=name, version=version, seed=seed, progress=progress)
        path = out_dir / f"{name}.jsonl"
        if path.exists():
            path.unlink()
        append_jsonl(path, rows)
        scores[name] = score_predictions(rows)
    return scores


def load_scores(out_dir: Path, benchmarks: dict[str, tuple[str, Sequence[Any]]]) -> dict[str, BenchmarkScores]:
    """Scores of an evaluation phase that already ran (a resumed run does not evaluate its base models twice)."""
    from corl_bench.results import read_jsonl

    return {name: score_predictions(read_jsonl(out_dir / f"{name}.jsonl")) for name in benchmarks}


def n_generations(cfg: EvalConfig, n_items: int) -> int:
    n = min(n_items, cfg.max_problems) if cfg.max_problems else n_items
    return n * ((1 if cfg.greedy else 0) + cfg.samples)
