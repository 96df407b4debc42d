"""One evaluation path (``corl_bench.eval.evaluator.evaluate``) for a training run and for ``corl-bench eval``:

* in a run it writes byte for byte what the in-run evaluator before the unification wrote (that code is kept
  below as the reference implementation);
* offline and in-run give identical rows for the same (seed, chunk);
* a resumed evaluation (interrupted after some chunks, or with rows lost) equals an uninterrupted one;
* ``corl-bench eval`` records the seed rule, seed and chunk and refuses to mix predictions made under others.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest

from corl_bench.config import ConfigError, EvalConfig
from corl_bench.eval.evaluator import (SEED_RULE, chunk_seed, eval_seed, evaluate, evaluate_spec, n_generations,
                                       run_decoding)
from corl_bench.eval.items import Item, render
from corl_bench.eval.metrics import score_predictions
from corl_bench.eval.specs import get_spec
from corl_bench.results import append_jsonl


def old_predict(agent: Any, items: Sequence[Any], cfg: EvalConfig, *, benchmark: str, version: str, seed: int,
                progress=None) -> list[dict[str, Any]]:
    """The in-run evaluation before the unification (``corl_bench/evaluation.py: predict``), verbatim."""
    from corl_bench.grading.verifier import grade
    from corl_bench.rollout import SamplingParams

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


@pytest.fixture(scope="module")
def bench_items():
    from corl_bench.micro.profile import BenchItem
    from corl_bench.micro.tasks import test_suite

    return [BenchItem(p.id, p, p.answer) for p in test_suite("micro-test")[:7]]


class Spy:
    """An engine's generate, recording every call's seed and batch size (and optionally failing at call ``fail``)."""

    def __init__(self, engine, fail: int | None = None):
        self.engine, self.fail, self.calls = engine, fail, []

    def __call__(self, prompts, params):
        if self.fail is not None and len(self.calls) == self.fail:
            raise KeyboardInterrupt("killed")
        self.calls.append((len(prompts), params.n, params.greedy, params.seed))
        return self.engine.generate(prompts, params)


@pytest.mark.parametrize("backend", ["hf", "fast"])
def test_in_run_evaluation_is_byte_identical_to_the_old_in_run_evaluator(tiny_qwen, bench_items, tmp_path, backend):
    from corl_bench.rollout import make_engine

    model, tok = tiny_qwen
    engine = make_engine(backend, model, tok)
    spec = get_spec("micro-test")
    cfg = EvalConfig(samples=3, max_new_tokens=12, max_problems=6, temperature=1.0)
    seed = eval_seed(5, 1)
    counted_old, counted_new = [], []
    old_rows = old_predict(engine, bench_items, cfg, benchmark="micro-test", version=spec.version, seed=seed,
                           progress=counted_old.append)
    append_jsonl(tmp_path / "old.jsonl", old_rows)
    new_path = tmp_path / "new.jsonl"
    new_path.write_text("stale rows of an earlier attempt\n")  # an in-run phase starts fresh
    scores = evaluate(engine.generate, spec, bench_items[: cfg.max_problems], out_path=new_path,
                      decoding=run_decoding(cfg, spec), seed=seed, resume=False, progress=counted_new.append)
    assert new_path.read_bytes() == (tmp_path / "old.jsonl").read_bytes()
    assert scores == score_predictions(old_rows)
    assert sum(counted_new) == sum(counted_old) == n_generations(cfg, len(bench_items)) == 6 * 4


def test_offline_and_in_run_give_identical_rows_for_the_same_seed_and_chunk(tiny_qwen, bench_items, tmp_path):
    from corl_bench.rollout import make_engine

    model, tok = tiny_qwen
    spec = get_spec("micro-test")
    offline_items = [Item(it.id, it.problem.text("original"), it.gold) for it in bench_items]
    assert [render(spec, it, tok) for it in offline_items] == [it.prompt() for it in bench_items]
    dec = run_decoding(EvalConfig(samples=2, max_new_tokens=10), spec)
    evaluate_spec(model, tok, spec, offline_items, out_path=tmp_path / "offline.jsonl", seed=11, decoding=dec,
                  chunk=3)
    spy = Spy(make_engine("fast", model, tok))
    evaluate(spy, spec, bench_items, out_path=tmp_path / "in-run.jsonl", seed=11, decoding=dec, chunk=3)
    assert (tmp_path / "offline.jsonl").read_bytes() == (tmp_path / "in-run.jsonl").read_bytes()
    # the seed rule: chunks over the full list, chunk at item `start` seeded (seed + start * 1_000_003) % 2**31
    assert [c[3] for c in spy.calls] == [chunk_seed(11, s) for s in (0, 3, 6)] * 2 == [11, 3_000_020, 6_000_029] * 2
    assert [c[:3] for c in spy.calls] == [(3, 1, True), (3, 1, True), (1, 1, True),
                                          (3, 2, False), (3, 2, False), (1, 2, False)]


def test_a_resumed_evaluation_equals_an_uninterrupted_one(tiny_qwen, bench_items, tmp_path):
    from corl_bench.rollout import make_engine

    model, tok = tiny_qwen
    engine = make_engine("fast", model, tok)
    spec = get_spec("micro-test")
    dec = run_decoding(EvalConfig(samples=2, max_new_tokens=10), spec)
    whole = tmp_path / "whole.jsonl"
    evaluate(engine.generate, spec, bench_items, out_path=whole, seed=3, decoding=dec, chunk=2)
    for fail in (1, 4, 6):  # killed inside the greedy pass, after the first sampled chunk, before the last one
        out = tmp_path / f"killed-{fail}.jsonl"
        with pytest.raises(KeyboardInterrupt):
            evaluate(Spy(engine, fail=fail), spec, bench_items, out_path=out, seed=3, decoding=dec, chunk=2)
        resumed = Spy(engine)
        evaluate(resumed, spec, bench_items, out_path=out, seed=3, decoding=dec, chunk=2)
        assert len(resumed.calls) == 8 - fail and out.read_bytes() == whole.read_bytes()
    # rows lost in the middle plus a torn last line: the chunk is regenerated with its own seed, the same rows return
    lines = whole.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    kept = [x for x in lines if json.loads(x)["problem_id"] != bench_items[3].id or json.loads(x)["sample_index"]]
    damaged.write_text("\n".join(kept[:-1]) + "\n" + kept[-1][:20])
    evaluate(engine.generate, spec, bench_items, out_path=damaged, seed=3, decoding=dec, chunk=2)
    assert sorted(damaged.read_text().splitlines()) == sorted(lines)


def test_eval_manifest_refuses_predictions_of_another_seed_rule_seed_or_chunk(tmp_path):
    from corl_bench.eval.targets import MANIFEST, check_manifest

    spec = get_spec("gsm8k")
    preds = tmp_path / "gsm8k.jsonl"
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=32)
    entry = json.loads((tmp_path / MANIFEST).read_text())["gsm8k"]
    assert entry["seed_rule"] == SEED_RULE and entry["seed"] == 0 and entry["chunk"] == 32
    preds.write_text(json.dumps({"problem_id": "1", "benchmark_version": spec.version}) + "\n")
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=32)  # same protocol: fine
    with pytest.raises(ConfigError, match=r"different seed \(seed=0\)"):
        check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=1, chunk=32)
    with pytest.raises(ConfigError, match=r"different chunk \(chunk=32\)"):
        check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=16)
    old = {k: v for k, v in entry.items() if k not in ("seed_rule", "seed", "chunk")}  # a manifest of rule 1
    (tmp_path / MANIFEST).write_text(json.dumps({"gsm8k": old}))
    with pytest.raises(ConfigError, match="seed rule 1.*delete those predictions"):
        check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=32)
    preds.unlink()  # the fix the message names
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=32)
    preds.write_text(json.dumps({"problem_id": "1", "benchmark_version": spec.version}) + "\n")
    with pytest.raises(ConfigError, match="different max_image_side"):  # --max-image-side changes the images seen
        check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=32, max_image_side=1024)


@pytest.mark.parametrize("completion,gold", [
    ("so \\boxed{12}", "12"), ("The answer is 12.", "12"), ("12 + 3 = 15\n15", "15"), ("it is 1/2", "0.5"),
    ("\\boxed{50\\%}", "50"), ("no number here", "3"), ("", "0"), ("7 coins\n7 coins", "8"), ("\\boxed{0.5}", "50"),
])
def test_the_micro_specs_grading_is_the_verifiers(completion, gold):
    """In-run rows used to be graded with ``verifier.grade``; now with the spec (qwen extractor, math grader)."""
    from corl_bench.eval.scoring import grade_text
    from corl_bench.grading.verifier import grade

    spec = get_spec("micro-test")
    assert json.dumps(grade_text(completion, gold, spec.extractor, spec.grader)) == json.dumps(grade(completion, gold))
