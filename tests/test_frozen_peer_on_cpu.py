"""corl-frozen-peer (issue 25): Co-RL whose labels come from each peer's frozen initial model. The rule, by hand;
then a short run in which the frozen copies stay bit-identical to the starting weights while the policies learn
from their votes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from corl_bench.config import AgentSpec, load_config
from corl_bench.method import AgentRollouts, RewardInput
from corl_bench.registries import METHODS


def _ro(rows: list[list[str | None]]) -> AgentRollouts:
    return AgentRollouts(agent="", answers=rows, completions=[[f"\\boxed{{{a}}}" for a in r] for r in rows],
                         finished=[[True] * len(r) for r in rows])


def test_labels_are_the_frozen_peers_votes_never_the_policies() -> None:
    cls = METHODS.get("corl-frozen-peer")
    agents = [AgentSpec("a0", "qwen2-bpe"), AgentSpec("a1", "llama-bpe", seed_offset=1)]
    method = cls(cls.parse_options({}), agents)
    policy = {"a0": _ro([["1", "1", "2", "2"], ["5", "5", "5", "6"]]), "a1": _ro([["2", "2", "2", "1"], ["6", "6", "6", "5"]])}
    frozen = {"a0": _ro([["3", "3", "1", None], [None, None, None, None]]), "a1": _ro([["1", "1", "9", "2"], ["5", "5", "7", "7"]])}
    batch = RewardInput(step=0, problem_ids=["p0", "p1"], rollouts=policy, samples_per_prompt=4,
                        auxiliary_rollouts={"frozen-peer": frozen})
    out = method.rewards(batch)
    # a0 learns from a1's frozen votes (1; 5), a1 from a0's frozen votes (3; none: a peer without a vote labels nothing)
    assert out["a0"].pseudo_labels == ["1", "5"] and out["a0"].rewards == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert out["a1"].pseudo_labels == ["3", None] and out["a1"].rewards == [[0, 0, 0, 0], [0, 0, 0, 0]]
    plain = METHODS.get("corl")(cls.parse_options({}), agents).rewards(batch)  # Co-RL labels from the policies
    assert plain["a0"].pseudo_labels == ["2", "6"]
    assert cls.method_kind() == "control" and [a.name for a in cls.auxiliary] == ["frozen-peer"]
    with pytest.raises(RuntimeError, match="frozen copies' rollouts"):
        method.rewards(RewardInput(step=0, problem_ids=["p0"], rollouts=policy, samples_per_prompt=4))


@pytest.mark.slow
def test_the_frozen_copies_never_move_while_the_policies_learn_from_them(tmp_path: Path) -> None:
    import json

    from corl_bench.registries import PROFILES
    from corl_bench.train.checkpoint import latest_checkpoint
    from corl_bench.train.runner import run

    cfg = load_config(None, ["method.name=corl-frozen-peer", "cohort.name=cross-family", "run.steps=2",
                             "rollout.prompts_per_step=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=24",
                             "eval.max_problems=4", "eval.samples=1", "run.checkpoint_every=1",
                             "grpo.lr=1e-3", f"run.output_dir={tmp_path}", "run.log_samples_every=1"])
    run_dir = run(cfg)
    profile = PROFILES.get("micro")(cfg.model)
    ckpt = latest_checkpoint(run_dir)
    for agent, family in (("a0-qwen2-bpe", "qwen2-bpe"), ("a1-llama-bpe", "llama-bpe")):
        start = profile.load(family)[0].state_dict()
        state = torch.load(ckpt / f"agent-{agent}.pt", weights_only=False)
        frozen, policy = state["auxiliary"]["frozen-peer"], state["model"]
        assert all(torch.equal(frozen[k], start[k]) for k in start), agent  # bit-identical after two updates
        assert any(not torch.equal(policy[k], start[k]) for k in start), agent  # the policy did learn
    rows = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {r["agent"] for r in rows} == {"a0-qwen2-bpe", "a1-llama-bpe"}
    assert any(r["pseudo_label"] is not None for r in rows)  # the frozen votes reached the learners
