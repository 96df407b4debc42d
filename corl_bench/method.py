"""The method contract: how one step's rollouts become rewards (and, rarely, advantages).

A method is one file that subclasses :class:`Method` and registers itself; it imports from ``corl_bench`` only
this module, which carries everything a method may use (the registry, the answer verifier's equivalence and vote,
the request type, REINFORCE++ whitening, the multi-turn debate of :mod:`corl_bench.debate`)::

    from corl_bench.method import METHODS, AgentRewards, Method, RewardInput, is_equivalent, plurality_vote

    @METHODS.register("my-method")
    class MyMethod(Method):
        '''One line on what the reward is, and the paper/code it follows.'''
        min_agents = 1
        def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
            ...

Everything else — sampling, answer extraction, advantages, the policy update, diagnostics, evaluation — is shared.
The trainer hands a method only what it may see: every agent's extracted answers and completions (texts, and
their lengths in tokens: ``AgentRollouts.n_tokens``, ``Completion.n_tokens``; a length penalty counts these, not
characters), aligned by problem. The hidden ground truth is in ``RewardInput.labels`` **only** for methods that declare
``uses_labels = True`` (GT-Reward); for every label-free method it is ``None``.

A method that needs a model besides each agent's policy declares it in :attr:`Method.auxiliary`
(Co-rewarding-II's EMA teacher): the agents keep it, the trainer samples its rollouts into
``RewardInput.auxiliary_rollouts`` when it ``generates``, and moves it toward the policy after every update by the
rate :meth:`Method.auxiliary_update` returns.

Method files must stay torch-free at import time (``corl-bench ls methods`` reads the class attributes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from corl_bench.config import PAPER_ROWS, AgentSpec, ConfigError
from corl_bench.debate import DEBATE_TEMPLATE, Debate, DebateOptions, Turn, debate_prompt, run_debate, turn_advantages
from corl_bench.grading.verifier import (Vote, harmonic_vote, has_boxed, is_equivalent, plurality_vote,
                                        vote_margin)
from corl_bench.registries import METHODS
from corl_bench.rollout.base import Completion
from corl_bench.rollout.request import Request, prompt_text

__all__ = ["AgentRewards", "AgentRollouts", "AuxiliaryModel", "Completion", "ConfigError", "DEBATE_TEMPLATE",
           "Debate", "DebateOptions", "Explore", "ExtraSample", "FollowUp", "Generate", "Likelihood", "METHODS",
           "Method", "NoOptions", "Request", "RewardInput", "SequenceStats", "Turn", "UNOFFICIAL", "Vote",
           "debate_prompt", "grouped_advantages", "harmonic_vote", "has_boxed", "is_equivalent", "plurality_vote",
           "prompt_text", "run_debate", "turn_advantages", "vote_margin", "whitened_advantages"]


def whitened_advantages(rewards: Any, lengths: Any, eps: float = 1e-8) -> Any:
    """REINFORCE++ advantages whitened over all of an agent's samples (:func:`corl_bench.advantages.whitened_advantages`;
    imported on call, so method files stay torch-free)."""
    from corl_bench.advantages import whitened_advantages as whiten

    return whiten(rewards, lengths, eps)


def grouped_advantages(rewards: Sequence[float], groups: Sequence[Any], scale_std: bool = True) -> list[float]:
    """GRPO advantages of samples whose groups are given per sample (``groups[i]``, any hashable; groups may differ
    in size): each group normalised by its own mean and std (:func:`corl_bench.advantages.group_advantages`; a
    group of one keeps its reward). Imported on call, so method files stay torch-free."""
    import torch

    from corl_bench.advantages import group_advantages

    if len(rewards) != len(groups):
        raise ValueError(f"one group per reward (got {len(rewards)} rewards and {len(groups)} groups)")
    values = torch.tensor(list(rewards), dtype=torch.float32)
    out = torch.zeros_like(values)
    for key in dict.fromkeys(groups):
        idx = torch.tensor([i for i, g in enumerate(groups) if g == key])
        out[idx] = group_advantages(values[idx].reshape(1, -1), scale_std=scale_std).reshape(-1)
    return out.tolist()


@dataclass(frozen=True)
class AuxiliaryModel:
    """A model each agent keeps besides its policy, starting as a frozen copy of the initial policy."""

    name: str  # e.g. "teacher"; the key of RewardInput.auxiliary_rollouts
    generates: bool = True  # it has a rollout engine (its own seed stream)
    rollouts: bool = True  # the trainer samples K rollouts per prompt from it every step (False: only the method's
    #                        own calls use its engine, as RewardInput.explore does)
    kl_reference: bool = False  # it is also the anchor of the k3 KL term (grpo.kl_coef)
    seed_salt: int = 1_000  # added to the agent's seed offset for its rollouts (never the policy's stream)


@dataclass(frozen=True)
class AgentRollouts:
    """One agent's rollouts for one step. ``answers[p][k]`` is the normalised extracted answer (None = no answer)."""

    agent: str
    answers: list[list[str | None]]  # [P][N] with N = generation_n(K) >= K
    completions: list[list[str]]  # [P][N]
    finished: list[list[bool]]  # [P][N] False where the completion hit the token cap
    n_tokens: list[list[int]] = field(default_factory=list)  # [P][N] each completion's length in tokens
    #                                                          (Completion.n_tokens: EOS counted; not characters)


