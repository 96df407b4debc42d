"""End to end on CPU: warm-start two tiny families, train a 2-agent Co-RL for a few steps, check the run directory,
that parameters moved, that the table recomputes the run, and that the warm start is deterministic.

Slow-ish (about a minute on 2 cores): the families are tiny and warm-started for a handful of steps only.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from corl_bench.config import load_config
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

pytestmark = pytest.mark.slow
STEPS = 3


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory):
    from corl_bench.train.runner import run

    for name in ("qwen2-bpe", "neox-bpe", "llama-bpe"):
        fam = tiny_family(name, warmstart_steps=4, warmstart_batch=16)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    root = tmp_path_factory.mktemp("e2e")
    cfg = load_config(None, [
        "method.name=corl", "cohort.name=tiny-cross",
        "cohort.agents=[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-neox-bpe, seed_offset: 1}]",
        f"run.steps={STEPS}", f"run.output_dir={root / 'results' / 'runs'}", f"model.cache_dir={root / 'cache'}",
        "run.log_samples_every=2", "rollout.prompts_per_step=4", "rollout.samples_per_prompt=4",
        "rollout.max_new_tokens=16", "eval.max_problems=8", "eval.samples=2", "eval.max_new_tokens=16",
        "grpo.lr=1e-3"])
    run_dir = run(cfg)
    return root, run_dir, cfg


def test_run_directory_holds_config_environment_metrics_samples_predictions_checkpoints(e2e_run):
    root, run_dir, cfg = e2e_run
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert [a["family"] for a in resolved["cohort"]["agents"]] == ["tiny-qwen2-bpe", "tiny-neox-bpe"]
    env = json.loads((run_dir / "env.json").read_text())
    assert env["seed"] == 0 and "git_commit" in env and env["packages"]["torch"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["phases"] == ["base", "final"]
    assert info["teachers"] == {"a0": ["a1"], "a1": ["a0"]}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["agent"]) for r in rows] == [(s, a) for s in range(STEPS) for a in ("a0", "a1")]
    for key in ("reward/mean", "reward/accuracy", "label/accuracy", "vote/majority_ratio", "peer/agreement",
                "adv/zero_std_fraction", "policy/entropy", "len/mean", "len/clipped_ratio", "policy/kl",
                "policy/grad_norm", "policy/clip_fraction", "time/rollout", "time/update"):
        assert key in rows[0], key
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {0, 2}
    assert {"prompt", "completion", "extracted", "pseudo_label", "truth", "reward"} <= set(samples[0])
    for phase in ("base", "final"):
        for agent in ("a0", "a1"):
            preds = [json.loads(x) for x in (run_dir / "eval" / phase / agent / "micro-test.jsonl").read_text()
                     .splitlines()]
            assert len(preds) == 8 * (1 + 2)  # greedy + 2 samples for 8 problems
            assert {"prompt", "completion", "extracted", "gold", "correct", "sample_index"} <= set(preds[0])
    for agent in ("a0", "a1"):
        assert (run_dir / "checkpoints" / "final" / agent / "config.json").is_file()


def test_training_changed_every_agents_parameters(e2e_run):
    from transformers import AutoModelForCausalLM

    from corl_bench.micro.profile import MicroProfile

    root, run_dir, cfg = e2e_run
    profile = MicroProfile(cfg.model)
    for agent, fam in (("a0", "tiny-qwen2-bpe"), ("a1", "tiny-neox-bpe")):
        base = AutoModelForCausalLM.from_pretrained(profile.checkpoint_dir(fam)).state_dict()
        final = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "final" / agent).state_dict()
        changed = [k for k in base if not torch.equal(base[k], final[k])]
        assert changed, f"{agent}: no parameter changed"


def test_table_recomputes_the_run_from_its_predictions(e2e_run):
    from corl_bench.eval.metrics import score_predictions
    from corl_bench.results import read_jsonl
    from corl_bench.report.collect import collect

    root, run_dir, _ = e2e_run
    rows, warnings = collect(root / "results")
    assert not warnings, warnings
    assert [(r.method, r.cohort, r.agent) for r in rows] == [("corl", "tiny-cross", "a0"), ("corl", "tiny-cross", "a1")]
    expected = score_predictions(read_jsonl(run_dir / "eval" / "final" / "a0" / "micro-test.jsonl"))
    assert rows[0].scores["micro-test"]["avg_k"] == pytest.approx(expected.avg_k)


def test_warm_start_is_deterministic(e2e_run, tmp_path):
    from safetensors.torch import load_file

    from corl_bench.config import ModelConfig
    from corl_bench.micro.profile import MicroProfile

    root, _, cfg = e2e_run
    first = MicroProfile(cfg.model).checkpoint_dir("tiny-qwen2-bpe")
    second = MicroProfile(ModelConfig(cache_dir=str(tmp_path))).ensure_checkpoints(["tiny-qwen2-bpe"])["tiny-qwen2-bpe"]
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()


def _registered_methods() -> list[str]:
    from corl_bench.registries import METHODS
    return METHODS.names()


@pytest.mark.parametrize("method", _registered_methods())
def test_every_registered_method_trains_end_to_end_and_appears_in_the_table(e2e_run, method):
    from corl_bench.registries import METHODS
    from corl_bench.train.runner import run
    from corl_bench.report.collect import collect

    root, _, _ = e2e_run
    n_agents = METHODS.get(method).min_agents
    families = ["tiny-qwen2-bpe", "tiny-neox-bpe", "tiny-llama-bpe"][:n_agents]
    agents = "[" + ", ".join(f"{{name: a{i}, family: {f}, seed_offset: {i}}}" for i, f in enumerate(families)) + "]"
    out = root / f"methods-{method}"
    cfg = load_config(None, [
        f"method.name={method}", "cohort.name=tiny", f"cohort.agents={agents}", "run.steps=2",
        f"run.output_dir={out / 'runs'}", f"model.cache_dir={root / 'cache'}", "rollout.prompts_per_step=2",
        "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12", "eval.max_problems=4", "eval.samples=2",
        "eval.max_new_tokens=12"])
    run_dir = run(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * n_agents
    assert all(r["reward/mean"] is not None and r["policy/entropy"] is not None for r in rows)
    table_rows, warnings = collect(out)
    assert not warnings and {r.method for r in table_rows} == {method}
    if not METHODS.get(method).official:  # an unofficial method's rows carry the mark, and the footer says why
        from corl_bench.report.layout import build

        table = build(out)
        assert all(row.label.startswith(METHODS.get(method).label + "†") for b in table.blocks for row in b.rows
                   if row.method == method)
        assert any(line.startswith("† unofficial: ") for line in table.footer), table.footer


def test_corl_bench_eval_scores_a_runs_agents_on_a_data_benchmark_and_the_table_shows_it(e2e_run, tmp_path):
    import json as _json

    from corl_bench.eval.targets import run_eval
    from corl_bench.report.collect import collect

    root, run_dir, _ = e2e_run
    data = tmp_path / "data" / "gsm8k"
    data.mkdir(parents=True)
    rows = [{"id": f"g{i}", "problem": f"Ava has {i} coins and finds 2. How many now?", "answer": str(i + 2)}
            for i in range(3)]
    (data / "test.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    first = run_eval(str(run_dir), ["gsm8k"], data_dir=str(tmp_path / "data"), overrides={"samples": 2,
                                                                                          "max_new_tokens": 8})
    assert set(first) == {"a0", "a1"} and first["a0"]["gsm8k"]["n_problems"] == 3
    preds = run_dir / "eval" / "final" / "a0" / "gsm8k.jsonl"
    assert len(preds.read_text().splitlines()) == 3 * 2
    again = run_eval(str(run_dir), ["gsm8k"], data_dir=str(tmp_path / "data"),
                     overrides={"samples": 2, "max_new_tokens": 8})
    assert again == first and len(preds.read_text().splitlines()) == 6  # nothing regenerated
    table_rows, warnings = collect(root / "results")
    assert not warnings
    assert {"micro-test", "gsm8k"} <= set(table_rows[0].scores)
