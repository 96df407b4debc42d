"""DCRL, dual consensus (arXiv 2603.16223): the label is the answer two vote pools agree on — the policy's own
(the anchor) and that of a copy of the policy pushed away from its own samples (the explorer).

Follows ``v0yager33/DualConsensus`` @071259d (``verl/verl/trainer/ppo/dcrl_utils.py::_harmonic_vote`` and
``apply_dcrl_gt``, ``workers/fsdp_workers.py::unlearn_actor``, ``workers/actor/dp_actor.py::update_unlearn_policy``,
``workers/reward_manager/naive.py``; defaults from ``trainer/config/ppo_trainer_dcrl.yaml``). Per agent and prompt:

1. **anchor pool**: the agent's K rollouts;
2. **explorer pool**: a copy of the current policy takes one optimiser step *away* from the first
   ``unlearn_per_prompt`` anchor rollouts of every prompt (descending ``-log(1 - p)`` of their tokens, ``p`` clamped
   to [eps, 1 - eps]) and samples ``explorer_samples`` completions per prompt (``RewardInput.explore``,
   :mod:`corl_bench.train.explore`); the policy itself is untouched;
3. **label**: the answer with the largest harmonic mean of its shares in the two pools, present in both
   (:func:`harmonic_vote`; shares over all of a pool's rollouts); where no answer is in both, the anchor's plurality;
4. **reward** of an anchor rollout: 1 if it is equivalent to the label, else 0 — except, as the release's reward
   manager does, a prompt whose label differs from the anchor's own plurality gets 0.5 on every rollout (a constant
   group: no gradient; ``disagreement: skip``). ``disagreement: reserved`` is the README's rule instead: 1 for the
   label, 0.5 for the anchor's plurality answer, 0 otherwise.

Defaults as the release's config and run script: explorer pool as large as the anchor pool (16 / 16 there), the
first 8 anchor rollouts per prompt unlearned, ``unlearn_lr`` 3e-7, eps 0.01; ``harmonic: false`` labels by the
anchor's plurality alone (TTRL's label). The release's dynamic sampling, which trains on 8 anchor + 8 explorer
rollouts once the anchor's majority share averages above 0.5 over 5 steps, is off in its config (0 explorer samples
trained) and not implemented: only the anchor rollouts are trained on. Deviations: the unlearning step is a fresh
AdamW's on the copy (the release steps the actor's own optimiser and restores it afterwards;
:mod:`corl_bench.train.explore`), the unlearned texts are re-encoded by the agent's tokenizer, and ties of the
harmonic vote go to the anchor's more common answer (the release: set order).
"""

from __future__ import annotations

from dataclasses import dataclass

from corl_bench.method import (METHODS, AgentRewards, AuxiliaryModel, Method, RewardInput, harmonic_vote,
                               is_equivalent, plurality_vote)

EXPLORER = "explorer"
DISAGREEMENT = ("skip", "reserved")


@dataclass(frozen=True)
class DCRLOptions:
    explorer_samples: int = 0
    """completions per prompt in the explorer pool; 0 = as many as the anchor's (rollout.samples_per_prompt)"""
    unlearn_per_prompt: int = 8
    """anchor rollouts per prompt the explorer is unlearned on (the first ones; the release: 8)"""
    unlearn_lr: float = 3e-7
    """the unlearning step's learning rate (the release: 3e-7); 0 = the explorer is the policy itself"""
    eps: float = 0.01
    """token probabilities are clamped to [eps, 1 - eps] in the unlearning loss"""
    harmonic: bool = True
    """label by the two pools' harmonic vote; false = the anchor's plurality (TTRL)"""
    disagreement: str = "skip"
    """skip (release code: a prompt whose label is not the anchor's plurality gets 0.5 everywhere) | reserved
    (README: 0.5 for the anchor's plurality answer, 1 for the label)"""

    def __post_init__(self) -> None:
        if self.explorer_samples < 0 or self.unlearn_per_prompt < 0:
            raise ValueError("explorer_samples and unlearn_per_prompt must be >= 0")
        if self.unlearn_lr < 0 or not 0.0 < self.eps < 0.5:
            raise ValueError(f"unlearn_lr must be >= 0 and eps in (0, 0.5) (got {self.unlearn_lr}, {self.eps})")
        if self.disagreement not in DISAGREEMENT:
            raise ValueError(f"disagreement must be one of {', '.join(DISAGREEMENT)} (got {self.disagreement!r})")