@dataclass(frozen=True)
class SequenceStats:
    """Per-rollout statistics of the agent's own policy, from the training forward pass (first K of each prompt)."""

    entropy: list[list[float]]  # [P][K] mean token entropy of softmax(logits / T) over the response
    self_certainty: list[list[float]]  # [P][K] mean token KL(U || p) over the response


@dataclass(frozen=True)
class RewardInput:
    step: int
    problem_ids: list[str]  # [P], identical for every agent (views are aligned by id)
    rollouts: dict[str, AgentRollouts]  # agent name -> rollouts, in cohort order
    samples_per_prompt: int  # K: the rollouts that are trained on are the first K of each prompt
    labels: list[str] | None = None  # hidden truth; only for methods with uses_labels = True
    stats: dict[str, SequenceStats] | None = None  # agent -> policy statistics of its trained rollouts
    auxiliary_rollouts: dict[str, dict[str, AgentRollouts]] | None = None  # model -> agent -> rollouts of the
    #                                                                      agent's auxiliary model (Method.auxiliary)
    prompts: dict[str, list[Request]] | None = None  # agent -> [P] the requests the rollouts answer
    generate: "Generate | None" = None  # extra generations through the rollout engine (interactive methods)
    extract: Callable[[str], str | None] | None = None  # the run's answer extractor (rollout.extractor), for the
    #                                                   answers of extra generations (a debate's later turns)
    likelihood: "Likelihood | None" = None  # a peer's scoring forward: how likely each agent finds given replies
    follow_up: "FollowUp | None" = None  # a conversation continued in an agent's own template (a verifier turn)
    explore: "Explore | None" = None  # rollouts of a copy of the policy unlearned one step on given samples (DCRL)

    @property
    def teacher_rollouts(self) -> dict[str, AgentRollouts] | None:
        """agent -> rollouts of its ``teacher`` auxiliary model (Co-rewarding-II), if the method declares one."""
        return (self.auxiliary_rollouts or {}).get("teacher")


Generate = Callable[..., list[Any]]
"""``generate(agent, prompts, role, max_new_tokens=None) -> [Completion]``: one sampled completion per prompt from
``agent``'s current policy (prompts: text or :class:`Request`), through the same rollout engine and sampling
settings as the main rollouts, with a seed
derived from (run seed, agent, step, role) — so extra generations are reproducible and never reuse the rollout seed.
"""


Likelihood = Callable[[Mapping[str, Sequence[Any]], Mapping[str, Sequence[str]]], dict[str, list[float]]]
"""``likelihood(requests, texts) -> {agent: [S floats]}``: each agent named in ``requests`` scores
``texts[agent][s]`` as its reply to ``requests[agent][s]`` (use its own requests, ``RewardInput.prompts[agent]``,
so the reply is read in its chat template): the mean log-probability of the text's tokens under its current policy
at temperature 1, the text re-encoded by its own tokenizer (agents of different families score each other's
replies). One forward pass per agent without grad, all agents at once under Ray; nothing joins the update.
"""


