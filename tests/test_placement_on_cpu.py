"""``run.placement``: disjoint and timeshare GPU placements, and the ``vllm`` engine sleeping while its agent trains.

The placement rules are pure functions of the config and the cluster's GPU count. The sleep/wake order is checked
through a real :class:`~corl_bench.train.agent.Agent` update against a test double of ``vllm`` that refuses to
generate while asleep; the real vLLM does the same in ``tests/test_vllm_engine.py::test_timeshare_engine_...``
(where vLLM loads).
"""

from __future__ import annotations

import importlib.machinery
import itertools
import sys
import types
from typing import Any

import pytest
import torch

from corl_bench.config import AgentSpec, ConfigError, GRPOConfig, load_config
from corl_bench.rollout.base import SamplingParams
from corl_bench.rollout.request import Request
from corl_bench import placement

AGENTS = "[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-llama-bpe, seed_offset: 1}]"


def _cfg(*overrides: str):
    return load_config(None, ["cohort.name=tiny", f"cohort.agents={AGENTS}", *overrides])


def test_auto_is_disjoint_when_every_agent_has_its_gpus_else_timeshare_on_cpu():
    cfg = _cfg("run.backend=ray", "run.gpus_per_agent=1")
    assert placement.resolve(cfg, 2.0) == placement.Placement("disjoint", (1.0, 1.0), sleep=False)
    assert placement.resolve(cfg, 1.0) == placement.Placement("timeshare", (0.5, 0.5), sleep=True)
    assert placement.resolve(_cfg("run.backend=ray"), 0.0).kind == "disjoint"  # nobody asks for a GPU
    assert placement.resolve(_cfg(), None).kind == "disjoint"  # the local backend reserves nothing
    forced = _cfg("run.backend=ray", "run.gpus_per_agent=1", "run.placement=timeshare")
    assert placement.resolve(forced, 8.0).gpus == (0.5, 0.5)


def test_placements_that_cannot_fit_are_refused_in_one_line_on_cpu():
    cases = [
        (_cfg("run.backend=ray", "run.gpus_per_agent=1", "run.placement=disjoint"), 1.0, "run.placement=timeshare"),
        (_cfg("run.backend=ray", "run.gpus_per_agent=2", "run.placement=timeshare"), 4.0, "run.placement=disjoint"),
        (_cfg("run.backend=ray", "run.gpus_per_agent=1"), 0.0, "add a GPU"),
        (_cfg("rollout.backend=vllm", "run.placement=timeshare"), None, "run.backend=ray"),
    ]
    for cfg, gpus, fix in cases:
        with pytest.raises(ConfigError) as e:
            placement.resolve(cfg, gpus)
        assert fix in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="run.placement must be one of"):
        _cfg("run.placement=shared")


def test_timeshare_puts_vllm_engines_to_sleep_with_a_share_of_the_memory_on_cpu():
    ray_ts = _cfg("run.backend=ray", "rollout.backend=vllm", "run.placement=timeshare")
    assert placement.engine_options(ray_ts) == {"sleep_level": 1, "gpu_memory_utilization": 0.15}
    mine = _cfg("run.backend=ray", "rollout.backend=vllm", "run.placement=timeshare",
                "rollout.engine_options={sleep_level: 2, gpu_memory_utilization: 0.2}")
    assert placement.engine_options(mine) == {"sleep_level": 2, "gpu_memory_utilization": 0.2}  # the user's win
    assert placement.engine_options(_cfg("run.backend=ray", "rollout.backend=vllm")) == {}  # disjoint: awake
    assert placement.engine_options(_cfg("run.placement=timeshare")) == {}  # hf engines have no sleep
    one = load_config(None, ["rollout.backend=vllm", "run.placement=timeshare"])  # one agent, one process: fine
    assert placement.engine_options(one) == {"sleep_level": 1, "gpu_memory_utilization": 0.3}


