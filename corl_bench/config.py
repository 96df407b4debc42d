"""Configuration: one frozen dataclass per concern, loaded from YAML with ``key=value`` overrides.

    model:   where models come from (profile, cache, dtype, threads)
    rollout: how completions are sampled (backend, prompts per step, K, temperature, lengths)
    grpo:    the policy update (lr, advantage normalisation, clip, loss aggregation, KL, grad clip)
    memory:  how the update fits in memory (micro-batches, chunked logits, checkpointing, shared prefix, LoRA)
    method:  which registered method turns rollouts into rewards, plus its own options
    cohort:  which agents train together (a registered cohort, or agents spelled out)
    eval:    what is evaluated before/after training and how
    data:    the unlabeled training stream (unlimited, or a fixed pool read in reshuffled epochs)
    run:     seed, steps, output directory, logging cadence, stop on collapse
    monitor: the live collapse alarm (label-free signals against each agent's own early baseline)

A YAML file mirrors this nesting; ``corl-bench run --set grpo.lr=3e-5`` overrides one field. Every field is
validated in ``__post_init__`` and a bad value raises :class:`ConfigError` with a one-line message naming the
field and the fix. The resolved config (cohort expanded, defaults filled) is written into every run directory.
This module never imports torch.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import yaml

from corl_bench.errors import ConfigError, MachineError, checking_for_elsewhere, machine_problem  # noqa: F401
from corl_bench.typed_yaml import _build, _plain, _set_dotted, parse_override  # noqa: F401 (parse_override: API)

log = logging.getLogger(__name__)

#: The paper's rows a cohort can reproduce (``cohort.paper_row``) -> the named cohort of that design, whose row label
#: a table gives it ("Co-RL (cross-family)"), so ``--reference paper`` puts the paper's row of that kind beside it.
PAPER_ROWS = {"different-family": "cross-family", "same-family": "same-family",
              "different-family+": "cross-family-rephrased", "three-agent": "three-agent"}

# Loss-aggregation modes of the GRPO core (named here, torch-free, so configs validate without torch).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LOSS_AGG_ALIASES = {
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dr-grpo": "seq-mean-token-sum-norm",
}


def resolve_loss_agg(mode: str) -> str:
    """Canonical loss-aggregation name for ``mode`` (a canonical name or an alias).

    Canonical names are verl's ``loss_agg_mode`` values; aliases are TRL's ``loss_type`` values.
    Raises ValueError listing valid modes and aliases.
    """
    if mode in LOSS_AGG_MODES:
        return mode
    if mode in LOSS_AGG_ALIASES:
        return LOSS_AGG_ALIASES[mode]
    raise ValueError(
        f"unknown loss aggregation {mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}; "
        f"aliases: {', '.join(f'{k}={v}' for k, v in LOSS_AGG_ALIASES.items())}"
    )


#: Checkpoint-selection rules of ``eval.select`` (named here, torch-free; corl_bench.train.select implements them).
SELECT_RULES = ("final", "dev", "label-free", "test-oracle")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _valid_device(device: str) -> bool:
    return isinstance(device, str) and re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device) is not None


def _positive(section: str, name: str, value: float, hint: str) -> None:
    _check(value > 0, f"{section}.{name} must be > 0 (got {value!r}); set e.g. {section}.{name}={hint}")


@dataclass(frozen=True)
class ModelConfig:
    profile: str = "micro"
    """a registered profile (``corl-bench ls profiles``): where models and data come from; ``micro`` (embedded tiny
    models, the default) or ``hf`` (real Hugging Face causal LMs). A registered cohort of another profile (e.g.
    ``smol-cross-family``: hf) brings its own in place of the default; any other value must match the cohort's"""
    cache_dir: str | None = None
    """micro checkpoints and dequantised model entries; default ``$CORL_BENCH_CACHE`` or ``~/.cache/corl-bench``"""
    dtype: str = "float32"
    """parameter dtype: float32 | bfloat16 | auto (hf profile: bf16 on CUDA, fp32 on CPU; micro models load in
    fp32 under auto)"""
    device: str = "auto"
    """where every agent's model lives unless its cohort entry names a device: auto (a GPU when one is visible,
    else the CPU) | cpu | cuda | cuda:N"""
    trust_remote_code: bool = False
    """let transformers run a model folder's own Python code (hf profile); off unless you trust the folder"""
    threads: int = 0
    """torch intra-op threads for the controller process; 0 = one per core"""
    micro_checkpoints: str = "shipped"
    """micro profiles: ``shipped`` (the warm-started checkpoints that ship with corl-bench, the ones its README and
    studies were measured on) or ``build`` (warm-start each family on this machine, cached under ``cache_dir``)"""
    freeze_vision: bool = False
    """vision-language agents: keep the vision tower's weights fixed (a common VLM recipe; the language model and
    the projector still learn); refused for a text model"""
    max_image_side: int = 0
    """vision-language agents with their own processor: downscale an image whose longer side exceeds this many
    pixels before the processor sees it (the paper's VLM protocol: 1024); 0 = only the processor's own limits"""

    def __post_init__(self) -> None:
        _check(self.micro_checkpoints in ("shipped", "build"), f"model.micro_checkpoints must be shipped or build "
               f"(got {self.micro_checkpoints!r}); set model.micro_checkpoints=shipped")
        _check(self.dtype in ("float32", "bfloat16", "auto"),
               f"model.dtype must be float32, bfloat16 or auto (got {self.dtype!r}); set model.dtype=auto")
        _check(_valid_device(self.device), f"model.device must be auto, cpu, cuda or cuda:N (got {self.device!r}); "
               "set model.device=auto")
        _check(self.threads >= 0, f"model.threads must be >= 0 (got {self.threads}); use 0 for one per core")
        _check(self.max_image_side >= 0, f"model.max_image_side must be >= 0 (got {self.max_image_side}); use 0 "
               "for no cap or e.g. 1024")