@METHODS.register("dcrl", aliases=("dual-consensus",))
class DCRL(Method):
    """DCRL: the label both the policy's pool and an unlearned explorer's pool support (harmonic vote)."""

    name = "dcrl"
    label = "DCRL"
    independent_agents = True
    table_order = 89  # not in the Co-RL paper's table: after its rows, before the controls
    min_agents = 1
    uses_labels = False
    extra_cost = ("one unlearning step of a policy copy per step and explorer_samples generations per prompt from "
                  "it; one model copy")
    reference = "DCRL, arXiv 2603.16223; v0yager33/DualConsensus verl/verl/trainer/ppo/dcrl_utils.py (_harmonic_vote)"
    Options = DCRLOptions
    auxiliary = (AuxiliaryModel(EXPLORER, generates=True, kl_reference=False, seed_salt=3_000, rollouts=False),)

    def teachers(self) -> dict[str, list[str]]:
        return {a.name: [a.name] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        opt, k = self.options, batch.samples_per_prompt
        explorer = self._explorer_answers(batch) if opt.harmonic else None
        out = {}
        for name, ro in batch.rollouts.items():
            rewards, labels, changed = [], [], 0
            for p, answers in enumerate(ro.answers):
                anchor = list(answers[:k])
                majority = plurality_vote(anchor).label
                label = (harmonic_vote(anchor, explorer[name][p]) if explorer is not None else None) or majority
                differs = (label is not None and majority is not None and not is_equivalent(label, majority))
                changed += differs
                rewards.append([self._reward(a, label, majority, differs) for a in anchor])
                labels.append(label)
            n = max(1, len(labels))
            metrics = {"label_changed_fraction": changed / n}
            if explorer is not None:
                same = [sum(e is not None and lb is not None and is_equivalent(e, lb) for e in row) / max(1, len(row))
                        for row, lb in zip(explorer[name], labels)]
                metrics["explorer_label_share"] = sum(same) / n
            out[name] = AgentRewards(rewards=rewards, pseudo_labels=labels, metrics=metrics)
        return out

    def _reward(self, answer: str | None, label: str | None, majority: str | None, differs: bool) -> float:
        if self.options.disagreement == "skip" and differs:
            return 0.5
        if answer is None:
            return 0.0
        if label is not None and is_equivalent(answer, label):
            return 1.0
        if self.options.disagreement == "reserved" and differs and is_equivalent(answer, majority):
            return 0.5
        return 0.0

    def _explorer_answers(self, batch: RewardInput) -> dict[str, list[list[str | None]]]:
        """agent -> [P][explorer_samples] the explorer pool's extracted answers."""
        if batch.explore is None or batch.prompts is None:
            raise RuntimeError("dcrl samples an explorer pool through the agents' auxiliary models; the trainer "
                               "passes RewardInput.explore and RewardInput.prompts")
        opt, k = self.options, batch.samples_per_prompt
        m = opt.unlearn_per_prompt
        unlearn = {name: [(batch.prompts[name][p], text) for p, row in enumerate(ro.completions) for text in row[:k][:m]]
                   for name, ro in batch.rollouts.items()}
        pools = batch.explore(EXPLORER, unlearn, {name: list(batch.prompts[name]) for name in batch.rollouts},
                              opt.explorer_samples or k, {name: opt.unlearn_lr for name in batch.rollouts}, opt.eps)
        extract = batch.extract
        if extract is None:
            raise RuntimeError("dcrl extracts the explorer's answers with the run's extractor (RewardInput.extract)")
        return {name: [[extract(c.text) for c in row] for row in pools[name]] for name in pools}
