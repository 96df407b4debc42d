"""``validate`` refuses everything ``run`` would refuse before step 1: a generated matrix of (profile x engine x memory
option x benchmark x method). Every config that ``resolve`` accepts gets through agent construction (the runner's own
``build_agents``) and generates for one item of each of its benchmarks; every refused one is refused by ``run`` too,
in one line, with nothing written under its output directory.

Models are tiny: a text and a vision-language family of the micro profiles (a few warm-start steps), and the same two
kinds as ``save_pretrained`` folders for the hf profile (a text model and a vision-language checkpoint with its image
layout, as corl-bench writes them).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.registries import FAMILIES
from tests.conftest import build_tiny, tiny_family
from tests.test_mm_benchmarks_on_cpu import mathvision_dir
from tests.test_vlm_on_cpu import build_tiny_vlm, tiny_visual_family

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
PROFILES = {  # name -> (model.profile, family kind, agent family or None for a folder fixture)
    "micro": ("micro", "text", "mtest-qwen2-bpe"),
    "micro-visual": ("micro-visual", "vision", "mtest-qwen2vl-micro"),
    "hf-text": ("hf", "text", None),
    "hf-vlm": ("hf", "vision", None),
}
ENGINES = ("hf", "fast", "vllm")
MEMORY = {"none": [], "micro-batch": ["memory.micro_batch=2"], "logit-chunk": ["memory.logit_chunk=8"],
          "shared-prefix": ["memory.shared_prefix=true"], "checkpointing": ["memory.gradient_checkpointing=true"],
          "lora": ["memory.lora_rank=2"]}
BENCHMARKS = ("micro-test", "micro-visual-test", "gsm8k", "mathvision_testmini")
METHODS = {"ttrl": 1, "corl": 2}
MATRIX = list(itertools.product(PROFILES, ENGINES, MEMORY, BENCHMARKS, METHODS))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Tiny families registered and their checkpoints placed in the micro cache (random weights: this test needs
    models that load and generate, not a warm start), the two hf folders written, benchmark data (the gsm8k fixture,
    a MathVision copy)."""
    from corl_bench.config import ModelConfig
    from corl_bench.micro import vl_warmstart, warmstart
    from corl_bench.micro.profile import MicroProfile
    from corl_bench.micro.vl_profile import MicroVisualProfile

    root = tmp_path_factory.mktemp("matrix")
    text = dataclasses.replace(tiny_family("qwen2-bpe"), name="mtest-qwen2-bpe")
    vision = dataclasses.replace(tiny_visual_family("qwen2vl-micro"), name="mtest-qwen2vl-micro")
    for fam in (text, vision):
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    cache = ModelConfig(cache_dir=str(root / "cache"))
    model, tok = build_tiny("qwen2-bpe")
    warmstart.save_checkpoint(model, tok, {"note": "random"}, MicroProfile(cache).checkpoint_dir(text.name))
    model.save_pretrained(root / "hf-text")
    tok.save_pretrained(root / "hf-text")
    model, tok = build_tiny_vlm("qwen2vl-micro")
    vl_warmstart.save_checkpoint(model, tok, {"note": "random"}, MicroVisualProfile(cache).checkpoint_dir(vision.name))
    vl_warmstart.save_checkpoint(model, tok, {"note": "random"}, root / "hf-vlm")
    data = root / "data"
    mathvision_dir(data)
    (data / "gsm8k").mkdir(parents=True)
    (data / "gsm8k" / "test.jsonl").write_text((FIXTURES / "gsm8k" / "test.jsonl").read_text())
    return {"root": root, "hf-text": str(root / "hf-text"), "hf-vlm": str(root / "hf-vlm"), "data": data}


def _config(world, profile: str, engine: str, memory: str, bench: str, method: str, out: Path):
    model_profile, _, family = PROFILES[profile]
    family = family or world[profile]
    agents = ", ".join(f"{{name: a{i}, family: '{family}', seed_offset: {i}}}" for i in range(METHODS[method]))
    sets = [f"method.name={method}", "cohort.name=matrix", f"cohort.agents=[{agents}]",
            f"model.profile={model_profile}", f"rollout.backend={engine}", f"eval.benchmarks=[{bench}]",
            f"run.output_dir={out}", f"model.cache_dir={world['root'] / 'cache'}", "rollout.prompts_per_step=2",
            "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "eval.max_problems=1", "eval.samples=1",
            "eval.max_new_tokens=2", "model.device=cpu", *MEMORY[memory]]
    if model_profile == "hf":
        sets += [f"data.train={FIXTURES / 'gsm8k' / 'train.jsonl'}", f"data.data_dir={world['data']}"]
    return load_config(None, sets)


def test_every_config_validate_accepts_builds_its_agents_and_every_refused_one_writes_nothing_on_cpu(
        world, tmp_path, monkeypatch) -> None:
    from corl_bench.eval.evaluator import request_for
    from corl_bench.eval.specs import get_spec
    from corl_bench.registries import PROFILES as PROFILE_REGISTRY
    from corl_bench.rollout.base import SamplingParams
    from corl_bench.train.runner import resolve, run
    from corl_bench.train.session import build_agents

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    accepted, refused, reasons = 0, 0, {}
    profiles: dict[str, object] = {}
    for i, (profile, engine, memory, bench, method) in enumerate(MATRIX):
        out = tmp_path / f"runs-{i}"
        cfg = _config(world, profile, engine, memory, bench, method, out)
        try:
            plan = resolve(cfg)
        except ConfigError as e:
            refused += 1
            reasons.setdefault(str(e).split(";")[0][:70], 0)
            with pytest.raises(ConfigError) as again:  # run refuses it too, before anything is written
                run(cfg, auto_resume=False)
            assert str(again.value) == str(e) and "\n" not in str(e)
            assert not out.exists(), (profile, engine, memory, bench, method)
            continue
        accepted += 1
        name = plan.config.model.profile
        prof = profiles.setdefault(name, PROFILE_REGISTRY.get(name)(plan.config.model))
        prof.prepare([a.family for a in plan.config.cohort.agents])
        if hasattr(prof, "configure"):
            prof.configure(plan.config)
        agents = build_agents(plan, prof)
        assert len(agents) == METHODS[method]
        for b in plan.config.eval.benchmarks:  # (micro-test left as is = the default: micro-visual evaluates its own)
            spec, item = get_spec(b), prof.benchmark(b)[0]  # one greedy token for one item: the request reaches it
            got = agents[0].generate([request_for(spec, item, agents[0].tokenizer)],
                                     SamplingParams(greedy=True, n=1, max_new_tokens=1))
            assert len(got) == 1
        assert not out.exists()  # resolving and building write no run directory
    assert accepted + refused == len(MATRIX) == 576
    assert 40 <= accepted <= 150, (accepted, refused, reasons)  # 128 since fast and logit_chunk take images