@dataclass(frozen=True)
class RolloutConfig:
    backend: str = "hf"
    """a registered rollout engine (``corl-bench ls engines``): ``hf`` (transformers generate with KV cache),
    ``fast`` (shared prefill per prompt and finished rows dropped from the batch; what ``corl-bench eval`` uses) or
    ``vllm`` (its own copy of the weights, synced after every update; ``pip install vllm`` / ``make vllm-env``)"""
    prompts_per_step: int = 16
    """prompts per training step; every agent sees the same prompts in the same order"""
    samples_per_prompt: int = 8
    """K completions per prompt and agent (the GRPO group size)"""
    temperature: float = 1.0
    """sampling temperature of the rollouts (1.0 = the model's own distribution)"""
    top_p: float = 1.0
    """nucleus sampling: draw from the smallest set of tokens whose probabilities sum to top_p; 1.0 = off"""
    max_new_tokens: int = 40
    """completion cap; completions that hit it count as clipped"""
    max_batch: int = 0
    """most sequences one engine call decodes at once (bounds the rollout KV cache: prompts x K are generated in
    slices of this size); 0 = the engine's default (hf 512, fast 256)"""
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    """the engine's own keyword options, e.g. for vllm ``{sync: reload, gpu_memory_utilization: 0.3}``"""
    extractor: str = "qwen"
    """how the answer every method votes on / is rewarded by is read from a rollout: a registered answer extractor
    (:data:`corl_bench.registries.EXTRACTORS`, checked at resolve time): ``qwen`` (last ``\\boxed{}``, then "the answer is", then
    the last number), ``boxed``, ``flexible``, ``letter`` or ``answer_tag`` (the last ``<answer>...</answer>``, no
    fallback: the paper's VLM training format), or a plugin's"""

    def __post_init__(self) -> None:
        _check(self.max_batch >= 0, f"rollout.max_batch must be >= 0 (got {self.max_batch}); set rollout.max_batch=0 "
               "for the engine's default")
        _check(bool(self.backend.strip()), "rollout.backend is empty; set rollout.backend=hf (or fast, or a plugin "
               "engine: corl-bench ls engines)")
        _positive("rollout", "prompts_per_step", self.prompts_per_step, "16")
        _check(self.samples_per_prompt >= 2, f"rollout.samples_per_prompt must be >= 2 for group-normalised "
               f"advantages (got {self.samples_per_prompt}); set e.g. rollout.samples_per_prompt=8")
        _positive("rollout", "temperature", self.temperature, "1.0")
        _check(0 < self.top_p <= 1, f"rollout.top_p must be in (0, 1] (got {self.top_p}); set rollout.top_p=1.0")
        _positive("rollout", "max_new_tokens", self.max_new_tokens, "40")
        _check(bool(self.extractor.strip()), "rollout.extractor is empty; set rollout.extractor=qwen (or another "
               "registered answer extractor)")


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 5e-5
    """AdamW learning rate (constant); the critical knob for label-free runs"""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW's decay rates of the first and second moment estimates"""
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay; 0 = none"""
    scale_std: bool = True
    """divide group advantages by the group std (False = Dr. GRPO advantage)"""
    adv_eps: float = 1e-6
    """added to the group std before the advantages are divided by it (a group whose rewards are all equal gets
    advantage 0, not a division by zero)"""
    clip_low: float = 0.2
    """the policy ratio is clipped to [1 - clip_low, 1 + clip_high] (PPO); inactive with one update per rollout
    batch, as in the paper (the ratio is then 1)"""
    clip_high: float = 0.2
    """upper clip of the policy ratio (1 + clip_high); above clip_low is DAPO's clip-higher"""
    loss_agg: str = "token-mean"
    """token-mean (TRL bnpo) | seq-mean-token-mean (grpo) | seq-mean-token-sum-norm (dr_grpo)"""
    kl_coef: float = 0.0
    """k3 KL to the initial policy; 0 as in the paper (no reference model is kept)"""
    max_grad_norm: float = 1.0
    """the gradients' global norm is clipped to this before each optimiser step"""
    behaviour_is_cap: float = 0.0
    """> 0: weight each token's policy-gradient term by min(exp(logp - logp_engine), cap), the truncated importance
    ratio against the rollout engine's own log-probs (TRL's vllm_importance_sampling_correction, cap 3.0): corrects
    an engine whose numerics differ from the trainer's (vLLM, bf16). 0 = off"""

    def __post_init__(self) -> None:
        _positive("grpo", "lr", self.lr, "5e-5")
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
               f"grpo.betas must be two numbers in [0, 1) (got {self.betas!r}); set grpo.betas=[0.9,0.99]")
        _check(self.weight_decay >= 0, f"grpo.weight_decay must be >= 0 (got {self.weight_decay}); set grpo.weight_decay=0")
        _positive("grpo", "adv_eps", self.adv_eps, "1e-6")
        _check(0 <= self.clip_low < 1, f"grpo.clip_low must be in [0, 1) (got {self.clip_low}); set grpo.clip_low=0.2")
        _check(self.clip_high >= 0, f"grpo.clip_high must be >= 0 (got {self.clip_high}); set grpo.clip_high=0.2")
        try:
            resolve_loss_agg(self.loss_agg)
        except ValueError as e:
            raise ConfigError(f"grpo.loss_agg: {e}") from None
        _check(self.kl_coef >= 0, f"grpo.kl_coef must be >= 0 (got {self.kl_coef}); set grpo.kl_coef=0")
        _positive("grpo", "max_grad_norm", self.max_grad_norm, "1.0")
        _check(self.behaviour_is_cap == 0 or self.behaviour_is_cap >= 1, f"grpo.behaviour_is_cap must be 0 (off) or "
               f">= 1 (got {self.behaviour_is_cap}); set grpo.behaviour_is_cap=3.0 (TRL's default cap)")



