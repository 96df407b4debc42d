"""CPU tests for corl_bench.train.grpo against hand-computed tensors (tolerance 1e-4)."""

from __future__ import annotations

import math

import pytest
import torch

from corl_bench.train import grpo
from corl_bench.train.grpo import (aggregate, entropy_from_logits, grpo_loss, kl_k3, logprobs_from_logits, policy_loss,
                                   token_advantages, zero_std_fraction)
from corl_bench.config import LOSS_AGG_ALIASES, LOSS_AGG_MODES, resolve_loss_agg
from corl_bench.advantages import group_advantages

TOL = 1e-4
LN15 = 0.4054651081  # ln 1.5
LN05 = -0.6931471806  # ln 0.5


def close(actual: torch.Tensor, expected, tol: float = TOL) -> None:
    exp = torch.as_tensor(expected, dtype=actual.dtype)
    assert actual.shape == exp.shape, (actual.shape, exp.shape)
    torch.testing.assert_close(actual, exp, atol=tol, rtol=0.0)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


# ---------------------------------------------------------------- advantages


def test_group_advantages_unbiased_std():
    # group 0: mean .5, Bessel std sqrt(1/3)=0.57735 -> .5/.57735 = 0.8660; group 1 constant -> 0
    adv = group_advantages(t([[1, 0, 0, 1], [1, 1, 1, 1]]))
    close(adv, [[0.8660, -0.8660, -0.8660, 0.8660], [0.0, 0.0, 0.0, 0.0]])


def test_group_advantages_unbiased_std_uneven():
    # [1,0,0]: mean 1/3, std sqrt(((2/3)^2 + 2(1/3)^2)/2) = 0.57735 -> [1.1547, -0.57735, -0.57735]
    close(group_advantages(t([[1, 0, 0]])), [[1.1547, -0.5774, -0.5774]])


def test_group_advantages_no_std_scaling():
    adv = group_advantages(t([[1, 0, 0, 1], [1, 1, 1, 1], [3, 1, 2, 2]]), scale_std=False)
    close(adv, [[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [1, -1, 0, 0]])


def test_group_advantages_population_std():
    # population std of [1,0,0,1] is 0.5 -> advantages +-1
    adv = group_advantages(t([[1, 0, 0, 1]]), unbiased=False)
    close(adv, [[1.0, -1.0, -1.0, 1.0]])


def test_group_advantages_single_sample_groups():
    # verl: size-1 groups get mean 0, std 1 -> r / (1 + eps), and exactly r without scaling
    close(group_advantages(t([[2.0], [-1.0]])), [[2.0], [-1.0]])
    assert torch.equal(group_advantages(t([[2.0], [-1.0]]), scale_std=False), t([[2.0], [-1.0]]))


def test_group_advantages_zero_variance_exact_zero():
    adv = group_advantages(t([[0.1, 0.1, 0.1], [0.7, 0.7, 0.7]]))
    assert torch.equal(adv, torch.zeros(2, 3))
    adv = group_advantages(t([[0.1, 0.1, 0.1]]), scale_std=False)
    assert torch.equal(adv, torch.zeros(1, 3))


def test_group_advantages_rejects_1d():
    with pytest.raises(ValueError):
        group_advantages(t([1, 0]))


def test_zero_std_fraction():
    r = t([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0.5, 0.5, 0.50001, 0.5]])
    assert zero_std_fraction(r) == pytest.approx(0.5)
    assert zero_std_fraction(r, tol=1e-3) == pytest.approx(0.75)
    assert zero_std_fraction(torch.zeros(0, 4)) == 0.0
    assert isinstance(zero_std_fraction(r), float)


