"""The memory options of the training step (issue 14 item 4): micro-batches with gradient accumulation, chunked
log-probs / entropy / self-certainty, gradient checkpointing, LoRA, and rollout log-probs without a (B, T, V) stack.

Every option must give the default step's result within float tolerance, and the default must stay what it was.
"""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch

from corl_bench.config import AgentSpec, ConfigError, load_config
from corl_bench.rollout import Completion, SamplingParams
from corl_bench.train import grpo
from corl_bench.train.agent import Agent
from corl_bench.train.boundary import TrainSample
from tests.conftest import build_tiny

FAMILIES = ("qwen2-bpe", "llama-bpe", "neox-bpe")
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


# ------------------------------------------------------------------------------------------- pure functions
VALUES = torch.tensor([[1.0, 2.0, 9.0, 9.0], [3.0, 9.0, 9.0, 9.0], [4.0, 5.0, 6.0, float("nan")]])
MASK = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])


@pytest.mark.parametrize("mode,denominator,full", [
    ("token-mean", 5.0, 18.0 / 5.0),                        # (1+2+4+5+6) / 5 tokens
    ("seq-mean-token-mean", 2.0, (1.5 + 5.0) / 2.0),        # two sequences with tokens, means 1.5 and 5
    ("seq-mean-token-sum-norm", 15.0, 18.0 / 15.0),         # N * max_len = 3 * 5
])
def test_partial_aggregates_sum_to_the_whole_batch(mode, denominator, full):
    counts = MASK.sum(-1)
    assert grpo.aggregate_denominator(counts, mode, width=4, max_len=5) == denominator
    assert float(grpo.aggregate(VALUES, MASK, mode, max_len=5)) == pytest.approx(full)
    for cuts in ([1], [2], [1, 2], []):
        bounds = [0, *cuts, 3]
        parts = [grpo.aggregate_partial(VALUES[a:b], MASK[a:b], mode, denominator) for a, b in zip(bounds, bounds[1:])]
        assert float(sum(parts)) == pytest.approx(full)