@dataclass(frozen=True)
class MemoryConfig:
    """How one agent's training step fits in memory (``memory:``; all off by default: the step then computes exactly
    what it always did). micro_batch, logit_chunk, gradient_checkpointing and shared_prefix change memory and time,
    not the update (equal within float rounding); LoRA trains adapters instead of all weights (the last resort when
    the full model's optimiser state does not fit). These were ``grpo.*`` fields before; a config or run directory
    that sets them under ``grpo:`` still loads (moved here, with a warning)."""

    micro_batch: int = 0
    """sequences per forward/backward in the update (gradient accumulation, one optimiser step; the update equals
    the whole-batch one within float tolerance); score() then keeps no graph. 0 = the whole batch at once"""
    logit_chunk: int = 0
    """completion positions per chunk of LM head + log-softmax + entropy (no (N, T, V) fp32 logits; each chunk
    recomputed in backward). 0 = full logits at once"""
    gradient_checkpointing: bool = False
    """recompute each decoder layer in backward (less activation memory, ~1/3 more compute)"""
    shared_prefix: bool = False
    """run each distinct prompt once in the training pass and its K completions on its cached keys/values
    (``corl_bench.train.prefix``): same loss and gradient within float rounding, fewer tokens computed (the prompt
    once instead of K times, no logits on prompt positions); not with logit_chunk or gradient_checkpointing"""
    lora_rank: int = 0
    """train LoRA adapters of this rank instead of all weights (needs peft); 0 = full fine-tuning; a cohort agent
    may override it (``lora_rank:`` in its entry)"""
    lora_alpha: float = 0.0
    """LoRA scaling numerator (scale = alpha / rank); 0 = 2 x rank"""
    lora_dropout: float = 0.0
    """dropout on the LoRA adapters' input while training; 0 = none"""
    lora_targets: tuple[str, ...] = ("all-linear",)
    """modules that get adapters: all-linear (every linear layer but the LM head) or names, e.g. [q_proj,v_proj]"""
    autocast: str = "off"
    """``bfloat16``: mixed precision as TRL and verl train on GPUs: weights, gradients and AdamW state stay fp32
    (``model.dtype=float32``), the training and scoring forward passes run under ``torch.autocast`` in bf16
    (log-softmax and entropy in fp32). ``off`` (default): every forward in the parameters' dtype. ``auto``: bf16 where
    the CPU has bf16 instructions and a bf16 matrix product measured faster (or the GPU supports bf16), off elsewhere
    (:mod:`corl_bench.train.precision`; resolved once, written into the resolved config; with the fast engine it
    also decodes with a bf16 copy unless ``rollout.engine_options.dtype`` is set)"""
    keep_host_memory: bool = True
    """keep freed CPU memory in the process for reuse during a run (glibc: no mmap / no trimming,
    ``corl_bench.hostmem``): the large tensors of every step stop page-faulting; same results, the process holds
    its peak memory until the run ends. false = the C library's default"""

    def __post_init__(self) -> None:
        for name in ("micro_batch", "logit_chunk", "lora_rank"):
            value = getattr(self, name)
            _check(value >= 0, f"memory.{name} must be >= 0 (got {value}); set memory.{name}=0 to turn it off")
        _check(self.lora_alpha >= 0, f"memory.lora_alpha must be >= 0 (got {self.lora_alpha}); set "
               "memory.lora_alpha=0 for 2 x rank")
        _check(0 <= self.lora_dropout < 1, f"memory.lora_dropout must be in [0, 1) (got {self.lora_dropout}); set "
               "memory.lora_dropout=0")
        _check(len(self.lora_targets) > 0 and all(t.strip() for t in self.lora_targets),
               "memory.lora_targets is empty; set memory.lora_targets=[all-linear] or module names like "
               "[q_proj,v_proj]")
        _check(self.autocast in ("off", "bfloat16", "auto"), f"memory.autocast must be off, bfloat16 or auto (got "
               f"{self.autocast!r}); set memory.autocast=off")
        _check(not (self.shared_prefix and (self.logit_chunk or self.gradient_checkpointing)),
               "memory.shared_prefix cannot be combined with memory.logit_chunk or memory.gradient_checkpointing; "
               "set memory.shared_prefix=false or turn those off (memory.micro_batch bounds memory with it)")