def test_token_advantages():
    out = token_advantages(t([2.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    close(out, [[2, 2, 0], [-1, 0, 0]])


# ---------------------------------------------------------------- policy loss


def test_policy_loss_ratio_above_upper_clip():
    # ratio 1.5: A=+1 -> max(-1.5, -1.2) = -1.2 (clipped); A=-1 -> max(1.5, 1.2) = 1.5 (not clipped)
    logp = t([[LN15], [LN15]]).requires_grad_()
    loss, clipped = policy_loss(logp, t([[0.0], [0.0]]), t([1.0, -1.0]), torch.ones(2, 1))
    close(loss, [[-1.2], [1.5]])
    assert clipped.tolist() == [[True], [False]]
    loss.sum().backward()
    close(logp.grad, [[0.0], [1.5]])  # clipped branch has no grad; else -A * ratio


def test_policy_loss_ratio_below_lower_clip():
    # ratio 0.5: A=+1 -> max(-0.5, -0.8) = -0.5 (not clipped); A=-1 -> max(0.5, 0.8) = 0.8 (clipped)
    logp = t([[LN05], [LN05]]).requires_grad_()
    loss, clipped = policy_loss(logp, t([[0.0], [0.0]]), t([1.0, -1.0]), torch.ones(2, 1))
    close(loss, [[-0.5], [0.8]])
    assert clipped.tolist() == [[False], [True]]
    loss.sum().backward()
    close(logp.grad, [[-0.5], [0.0]])


def test_policy_loss_asymmetric_clip():
    # clip_low .2, clip_high .28 (DAPO): ratio 1.5/A=1 -> -1.28; ratio .5/A=-1 -> .8; ratio 1.25/A=1 -> -1.25
    ln125 = 0.2231435513
    logp = t([[LN15, LN05, ln125]])
    adv = t([[1.0, -1.0, 1.0]])
    loss, clipped = policy_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), clip_low=0.2, clip_high=0.28)
    close(loss, [[-1.28, 0.8, -1.25]])
    assert clipped.tolist() == [[True, True, False]]
    # symmetric 0.2 clips the 1.25 ratio at 1.2
    loss, clipped = policy_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3))
    close(loss, [[-1.2, 0.8, -1.2]])
    assert clipped.tolist() == [[True, True, True]]


def test_policy_loss_dual_clip():
    ln5, ln2 = 1.6094379124, 0.6931471806
    # ratio 5, A=-1: max(5, 1.2)=5 -> min(5, 3)=3 (dual clipped)
    # ratio 2, A=-2: max(4, 2.4)=4 -> min(4, 6)=4 (not clipped)
    # ratio 5, A=+1: max(-5, -1.2) = -1.2 (ordinary clip, dual clip only for A<0)
    logp = t([[ln5, ln2, ln5]]).requires_grad_()
    adv = t([[-1.0, -2.0, 1.0]])
    loss, clipped = policy_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), dual_clip=3.0)
    close(loss, [[3.0, 4.0, -1.2]])
    assert clipped.tolist() == [[True, False, True]]
    loss.sum().backward()
    close(logp.grad, [[0.0, 4.0, 0.0]])
    # without dual clip the first token is 5
    loss, _ = policy_loss(logp.detach(), torch.zeros(1, 3), adv, torch.ones(1, 3))
    close(loss, [[5.0, 4.0, -1.2]])
    with pytest.raises(ValueError):
        policy_loss(logp.detach(), torch.zeros(1, 3), adv, torch.ones(1, 3), dual_clip=0.5)


def test_policy_loss_masking_and_padding_inf():
    # padding positions hold -inf log-probs: loss and grad there must be exactly 0, no NaN
    logp = t([[LN15, float("-inf")]]).requires_grad_()
    old = t([[0.0, float("-inf")]])
    loss, clipped = policy_loss(logp, old, t([1.0]), torch.tensor([[1, 0]]))
    close(loss, [[-1.2, 0.0]])
    assert clipped.tolist() == [[True, False]]
    loss.sum().backward()
    assert torch.isfinite(logp.grad).all()
    close(logp.grad, [[0.0, 0.0]])


def test_policy_loss_per_token_advantages():
    loss, _ = policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), t([[2.0, -3.0]]), torch.ones(1, 2))
    close(loss, [[-2.0, 3.0]])


# ---------------------------------------------------------------- KL


def test_kl_k3_values():
    logp = t([[0.0, 0.0, 0.0, 0.0, 0.0]])
    ref = t([[0.0, 1.0, -1.0, 15.0, -30.0]])
    # d=0 -> 0; d=1 -> e-2; d=-1 -> e^-1; d=15 -> huge, clamp 10; d=-30 -> clamp d to -20 -> 19 -> clamp 10
    close(kl_k3(logp, ref), [[0.0, 0.7182818, 0.3678794, 10.0, 10.0]])


def test_kl_k3_grad():
    logp = t([[0.0]]).requires_grad_()
    kl_k3(logp, t([[-1.0]])).sum().backward()
    close(logp.grad, [[1 - 0.3678794]])  # d/dlogp (e^d - d - 1) = 1 - e^d, d = ref - logp


# ---------------------------------------------------------------- aggregation

