"""BlockAdamW: torch.optim.AdamW's CPU step, block by block, bit for bit (corl_bench.train.optim)."""

from __future__ import annotations

import pytest
import torch

from corl_bench.train.optim import ALIGN, GRAIN, BlockAdamW, blocks, torch_split

# sizes around every boundary the blocking reasons about: below and above one thread's grain, two grains, thread
# ranges that are and are not multiples of ALIGN, a remainder block that torch splits again, several full blocks
SIZES = [1, 7, 63, 64, 65, GRAIN - 1, GRAIN, GRAIN + 1, 2 * GRAIN + 17, 100_003, 262_144 + 129, 600_001, 1_048_583]


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", SIZES)
def test_blocks_tile_and_keep_torchs_remainders_on_cpu(n: int, threads: int) -> None:
    got = list(blocks(n, threads))
    assert got[0][0] == 0 and got[-1][1] == n
    assert all(a < b for a, b in got) and all(got[i][1] == got[i + 1][0] for i in range(len(got) - 1))
    ends = {hi for _, hi in torch_split(n, threads)}
    for lo, hi in torch_split(n, threads):  # inside each of torch's thread ranges, blocks start on ALIGN
        inside = [(a, b) for a, b in got if lo <= a < hi]
        assert inside and inside[-1][1] == hi and all((a - lo) % ALIGN == 0 for a, _ in inside)
        for a, b in inside:  # and torch's split of a block puts its remainders only at the range's end
            for x, y in torch_split(b - a, threads):
                assert (y - x) % ALIGN == 0 or a + y in ends


def _run(cls: type, threads: int, steps: int, **kw: object) -> list[torch.Tensor]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n) * 0.1) for n in SIZES] + \
            [torch.nn.Parameter(torch.randn(3, 5, 7)), torch.nn.Parameter(torch.randn(513, 1031))]
        groups = [{"params": params[:6]}, {"params": params[6:], "lr": 3e-3}]
        opt = cls(groups, lr=1e-3, betas=(0.9, 0.99), **kw)
        gen = torch.Generator().manual_seed(1)
        for step in range(steps):
            for i, p in enumerate(params):  # a parameter without a gradient on some steps is skipped, as torch does
                p.grad = None if (i + step) % 5 == 0 else torch.randn(p.shape, generator=gen) * 1e-2
            opt.step()
        return [t for p in params for t in (p.detach(), *(opt.state[p][k] for k in ("exp_avg", "exp_avg_sq")
                                                            if k in opt.state[p]))]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_block_adamw_is_bit_identical_to_torch_on_cpu(threads: int, weight_decay: float) -> None:
    ref = _run(torch.optim.AdamW, threads, 4, weight_decay=weight_decay, foreach=False)
    got = _run(BlockAdamW, threads, 4, weight_decay=weight_decay)
    assert len(ref) == len(got)
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    near = _run(torch.optim.AdamW, threads, 4, weight_decay=weight_decay, fused=True)  # the test can fail:
    assert not all(torch.equal(a, b) for a, b in zip(ref, near))  # torch's fused kernel differs in the last bits


def test_block_adamw_state_dict_is_torchs_on_cpu() -> None:
    """A checkpoint written under one optimizer resumes bit-identically under the other."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(300, 400), torch.nn.Linear(400, 7))
    twin = torch.nn.Sequential(torch.nn.Linear(300, 400), torch.nn.Linear(400, 7))
    twin.load_state_dict(model.state_dict())
    a, b = BlockAdamW(model.parameters(), lr=1e-2), torch.optim.AdamW(twin.parameters(), lr=1e-2, foreach=False)
    x = torch.randn(16, 300)
    for step in range(4):
        if step == 2:  # swap states mid-run
            sa, sb = a.state_dict(), b.state_dict()
            a.load_state_dict(sb)
            b.load_state_dict(sa)
        for m, opt in ((model, a), (twin, b)):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters()))
    assert a.state_dict()["state"][0]["step"] == torch.tensor(4.0)


def test_block_adamw_takes_torchs_step_where_blocks_do_not_apply_on_cpu() -> None:
    """AMSGrad, a non-contiguous parameter: torch's own step (still the same result as torch)."""
    for kw, make in (({"amsgrad": True}, lambda t: t), ({}, lambda t: t.t())):
        torch.manual_seed(0)
        p, q = (torch.nn.Parameter(make(torch.randn(40, 30))) for _ in range(2))
        q.data.copy_(p.data)
        a, b = BlockAdamW([p], lr=1e-2, **kw), torch.optim.AdamW([q], lr=1e-2, foreach=False, **kw)
        for _ in range(3):
            g = torch.randn(p.shape)
            p.grad, q.grad = g.clone(), g.clone()
            assert not a._eligible(a.param_groups[0])
            a.step()
            b.step()
        assert torch.equal(p, q)