@dataclass(frozen=True)
class MethodConfig:
    name: str = "corl"
    """a registered method (``corl-bench ls methods``)"""
    options: Mapping[str, Any] = field(default_factory=dict)
    """method-specific options, validated by the method (e.g. ``votes_per_prompt`` for ttrl)"""


def check_resources(resources: Any, where: str) -> None:
    """One-line ConfigError unless ``resources`` maps custom Ray resource names (not Ray's own CPU, GPU, memory)
    to amounts Ray accepts (> 0, at most 4 decimals); ``where`` names the field."""
    _check(isinstance(resources, Mapping), f"{where} must be a mapping of Ray resource: amount (got {resources!r}); "
           "write e.g. {node_a: 1}")
    for name, amount in resources.items():
        _check(isinstance(name, str) and name.strip() != "" and name not in ("CPU", "GPU", "memory",
               "object_store_memory"), f"{where}: {name!r} is not a custom resource name; CPUs and GPUs are the "
               "agent's cpus / gpus (run.cpus_per_agent, run.gpus_per_agent): write e.g. {node_a: 1}")
        _check(isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount > 0
               and round(amount, 4) == amount, f"{where}: {name} must be a number > 0 with at most 4 decimals "
               f"(got {amount!r}); write e.g. {{{name}: 1}}")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    """short id used in logs and file names (e.g. ``a0-qwen2-bpe``)"""
    family: str
    """a registered model family of the profile"""
    view: str = "original"
    """which wording of each prompt this agent sees: original | rephrased"""
    seed_offset: int = 0
    """added to run.seed for this agent's sampling RNG (agents never share rollout randomness)"""
    device: str = ""
    """where this agent's model lives: auto | cpu | cuda | cuda:N; empty = model.device"""
    lora_rank: int | None = None
    """this agent's LoRA rank (0 = full fine-tuning); empty = memory.lora_rank"""
    lr: float | None = None
    """this agent's learning rate; empty = grpo.lr (models of different sizes and families rarely share one)"""
    prompt: str = ""
    """how the profile asks this agent; empty = the profile's way. hf: paper (the paper's instruction, the default)
    | bare (the problem alone) | fewshot (three worked examples as plain text, for base models) | fewshot-arith (the
    same with three arithmetic examples: the generated arithmetic sets) | r1v (the paper's
    vision-language turn: think in <think>, answer in <answer>; read it with rollout.extractor=answer_tag)"""
    gpus: float | None = None
    """``run.backend=ray``: GPUs reserved for this agent's actor; empty = run.gpus_per_agent; more than one: one rank
    per GPU (``ranks``)"""
    cpus: float | None = None
    """``run.backend=ray``: CPUs reserved for this agent's actor (also its torch threads); empty = run.cpus_per_agent"""
    resources: Mapping[str, float] = field(default_factory=dict, hash=False)
    """``run.backend=ray``: custom Ray resources this agent's actor needs, e.g. ``{node_a: 1}`` to pin it to the
    node started with ``ray start --resources '{"node_a": 1}'``; empty = none (``run.agent_resources`` can set it
    by agent name)"""
    ranks: int | None = None
    """worker processes that train this agent's one model together (FSDP2-sharded, :mod:`corl_bench.train.sharded`);
    empty = run.ranks_per_agent"""

    def __post_init__(self) -> None:
        _check(self.lora_rank is None or self.lora_rank >= 0, f"cohort agent {self.name!r}: lora_rank must be >= 0 "
               f"(got {self.lora_rank}); leave it out to use memory.lora_rank")
        _check(self.lr is None or (isinstance(self.lr, (int, float)) and not isinstance(self.lr, bool) and self.lr > 0),
               f"cohort agent {self.name!r}: lr must be a number > 0 (got {self.lr!r}); leave it out to use grpo.lr")
        _check(self.view in ("original", "rephrased"),
               f"cohort agent {self.name!r}: view must be original or rephrased (got {self.view!r}); "
               f"set view: original")
        for what, val in (("gpus", self.gpus), ("cpus", self.cpus)):
            _check(val is None or val >= 0, f"cohort agent {self.name!r}: {what} must be >= 0 (got {val}); leave it "
                   f"out to use run.{what}_per_agent")
        check_resources(self.resources, f"cohort agent {self.name!r}: resources")
        _check(self.ranks is None or (isinstance(self.ranks, int) and not isinstance(self.ranks, bool)
                                      and self.ranks >= 1),
               f"cohort agent {self.name!r}: ranks must be an integer >= 1 (got {self.ranks!r}); leave it out to use "
               "run.ranks_per_agent")
        _check(self.device == "" or _valid_device(self.device),
               f"cohort agent {self.name!r}: device must be auto, cpu, cuda or cuda:N (got {self.device!r}); "
               "leave it out to use model.device")