def test_denominators_of_degenerate_batches():
    empty = torch.zeros(3)
    assert grpo.aggregate_denominator(empty, "token-mean", 4) == 1.0
    assert grpo.aggregate_denominator(empty, "seq-mean-token-mean", 4) == 1.0
    assert grpo.aggregate_denominator(empty, "dr_grpo", 4) == 12.0  # alias; width when no max_len
    with pytest.raises(ValueError, match="max_len"):
        grpo.aggregate_denominator(empty, "dr_grpo", 4, max_len=0)
    with pytest.raises(ValueError, match="denominator"):
        grpo.aggregate_partial(VALUES, MASK, "token-mean", 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_partial_grpo_losses_sum_to_the_full_loss_and_gradient(mode):
    g = torch.Generator().manual_seed(0)
    N, T = 5, 7
    logp = (-torch.rand(N, T, generator=g) * 3).requires_grad_()
    ref = -torch.rand(N, T, generator=g) * 3
    mask = (torch.rand(N, T, generator=g) > 0.3).float()
    mask[2] = 0.0
    adv = torch.randn(N, generator=g)
    kw = dict(loss_agg=mode, kl_coef=0.1, ref_logp=ref)
    full = grpo.grpo_loss(logp, logp.detach(), adv, mask, max_len=9, **kw)
    full.loss.backward()
    want = logp.grad.clone()
    logp.grad = None
    counts = mask.sum(-1)
    denom, tok = grpo.aggregate_denominator(counts, mode, T, 9), grpo.aggregate_denominator(counts, "token-mean", T)
    sums = torch.zeros(4)
    for a, b in ((0, 2), (2, 3), (3, 5)):
        out = grpo.grpo_loss_partial(logp[a:b], logp[a:b].detach(), adv[a:b], mask[a:b], denominator=denom,
                                     token_denominator=tok, loss_agg=mode, kl_coef=0.1, ref_logp=ref[a:b])
        out.loss.backward()
        sums += torch.stack([out.loss.detach(), out.pg_loss, out.kl, out.clip_fraction])
    expect = torch.stack([full.loss.detach(), full.pg_loss, full.kl, full.clip_fraction])
    assert torch.allclose(sums, expect, atol=1e-6)
    assert torch.allclose(logp.grad, want, atol=1e-7)


@pytest.mark.parametrize("chunk", [1, 3, 10, 64])
def test_chunked_token_stats_equal_the_full_logits_path_with_gradients(chunk):
    g = torch.Generator().manual_seed(1)
    M, H, V = 10, 6, 17
    head = torch.nn.Linear(H, V, bias=False)
    hidden = torch.randn(M, H, generator=g, requires_grad=True)
    tokens = torch.randint(0, V, (M,), generator=g)

    def capped(h):  # soft-capped head, as Gemma's
        return torch.tanh(head(h) / 3.0) * 3.0

    logits = capped(hidden)
    lp_full = grpo.logprobs_from_logits(logits, tokens, 0.7)
    lp_full.sum().backward()
    gh, gw = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    lp, ent, sc = grpo.chunked_token_stats(hidden, capped, tokens, 0.7, chunk)
    lp.sum().backward()
    assert torch.allclose(lp, lp_full, atol=1e-6)
    assert torch.allclose(ent, grpo.entropy_from_logits(logits.detach(), 0.7), atol=1e-6)
    assert torch.allclose(sc, grpo.self_certainty_from_logits(logits.detach(), 0.7), atol=1e-6)
    assert not ent.requires_grad and not sc.requires_grad
    assert torch.allclose(hidden.grad, gh, atol=1e-6) and torch.allclose(head.weight.grad, gw, atol=1e-6)
    with torch.no_grad():
        lp2, none1, none2 = grpo.chunked_token_stats(hidden, capped, tokens, 0.7, chunk, stats=False)
    assert torch.allclose(lp2, lp_full, atol=1e-6) and none1 is None and none2 is None
    empty = grpo.chunked_token_stats(hidden[:0], capped, tokens[:0], 0.7, chunk)
    assert all(t.shape == (0,) for t in empty)


# ------------------------------------------------------------------------------------------- the LM head split
def _tiny_gemma3(softcap):
    import transformers

    cfg = transformers.Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                        final_logit_softcapping=softcap, sliding_window=8, pad_token_id=0)
    torch.manual_seed(0)
    return transformers.Gemma3ForCausalLM(cfg).eval()


@pytest.mark.parametrize("name", [*FAMILIES, "gemma3-softcap", "gemma3"])
def test_split_lm_reproduces_the_models_logits(name):
    from corl_bench.train.memory import SplitLM

    model = _tiny_gemma3(0.5 if name == "gemma3-softcap" else None) if name.startswith("gemma3") else \
        build_tiny(name)[0]
    ids = torch.randint(3, 90, (2, 11))
    att = torch.ones_like(ids)
    att[1, 8:] = 0
    split = SplitLM(model)
    split.check(ids, att)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=att).logits
        got = split.head(split.hidden(ids, att))
    assert torch.allclose(ref, got, atol=1e-5)
    if name == "gemma3-softcap":
        assert float(ref.abs().max()) <= 0.5
        wrong = SplitLM(model)
        wrong.softcap = None  # an architecture whose post-processing the split does not know
        with pytest.raises(RuntimeError, match="memory.logit_chunk=0"):
            wrong.check(ids, att)


# ------------------------------------------------------------------------------------------- agents
def _samples(tok, n: int, seed: int = 0) -> list[TrainSample]:
    """n (prompt, completion) samples of varied prompt and completion lengths (one empty completion)."""
    g = torch.Generator().manual_seed(seed)
    prompts = ["12+7=", "what is 3*4? think", "5-1", "compute 9*9 then add 2 to it ="]
    out = []
    for i in range(n):
        length = 0 if i == 3 else int(torch.randint(1, 14, (1,), generator=g))
        ids = tuple(int(t) for t in torch.randint(5, len(tok) - 1, (length,), generator=g))
        out.append(TrainSample(prompts[i % len(prompts)], Completion(ids, (), "", True)))
    return out


