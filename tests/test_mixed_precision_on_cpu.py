"""Mixed precision (issue 26 item 5): ``memory.autocast=bfloat16`` runs the training and scoring forward passes under
``torch.autocast`` in bf16 while the weights, their gradients and AdamW's moments stay fp32 (TRL's and verl's GPU
setting). On the CPU torch's autocast has bf16 too, so the same path is checked here on a tiny model: the matmuls
run in bf16, nothing the optimiser holds leaves fp32, and the update stays close to the fp32 one. Off (the default)
the step is the one it always was.
"""

from __future__ import annotations

import copy

import pytest
import torch

from corl_bench.config import AgentSpec, ConfigError, load_config
from corl_bench.rollout import Completion
from corl_bench.train.agent import Agent
from corl_bench.train.boundary import TrainSample
from tests.conftest import build_tiny


@pytest.fixture(scope="module")
def tiny():
    return build_tiny("qwen2-bpe")


def _samples(tok, n: int = 6) -> list[TrainSample]:
    g = torch.Generator().manual_seed(0)
    prompts = ["12+7=", "what is 3*4? think", "5-1"]
    return [TrainSample(prompts[i % 3], Completion(tuple(int(t) for t in torch.randint(
        5, len(tok) - 1, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g)), (), "", True))
        for i in range(n)]


def _update(model, tok, *sets: str, hook_dtypes: list | None = None):
    """One score() + update() of a fresh agent on a copy of ``model``: (stats, update, parameters, agent)."""
    cfg = load_config(None, ["grpo.lr=1e-3", "grpo.max_grad_norm=100", "grpo.kl_coef=0.05", *sets])
    agent = Agent(AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo, temperature=0.8,
                  memory=cfg.memory)
    if hook_dtypes is not None:  # what the first decoder layer's MLP projection outputs (a matmul)
        linear = next(m for n, m in agent.model.named_modules() if n.endswith("mlp.up_proj"))
        linear.register_forward_hook(lambda mod, inp, out: hook_dtypes.append(out.dtype))
    samples = _samples(tok)
    s = agent.score(samples)
    upd = agent.update(torch.linspace(-1.0, 1.0, len(samples)).tolist(), max_len=16)
    stats = torch.tensor([s.entropy, s.self_certainty])
    return stats, upd, [p.detach().clone() for p in agent.model.parameters()], agent


def test_autocast_is_off_by_default_and_validated_in_one_line() -> None:
    assert load_config(None).memory.autocast == "off"
    assert load_config(None, ["memory.autocast=bfloat16"]).memory.autocast == "bfloat16"
    with pytest.raises(ConfigError) as e:
        load_config(None, ["memory.autocast=fp16"])
    assert "\n" not in str(e.value) and "set memory.autocast=off" in str(e.value)
    for dtype in ("bfloat16", "auto"):  # auto is bf16 on CUDA: no fp32 master weights there
        with pytest.raises(ConfigError) as e:
            load_config(None, ["memory.autocast=bfloat16", f"model.dtype={dtype}"])
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("memory.autocast=bfloat16 keeps fp32 master weights; set "
                                                  "model.dtype=float32"), msg


def test_off_is_the_step_it_always_was(tiny) -> None:
    model, tok = tiny
    stats0, upd0, params0, _ = _update(model, tok)
    stats1, upd1, params1, _ = _update(model, tok, "memory.autocast=off")
    assert torch.equal(stats0, stats1) and upd0 == upd1
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))


def test_the_autocast_step_runs_bf16_matmuls_over_fp32_weights_gradients_and_adamw(tiny) -> None:
    model, tok = tiny
    seen: list = []
    _, _, _, fp32_agent = _update(model, tok, hook_dtypes=seen)
    assert set(seen) == {torch.float32}  # off: every matmul in the weights' dtype
    seen.clear()
    _, _, params, agent = _update(model, tok, "memory.autocast=bfloat16", hook_dtypes=seen)
    assert seen and set(seen) == {torch.bfloat16}  # the scoring and training forward passes ran in bf16
    assert all(p.dtype == torch.float32 for p in params)
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in agent.model.parameters())
    moments = [t for st in agent.optimizer.state.values() for k, t in st.items() if k in ("exp_avg", "exp_avg_sq")]
    assert moments and all(t.dtype == torch.float32 for t in moments)
    assert agent.reference is not None and all(p.dtype == torch.float32 for p in agent.reference.parameters())


