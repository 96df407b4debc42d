"""A sharded agent on CPU (gloo): 2 ranks, FSDP2 (``corl_bench.train.sharded``), against the plain 1-process agent.

The ranks are spawned local processes (``ProcessRanks``, what ``run.backend=local`` uses); the Ray test puts the same
``RankHost`` in Ray actors (what ``run.backend=ray`` uses). The unit test starts two 2-rank groups (~15 s on a quiet
2-core machine):

- rollouts from the 2-rank agent equal the 1-rank agent's (rank 0 samples from the full copy of the policy);
- one update on 2 ranks (each scoring half of the samples) gives the parameters of the 1-rank update within float
  tolerance (the difference is printed), with the same loss, KL, gradient norm and token count;
- a checkpoint written by the 2 ranks (DCP) resumes on 2 fresh ranks and their next update equals, bit for bit, the
  next update of the uninterrupted 2-rank run;
- the same checkpoint loads into a plain 1-process agent (parameters equal to the 2-rank ones bit for bit), and its
  next update (from the resharded AdamW state) matches the 2-rank one within float tolerance.

Then through the run loop: a 2-step Co-RL run with agent a0 on 2 ranks matches the 1-rank run at step 0, writes DCP
checkpoints, resumes after a crash on fresh ranks bit for bit, and gives the same results on Ray actors (slow); plus
micro-batches with gradient checkpointing, a failing rank (no hang), the handle's split, config and validate checks.
"""

from __future__ import annotations

import copy

import pytest
import torch

from corl_bench.config import AgentSpec, GRPOConfig
from corl_bench.rollout import SamplingParams
from corl_bench.train.agent import Agent
from corl_bench.train.boundary import TrainSample
from tests.conftest import build_tiny

SPEC = AgentSpec(name="a0", family="tiny-qwen2-bpe")
# a KL term (so the reference model is checkpointed too) and a lr large enough that the step moves every weight
GRPO = GRPOConfig(lr=1e-2, kl_coef=0.05)
PROMPTS = ["12+7=", "3*4=", "20-13=", "8+9="]
TOL = 1e-5


def test_ranks_resolve_from_the_agent_the_run_or_its_gpus_and_bad_values_are_refused():
    from corl_bench.config import ConfigError, RunConfig, agent_resources

    run = RunConfig()
    assert agent_resources(SPEC, run) == (1, 0.0, 1.0)  # the default: one process, as always
    assert agent_resources(AgentSpec(name="a", family="f", gpus=4), run)[0] == 4  # one rank per GPU
    assert agent_resources(AgentSpec(name="a", family="f", gpus=4, ranks=1), run)[0] == 1
    assert agent_resources(SPEC, RunConfig(ranks_per_agent=2))[0] == 2
    assert agent_resources(AgentSpec(name="a", family="f", ranks=3), RunConfig(ranks_per_agent=2))[0] == 3
    with pytest.raises(ConfigError, match="ranks must be an integer >= 1"):
        AgentSpec(name="a", family="f", ranks=0)
    with pytest.raises(ConfigError, match="run.ranks_per_agent must be an integer >= 0"):
        RunConfig(ranks_per_agent=-1)


def test_validate_refuses_what_a_sharded_agent_cannot_do_yet(tmp_path):
    from corl_bench.config import ConfigError, load_config
    from corl_bench.train.runner import _check_ranks

    def cfg(*sets):
        return load_config(None, ["cohort.agents=[{name: a0, family: qwen2-bpe}]", "run.ranks_per_agent=2", *sets])

    _check_ranks(cfg())  # the default memory settings are fine
    for sets, what in ((["memory.lora_rank=4"], "LoRA"), (["memory.logit_chunk=64"], "memory.logit_chunk"),
                       (["memory.shared_prefix=true"], "memory.shared_prefix"),
                       (["rollout.prompts_per_step=1", "rollout.samples_per_prompt=2", "run.ranks_per_agent=3"],
                        "cannot be split")):
        with pytest.raises(ConfigError, match=what):
            _check_ranks(cfg(*sets))


class _RecordingRanks:
    """A test double for the ranks: records what each rank is sent; a score returns the samples as statistics."""

    world = 2

    def __init__(self) -> None:
        self.sent: list[tuple[int, str, tuple, dict]] = []

    def start(self, rank, method, args=(), kwargs=None):
        from corl_bench.train.boundary import SampleStats

        self.sent.append((rank, method, args, kwargs))
        if method == "score":
            return SampleStats(entropy=list(args[0]), self_certainty=list(args[0]))
        if method == "_where":
            return {"rank": rank, "host": "h"}
        return "tok" if method == "_tokenizer" else (rank, method)

    def gather(self, ranks, tickets):
        return tickets