FollowUp = Callable[[str, Any, str, str], Any]
"""``follow_up(agent, request, reply, user) -> Request``: the request that continues ``agent``'s conversation —
``request`` as it was asked (e.g. ``RewardInput.prompts[agent][p]``), its ``reply``, then the user turn ``user`` —
rendered by the run's profile in the agent's chat template (plain text where it has none), ending where the
agent's next reply starts. Multi-turn methods (CoVerRL's verifier turn) build their later turns with it.
"""


Explore = Callable[..., dict[str, list[list[Any]]]]
"""``explore(model, unlearn, requests, n, lr, eps=0.01) -> {agent: [P][n] Completion}``: for each agent named in
``requests``, its auxiliary model ``model`` (declared ``AuxiliaryModel(model, generates=True, rollouts=False)``) is
set to the current policy, moved one AdamW step of ``lr[agent]`` away from ``unlearn[agent]`` (``(request,
completion text)`` pairs, re-encoded by the agent's tokenizer: their tokens become less likely), and samples ``n`` completions of each of ``requests[agent]``
with the run's sampling settings and a seed of its own (:mod:`corl_bench.train.explore`). The policy is untouched.
"""


@dataclass(frozen=True)
class ExtraSample:
    """A training sample a method generated beyond the main rollouts (CoMAS: critiques and scores).

    The agent that generated it trains on it: ``prompt`` + ``completion`` enter the same forward pass and policy
    step as its main rollouts, with the advantage the method's :meth:`Method.advantages` gives it.
    """

    prompt: str | Request
    completion: Completion
    reward: float
    role: str


@dataclass
class AgentRewards:
    """Rewards for the first K rollouts of every prompt, plus what they were computed against."""

    rewards: list[list[float]]  # [P][K]
    pseudo_labels: list[str | None] | None = None  # [P] the label rewards were checked against (None = unlabeled)
    metrics: dict[str, float] = field(default_factory=dict)  # method-specific scalars, logged as method/<key>
    extra: list[ExtraSample] = field(default_factory=list)  # more samples to train on (needs an advantages override)


@dataclass(frozen=True)
class NoOptions:
    """Options of a method without options."""


UNOFFICIAL = "†"
"""The mark of a method implemented from its paper without public code (``Method.official = False``)."""


def mirrored_cohort(cohort: str) -> str:
    """The text cohort a vision-language cohort mirrors (``visual-cross-family`` -> ``cross-family``): it gets that
    cohort's row label and place, so Co-RL's VLM rows read as the paper's ("Co-RL (cross-family)")."""
    return cohort.removeprefix("visual-")


def labelled_cohort(cohort: str, paper_row: str = "") -> str:
    """The cohort whose row label and place a run on ``cohort`` takes in tables: the named cohort of the paper row it
    reproduces (``cohort.paper_row``, :data:`corl_bench.config.PAPER_ROWS`: a ``paper-cross-family`` cohort of
    paper_row different-family is labelled like ``cross-family``), else ``cohort`` itself (also for a paper_row this
    version does not know)."""
    return PAPER_ROWS.get(paper_row, cohort)