@dataclass(frozen=True)
class CohortConfig:
    name: str = "cross-family"
    """a registered cohort (``corl-bench ls cohorts``) or a new name when ``agents`` is given"""
    agents: tuple[AgentSpec, ...] = ()
    """spelled-out agents; empty = take them from the registered cohort. Co-RL's ring follows this order:
    agent n learns from agent n-1 (cyclic)"""
    profile: str = ""
    """the profile whose families the agents name (filled from the registered cohort)"""
    description: str = ""
    """one line on the cohort (shown by ``corl-bench ls cohorts``)"""
    paper_row: str = ""
    """the paper's row this cohort reproduces: different-family | same-family | different-family+ | three-agent
    (tables label it so and ``--reference paper`` sets the paper's row beside it); empty = none"""

    def __post_init__(self) -> None:
        names = [a.name for a in self.agents]
        _check(len(set(names)) == len(names), f"cohort {self.name!r}: agent names must be unique (got {names})")
        _check(self.paper_row in ("", *PAPER_ROWS), f"cohort {self.name!r}: paper_row must be one of "
               f"{', '.join(PAPER_ROWS)} (got {self.paper_row!r}); or leave it out")


@dataclass(frozen=True)
class EvalConfig:
    benchmarks: tuple[str, ...] = ("micro-test",)
    """registered benchmarks every agent is evaluated on (``corl-bench ls benchmarks``); not set: the profile's
    own suites where it has them (micro: micro-test)"""
    samples: int = 8
    """samples per problem for sampled pass@1 (avg@k) and maj@k"""
    temperature: float = 1.0
    """sampling temperature of the sampled evaluation (avg@k, maj@k)"""
    greedy: bool = True
    """also decode greedily (greedy pass@1)"""
    max_problems: int = 0
    """evaluate only the first N problems of each benchmark; 0 = all"""
    max_new_tokens: int = 40
    """completion cap in evaluation"""
    before: bool = True
    """evaluate every agent before training (its base score)"""
    every: int = 0
    """also evaluate every N training steps (phases ``step-NNNNNN``, for training-dynamics plots); 0 = never"""
    select: str = "final"
    """which checkpoint a run reports (corl_bench.train.select): ``final``; ``dev`` (best sampled pass@1 on the
    profile's labelled dev split, disjoint from every test set); ``label-free`` (best agreement with the peers'
    majority answers on that split, its labels unread, among phases before a collapse alarm); ``test-oracle``
    (best on the first of eval.benchmarks: the paper's protocol, optimistic, and every table footer says so).
    Chooses among the ``eval.every`` phases and final"""

    def __post_init__(self) -> None:
        _check(self.select in SELECT_RULES, f"eval.select must be one of {', '.join(SELECT_RULES)} (got "
               f"{self.select!r}); set eval.select=final")
        _check(len(self.benchmarks) > 0, "eval.benchmarks is empty; set e.g. eval.benchmarks=[micro-test]")
        _check(self.samples >= 0, f"eval.samples must be >= 0 (got {self.samples}); set eval.samples=8")
        _positive("eval", "temperature", self.temperature, "1.0")
        _check(self.max_problems >= 0, f"eval.max_problems must be >= 0 (got {self.max_problems}); set eval.max_problems=0 for all")
        _positive("eval", "max_new_tokens", self.max_new_tokens, "40")
        _check(self.every >= 0, f"eval.every must be >= 0 (got {self.every}); set eval.every=10 (0 = base and final only)")


@dataclass(frozen=True)
class DataConfig:
    train_pool: int = 0
    """0 = the profile's unlimited training stream; N = a fixed pool of its first N problems, read in epochs,
    each epoch in a new seeded order (like a finite training set)"""

    train: str = ""
    """the training set; empty = the profile's own (micro: its generated problems; hf: math-level345). hf profile:
    math-level345 | math-train | dapo-math | gsm8k-train | arith-1digit | arith-small | arith-mul |
    a .jsonl file (id, problem, answer) | hub:owner/name[:split]"""
    data_dir: str = ""
    """where training sets and benchmark files are looked up first (then ``$CORL_BENCH_DATA``, then the hub)"""
    rephrase_model: str = "smol"
    """hf profile: the model that writes the rephrased view (once per problem, greedy, cached on disk) for agents with
    view: rephrased — a model entry, a folder or a cached hub id"""

    def __post_init__(self) -> None:
        _check(self.train_pool >= 0, f"data.train_pool must be >= 0 (got {self.train_pool}); "
               "set data.train_pool=0 for the unlimited stream")
        _check(self.train == self.train.strip() and "\n" not in self.train,
               f"data.train must be one name or path (got {self.train!r}); set e.g. data.train=math-level345")
        _check(bool(self.rephrase_model.strip()), "data.rephrase_model is empty; set data.rephrase_model=smol")