def _agent(model, tok, *sets, spec=None, aux=()):
    cfg = load_config(None, ["grpo.lr=1e-2", "grpo.max_grad_norm=100", *sets])
    return Agent(spec or AgentSpec(name="a0", family="qwen2-bpe"), copy.deepcopy(model), tok, cfg.grpo,
                 temperature=0.8, auxiliary=aux, memory=cfg.memory)


def _one_update(agent, samples, adv, split=None):
    split = split or [len(samples)]
    stats, at = [], 0
    for n in split:  # a second score() before update(): a method's extra samples join the same update
        s = agent.score(samples[at: at + n])
        stats += list(zip(s.entropy, s.self_certainty))
        at += n
    upd = agent.update(adv, max_len=16)
    return torch.tensor(stats), upd, [p.detach().clone() for p in agent.model.parameters()]


def _close(a, b, atol=2e-5):
    return all(torch.allclose(x, y, atol=atol, rtol=1e-4) for x, y in zip(a, b))


@pytest.mark.parametrize("mode", MODES)
def test_micro_batched_update_equals_the_full_batch_update(mode):
    model, tok = build_tiny("qwen2-bpe")
    samples = _samples(tok, 7)
    adv = torch.randn(7, generator=torch.Generator().manual_seed(2)).tolist()
    base = [f"grpo.loss_agg={mode}", "grpo.kl_coef=0.05"]
    stats0, upd0, params0 = _one_update(_agent(model, tok, *base), samples, adv, split=[5, 2])
    for extra in (["memory.micro_batch=1"], ["memory.micro_batch=3"], ["memory.micro_batch=7"],
                  ["memory.micro_batch=3", "memory.logit_chunk=4"], ["memory.logit_chunk=5"]):
        stats, upd, params = _one_update(_agent(model, tok, *base, *extra), samples, adv, split=[5, 2])
        assert torch.allclose(stats, stats0, atol=1e-5), extra
        for field in ("loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "entropy"):
            assert getattr(upd, field) == pytest.approx(getattr(upd0, field), rel=1e-4, abs=1e-6), (extra, field)
        assert upd.n_tokens == upd0.n_tokens
        assert _close(params, params0), extra


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_logits_and_checkpointing_equal_the_default_on_three_families(family):
    model, tok = build_tiny(family)
    samples = _samples(tok, 6, seed=3)
    adv = [1.0, -0.5, 0.2, 0.0, -1.0, 0.3]
    stats0, upd0, params0 = _one_update(_agent(model, tok), samples, adv)
    for extra in (["memory.logit_chunk=3"], ["memory.gradient_checkpointing=true"],
                  ["memory.micro_batch=2", "memory.logit_chunk=7", "memory.gradient_checkpointing=true"]):
        stats, upd, params = _one_update(_agent(model, tok, *extra), samples, adv)
        assert torch.allclose(stats, stats0, atol=1e-5), extra
        assert upd.grad_norm == pytest.approx(upd0.grad_norm, rel=1e-4), extra
        assert _close(params, params0), extra


def test_micro_batched_score_keeps_no_graph_and_discard_drops_it():
    model, tok = build_tiny("qwen2-bpe")
    agent = _agent(model, tok, "memory.micro_batch=2")
    agent.score(_samples(tok, 5))
    assert agent._pending is None and len(agent._micro) == 3
    assert not any(b.entropy.requires_grad for b in agent._micro)
    with pytest.raises(RuntimeError, match="4 advantages for 5"):
        agent.update([0.0] * 4)
    agent.score(_samples(tok, 2))
    agent.discard()
    with pytest.raises(RuntimeError, match="without scored samples"):
        agent.update([])


def test_default_settings_take_the_unchanged_path():
    model, tok = build_tiny("qwen2-bpe")
    agent = _agent(model, tok)
    agent.score(_samples(tok, 3))
    assert agent._pending is not None and agent._pending.logp.requires_grad and not agent._micro
    assert not agent._splits and agent.lora_rank == 0


def _saved_for_backward(agent, samples, adv):
    """What the autograd graph holds during one score + update: (peak bytes of the tensors saved for backward by
    one forward pass, largest saved tensor with the vocabulary as last dim, in elements). Parameters not counted."""
    params = {p.untyped_storage().data_ptr() for p in agent.model.parameters()}
    vocab = agent.model.get_output_embeddings().weight.shape[0]
    cur, peak, vocab_numel = [0], [0], [0]
    original = agent._logp

    def logp(*a, **k):  # a micro-batch's forward pass starts a new graph
        cur[0] = 0
        return original(*a, **k)

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            cur[0] += t.numel() * t.element_size()
            peak[0] = max(peak[0], cur[0])
            if t.dim() and t.shape[-1] == vocab:
                vocab_numel[0] = max(vocab_numel[0], t.numel())
        return t

    agent._logp = logp
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        agent.score(samples)
        agent.update(adv)
    return peak[0], vocab_numel[0]


def test_the_graph_follows_the_micro_batch_and_holds_no_full_logits():
    model, tok = build_tiny("qwen2-bpe")
    samples = [TrainSample("12+7=", Completion(tuple(range(10, 22)), (), "", True))] * 6
    adv = [1.0, -1.0, 0.5, -0.5, 0.2, -0.2]
    whole, whole_v = _saved_for_backward(_agent(model, tok), samples, adv)
    assert whole_v >= 6 * 12 * len(tok) * 0.9  # today's path keeps (N, T, V) log-softmax for backward
    micro, micro_v = _saved_for_backward(_agent(model, tok, "memory.micro_batch=2"), samples, adv)
    assert micro == pytest.approx(whole / 3, rel=0.05)  # a third of the batch, a third of the graph
    chunked, chunked_v = _saved_for_backward(_agent(model, tok, "memory.micro_batch=2", "memory.logit_chunk=4"),
                                             samples, adv)
    assert chunked_v == 0  # the chunks' logits are recomputed in backward, never saved
    assert chunked < micro - 0.9 * 2 * 12 * len(tok) * 4


# ------------------------------------------------------------------------------------------- LoRA
peft = pytest.importorskip("peft")


def test_lora_trains_adapters_only_and_saves_merged_weights(tmp_path):
    import transformers

    model, tok = build_tiny("qwen2-bpe")
    agent = _agent(model, tok, "memory.lora_rank=4", "memory.logit_chunk=8")
    trainable = {id(p) for p in agent.model.parameters() if p.requires_grad}
    opt_params = [p for group in agent.optimizer.param_groups for p in group["params"]]
    assert opt_params and all(id(p) in trainable for p in opt_params)
    assert all(".lora_" in n for n, p in agent.model.named_parameters() if p.requires_grad)
    frozen = {n: p.detach().clone() for n, p in agent.model.named_parameters() if not p.requires_grad}
    samples = _samples(tok, 4)
    for _ in range(2):
        _one_update(agent, samples, [1.0, -1.0, 0.5, -0.5])
    assert all(torch.equal(p, frozen[n]) for n, p in agent.model.named_parameters() if not p.requires_grad)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = agent.model(input_ids=ids).logits
        assert not torch.allclose(want, model(input_ids=ids).logits, atol=1e-4)  # the adapters learned something
    agent.save(tmp_path / "final")
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "final").eval()
    assert not any("lora" in k for k in plain.state_dict())
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, want, atol=1e-5)