class Method:
    """Base class. Subclasses set the class attributes and implement :meth:`rewards`."""

    name: ClassVar[str] = ""
    min_agents: ClassVar[int] = 1
    max_agents: ClassVar[int | None] = None
    uses_labels: ClassVar[bool] = False
    extra_cost: ClassVar[str] = "none"  # extra forward passes or generations, for `ls methods`
    reference: ClassVar[str] = ""  # paper / official code the implementation follows
    official: ClassVar[bool] = True  # False: implemented from the paper, no public code to follow ("unofficial" in
    #                                  `ls methods`; its table rows carry UNOFFICIAL and a footnote says why)
    Options: ClassVar[type] = NoOptions  # a frozen dataclass; MethodConfig.options is validated against it
    auxiliary: ClassVar[tuple[AuxiliaryModel, ...]] = ()  # models each agent keeps besides its policy

    # How the method describes itself to tables and listings (read from the class; no instance, no torch):
    label: ClassVar[str] = ""  # row label in tables ("TTRL"); empty = the registered name
    kind: ClassVar[str] = ""  # label-free | uses-labels (shown, never ranked) | control (never ranked); empty =
    #                           uses-labels when uses_labels, else label-free
    independent_agents: ClassVar[bool] = False  # every agent trains on its own (the cohort only names the models),
    #                                             so each agent is a row of its own family's block
    cohort_labels: ClassVar[Mapping[str, str]] = {}  # cohort -> row suffix, in row order: "Co-RL (cross-family)";
    #                                                  a method with none has one row label whatever the cohort
    table_order: ClassVar[int] = 1000  # rows sort by this (the paper's methods 10..90), then by name

    def __init__(self, options: Any, agents: Sequence[AgentSpec]) -> None:
        self.options = options
        self.agents = tuple(agents)

    # ---------------------------------------------------------------- self-description
    KINDS: ClassVar[tuple[str, ...]] = ("label-free", "uses-labels", "control")

    @classmethod
    def method_kind(cls) -> str:
        """label-free, uses-labels or control (the tables rank label-free rows only)."""
        kind = cls.kind or ("uses-labels" if cls.uses_labels else "label-free")
        if kind not in cls.KINDS:
            raise ConfigError(f"method {cls.name!r} declares kind {kind!r}; use one of {', '.join(cls.KINDS)}")
        return kind

    @classmethod
    def row_label(cls, cohort: str) -> str:
        """The table row of this method trained on ``cohort`` ("Co-RL (cross-family)", "TTRL"; an unofficial
        method's label ends in :data:`UNOFFICIAL`: "RLCCF†")."""
        label = (cls.label or cls.name) + ("" if cls.official else UNOFFICIAL)
        if not cls.cohort_labels:
            return label
        return f"{label} ({cls.cohort_labels.get(cohort, cls.cohort_labels.get(mirrored_cohort(cohort), cohort))})"

    # ---------------------------------------------------------------- construction
    @classmethod
    def parse_options(cls, raw: Mapping[str, Any]) -> Any:
        """Validate ``method.options`` against ``cls.Options`` with one-line errors naming the option."""
        valid = {f.name: f for f in dataclasses.fields(cls.Options)}
        for key in raw:
            if key not in valid:
                names = ", ".join(valid) or "(none)"
                raise ConfigError(f"method.options.{key} is not an option of method {cls.name!r}; valid: {names}")
        try:
            return cls.Options(**dict(raw))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"method.options for {cls.name!r}: {e}") from None

    @classmethod
    def check_cohort(cls, agents: Sequence[AgentSpec], cohort: str) -> None:
        n = len(agents)
        if n < cls.min_agents:
            raise ConfigError(f"method {cls.name!r} needs at least {cls.min_agents} agents but cohort {cohort!r} has "
                              f"{n}; pick a cohort with more agents, such as "
                              f"{'three-agent' if cls.min_agents > 2 else 'cross-family'}")
        if cls.max_agents is not None and n > cls.max_agents:
            raise ConfigError(f"method {cls.name!r} trains at most {cls.max_agents} agent(s) but cohort {cohort!r} "
                              f"has {n}; use --cohort single")

    # ---------------------------------------------------------------- the contract
    def generation_n(self, samples_per_prompt: int) -> int:
        """How many completions per prompt to generate (TTRL votes on more than it trains on)."""
        return samples_per_prompt

    def teachers(self) -> dict[str, list[str]]:
        """Which agents' answers each agent's reward depends on (for logging and the peer-agreement diagnostic)."""
        return {a.name: [] for a in self.agents}

    def rewards(self, batch: RewardInput) -> dict[str, AgentRewards]:
        raise NotImplementedError(f"{type(self).__name__} must implement rewards()")

    def advantages(self, batch: RewardInput, rewards: dict[str, AgentRewards],
                   lengths: dict[str, list[int]]) -> dict[str, Any] | None:
        """Optional override of the GRPO group advantages. None = the shared GRPO core.

        ``lengths[agent]`` holds the response token counts of everything the agent trains on, in training order:
        the P*K main rollouts row-major, then ``rewards[agent].extra``. Return agent -> a 1-D sequence of one
        advantage per trained sample in that order (it is broadcast over the sample's tokens). A method that
        returns ``extra`` samples must override this.
        """
        return None

    def auxiliary_update(self, name: str, step: int, total_steps: int) -> float:
        """EMA rate of auxiliary model ``name`` toward the policy after the update of ``step`` (0: it stays)."""
        return 0.0

    def state_dict(self) -> dict[str, Any]:
        """Method state to checkpoint (most methods are stateless)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
