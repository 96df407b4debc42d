"""The agent boundary is plain data: whole training steps with every agent behind a proxy that pickles every argument,
result and exception (as a call to another process or a Ray actor would) give results identical to in-process agents,
for every built-in method — and checkpoints written and restored through the proxy (each agent writing its own file)
resume bit-identically. The proxy, the Ray handle and the actor all take their call list from one protocol,
:class:`corl_bench.train.boundary.AgentHandle`, which :class:`corl_bench.train.agent.Agent` satisfies."""

from __future__ import annotations

import copy
import inspect
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
from corl_bench.train.boundary import BOUNDARY, AgentGroup, AgentHandle, boundary_calls
from corl_bench.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from corl_bench.train.trainer import Trainer

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
         "corl-peer-majority": 3, "comas": 2, "corl-frozen-peer": 2, "maporl": 2, "maca": 2, "rlccf": 2, "scrl": 1,
         "peer-likelihood": 2, "coverrl": 1, "dcrl": 1}
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
    """The policy weights of in-process agents or of the agents behind proxies (read by the test, not the trainer)."""
    return [getattr(a, "_agent", a).state_dict()["model"] for a in agents]


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
    cls = METHODS.get(method)
    rule = cls(cls.parse_options(cfg.method.options), [a.spec for a in plain])
    updated = any(rule.auxiliary_update(aux.name, 0, STEPS) for aux in cls.auxiliary)
    assert ("update_auxiliary" in proxies[0].calls) == updated  # a frozen auxiliary (corl-frozen-peer) is never sent one


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


def test_the_boundary_is_the_protocol_s_calls_and_the_agent_satisfies_it(tiny_qwen, tmp_path):
    assert BOUNDARY == boundary_calls(AgentHandle) == ("generate", "score", "explore", "likelihood", "update",
                                                       "update_auxiliary", "discard", "checkpoint", "restore", "save")
    assert "state_dict" not in BOUNDARY and "load_state_dict" not in BOUNDARY  # state stays where the agent lives
    model, tok = tiny_qwen
    agent = _agents("ttrl", model, tok, _config("ttrl", tmp_path))[0]
    assert isinstance(agent, AgentHandle) and isinstance(PicklingProxy(agent), AgentHandle)
    for call in BOUNDARY:  # same parameters (names, kinds, defaults) as the protocol declares
        want = list(inspect.signature(getattr(AgentHandle, call)).parameters.values())
        got = list(inspect.signature(getattr(Agent, call)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in want], call
        assert getattr(AgentHandle, call).__doc__, f"AgentHandle.{call} is undocumented"
    assert all(callable(getattr(AgentGroup, call)) for call in BOUNDARY)  # the group makes every call


def test_the_ray_handle_and_the_actor_take_the_protocol_s_calls():
    from corl_bench.train import actors

    assert actors.BOUNDARY is BOUNDARY
    handle = actors.RayAgent(handle=None, spec=AgentSpec(name="a0", family="qwen2-bpe"), tokenizer=None)
    assert isinstance(handle, AgentHandle)
    for call in ("state_dict", "load_state_dict", "model"):
        with pytest.raises(AttributeError, match="not part of the agent boundary|" + call):
            getattr(handle, call)
        with pytest.raises(AttributeError, match="not part of the agent boundary"):
            handle.submit(call)
    host = actors.AgentHost.__new__(actors.AgentHost)  # no model: the refusal comes first
    with pytest.raises(AttributeError, match="not part of the agent boundary"):
        host.call("state_dict", (), {})


def test_a_checkpoint_is_written_by_the_agent_in_the_file_the_run_layout_names(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    cfg = _config("co-rewarding-ii", tmp_path)
    agent = _agents("co-rewarding-ii", model, tok, cfg)[0]
    proxy = PicklingProxy(agent)
    proxy.checkpoint(tmp_path)
    assert proxy.calls == ["checkpoint"]
    saved = torch.load(tmp_path / "agent-a0.pt", weights_only=False)  # what Agent.state_dict() was saved as
    assert saved.keys() == agent.state_dict().keys()
    assert all(torch.equal(saved["model"][k], v) for k, v in agent.state_dict()["model"].items())
    other = _agents("co-rewarding-ii", model, tok, cfg)[0]
    with torch.no_grad():
        next(other.model.parameters()).add_(1.0)
    PicklingProxy(other).restore(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(agent.model.parameters(), other.model.parameters()))


def test_a_numerical_error_crosses_the_boundary_with_its_fields():
    err = pickle.loads(pickle.dumps(NumericalError("loss", "a0", 3, "2 of 8 values")))
    assert (err.quantity, err.agent, err.step, err.detail) == ("loss", "a0", 3, "2 of 8 values")
    assert "non-finite loss (agent a0, step 3)" in str(err)


def test_the_proxy_refuses_what_is_not_part_of_the_boundary(tiny_qwen, tmp_path):
    model, tok = tiny_qwen
    proxy = PicklingProxy(_agents("ttrl", model, tok, _config("ttrl", tmp_path))[0])
    with pytest.raises(AttributeError, match="not part of the agent boundary"):
        proxy.model  # noqa: B018
