"""The agent boundary is plain data: whole training steps with every agent behind a proxy that pickles every argument,
result and exception (as a call to another process or a Ray actor would) give results identical to in-process agents,
for every built-in method — and checkpoints written and restored through the proxy resume bit-identically."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch

from corl_bench.config import AgentSpec, load_config
from corl_bench.micro.tasks import problem_stream
from corl_bench.micro.warmstart import render_prompt
from corl_bench.profile import Profile as BaseProfile
from corl_bench.registries import METHODS
from corl_bench.rollout import Request
from corl_bench.train.agent import Agent, NumericalError
from corl_bench.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from corl_bench.train.trainer import Trainer

BOUNDARY = frozenset({"generate", "score", "update", "update_auxiliary", "discard", "state_dict", "load_state_dict",
                      "save"})
STEPS = 2


class PicklingProxy:
    """Stands in for an agent in another process: only the boundary's calls, every value pickled both ways."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self.name = agent.name
        self.spec = pickle.loads(pickle.dumps(agent.spec))
        self.calls: list[str] = []

    def __getattr__(self, attr: str):
        if attr not in BOUNDARY:
            raise AttributeError(f"the controller reached for agent.{attr}, which is not part of the agent boundary")
        target = getattr(self._agent, attr)

        def call(*args, **kwargs):
            self.calls.append(attr)
            args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
            try:
                out = target(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - exceptions cross the boundary too
                raise pickle.loads(pickle.dumps(exc)) from None
            return pickle.loads(pickle.dumps(out))

        return call


class Profile(BaseProfile):
    def training_problems(self, seed: int):
        return problem_stream(seed)

    def render(self, problem, view: str, model=None, prompt="") -> Request:
        return Request(text=render_prompt(problem.text(view)))


CELLS = {"gt-reward": 1, "ttrl": 1, "rent": 1, "intuitor": 1, "co-rewarding-ii": 1, "random-reward": 1, "corl": 2,
         "corl-peer-majority": 3, "comas": 2}
OPTIONS = {"comas": "{score_parser: fork, score_max_tokens: 4}"}


def _config(method: str, tmp: Path):
    sets = [f"method.name={method}", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4",
            "rollout.max_new_tokens=8", "grpo.lr=1e-3", f"run.steps={STEPS}", "run.log_samples_every=1",
            f"run.output_dir={tmp}"]
    if method == "co-rewarding-ii":
        sets.append("grpo.kl_coef=0.01")  # the teacher is also the KL anchor
    if method in OPTIONS:
        sets.append(f"method.options={OPTIONS[method]}")
    return load_config(None, sets)


def _agents(method: str, model, tok, cfg) -> list[Agent]:
    cls = METHODS.get(method)
    return [Agent(AgentSpec(name=f"a{i}", family="qwen2-bpe", seed_offset=i), copy.deepcopy(model), tok, cfg.grpo,
                  temperature=cfg.rollout.temperature, auxiliary=cls.auxiliary) for i in range(CELLS[method])]


def _trainer(method: str, agents, cfg, run_dir: Path) -> Trainer:
    cls = METHODS.get(method)
    specs = [a.spec for a in agents]
    return Trainer(cfg, agents, cls(cls.parse_options(cfg.method.options), specs), Profile(), run_dir)


def _run(method: str, agents, cfg, run_dir: Path, steps=range(STEPS)) -> list:
    trainer = _trainer(method, agents, cfg, run_dir)
    out = []
    for step in steps:
        result = trainer.step(step)
        out.append(({a: {k: v for k, v in m.items()} for a, m in result.metrics.items()}, result.samples))
    return out


def _weights(agents) -> list[dict[str, torch.Tensor]]:
    return [a.state_dict()["model"] for a in agents]


@pytest.mark.parametrize("method", list(CELLS))
def test_training_steps_through_a_pickling_proxy_equal_in_process_agents(method, tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    cfg = _config(method, tmp_path)
    plain = _agents(method, model, tok, cfg)
    expected = _run(method, plain, cfg, tmp_path / "plain")
    proxies = [PicklingProxy(a) for a in _agents(method, model, tok, cfg)]
    got = _run(method, proxies, cfg, tmp_path / "proxied")
    assert got == expected
    for a, b in zip(_weights(plain), _weights(proxies)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {"generate", "score", "update"} <= set(proxies[0].calls)
    if METHODS.get(method).auxiliary:
        assert "update_auxiliary" in proxies[0].calls


class Deferred:
    """A call started but not run until its result is asked for (as a Ray actor's future)."""

    def __init__(self, fn, args, kwargs) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def result(self):
        return self.fn(*self.args, **self.kwargs)


class SubmittingProxy(PicklingProxy):
    """A proxy that also starts calls without waiting (``submit``), as ``RayAgent`` does: the trainer's ``each``
    then starts a phase on every agent before it asks for any result."""

    def submit(self, method: str, *args, **kwargs):
        self.submitted = getattr(self, "submitted", 0) + 1
        return Deferred(getattr(self, method), args, kwargs)


@pytest.mark.parametrize("method", ["corl", "comas", "co-rewarding-ii", "corl-peer-majority"])
def test_training_steps_with_calls_submitted_to_every_agent_first_equal_in_process(method, tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    cfg = _config(method, tmp_path)
    expected = _run(method, _agents(method, model, tok, cfg), cfg, tmp_path / "plain")
    proxies = [SubmittingProxy(a) for a in _agents(method, model, tok, cfg)]
    got = _run(method, proxies, cfg, tmp_path / "submitted")
    assert got == expected
    assert all(p.submitted >= 3 * STEPS for p in proxies)  # generate, score, update went through submit
    assert {"generate", "score", "update"} <= set(proxies[0].calls)


@pytest.mark.parametrize("method", ["corl", "co-rewarding-ii"])
def test_checkpoints_through_the_proxy_resume_bit_identically(method, tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    cfg = _config(method, tmp_path)
    whole = _agents(method, model, tok, cfg)
    expected = _run(method, whole, cfg, tmp_path / "whole")
    first = [PicklingProxy(a) for a in _agents(method, model, tok, cfg)]
    trainer = _trainer(method, first, cfg, tmp_path / "resumed")
    trainer.step(0)
    save_checkpoint(tmp_path / "resumed", 1, first, trainer.state_dict())
    second = [PicklingProxy(a) for a in _agents(method, model, tok, cfg)]
    state = load_checkpoint(latest_checkpoint(tmp_path / "resumed"), second)
    resumed = _trainer(method, second, cfg, tmp_path / "resumed")
    resumed.load_state_dict(state)
    got = resumed.step(1)
    assert {a: dict(m) for a, m in got.metrics.items()} == expected[1][0]
    for a, b in zip(_weights(whole), _weights(second)):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_numerical_error_crosses_the_boundary_with_its_fields():
    err = pickle.loads(pickle.dumps(NumericalError("loss", "a0", 3, "2 of 8 values")))
    assert (err.quantity, err.agent, err.step, err.detail) == ("loss", "a0", 3, "2 of 8 values")
    assert "non-finite loss (agent a0, step 3)" in str(err)


def test_the_proxy_refuses_what_is_not_part_of_the_boundary(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    proxy = PicklingProxy(_agents("ttrl", model, tok, _config("ttrl", tmp_path))[0])
    with pytest.raises(AttributeError, match="not part of the agent boundary"):
        proxy.model  # noqa: B018