V = [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]
M = [[1, 1, 1], [1, 0, 0]]


def test_aggregate_token_mean():
    close(aggregate(t(V), torch.tensor(M), "token-mean"), 2.5)  # 10/4
    close(aggregate(t(V), torch.tensor(M), "bnpo"), 2.5)


def test_aggregate_seq_mean_token_mean():
    close(aggregate(t(V), torch.tensor(M), "seq-mean-token-mean"), 3.0)  # (2 + 4)/2
    close(aggregate(t(V), torch.tensor(M), "grpo"), 3.0)


def test_aggregate_dr_grpo():
    close(aggregate(t(V), torch.tensor(M), "seq-mean-token-sum-norm", max_len=4), 1.25)  # 10/(2*4)
    close(aggregate(t(V), torch.tensor(M), "dr_grpo"), 1.6667)  # 10/(2*3), L = T
    close(aggregate(t(V), torch.tensor(M), "dr-grpo", max_len=4), 1.25)


def test_aggregate_with_empty_sequence_and_nan_padding():
    v = t([[1.0, 2.0, 3.0], [4.0, float("nan"), 9.0], [7.0, 7.0, 7.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    close(aggregate(v, m, "token-mean"), 2.5)  # 10/4
    close(aggregate(v, m, "seq-mean-token-mean"), 3.0)  # empty row is skipped: (2+4)/2
    close(aggregate(v, m, "seq-mean-token-sum-norm"), 1.1111)  # 10/(3*3)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregate_empty_mask_is_differentiable_zero(mode):
    v = t([[1.0, 2.0]]).requires_grad_()
    out = aggregate(v, torch.zeros(1, 2), mode)
    assert out.item() == 0.0
    assert out.grad_fn is not None
    out.backward()
    close(v.grad, [[0.0, 0.0]])


# ---------------------------------------------------------------- logits


def test_entropy_two_tokens():
    # logits [0, ln 3] -> p = [.25, .75], H = -(.25 ln .25 + .75 ln .75) = 0.5623
    logits = t([[[0.0, math.log(3.0)], [5.0, 5.0]]])
    close(entropy_from_logits(logits), [[0.5623351, 0.6931472]])


def test_entropy_temperature_and_shift_invariance():
    # T=2: z = [0, ln3/2] -> p = [1/(1+sqrt3), sqrt3/(1+sqrt3)] = [.36603, .63397], H = 0.65681
    logits = t([[[0.0, math.log(3.0)]]])
    close(entropy_from_logits(logits, temperature=2.0), [[0.6568064]])
    close(entropy_from_logits(logits + 1000.0), [[0.5623351]])  # stable for large logits
    close(entropy_from_logits(t([[[1.0, 1.0, 1.0, 1.0]]])), [[1.3862944]])  # ln 4


def test_logprobs_gather():
    logits = t([[[0.0, math.log(3.0), -1e9], [1.0, 2.0, 3.0]]])
    tokens = torch.tensor([[1, 0]])
    # ln .75 = -0.28768; logsumexp(1,2,3) = 3.40761 -> 1 - 3.40761 = -2.40761
    close(logprobs_from_logits(logits, tokens), [[-0.2876821, -2.4076060]])
    close(logprobs_from_logits(logits, torch.tensor([[0, 2]])), [[-1.3862944, -0.4076060]])


def test_logprobs_temperature():
    # T=2 on [0, ln3]: p0 = 1/(1+sqrt3) -> ln = -1.00505; p1 -> -0.45575
    logits = t([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    close(logprobs_from_logits(logits, torch.tensor([[0, 1]]), temperature=2.0), [[-1.0050525, -0.4557464]])


def test_logprobs_bfloat16_upcast():
    logits = t([[[0.0, math.log(3.0)]]]).to(torch.bfloat16)
    out = logprobs_from_logits(logits, torch.tensor([[1]]))
    assert out.dtype == torch.float32
    close(out, [[-0.2876821]], tol=1e-2)


# ---------------------------------------------------------------- grpo_loss

ADV = [1.0, -0.5]
MASK = [[1, 1, 0], [1, 0, 0]]


def _on_policy_logp() -> torch.Tensor:
    return t([[-0.7, -1.2, -3.0], [-0.1, -2.0, -2.0]]).requires_grad_()


def test_grpo_loss_token_mean_gradient():
    logp = _on_policy_logp()
    out = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK))
    close(out.loss, -0.5)  # (-1 - 1 + 0.5)/3
    close(out.pg_loss, -0.5)
    close(out.clip_fraction, 0.0)
    close(out.kl, 0.0)
    assert not out.pg_loss.requires_grad and not out.kl.requires_grad
    out.loss.backward()
    # -A * mask / sum(mask) at ratio 1
    close(logp.grad, [[-1 / 3, -1 / 3, 0.0], [0.5 / 3, 0.0, 0.0]])


def test_grpo_loss_seq_mean_gradient():
    logp = _on_policy_logp()
    out = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), loss_agg="grpo")
    close(out.loss, -0.25)  # mean(-1, 0.5)
    out.loss.backward()
    close(logp.grad, [[-0.25, -0.25, 0.0], [0.25, 0.0, 0.0]])  # -A/(len_i * N)


def test_grpo_loss_dr_grpo_gradient():
    logp = _on_policy_logp()
    out = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), loss_agg="dr_grpo", max_len=4)
    close(out.loss, -0.1875)  # (-2 + 0.5)/(2*4)
    out.loss.backward()
    close(logp.grad, [[-0.125, -0.125, 0.0], [0.0625, 0.0, 0.0]])