def test_a_sharded_handle_splits_samples_and_advantages_by_rank_in_order():
    from corl_bench.train.ranks import ShardedAgentHandle
    from corl_bench.train.sharded import split

    assert split(7, 2) == [(0, 4), (4, 7)] and split(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(RuntimeError, match="at least one sample per rank"):
        split(1, 2)
    ranks = _RecordingRanks()
    h = ShardedAgentHandle(SPEC, ranks)
    assert h.tokenizer == "tok" and h.generate(["p"], None) == (0, "generate")  # rank 0 alone generates
    assert h.where == {"rank": 0, "host": "h", "ranks": [{"rank": 0, "host": "h"}, {"rank": 1, "host": "h"}]}
    # two score() calls before one update() (a method's extra samples): each rank gets its slices' advantages
    assert h.score([0, 1, 2, 3, 4]).entropy == [0, 1, 2, 3, 4]
    assert h.score([5, 6, 7]).entropy == [5, 6, 7]
    ranks.sent.clear()
    h.update([10, 11, 12, 13, 14, 15, 16, 17], max_len=9)
    assert ranks.sent == [(0, "update", ([10, 11, 12, 15, 16],), {"max_len": 9}),
                          (1, "update", ([13, 14, 17],), {"max_len": 9})]
    h.score([0, 1])
    with pytest.raises(RuntimeError, match="3 advantages for 2 scored samples"):
        h.update([1.0, 2.0, 3.0])
    h.discard()
    with pytest.raises(RuntimeError, match="0 scored samples"):
        h.update([1.0])


def tiny_qwen(device: str):
    """Every rank builds the same tiny model (``build_tiny`` seeds itself)."""
    model, tok = build_tiny("qwen2-bpe")
    return model.to(device), tok


def _weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _samples(agent: Agent, seed: int) -> list[TrainSample]:
    comps = agent.generate(PROMPTS, SamplingParams(n=3, max_new_tokens=10, seed=seed))
    return [TrainSample(p, c) for p, group in zip(PROMPTS, comps) for c in group]


def _advantages(n: int, shift: int) -> list[float]:
    return [float(((i + shift) % 5) - 2) / 2 for i in range(n)]


def _group():
    from corl_bench.train.ranks import ProcessRanks, ShardedAgentHandle
    from corl_bench.train.sharded import Recipe

    recipe = Recipe(spec=SPEC, load=tiny_qwen, grpo=GRPO, seed=0, threads=1)
    return ShardedAgentHandle(SPEC, ProcessRanks(recipe, 2))


def test_two_ranks_update_like_one_rank_and_their_checkpoint_resumes_on_two_and_loads_on_one(tmp_path):
    base_model, tok = tiny_qwen("cpu")
    plain = Agent(SPEC, copy.deepcopy(base_model), tok, GRPO)
    params = SamplingParams(n=3, max_new_tokens=10, seed=11)
    first, second = _samples(plain, 1), _samples(plain, 2)  # from the initial policy: fixed inputs for both runs
    adv1, adv2 = _advantages(len(first), 0), _advantages(len(second), 3)

    sharded = _group()
    try:
        # rank 0 generates from its full copy of the policy; rank 1 keeps none (no auxiliary model follows it)
        assert [w["full_copy"] for w in sharded.where["ranks"]] == ["cpu", None]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the ranks (Recipe.threads): sampling a near-uniform tiny model flips on last bits
        try:
            assert sharded.generate(PROMPTS, params) == plain.generate(PROMPTS, params)
        finally:
            torch.set_num_threads(threads)
        stats1 = sharded.score(first)
        up1 = sharded.update(adv1)
        sharded.save(tmp_path / "two-after-1")
        (tmp_path / "ckpt").mkdir()  # the controller makes the checkpoint folder; every rank writes into it
        receipt = sharded.checkpoint(tmp_path / "ckpt")
        sharded.score(second)
        up2 = sharded.update(adv2)
        sharded.save(tmp_path / "two-after-2")
    finally:
        sharded.close()
    assert (tmp_path / "ckpt" / "agent-a0.dcp").is_dir() and receipt.file == "agent-a0.dcp" and receipt.bytes > 0

    # 2 ranks vs 1 rank: the same update within float tolerance
    plain_stats = plain.score(first)
    plain_up = plain.update(adv1)
    plain.save(tmp_path / "one-after-1")
    two, one = _weights(tmp_path / "two-after-1"), _weights(tmp_path / "one-after-1")
    diff = _max_diff(two, one)
    moved = _max_diff(one, {k: v.detach() for k, v in base_model.state_dict().items() if k in one})
    # the key bias has a zero true gradient (a constant added to every key shifts all of a query's scores
    # alike), so AdamW's first step turns its rounding noise into a step of up to lr: the largest difference
    rest = _max_diff(*({k: v for k, v in d.items() if "k_proj.bias" not in k} for d in (two, one)))
    print(f"max |param diff| 2 ranks vs 1 rank: {diff:.3g} ({rest:.3g} without the key biases; update size "
          f"{moved:.3g})")
    assert moved > 1e-3 and diff < TOL
    assert stats1.entropy == pytest.approx(plain_stats.entropy, abs=1e-5)
    assert up1.n_tokens == plain_up.n_tokens
    for key in ("loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "entropy", "logp_gap_mean"):
        assert getattr(up1, key) == pytest.approx(getattr(plain_up, key), rel=1e-4, abs=1e-6), key

    # the 2-rank checkpoint resumes on 2 fresh ranks bit-identically
    resumed = _group()
    try:
        resumed.restore(tmp_path / "ckpt")
        resumed.score(second)
        up2b = resumed.update(adv2)
        resumed.save(tmp_path / "resumed-after-2")
    finally:
        resumed.close()
    after2, after2b = _weights(tmp_path / "two-after-2"), _weights(tmp_path / "resumed-after-2")
    assert all(torch.equal(after2[k], after2b[k]) for k in after2)
    assert up2b == up2

    # ... and loads on 1 rank: the same weights, and the AdamW state carries on
    single = Agent(SPEC, copy.deepcopy(base_model), tok, GRPO)
    single.restore(tmp_path / "ckpt")
    loaded = {k: v for k, v in single.model.state_dict().items() if k in two}
    assert all(torch.equal(loaded[k], two[k]) for k in two)
    assert single.reference is not None and all(
        torch.equal(a, b) for a, b in zip(single.reference.state_dict().values(), base_model.state_dict().values()))
    single.score(second)
    single.update(adv2)
    single.save(tmp_path / "one-after-2")
    assert _max_diff(_weights(tmp_path / "one-after-2"), after2) < TOL


def _run(root, out: str, ranks: int, backend: str = "local", resume=None):
    import dataclasses

    from corl_bench.config import load_config
    from corl_bench.registries import FAMILIES
    from corl_bench.train.runner import run
    from tests.conftest import tiny_family

    for name in ("qwen2-bpe", "neox-bpe"):
        fam = dataclasses.replace(tiny_family(name, warmstart_steps=4, warmstart_batch=16), name=f"shard-{name}")
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    return run(load_config(None, [
        "method.name=corl", "cohort.name=tiny-pair",
        f"cohort.agents=[{{name: a0, family: shard-qwen2-bpe, ranks: {ranks}}}, "
        "{name: a1, family: shard-neox-bpe, seed_offset: 1}]",
        "run.steps=2", "run.checkpoint_every=1", f"run.output_dir={root / out}", "run.run_id=r",
        f"model.cache_dir={root / 'cache'}", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4",
        "rollout.max_new_tokens=10", "eval.max_problems=2", "eval.samples=1", "eval.max_new_tokens=8",
        "grpo.lr=1e-3", "model.threads=1", f"run.backend={backend}"]), resume=resume)


def _metrics(run_dir) -> list[dict]:
    import json

    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 2-step Co-RL run with agent a0 on 1 rank and on 2 local ranks: (root, 1-rank dir, 2-rank dir)."""
    root = tmp_path_factory.mktemp("sharded-run")
    return root, _run(root, "one", 1), _run(root, "two", 2)


@pytest.mark.slow
def test_a_run_with_a_two_rank_agent_trains_checkpoints_and_matches_the_one_rank_run(runs):
    import json

    _, one, two = runs
    assert json.loads((two / "run.json").read_text())["status"] == "finished"
    ckpt = two / "checkpoints" / (two / "checkpoints" / "latest").read_text().strip()
    assert (ckpt / "agent-a0.dcp").is_dir() and (ckpt / "agent-a1.pt").is_file()
    writers = json.loads((ckpt / "writers.json").read_text())
    assert writers["a0"]["file"] == "agent-a0.dcp" and writers["a0"]["bytes"] == sum(
        f.stat().st_size for f in (ckpt / "agent-a0.dcp").iterdir())
    assert (two / "checkpoints" / "final" / "a0" / "config.json").is_file()
    m1, m2 = _metrics(one), _metrics(two)
    assert [(r["step"], r["agent"]) for r in m1] == [(r["step"], r["agent"]) for r in m2]
    first = {r["agent"]: r for r in m2 if r["step"] == 0}, {r["agent"]: r for r in m1 if r["step"] == 0}
    for key in ("reward/mean", "len/mean", "policy/entropy", "policy/grad_norm", "policy/kl"):
        for agent in ("a0", "a1"):  # step 0: the same rollouts, the same update statistics
            assert first[0][agent][key] == pytest.approx(first[1][agent][key], rel=1e-4, abs=1e-6), (agent, key)


@pytest.mark.slow
def test_with_run_backend_ray_the_ranks_are_ray_actors_and_give_the_local_ranks_results_bit_for_bit(runs):
    ray = pytest.importorskip("ray", reason="run.backend=ray needs Ray (pip install -e .[ray]; the test extra has it)")
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint

    root, _, two = runs
    local = run_fingerprint(two)
    try:
        on_ray = run_fingerprint(_run(root, "ray", 2, backend="ray"))
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert set(on_ray["weights"]) == {"a0", "a1"} and on_ray["metrics"]
    assert fingerprint_diff(local, on_ray) == []


@pytest.mark.slow
def test_a_run_with_a_two_rank_agent_killed_mid_training_resumes_on_fresh_ranks_bit_for_bit(runs, monkeypatch):
    import json

    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint
    from corl_bench.train.trainer import Trainer

    root, _, two = runs
    step = Trainer.step

    def crash(self, s):
        if s == 1:
            raise KeyboardInterrupt("crash before step 1")
        return step(self, s)

    with monkeypatch.context() as m:
        m.setattr(Trainer, "step", crash)
        with pytest.raises(KeyboardInterrupt):
            _run(root, "crashed", 2)
    run_dir = root / "crashed" / "r"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    from corl_bench.train.ranks import ShardedAgentHandle

    calls, submit = [], ShardedAgentHandle.submit
    monkeypatch.setattr(ShardedAgentHandle, "submit",
                        lambda self, method, *a, **k: calls.append((method, *a)) or submit(self, method, *a, **k))
    assert _run(root, "crashed", 2, resume=run_dir) == run_dir  # new rank processes read the DCP checkpoint
    assert [c[1].name for c in calls if c[0] == "restore"] == ["step-000001"]
    assert fingerprint_diff(run_fingerprint(two), run_fingerprint(run_dir)) == []


def broken_on_rank_1(device: str):
    """A loader that fails on rank 1 only (rank 0 goes on into the collectives of sharding and waits there)."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise OSError("rank 1 cannot read its model")
    return tiny_qwen(device)


@pytest.mark.slow
def test_a_rank_that_fails_stops_the_group_and_raises_its_error_instead_of_hanging(monkeypatch):
    import time

    import corl_bench.train.ranks as ranks_mod
    from corl_bench.train.ranks import ProcessRanks
    from corl_bench.train.sharded import Recipe

    monkeypatch.setattr(ranks_mod, "_GRACE_S", 2.0)
    t0 = time.monotonic()
    with pytest.raises(OSError, match="rank 1 cannot read its model"):
        ProcessRanks(Recipe(spec=SPEC, load=broken_on_rank_1, grpo=GRPO), 2)
    assert time.monotonic() - t0 < 120


@pytest.mark.slow
def test_two_ranks_with_micro_batches_and_gradient_checkpointing_update_like_one_rank(tmp_path):
    from corl_bench.config import MemoryConfig
    from corl_bench.train.ranks import ProcessRanks, ShardedAgentHandle
    from corl_bench.train.sharded import Recipe

    mem = MemoryConfig(micro_batch=3, gradient_checkpointing=True)  # 12 samples: 2 micro-batches per rank
    model, tok = tiny_qwen("cpu")
    plain = Agent(SPEC, copy.deepcopy(model), tok, GRPO, memory=mem)
    samples = _samples(plain, 1)
    adv = _advantages(len(samples), 1)
    recipe = Recipe(spec=SPEC, load=tiny_qwen, grpo=GRPO, agent_kwargs={"memory": mem})
    sharded = ShardedAgentHandle(SPEC, ProcessRanks(recipe, 2), micro_batch=3)
    try:
        stats = sharded.score(samples)
        up = sharded.update(adv)
        sharded.save(tmp_path / "two")
    finally:
        sharded.close()
    plain_stats = plain.score(samples)
    plain_up = plain.update(adv)
    plain.save(tmp_path / "one")
    assert _max_diff(_weights(tmp_path / "two"), _weights(tmp_path / "one")) < TOL
    assert stats.entropy == pytest.approx(plain_stats.entropy, abs=1e-5)
    assert (up.loss, up.grad_norm, up.n_tokens) == pytest.approx((plain_up.loss, plain_up.grad_norm,
                                                                  plain_up.n_tokens), rel=1e-4)