@dataclass(frozen=True)
class MonitorConfig:
    """The live collapse alarm (corl_bench.train.monitor): label-free signals only, each relative to the agent's
    own first steps. It fires on *collapse* (answer diversity, 1 - majority ratio, fallen to diversity_drop x its
    baseline together with entropy, length or peer agreement fallen too) or *dissolution* (entropy risen to
    entropy_rise x while answer diversity has not fallen); logged as an event row in metrics.jsonl and shown in
    the progress display; run.stop_on_collapse ends the run on it."""

    collapse_alarm: bool = True
    """watch every agent for collapse (never changes training; false = no alarm at all)"""
    baseline_steps: int = 5
    """the agent's baseline: mean of each signal over its first N steps"""
    window: int = 5
    """the current value: mean over the last N steps (checked once it no longer overlaps the baseline)"""
    diversity_drop: float = 0.67
    """consensus symptom: answer diversity (1 - vote/majority_ratio) at most this share of its baseline"""
    entropy_drop: float = 0.67
    """entropy symptom: policy/entropy at most this share of its baseline"""
    length_drop: float = 0.67
    """length symptom: len/mean at most this share of its baseline"""
    agreement_drop: float = 0.5
    """divergence symptom (runs with 2+ agents): peer/agreement at most this share of its baseline"""
    entropy_rise: float = 1.2
    """dissolution: policy/entropy at least this multiple of its baseline while answer diversity has not fallen"""

    def __post_init__(self) -> None:
        _positive("monitor", "baseline_steps", self.baseline_steps, "5")
        _positive("monitor", "window", self.window, "5")
        for name in ("diversity_drop", "entropy_drop", "length_drop", "agreement_drop"):
            value = getattr(self, name)
            _check(0 < value < 1, f"monitor.{name} must be in (0, 1), a share of the baseline (got {value!r}); "
                   f"set e.g. monitor.{name}={getattr(MonitorConfig, name):.2g}")
        _check(self.entropy_rise > 1, f"monitor.entropy_rise must be > 1, a multiple of the baseline (got "
               f"{self.entropy_rise!r}); set e.g. monitor.entropy_rise=1.2")


RUN_BACKENDS = ("local", "ray", "auto")
PLACEMENTS = ("auto", "disjoint", "timeshare")
TRACKERS = ("wandb", "tensorboard")


