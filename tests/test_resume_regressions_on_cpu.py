"""The field's known resume bugs as regression tests (issue 42, item 9).

Each check runs twice: against the code as it is (it must pass) and against a deliberately broken variant that
reintroduces the bug (it must fail there), so a check that cannot see its bug fails the suite too:

- verl#7933: the step counter advanced twice on resume (a step skipped, the optimiser one step short);
- TRL PR#5911: a checkpoint whose rollout/data-state file is missing restarts the prompt stream at 0 silently;
- verl PR#5725 / #7974: a run resumed at an epoch boundary trains 0 steps (the stream ended with the epoch);
- TRL PR#7017: a LoRA adapter not continuing across a resume (the base model restored, the adapter restarted).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from itertools import islice
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from tests.test_resume_on_cpu import STEPS, config, fingerprint, interrupted_run, root, same  # noqa: F401

pytestmark = pytest.mark.slow
VARIANTS = ("as-is", "broken")


def steps_logged(run_dir: Path) -> list[int]:
    """The training steps metrics.jsonl holds for agent a0, in order."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if r.get("agent") == "a0" and "reward/mean" in r]


def optimiser_steps(run_dir: Path) -> set[int]:
    """AdamW's step count of every parameter of agent a0 in the run's last training checkpoint."""
    import torch

    from corl_bench.train.checkpoint import latest_checkpoint

    state = torch.load(latest_checkpoint(run_dir) / "agent-a0.pt", weights_only=False)["optimizer"]["state"]
    return {int(s["step"]) for s in state.values()}


def problems_per_step(run_dir: Path) -> dict[int, list[str]]:
    """step -> the problem ids agent a0 trained on (samples.jsonl, logged every step in these tests)."""
    out: dict[int, list[str]] = {}
    for x in (run_dir / "samples.jsonl").read_text().splitlines():
        row = json.loads(x)
        if row.get("agent", "a0") == "a0":
            out.setdefault(row["step"], []).append(str(row["problem_id"]))
    return out


@pytest.fixture(scope="module")
def reference(root):  # noqa: F811 - the shared root fixture
    from corl_bench.train.runner import run

    run_dir = run(config(root, "reference"))
    return run_dir, fingerprint(run_dir)


@pytest.mark.parametrize("variant", VARIANTS)
def test_resume_runs_every_step_exactly_once(root, reference, monkeypatch, variant):  # noqa: F811
    """verl#7933: after a crash before step 2, the resumed run trains steps 2 and 3 once each, and AdamW has taken
    STEPS steps. Broken variant: the restored step counter advanced once more (step 2 skipped)."""
    import corl_bench.train.checkpoint as checkpoint
    from corl_bench.train.runner import run

    out = f"twice-{variant}"
    run_dir = interrupted_run(root, out, monkeypatch, at_step=2)
    with monkeypatch.context() as m:
        if variant == "broken":
            load = checkpoint.load_checkpoint
            m.setattr(checkpoint, "load_checkpoint", lambda path, agents: (lambda s: {**s, "step": s["step"] + 1})(
                load(path, agents)))
        run(config(root, out), resume=run_dir)
    holds = steps_logged(run_dir) == list(range(STEPS)) and optimiser_steps(run_dir) == {STEPS}
    assert holds == (variant == "as-is"), (variant, steps_logged(run_dir), optimiser_steps(run_dir))


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_checkpoint_without_its_data_state_is_refused_not_restarted_at_zero(root, reference, monkeypatch,  # noqa: F811
                                                                               variant):
    """TRL PR#5911: a complete checkpoint whose state.pt (data position, step, RNG) is gone must not resume with the
    prompt stream back at problem 0. As it is: a one-line error naming the file and the fix; the previous
    checkpoints are kept. Broken variant: a loader that takes a missing state as 'start of the stream'."""
    import corl_bench.train.checkpoint as checkpoint
    from corl_bench.train.runner import run

    out = f"nostate-{variant}"
    run_dir = interrupted_run(root, out, monkeypatch, at_step=3)
    latest = checkpoint.latest_checkpoint(run_dir)
    (latest / "state.pt").unlink()
    refused = False
    with monkeypatch.context() as m:
        if variant == "broken":
            load = checkpoint.load_checkpoint

            def lenient(path, agents):
                if not (path / "state.pt").is_file():
                    checkpoint.AgentGroup.of(agents).restore(path)
                    return {"step": int(path.name.split("-")[1]), "consumed": 0, "method": {}}
                return load(path, agents)
            m.setattr(checkpoint, "load_checkpoint", lenient)
        try:
            run(config(root, out), resume=run_dir)
        except ConfigError as e:
            refused = True
            message = str(e)
    if variant == "as-is":
        assert refused and "\n" not in message and "state.pt" in message and latest.name in message, message
        assert (latest / "agent-a0.pt").is_file()  # nothing written is lost
    holds = refused or same(fingerprint(run_dir), reference[1])
    assert holds == (variant == "as-is")


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_run_resumed_at_an_epoch_boundary_trains_the_remaining_steps(root, monkeypatch, variant):  # noqa: F811
    """verl PR#5725 / #7974: a fixed pool of 6 problems read 3 per step (epoch 0 = steps 0-1); a crash right at the
    boundary (before step 2) resumes into epoch 1 and trains steps 2 and 3 on full batches, each epoch a permutation
    of the pool. Broken variant: a pool stream that ends with its first epoch, as a finished dataloader does."""
    import corl_bench.train.trainer as trainer
    from corl_bench.train.runner import run

    pool = {"data.train_pool": 6, "run.samples_per_log": 3}
    out = f"boundary-{variant}"
    run_dir = interrupted_run(root, out, monkeypatch, at_step=2, **pool)
    with ExitStack() as stack:
        m = stack.enter_context(monkeypatch.context())
        if variant == "broken":
            pooled = trainer.pooled
            m.setattr(trainer, "pooled", lambda stream, seed, size: islice(pooled(stream, seed, size), size))
        try:
            run(config(root, out, **pool), resume=run_dir)
        except ConfigError as e:
            assert "training stream ended" in str(e) and "\n" not in str(e), e
    seen = problems_per_step(run_dir)
    holds = (steps_logged(run_dir) == list(range(STEPS)) and all(len(seen.get(s, ())) == 3 for s in range(STEPS))
             and sorted(seen[0] + seen[1]) == sorted(seen[2] + seen[3]))
    assert holds == (variant == "as-is"), (variant, steps_logged(run_dir), seen)


