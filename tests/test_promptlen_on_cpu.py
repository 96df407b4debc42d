"""The memory estimate's two inputs beside the architecture: the prompts a run draws, measured in each agent's tokens
(corl_bench.hf.promptlen), and the heap a CPU process keeps under memory.keep_host_memory (fit.KEPT_HEAP)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import pytest

from corl_bench.config import load_config
from corl_bench.hf import fit, promptlen
from corl_bench.hf.profile import HFProfile
from corl_bench.profile import render_for

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def _cfg(folder: Path, tmp_path: Path, *sets: str):
    return load_config(None, ["model.profile=hf", "method.name=ttrl", "cohort.name=mine", "cohort.profile=hf",
                              f"cohort.agents=[{{name: a0, family: '{folder}'}}]", f"data.data_dir={FIXTURES}",
                              "data.train=gsm8k-train", f"model.cache_dir={tmp_path / 'cache'}",
                              "rollout.prompts_per_step=2", *sets])


def _trainer_draws(cfg, n: int) -> list[str]:
    """The ids of the first n problems the trainer's own stream yields."""
    from corl_bench.train.trainer import Trainer

    profile = HFProfile(cfg.model)
    profile.configure(cfg)
    stream = Trainer._training_stream(SimpleNamespace(cfg=cfg, profile=profile))
    return [p.id for p in islice(stream, n)]


@pytest.mark.parametrize("sets", [("run.steps=2",), ("run.steps=2", "data.train_pool=8"), ("run.steps=3", "data.train_pool=5"),
                                  ("run.steps=400",)])
def test_the_draws_replayed_for_the_estimate_are_the_trainers_on_cpu(tiny_folder, tmp_path, sets) -> None:
    cfg = _cfg(tiny_folder, tmp_path, *sets)
    drawn = promptlen._drawn(cfg)
    want = _trainer_draws(cfg, cfg.run.steps * 2)
    assert drawn is not None
    if cfg.run.steps * 2 >= len(drawn) and len(set(want)) == len(drawn):  # the run passes through the whole set
        assert sorted(p.id for p in drawn) == sorted(set(want))
    else:
        assert [p.id for p in drawn] == want


def test_the_longest_prompt_is_measured_in_the_agents_tokens_as_it_is_asked_on_cpu(tiny_folder, tmp_path) -> None:
    cfg = _cfg(tiny_folder, tmp_path, "run.steps=3")
    profile = HFProfile(cfg.model)
    agent = cfg.cohort.agents[0]
    tok = profile.tokenizer(agent.family)
    every = [len(tok(render_for(profile, p, agent).text)["input_ids"]) for p in promptlen._drawn(cfg)]
    assert promptlen.longest_prompts(cfg, HFProfile(cfg.model)) == [max(every)]
    few = _cfg(tiny_folder, tmp_path, "run.steps=3", f"cohort.agents=[{{name: a0, family: '{tiny_folder}', "
                                                      "prompt: fewshot}]")
    assert promptlen.longest_prompts(few, HFProfile(few.model))[0] > max(every)  # the worked examples come first


def test_without_the_tokenizer_the_length_is_approximated_and_without_the_data_assumed_on_cpu(tiny_folder, tmp_path) -> None:
    missing = _cfg(tiny_folder, tmp_path, "run.steps=2", f"data.data_dir={tmp_path / 'nothing'}")
    assert promptlen.longest_prompts(missing, HFProfile(missing.model)) == [None]
    hub = _cfg(tiny_folder, tmp_path, "run.steps=2", "cohort.agents=[{name: a0, family: Qwen/Qwen2.5-0.5B}]")
    profile = HFProfile(hub.model)
    chars = max(len(profile.render(p, "original").text) for p in promptlen._drawn(hub))
    # nothing is downloaded to measure a prompt: its text without a chat template, at 3 characters a token, + 40
    want = [(-(-chars // 3) + promptlen.TEMPLATE_TOKENS, "approximate")]
    assert promptlen.longest_prompts(hub, HFProfile(hub.model), detail=True) == want
    assert promptlen.longest_prompts(missing, HFProfile(missing.model), detail=True) == [(None, "unknown")]
    a = fit.KNOWN["smol"]
    cfg = load_config(None, ["model.profile=hf", "method.name=corl", "cohort.name=smol-cross-family",
                             "model.device=cpu"])
    from corl_bench.registries import COHORTS

    cfg = cfg.replace(cohort=COHORTS.get(cfg.cohort.name))
    agent = cfg.cohort.agents[0]
    default = fit._agent_estimate(cfg, agent, a, 8, 256, 0, 4)
    assert default == fit._agent_estimate(cfg, agent, a, 8, 256, 0, 4, prompt=fit.PROMPT_TOKENS)
    measured = fit._agent_estimate(cfg, agent, a, 8, 256, 0, 4, prompt=40)
    assert measured["activations"] == pytest.approx(default["activations"] * (40 + cfg.rollout.max_new_tokens) /
                                                    (fit.PROMPT_TOKENS + cfg.rollout.max_new_tokens))


def test_the_kept_heap_doubles_the_training_transient_of_several_micro_batches_on_a_cpu_only_on_cpu() -> None:
    a = fit.KNOWN["smol"]
    args = dict(dtype_bytes=4, prompt_tokens=100, new_tokens=64, micro_batch=8, logit_chunk=256, checkpointing=False,
                max_batch=32)
    live, kept = fit.estimate(a, **args), fit.estimate(a, kept_heap=2.0, **args)
    transient = live["activations"] + live["logits"]
    assert kept["train_peak"] == pytest.approx(live["resident"] + 2 * transient)
    assert kept["rollout_peak"] == live["rollout_peak"]  # what generation holds is not doubled
    base = ["model.profile=hf", "method.name=corl", "cohort.name=smol-cross-family"]
    from corl_bench.registries import COHORTS

    for sets, factor in ((["model.device=cpu"], fit.KEPT_HEAP),
                         (["model.device=cpu", "memory.keep_host_memory=false"], 1.0),
                         (["model.device=cuda"], 1.0)):
        cfg = load_config(None, [*base, *sets])
        cfg = cfg.replace(cohort=COHORTS.get(cfg.cohort.name))
        assert fit._agent_estimate(cfg, cfg.cohort.agents[0], a, 8, 256, 0, 4)["kept_heap"] == factor
        whole = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
        for one in (0, whole):  # one micro-batch a step: what it freed is reused by the next step's, counted once
            assert fit._agent_estimate(cfg, cfg.cohort.agents[0], a, one, 256, 0, 4)["kept_heap"] == 1.0