@dataclass(frozen=True)
class RunConfig:
    seed: int = 0
    """the run's seed: prompt order, sampling, evaluation draws (each agent adds its ``seed_offset``)"""
    steps: int = 50
    """training steps (one rollout batch and one update per agent per step)"""
    output_dir: str = "results/runs"
    """where run directories are created (one per run, named ``run_id``)"""
    run_id: str = ""
    """directory name under output_dir; empty = <method>-<cohort>-s<seed>-<timestamp>"""
    log_samples_every: int = 10
    """write sample logs (prompt, completion, answer, pseudo-label, truth, reward) every N steps"""
    samples_per_log: int = 4
    """problems per agent written to the sample log each time (their first completion)"""
    save_checkpoints: bool = True
    """save every agent's final weights as a save_pretrained folder (checkpoints/final/<agent>)"""
    checkpoint_every: int = 10
    """write a resumable training checkpoint every N steps and after the last one (0 = never: no resume)"""
    tag: str = ""
    """a variant label recorded in run.json (e.g. ``budget-matched``); tables keep tagged runs in their own rows"""
    stop_on_collapse: bool = False
    """end the run cleanly when the collapse alarm fires (``monitor``): finish the step, checkpoint, evaluate
    final, status finished with ``stopped: collapse`` in run.json"""
    backend: str = "local"
    """where the agents live: ``local`` (one process, agents one after another), ``ray`` (one Ray actor per
    agent with its own resources; rollouts of all agents at the same time; ``ray start --head`` first for a
    cluster, else a local Ray is started) or ``auto`` (ray where that is predicted faster on this CPU:
    :mod:`corl_bench.train.parallel`)"""
    ray_address: str = ""
    """``run.backend=ray``: the cluster to join (``auto``, ``ray://host:10001``); empty = ``auto`` if a cluster
    is running here, else a local one"""
    gpus_per_agent: float = 0.0
    """``run.backend=ray``: GPUs per agent actor (a cohort agent's ``gpus`` overrides it); the paper: 4. More than
    one makes the agent sharded over that many ranks, one GPU each (``run.ranks_per_agent``)"""
    cpus_per_agent: float = 1.0
    """``run.backend=ray``: CPUs per agent actor (a cohort agent's ``cpus`` overrides it); also its torch threads"""
    placement: str = "auto"
    """how the agents and their rollout engines share GPUs (:mod:`corl_bench.placement`): ``disjoint`` (each
    agent's actor its own ``gpus``), ``timeshare`` (the agents share their GPUs: each actor reserves its share, and a
    ``vllm`` engine sleeps while its agent trains and wakes with the new weights), ``auto`` (disjoint where the
    cluster has a GPU for every agent's reservation, else timeshare; disjoint on the local backend)"""
    agent_resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict, hash=False)
    """``run.backend=ray``: custom Ray resources by agent name, e.g. ``{a0: {node_a: 1}, a1: {node_b: 1}}`` to
    place the agents of a registered cohort on the nodes that advertise them; replaces that agent's own
    ``resources``"""
    ranks_per_agent: int = 0
    """worker processes per agent that train its one model together, sharded with PyTorch FSDP2 (a cohort agent's
    ``ranks`` overrides it; :mod:`corl_bench.train.sharded`). 0 = automatic: the agent's GPUs when it has more than
    one (one rank per GPU), else 1 (the agent in one process, as always). On CPU the ranks use gloo"""
    trackers: tuple[str, ...] = ()
    """experiment trackers that mirror metrics.jsonl (which stays the source of truth): ``wandb``,
    ``tensorboard``; off by default"""

    def __post_init__(self) -> None:
        _check(self.steps >= 0, f"run.steps must be >= 0 (got {self.steps}); set e.g. run.steps=60")
        _check(self.log_samples_every >= 0, f"run.log_samples_every must be >= 0 (got {self.log_samples_every}); "
               f"set run.log_samples_every=10 (0 = never)")
        _check(self.checkpoint_every >= 0, f"run.checkpoint_every must be >= 0 (got {self.checkpoint_every}); "
               "set run.checkpoint_every=10 (0 = no resumable checkpoints)")
        _check(self.samples_per_log >= 0, f"run.samples_per_log must be >= 0 (got {self.samples_per_log}); set run.samples_per_log=4")
        _check("/" not in self.run_id and self.run_id not in (".", ".."),
               f"run.run_id must be a plain directory name (got {self.run_id!r}); use letters, digits and '-'")
        _check(self.backend in RUN_BACKENDS, f"run.backend must be one of {', '.join(RUN_BACKENDS)} (got "
               f"{self.backend!r}); set run.backend=local (one process) or run.backend=ray (one actor per agent)")
        _check(self.gpus_per_agent >= 0 and self.cpus_per_agent > 0, f"run.gpus_per_agent must be >= 0 and "
               f"run.cpus_per_agent > 0 (got {self.gpus_per_agent}, {self.cpus_per_agent}); e.g. run.cpus_per_agent=1")
        _check(self.placement in PLACEMENTS, f"run.placement must be one of {', '.join(PLACEMENTS)} (got "
               f"{self.placement!r}); e.g. run.placement=timeshare (agents share a GPU) or run.placement=auto")
        _check(isinstance(self.agent_resources, Mapping), f"run.agent_resources must map agent names to Ray "
               f"resources (got {self.agent_resources!r}); write e.g. run.agent_resources={{a0: {{node_a: 1}}}}")
        for agent, resources in self.agent_resources.items():
            check_resources(resources, f"run.agent_resources.{agent}")
        _check(isinstance(self.ranks_per_agent, int) and self.ranks_per_agent >= 0,
               f"run.ranks_per_agent must be an integer >= 0 (got {self.ranks_per_agent!r}); set run.ranks_per_agent=2 "
               "(0 = one rank per GPU of the agent)")
        bad = [t for t in self.trackers if t not in TRACKERS]
        _check(not bad, f"run.trackers: unknown tracker {bad[0]!r} (known: {', '.join(TRACKERS)}); e.g. "
               "run.trackers=[tensorboard]" if bad else "")
        _check(all(c.isalnum() or c in "-_." for c in self.tag),
               f"run.tag must use letters, digits, '-', '_' or '.' (got {self.tag!r}); e.g. run.tag=budget-matched")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    cohort: CohortConfig = field(default_factory=CohortConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    data: DataConfig = field(default_factory=DataConfig)
    run: RunConfig = field(default_factory=RunConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    set_keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The ``section.field`` keys the user wrote (config file, a sweep's and a cell's ``set:``, ``--set``, ``--steps``
    and the other flags), recorded by :func:`config_from_dict`. Not part of the config: never dumped or compared."""

    def __post_init__(self) -> None:
        _check(self.memory.autocast == "off" or self.model.dtype == "float32", f"memory.autocast="
               f"{self.memory.autocast} keeps fp32 master weights; set model.dtype=float32 (got {self.model.dtype})")

    def is_set(self, key: str) -> bool:
        """Whether the user set ``key`` (``section.field``): it was written (:attr:`set_keys`), or — a Config built
        in code — it holds a value other than the global default. A profile's default fills only keys not set, so a
        value the user wrote runs even when it equals the global default (``rollout.samples_per_prompt: 8``)."""
        if key in self.set_keys:
            return True
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name) != getattr(_section_default(section), name)

    def to_dict(self) -> dict[str, Any]:
        out = _plain(dataclasses.asdict(self))
        out.pop("set_keys", None)
        return out

    def replace(self, **sections: Any) -> "Config":
        return dataclasses.replace(self, **sections)


def _section_default(section: str) -> Any:
    """``section`` at its global default (what :meth:`Config.is_set` compares a value built in code with)."""
    factories = {f.name: f.default_factory for f in fields(Config) if f.default_factory is not dataclasses.MISSING}
    if section not in factories:
        raise ConfigError(f"{section!r} is not a config section ({', '.join(factories)})")
    return factories[section]()  # type: ignore[operator]


def written_keys(data: Mapping[str, Any]) -> frozenset[str]:
    """The ``section.field`` keys a config mapping names (a section written whole, e.g. ``cohort: {name: ...}``,
    names its fields; ``section.field.sub`` counts as ``section.field``)."""
    return frozenset(f"{section}.{name}" for section, body in data.items() if isinstance(body, Mapping)
                     for name in body)


def agent_resources(spec: AgentSpec, run: RunConfig) -> tuple[int, float, float]:
    """(ranks, GPUs, CPUs) of one cohort agent: its own ``ranks`` / ``gpus`` / ``cpus``, else the run's per-agent
    values; ``run.ranks_per_agent=0`` (the default) gives one rank per GPU when the agent has more than one GPU
    (a whole number of them), else one rank. GPUs and CPUs are the agent's, shared evenly by its ranks."""
    gpus = spec.gpus if spec.gpus is not None else run.gpus_per_agent
    cpus = spec.cpus if spec.cpus is not None else run.cpus_per_agent
    ranks = spec.ranks if spec.ranks is not None else run.ranks_per_agent
    if not ranks:
        ranks = int(gpus) if gpus > 1 and float(gpus).is_integer() else 1
    return ranks, gpus, cpus


# ------------------------------------------------------------------------------------------- loading
#: Fields that moved from ``grpo:`` to ``memory:``; old configs, ``--set grpo.<field>=...`` and the config.yaml of
#: older run directories still name them under grpo.
MOVED_TO_MEMORY = tuple(f.name for f in fields(MemoryConfig))
_warned_moved: set[str] = set()


def _moved_keys(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with every ``grpo.<memory field>`` moved to ``memory.<field>`` (a deprecation warning, once per key)."""
    grpo = data.get("grpo")
    if not isinstance(grpo, Mapping) or not any(k in MOVED_TO_MEMORY for k in grpo):
        return data
    memory = data.get("memory")
    if memory is None:
        memory = {}
    if not isinstance(memory, Mapping):
        return data  # _build names the bad memory section
    grpo, memory = dict(grpo), dict(memory)
    moved = [k for k in grpo if k in MOVED_TO_MEMORY]
    for key in moved:
        value = grpo.pop(key)
        if key in memory and memory[key] != value:
            raise ConfigError(f"grpo.{key} ({value!r}) and memory.{key} ({memory[key]!r}) disagree; grpo.{key} "
                              f"moved to memory.{key}: keep only memory.{key}")
        memory[key] = value
    if not set(moved) <= _warned_moved:  # one line per load, not per key (an older run's config.yaml has all)
        _warned_moved.update(moved)
        log.warning("%s moved to the memory section and were read as memory.*; write memory.<key> in configs "
                    "and --set", ", ".join(f"grpo.{k}" for k in moved))
    return {**data, "grpo": grpo, "memory": memory}


def config_from_dict(data: Mapping[str, Any] | None) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        sections = ", ".join(f.name for f in fields(Config) if f.name != "set_keys")
        raise ConfigError(f"a config must be a mapping of sections ({sections})")
    data = _moved_keys(data)
    memory = data.get("memory")
    if isinstance(memory, Mapping) and memory.get("autocast") is False:  # YAML reads a bare off as false
        data = {**data, "memory": {**memory, "autocast": "off"}}
    if "set_keys" in data:
        raise ConfigError("unknown config key set_keys; it is recorded from what a config writes, not written")
    cfg = _build(Config, data, "")
    return dataclasses.replace(cfg, set_keys=written_keys(data))


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (optional), apply ``key=value`` overrides, validate, and return a frozen Config."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config path {str(p)!r} is a directory; pass the path of a YAML file")
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist; pass the path of a YAML file")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"config file {str(p)!r} is not valid YAML{where}; fix the syntax") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config file {str(p)!r} is not UTF-8 text") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(p)!r} must hold a mapping of sections, not {type(loaded).__name__}")
        data = loaded or {}
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(data, key, value)
    return config_from_dict(data)


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