def test_lora_resume_is_bit_identical_and_an_agent_may_override_the_rank(tmp_path):
    model, tok = build_tiny("llama-bpe")
    spec = AgentSpec(name="a0", family="llama-bpe", lora_rank=2)
    samples, adv = _samples(tok, 4, seed=5), [0.5, -1.0, 1.0, -0.5]
    straight = _agent(model, tok, "memory.lora_rank=8", "memory.micro_batch=2", spec=spec)
    assert straight.lora_rank == 2
    _one_update(straight, samples, adv)
    torch.save(straight.state_dict(), tmp_path / "agent.pt")
    _, upd_a, params_a = _one_update(straight, samples, adv)
    torch.manual_seed(123)  # a different global RNG: the resumed agent's adapter init must not matter
    resumed = _agent(model, tok, "memory.lora_rank=8", "memory.micro_batch=2", spec=spec)
    resumed.load_state_dict(torch.load(tmp_path / "agent.pt", weights_only=False))
    _, upd_b, params_b = _one_update(resumed, samples, adv)
    assert upd_a == upd_b
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))


def test_an_agent_may_set_its_own_learning_rate():
    """``lr:`` on a cohort agent replaces grpo.lr for that agent only: the same update as a run whose grpo.lr is it."""
    model, tok = build_tiny("qwen2-bpe")
    samples, adv = _samples(tok, 4, seed=5), [0.5, -1.0, 1.0, -0.5]
    own = _agent(model, tok, spec=AgentSpec(name="a0", family="qwen2-bpe", lr=3e-3))
    same = _agent(model, tok, "grpo.lr=3e-3")
    default = _agent(model, tok)
    assert (own.lr, same.lr, default.lr) == (3e-3, 3e-3, 1e-2)
    params = [_one_update(a, samples, adv)[2] for a in (own, same, default)]
    assert all(torch.equal(a, b) for a, b in zip(params[0], params[1]))
    assert not all(torch.equal(a, b) for a, b in zip(params[0], params[2]))
    for bad in (0.0, -1e-5, True):
        with pytest.raises(ConfigError, match="lr must be a number > 0"):
            AgentSpec(name="x", family="qwen2-bpe", lr=bad)