LORA = {"memory.lora_rank": 4}
LORA_METHOD = "random-reward"  # rewards that vary within every group: the adapters move from the first step (with a
#                               label-free reward the tiny models' first groups are often all 0, no gradient, and a
#                               forgotten adapter would equal the trained one)


@pytest.fixture(scope="module")
def lora_reference(root):  # noqa: F811
    from corl_bench.train.runner import run

    return fingerprint(run(config(root, "lora-reference", method=LORA_METHOD, **LORA)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_lora_adapter_continues_across_a_resume(root, lora_reference, monkeypatch, variant):  # noqa: F811
    """TRL PR#7017: with LoRA adapters (memory.lora_rank=4) a run resumed after a crash before step 2 ends
    bit-identical to the uninterrupted run (adapter weights, their AdamW state, predictions). Broken variant: the
    restore loads the base weights but leaves the adapters as freshly initialised."""
    from corl_bench.train.agent import Agent
    from corl_bench.train.runner import run

    ref = lora_reference
    out = f"lora-{variant}"
    run_dir = interrupted_run(root, out, monkeypatch, at_step=2, method=LORA_METHOD, **LORA)
    trained = [v for k, v in _adapter_state(run_dir).items() if "lora_B" in k]
    assert trained and any(bool(v.abs().sum()) for v in trained), "the adapters did not move before the crash"
    with monkeypatch.context() as m:
        if variant == "broken":
            load = Agent.load_state_dict

            def forget_adapters(self, state):
                fresh = {k: v for k, v in self.model.state_dict().items() if "lora_" in k}
                load(self, {**state, "model": {**state["model"], **fresh}})
            m.setattr(Agent, "load_state_dict", forget_adapters)
        run(config(root, out, method=LORA_METHOD, **LORA), resume=run_dir)
    assert same(fingerprint(run_dir), ref) == (variant == "as-is")


def _adapter_state(run_dir: Path) -> dict:
    """Agent a0's LoRA tensors in the run's last training checkpoint (lora_B starts at zero)."""
    import torch

    from corl_bench.train.checkpoint import latest_checkpoint

    model = torch.load(latest_checkpoint(run_dir) / "agent-a0.pt", weights_only=False)["model"]
    return {k: v for k, v in model.items() if "lora_" in k}