def test_the_shared_prefix_check_compares_fp32_weights_in_fp32_under_autocast(tiny, monkeypatch) -> None:
    """memory.shared_prefix checks its cached layout against the plain forward once; under memory.autocast that
    check runs in fp32 (bf16 rounding alone put SmolLM2-135M's gap at 0.22 nats, over the 0.05 bf16 tolerance, and
    refused the option), while the training passes stay bf16."""
    from corl_bench.train import agent as agent_mod

    model, tok = tiny
    modes: list[tuple[str, bool]] = []
    check, logits = agent_mod.Agent._check_shared, agent_mod.prefix.logits

    def spy_check(self, *a, **k):
        modes.append(("check", torch.is_autocast_enabled("cpu")))
        return check(self, *a, **k)

    def spy_logits(model, b):
        modes.append(("logits", torch.is_autocast_enabled("cpu")))
        return logits(model, b)

    monkeypatch.setattr(agent_mod.Agent, "_check_shared", spy_check)
    monkeypatch.setattr(agent_mod.prefix, "logits", spy_logits)
    _update(model, tok, "memory.autocast=bfloat16", "memory.shared_prefix=true")
    assert modes[0] == ("check", True)  # called inside the scoring pass's autocast ...
    assert modes[1] == ("logits", False)  # ... computes its cached pass in fp32
    assert modes[2:] and all(on for kind, on in modes[2:])  # the training passes: bf16


@pytest.mark.parametrize("extra", [(), ("memory.micro_batch=2", "memory.logit_chunk=4",
                                        "memory.gradient_checkpointing=true"), ("memory.shared_prefix=true",)],
                         ids=["whole-batch", "micro-chunk-ckpt", "shared-prefix"])
def test_the_autocast_update_is_close_to_the_fp32_update(tiny, extra) -> None:
    """bf16 matmuls change the numbers a little (not bit-identical: the option does something) and the update
    only a little: statistics and loss within bf16 rounding, and the parameter change within 10 % of its size."""
    model, tok = tiny
    before = [p.detach().clone() for p in model.parameters()]
    stats0, upd0, params0, _ = _update(model, tok, *extra)
    stats1, upd1, params1, _ = _update(model, tok, "memory.autocast=bfloat16", *extra)
    assert not torch.equal(stats0, stats1)
    assert torch.allclose(stats1, stats0, rtol=2e-2, atol=2e-2)
    assert upd1.loss == pytest.approx(upd0.loss, rel=5e-2, abs=5e-3)
    assert upd1.grad_norm == pytest.approx(upd0.grad_norm, rel=5e-2)
    assert upd1.n_tokens == upd0.n_tokens
    step0 = torch.cat([(a - b).flatten() for a, b in zip(params0, before)])
    step1 = torch.cat([(a - b).flatten() for a, b in zip(params1, before)])
    assert float(step0.abs().max()) > 1e-4  # the update moved the weights
    assert float((step1 - step0).norm() / step0.norm()) < 0.1


def test_a_sharded_agent_under_autocast_updates_like_one_rank_under_autocast(tmp_path) -> None:
    """Two FSDP2 ranks (gloo) with ``memory.autocast=bfloat16``: the same step as one process in mixed precision, within
    bf16 rounding (here the ranks' micro-batches are the one process's, so equal up to FSDP2's summed gradients),
    and nearer to it than to the fp32 step: the ranks' forward passes ran in bf16."""
    from corl_bench.config import MemoryConfig
    from corl_bench.train.ranks import ProcessRanks, ShardedAgentHandle
    from corl_bench.train.sharded import Recipe
    from tests.test_sharded_agent_on_cpu import GRPO, SPEC, _advantages, _max_diff, _samples, _weights, tiny_qwen

    mem = MemoryConfig(micro_batch=3, autocast="bfloat16")
    model, tok = tiny_qwen("cpu")
    plain = Agent(SPEC, copy.deepcopy(model), tok, GRPO, memory=mem)
    samples = _samples(plain, 1)
    adv = _advantages(len(samples), 1)
    sharded = ShardedAgentHandle(SPEC, ProcessRanks(Recipe(spec=SPEC, load=tiny_qwen, grpo=GRPO,
                                                           agent_kwargs={"memory": mem}), 2), micro_batch=3)
    try:
        stats = sharded.score(samples)
        up = sharded.update(adv)
        sharded.save(tmp_path / "two")
    finally:
        sharded.close()
    plain_stats = plain.score(samples)
    plain_up = plain.update(adv)
    plain.save(tmp_path / "one")
    before = {k: v.detach() for k, v in model.state_dict().items()}
    step = _max_diff(_weights(tmp_path / "one"), {k: before[k] for k in _weights(tmp_path / "one")})
    gap = _max_diff(_weights(tmp_path / "two"), _weights(tmp_path / "one"))
    assert step > 0 and gap < 0.1 * step
    fp32 = Agent(SPEC, copy.deepcopy(model), tok, GRPO, memory=MemoryConfig(micro_batch=3)).score(samples).entropy
    off = lambda a, b: max(abs(x - y) for x, y in zip(a, b))  # noqa: E731
    assert off(stats.entropy, plain_stats.entropy) < off(stats.entropy, fp32)  # the ranks ran in bf16 too
    assert (up.loss, up.grad_norm) == pytest.approx((plain_up.loss, plain_up.grad_norm), rel=2e-2)
    assert up.n_tokens == plain_up.n_tokens