# ------------------------------------------------------------------------------------------------ vllm double
class _FakeLLM:
    """Records the calls the engine makes; refuses to generate while asleep (vLLM's scheduler is paused)."""

    log: list[str] = []

    def __init__(self, folder: str, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.asleep = False
        self.log.append("build")

    def generate(self, prompts: list[dict[str, Any]], params: Any, use_tqdm: bool = False) -> list[Any]:
        if self.asleep:
            raise RuntimeError("generate while asleep")
        self.log.append("generate")
        outs = []
        for p, sp in zip(prompts, params):
            done = [types.SimpleNamespace(index=k, token_ids=[5, 6], logprobs=None, finish_reason="length")
                    for k in range(sp["n"])]
            outs.append(types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=done))
        return outs

    def sleep(self, level: int = 1) -> None:
        self.asleep = True
        self.log.append(f"sleep{level}")

    def wake_up(self, tags: Any = None) -> bool:
        self.asleep = False
        self.log.append("wake")
        return True

    def collective_rpc(self, name: str, kwargs: Any = None) -> None:
        if self.asleep:
            raise RuntimeError("weights loaded while asleep")
        self.log.append(name)

    def reset_prefix_cache(self) -> None:
        pass


@pytest.fixture()
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    mod.__version__ = "test-double"
    mod.LLM = _FakeLLM
    mod.TokensPrompt = dict
    mod.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", mod)
    _FakeLLM.log = []
    return _FakeLLM.log


def _tiny_agent(**engine_options: Any):
    import transformers

    from corl_bench.micro.families import build_tokenizer
    from corl_bench.micro.tasks import problem_stream
    from corl_bench.micro.warmstart import render_prompt
    from corl_bench.train.agent import Agent

    corpus = [render_prompt(p.text("original")) + p.solution() for p in itertools.islice(problem_stream(0), 100)]
    tok = build_tokenizer("bpe", corpus)
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                   max_position_embeddings=128)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    return Agent(AgentSpec(name="a0", family="qwen2-bpe"), model, tok, GRPOConfig(lr=1e-2), backend="vllm",
                 engine_options={"sync": "reload", **engine_options}, temperature=1.0)


def _one_step(agent) -> None:
    from corl_bench.train.boundary import TrainSample

    prompts = ["Q: 1+2=? A:", "Q: 3+4=? A:"]
    comps = agent.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=2, logprobs=False, seed=1))
    agent.score([TrainSample(Request(text=p), c) for p, g in zip(prompts, comps) for c in g])
    agent.update([1.0, -1.0, 0.5, -0.5])


def test_a_sleeping_engine_sleeps_through_the_update_and_wakes_for_the_weight_sync_on_cpu(fake_vllm):
    agent = _tiny_agent(sleep_level=1)
    engine = agent.engines["policy"]
    assert "enable_sleep_mode" not in engine.llm.kwargs  # a CPU has no sleep mode (vLLM refuses it there)
    _one_step(agent)
    _one_step(agent)
    steps = fake_vllm[fake_vllm.index("generate"):]
    assert steps == ["generate", "sleep1", "wake", "reload_weights"] * 2
    assert not engine.asleep and [k for k, _ in engine.sleep_seconds] == ["sleep", "wake"] * 2


def test_an_engine_that_never_sleeps_is_unchanged_and_level_two_needs_a_sync_on_cpu(fake_vllm):
    _one_step(_tiny_agent())
    assert "sleep1" not in fake_vllm and "wake" not in fake_vllm
    agent = _tiny_agent(sleep_level=2)
    engine = agent.engines["policy"]
    engine.sleep()
    with pytest.raises(RuntimeError, match="sync_weights") as e:  # its weights were dropped: only a sync wakes it
        agent.generate(["Q: 1+1=? A:"], SamplingParams(n=1, greedy=True, max_new_tokens=2, logprobs=False))
    assert "\n" not in str(e.value)
    engine.sync_weights(agent.model)
    assert not engine.asleep and fake_vllm[-2:] == ["wake", "reload_weights"]
    with pytest.raises(ValueError, match="sleep_level"):
        _tiny_agent(sleep_level=3)