def test_grpo_loss_aliases_match_canonical():
    for alias, canonical in LOSS_AGG_ALIASES.items():
        logp = _on_policy_logp()
        a = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), loss_agg=alias, max_len=4)
        b = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), loss_agg=canonical, max_len=4)
        close(a.loss.detach(), b.loss.detach().item())


def test_grpo_loss_kl_only_when_coef_positive():
    logp = _on_policy_logp()
    ref = logp.detach() - 1.0  # ref - logp = -1 -> k3 = e^-1 = 0.367879 on every token
    off = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), ref_logp=ref, kl_coef=0.0)
    close(off.loss.detach(), -0.5)
    close(off.kl, 0.3678794)  # reported as a metric even when not in the loss
    on = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), ref_logp=ref, kl_coef=0.1)
    close(on.loss.detach(), -0.4632121)  # -0.5 + 0.1 * 0.367879
    close(on.pg_loss, -0.5)
    close(on.kl, 0.3678794)
    on.loss.backward()
    # token (0,0): -1/3 + 0.1 * (1 - e^-1)/3 = -0.312263; padding stays 0
    close(logp.grad, [[-0.3122627, -0.3122627, 0.0], [0.1877373, 0.0, 0.0]])
    with pytest.raises(ValueError):
        grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), kl_coef=0.1)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_grpo_loss_is_one_micro_batch_of_the_partial_loss(mode):
    """grpo_loss is grpo_loss_partial over the whole batch as one micro-batch: equal (bitwise) to it and to a
    reference computed by hand, off-policy (ratios 1.5 and 0.5 so the clip acts), with KL in the loss."""
    logp = t([[LN15, 0.0, -1.0], [LN05, 0.0, 0.0]]).requires_grad_()  # old_logp 0: ratios 1.5, 1, e^-1 | 0.5
    old, ref, mask, adv = torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor(MASK), t(ADV)
    kw = dict(loss_agg=mode, clip_low=0.2, clip_high=0.2, kl_coef=0.1, ref_logp=ref)
    whole = grpo_loss(logp, old, adv, mask, max_len=4, **kw)
    counts = mask.sum(-1)
    part = grpo.grpo_loss_partial(logp, old, adv, mask, **kw,
                                  denominator=grpo.aggregate_denominator(counts, mode, 3, 4),
                                  token_denominator=grpo.aggregate_denominator(counts, "token-mean", 3))
    for field in ("loss", "pg_loss", "kl", "clip_fraction"):
        assert torch.equal(getattr(whole, field), getattr(part, field)), field
    # by hand. token (0,0): ratio 1.5, A=1 -> max(-1.5, -1.2) = -1.2 (clipped); (0,1): ratio 1 -> -1;
    # (1,0): ratio 0.5, A=-0.5 -> max(0.25, 0.4) = 0.4 (clipped). k3 with ref = 0: e^-logp + logp - 1.
    pg = [[-1.2, -1.0], [0.4]]
    k3 = [[1 / 1.5 + LN15 - 1, 0.0], [2.0 + LN05 - 1]]
    tok = [[p + 0.1 * k for p, k in zip(pr, kr)] for pr, kr in zip(pg, k3)]
    if mode == "token-mean":
        agg = lambda v: sum(sum(r) for r in v) / 3  # noqa: E731
    elif mode == "seq-mean-token-mean":
        agg = lambda v: sum(sum(r) / len(r) for r in v) / 2  # noqa: E731
    else:
        agg = lambda v: sum(sum(r) for r in v) / (2 * 4)  # noqa: E731
    close(whole.loss.detach(), agg(tok))
    close(whole.pg_loss, agg(pg))
    close(whole.kl, sum(sum(r) for r in k3) / 3)
    close(whole.clip_fraction, 2 / 3)


