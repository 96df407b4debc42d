"""Every label-free method (and GT-Reward) trains vision-language agents through the unchanged core: one short run
per method on tiny warm-started VLMs of both micro visual families, through ``corl-bench``'s own runner (profile
``micro-visual``), checking that each agent was rewarded, updated and evaluated on the visual suite (and that CoMAS's
critiques and scores, and MAPoRL's debate turns, were asked with the problem's image)."""

from __future__ import annotations

import json

import pytest

from corl_bench.config import load_config
from corl_bench.registries import FAMILIES
from tests.test_vlm_on_cpu import tiny_visual_family

pytestmark = pytest.mark.slow
STEPS = 2
COHORTS = {
    "ring3": "[{name: a0, family: vtest-qwen2vl-micro}, {name: a1, family: vtest-llava-micro, seed_offset: 1}, "
             "{name: a2, family: vtest-qwen2vl-micro, seed_offset: 2}]",
    "pair": "[{name: a0, family: vtest-qwen2vl-micro}, {name: a1, family: vtest-llava-micro, seed_offset: 1}]",
    "one": "[{name: a0, family: vtest-llava-micro}]",
}
CASES = [("corl", "ring3", []), ("corl", "ring3", ["method.options={supervision: peer-majority}"]),
         ("ttrl", "one", []), ("gt-reward", "one", []), ("rent", "one", []), ("intuitor", "one", []),
         ("co-rewarding-ii", "one", []), ("mm-upt", "pair", []), ("comas", "pair", []), ("maporl", "pair", [])]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    for name in ("qwen2vl-micro", "llava-micro"):
        fam = tiny_visual_family(name, warmstart_steps=4, warmstart_batch=8, warmstart_min_steps=100)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    return tmp_path_factory.mktemp("vlm-cache")


def _run(cache, tmp_path, method, cohort, extra):
    from corl_bench.train.runner import run

    cfg = load_config(None, [
        f"method.name={method}", "model.profile=micro-visual", f"cohort.name=vtest-{cohort}",
        f"cohort.agents={COHORTS[cohort]}", f"run.steps={STEPS}", f"run.output_dir={tmp_path / 'runs'}",
        f"model.cache_dir={cache}", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=3",
        "rollout.max_new_tokens=12", "eval.max_problems=4", "eval.samples=1", "eval.max_new_tokens=12",
        "grpo.lr=1e-3", *extra])
    return cfg, run(cfg)


def _spy_extra_generations(monkeypatch) -> list:
    """Record every prompt an interactive method (CoMAS, a debate) sends through ``RewardInput.generate``."""
    from corl_bench.train.trainer import Trainer

    asked: list = []
    original = Trainer._generator

    def generator(self, step):
        generate = original(self, step)

        def spy(agent, prompts, role, max_new_tokens=None):
            asked.extend((role, p) for p in prompts)
            return generate(agent, prompts, role, max_new_tokens)

        return spy

    monkeypatch.setattr(Trainer, "_generator", generator)
    return asked


@pytest.mark.parametrize("method,cohort,extra", CASES, ids=[f"{m}-{c}{'-pm' if e else ''}" for m, c, e in CASES])
def test_each_method_trains_and_evaluates_vlm_agents_on_cpu(cache, tmp_path, method, cohort, extra, monkeypatch):
    asked = _spy_extra_generations(monkeypatch)
    cfg, run_dir = _run(cache, tmp_path, method, cohort, extra)
    agents = [a.name for a in cfg.cohort.agents]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["profile"] == "micro-visual"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["agent"]) for r in rows] == [(s, a) for s in range(STEPS) for a in agents]
    assert all(r["policy/grad_norm"] >= 0 and r["len/mean"] > 0 for r in rows)
    if method != "gt-reward" and method not in ("rent", "intuitor"):
        assert all("label/accuracy" in r for r in rows)
    for a in agents:
        preds = [json.loads(line) for line in
                 (run_dir / "eval" / "final" / a / "micro-visual-test.jsonl").read_text().splitlines()]
        assert {p["benchmark"] for p in preds} == {"micro-visual-test"} and len(preds) >= 4
        assert all(p["problem_id"].startswith("micro-visual-test-") for p in preds)
    if method == "corl":
        assert info["teachers"]["a0"] == (["a2"] if not extra else ["a1", "a2"])
    if method == "comas":  # critiques and scores were asked with the problem's image, and trained on
        assert {role for role, _ in asked} == {"evaluator-r0", "scorer-r0"}
        assert all(getattr(p, "images", ()) for _, p in asked)
        assert all(r["method/extra_samples"] > 0 for r in rows)
    if method == "maporl":  # every debate turn was asked with the problem's image and trained on
        assert {role for role, _ in asked} == {"debate-r1"} and len(asked) == STEPS * 2 * 2 * 3
        assert all(getattr(p, "images", ()) and "\nUpdate your answer.\n" in p.text for _, p in asked)
        assert all(r["method/extra_samples"] == 2 * 3 for r in rows)
    weights = run_dir / "checkpoints"
    assert weights.exists()


def test_a_visual_run_starts_from_the_cohort_profile_and_its_own_benchmark_on_cpu(cache, tmp_path):
    from corl_bench.train.runner import resolve

    cfg = load_config(None, ["method.name=corl", "cohort.name=visual-cross-family", f"model.cache_dir={cache}",
                             f"run.output_dir={tmp_path / 'runs'}"])
    plan = resolve(cfg)
    assert plan.config.model.profile == "micro-visual" and plan.config.eval.benchmarks == ("micro-visual-test",)
    text = load_config(None, ["method.name=corl", "cohort.agents=[{name: a0, family: qwen2vl-micro}, "
                              "{name: a1, family: qwen2-bpe, seed_offset: 1}]", "model.profile=micro-visual"])
    with pytest.raises(Exception, match="text family"):
        resolve(text)
    mixed = load_config(None, ["method.name=ttrl", "cohort.agents=[{name: a0, family: llava-micro}]"])
    with pytest.raises(Exception, match="model.profile=micro-visual"):
        resolve(mixed)
    engines = {b: load_config(None, ["method.name=ttrl", "cohort.name=visual-single", f"rollout.backend={b}",
                                     f"model.cache_dir={cache}", f"run.output_dir={tmp_path / 'runs'}"])
               for b in ("fast", "vllm")}
    assert resolve(engines["fast"]).config.rollout.backend == "fast"  # the fast engine takes images
    with pytest.raises(Exception, match="vLLM cannot load"):
        resolve(engines["vllm"])


def test_vlm_agents_as_ray_actors_match_the_local_run_on_cpu(cache, tmp_path):
    """Requests with images cross the actor boundary: at one torch thread, Ray and local runs are bit-identical."""
    pytest.importorskip("ray")
    out = {}
    for backend in ("local", "ray"):
        cfg, run_dir = _run(cache, tmp_path / backend, "corl", "pair", ["model.threads=1", f"run.backend={backend}"])
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        preds = (run_dir / "eval" / "final" / "a1" / "micro-visual-test.jsonl").read_text()
        out[backend] = ([{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows], preds)
    assert out["local"] == out["ray"]