def test_lora_ema_teacher_follows_the_merged_policy():
    from corl_bench.method import AuxiliaryModel
    from corl_bench.models.lora import merged_state_dict

    model, tok = build_tiny("qwen2-bpe")
    agent = _agent(model, tok, "memory.lora_rank=4", aux=(AuxiliaryModel("teacher", generates=True),))
    _one_update(agent, _samples(tok, 4), [1.0, -1.0, 0.5, -0.5])
    agent.update_auxiliary("teacher", 1.0)  # alpha 1: the teacher becomes the (merged) policy
    merged = merged_state_dict(agent.model)
    for name, t in agent.auxiliary["teacher"].named_parameters():
        assert torch.allclose(t, merged[name], atol=1e-6), name


def test_lora_without_peft_names_the_install(monkeypatch):
    model, tok = build_tiny("qwen2-bpe")
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(RuntimeError, match=r"pip install -c constraints-cpu.txt peft"):
        _agent(model, tok, "memory.lora_rank=4")


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("item,match", [
    ("memory.micro_batch=-1", "memory.micro_batch=0"), ("memory.logit_chunk=-4", "memory.logit_chunk=0"),
    ("memory.lora_dropout=1.5", "memory.lora_dropout=0"), ("memory.lora_targets=[]", "memory.lora_targets"),
])
def test_memory_options_are_validated(item, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [item])
    with pytest.raises(ConfigError, match="lora_rank"):
        AgentSpec(name="x", family="qwen2-bpe", lora_rank=-1)


# ------------------------------------------------------------------------------------------- rollout log-probs
def _stacked_logprobs(model, tok, prompts, params):
    """The former hf-engine computation: stack every step's logits (B, T, V), then log-softmax."""
    from corl_bench.rollout.hf import HFEngine

    enc = HFEngine(model, tok).encode(prompts, "cpu")
    kw = dict(max_new_tokens=params.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
              return_dict_in_generate=True, output_logits=True)
    if params.greedy:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kw.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        res = model.generate(**enc, **kw)
    gen = res.sequences[:, enc["input_ids"].shape[1]:]
    temp = 1.0 if params.greedy else params.temperature
    logits = torch.stack(res.logits, dim=1).float()
    return gen, torch.log_softmax(logits / temp, dim=-1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_engine_logprobs_are_bit_identical_without_the_stack(family):
    from corl_bench.rollout.hf import HFEngine

    model, tok = build_tiny(family)
    prompts = ["12+7=", "what is 3*4?", "5", "a longer prompt with words 9-2="]
    for params in (SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=3),
                   SamplingParams(greedy=True, max_new_tokens=12)):
        gen, lp = _stacked_logprobs(model, tok, prompts, params)
        for b, (c,) in enumerate(HFEngine(model, tok).generate(prompts, params)):
            n = len(c.token_ids)
            assert list(c.token_ids) == gen[b, :n].tolist()
            assert list(c.logprobs) == lp[b, :n].tolist()  # bit for bit
            assert all(math.isfinite(x) and x <= 0 for x in c.logprobs)