def test_grpo_loss_clip_fraction():
    # (0,0): ratio 1.5, A=1 -> clipped; (0,1): ratio 1; (1,0): ratio 1.5, A=-1 -> not clipped
    logp = t([[LN15, 0.0, 0.0], [LN15, 0.0, 0.0]])
    out = grpo_loss(logp, torch.zeros(2, 3), t([1.0, -1.0]), torch.tensor(MASK))
    close(out.clip_fraction, 0.3333)
    close(out.loss, -0.2333)  # (-1.2 - 1 + 1.5)/3


def test_grpo_loss_one_step_setting_ratio_one():
    # old_logp == logp.detach(): ratio 1, clip inactive even with tiny clip ranges
    logp = _on_policy_logp()
    out = grpo_loss(logp, logp.detach(), t(ADV), torch.tensor(MASK), clip_low=0.01, clip_high=0.01, dual_clip=3.0)
    close(out.clip_fraction, 0.0)
    out.loss.backward()
    close(logp.grad, [[-1 / 3, -1 / 3, 0.0], [0.5 / 3, 0.0, 0.0]])


# ---------------------------------------------------------------- modes


def test_resolve_loss_agg():
    for mode in LOSS_AGG_MODES:
        assert resolve_loss_agg(mode) == mode
    assert resolve_loss_agg("bnpo") == "token-mean"
    assert resolve_loss_agg("grpo") == "seq-mean-token-mean"
    assert resolve_loss_agg("dr_grpo") == "seq-mean-token-sum-norm"
    assert resolve_loss_agg("dr-grpo") == "seq-mean-token-sum-norm"


def test_invalid_mode_raises_with_valid_names():
    with pytest.raises(ValueError) as exc:
        resolve_loss_agg("sum")
    msg = str(exc.value)
    assert "\n" not in msg
    for name in (*LOSS_AGG_MODES, *LOSS_AGG_ALIASES):
        assert name in msg
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(t(V), torch.tensor(M), "mean")
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), t([1.0]), torch.ones(1, 1), loss_agg="nope")


def test_module_is_pure():
    assert LOSS_AGG_MODES == ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    r = t([[1, 0, 0, 1]])
    before = r.clone()
    group_advantages(r)
    assert torch.equal(r, before)  # inputs are not modified in place


# ----------------------------------------------------------------------------------------- self-certainty
def test_self_certainty_two_token_vocabulary_by_hand():
    # p = [0.25, 0.75]: KL(U || p) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln 2 + 0.5 ln(2/3) = 0.14384
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert grpo.self_certainty_from_logits(logits).item() == pytest.approx(0.143841, abs=1e-5)


def test_self_certainty_is_zero_for_uniform_and_grows_with_temperature_sharpening():
    uniform = torch.zeros(1, 1, 5)
    assert grpo.self_certainty_from_logits(uniform).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert grpo.self_certainty_from_logits(logits, temperature=0.5).item() > grpo.self_certainty_from_logits(
        logits).item()


def test_masked_seq_mean_ignores_padding_and_empty_rows():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert grpo.masked_seq_mean(values, mask).tolist() == [2.0, 4.0, 0.0]


def test_token_stats_equal_the_separate_functions():
    import torch

    from corl_bench.train import grpo

    torch.manual_seed(0)
    logits = torch.randn(3, 5, 50, requires_grad=True) * 4
    tokens = torch.randint(0, 50, (3, 5))
    for t in (1.0, 0.7):
        logp, ent, cert = grpo.token_stats(logits, tokens, t)
        assert torch.allclose(logp, grpo.logprobs_from_logits(logits, tokens, t), atol=1e-5)
        assert torch.allclose(ent, grpo.entropy_from_logits(logits.detach(), t), atol=1e-5)
        assert torch.allclose(cert, grpo.self_certainty_from_logits(logits.detach(), t), atol=1e-5)
        assert logp.requires_grad and not ent.requires_grad and not cert.requires_grad
