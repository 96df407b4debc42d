"""The study's claim verdicts: per-seed pairing, the verdict rule, agent averaging and collapse detection, on run
directories written by hand (known right/wrong answers, so every value is computable by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.report.study import Cell, claim_comparisons, collapse_report, compare, load_agent_scores, to_markdown, \
    verdict


def write_run(root: Path, method: str, cohort: str, seed: int, agents: dict[str, tuple[str, float, float]],
              tag: str = "", status: str = "finished") -> None:
    """agents: name -> (family, base accuracy, final accuracy) over 10 problems x 2 samples (+ greedy)."""
    run = root / f"{method}-{cohort}{'-' + tag if tag else ''}-s{seed}"
    (run).mkdir(parents=True)
    info = {"run_id": run.name, "method": method, "cohort": cohort, "seed": seed, "tag": tag, "status": status,
            "agents": [{"name": n, "family": f} for n, (f, _, _) in agents.items()], "steps": 5}
    (run / "run.json").write_text(json.dumps(info))
    for name, (_, base, final) in agents.items():
        for phase, acc in (("base", base), ("final", final)):
            rows = []
            for i in range(10):
                right = i < round(acc * 10)
                for decoding, idx in (("greedy", 0), ("sampled", 0), ("sampled", 1)):
                    rows.append({"problem_id": f"p{i}", "decoding": decoding, "sample_index": idx, "gold": "7",
                                 "completion": f"\\boxed{{{7 if right else 5}}}"})
            out = run / "eval" / phase / name / "micro-test.jsonl"
            out.parent.mkdir(parents=True)
            out.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_verdict_rule():
    assert verdict([0.05, 0.04, 0.06]) == "holds"
    assert verdict([-0.05, -0.04, -0.06]) == "reversed"
    assert verdict([0.05, -0.01, 0.06]) == "inconclusive"  # a seed disagrees
    assert verdict([0.10, 0.001, 0.15]) == "inconclusive"  # same sign but mean within 2 standard errors
    assert verdict([0.3]) == "inconclusive"  # one seed decides nothing
    assert verdict([-0.01, -0.015, -0.012], margin=0.02) == "holds"  # "within 2 points"


def test_claims_pair_seeds_and_average_agents_of_a_family(tmp_path):
    for seed, (corl_q, ttrl_q) in enumerate([(0.7, 0.5), (0.8, 0.5), (0.6, 0.3)]):
        write_run(tmp_path, "corl", "cross-family", seed, {"a0": ("qwen2-bpe", 0.5, corl_q),
                                                           "a1": ("llama-bpe", 0.3, 0.4)})
        write_run(tmp_path, "ttrl", "cross-family", seed, {"a0": ("qwen2-bpe", 0.5, ttrl_q),
                                                           "a1": ("llama-bpe", 0.3, 0.1)})
        write_run(tmp_path, "corl", "same-family", seed, {"a0": ("qwen2-bpe", 0.5, 0.6), "a1": ("qwen2-bpe", 0.5, 0.4)})
    write_run(tmp_path, "ttrl", "cross-family", 0, {"a0": ("qwen2-bpe", 0.5, 0.9)}, tag="budget-matched")
    write_run(tmp_path, "corl", "cross-family", 7, {"a0": ("qwen2-bpe", 0.5, 0.9)}, status="running")
    scores, warnings = load_agent_scores(tmp_path)
    assert warnings == ["corl-cross-family-s7: status 'running'; not used"]
    c = compare(scores, "x", Cell("corl", "cross-family"), Cell("ttrl"), "qwen2-bpe", "avg_k")
    assert c.seeds == (0, 1, 2) and c.diffs == pytest.approx((0.2, 0.3, 0.3)) and c.verdict == "holds"
    # the budget-matched variant is not mixed into plain TTRL, and has one seed only
    bm = compare(scores, "x", Cell("corl", "cross-family"), Cell("ttrl", tag="budget-matched"), "qwen2-bpe", "greedy")
    assert bm.seeds == (0,) and bm.diffs == pytest.approx((0.7 - 0.9,)) and bm.verdict == "inconclusive"
    # same-family: the two qwen2 agents are averaged per seed (0.6 and 0.4 -> 0.5)
    sf = compare(scores, "x", Cell("corl", "cross-family"), Cell("corl", "same-family"), "qwen2-bpe", "maj_k")
    assert sf.b_values == pytest.approx((0.5, 0.5, 0.5))
    base = compare(scores, "x", Cell("corl", "cross-family"), Cell("corl", "cross-family", phase="base"),
                   "llama-bpe", "avg_k")
    assert base.diffs == pytest.approx((0.1, 0.1, 0.1)) and base.verdict == "holds"
    table = to_markdown(claim_comparisons(scores, metrics=("avg_k",)))
    assert "| Co-RL above TTRL | qwen2-bpe | pass@1 | 70.0 | 43.3 | +26.7 ± 5.8 | s0: +20.0, s1: +30.0, s2: +30.0 | holds |" \
        in table
    collapsed = collapse_report(scores)
    assert {(r["method"], r["agent"], r["seed"]) for r in collapsed} == {("ttrl", "a1", s) for s in range(3)}
