"""One run end to end: resolve and validate the config, open the run, build agents, evaluate, train, finish.

``resolve`` does every check that can fail *before* anything is written, so a bad method, cohort, option or field
leaves ``results/`` untouched. :func:`run` reads as the list of stages; each is a function of
:mod:`corl_bench.train.session` (and resuming, of :mod:`corl_bench.train.resume`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from corl_bench.config import Config, ConfigError, machine_problem
from corl_bench.profile import Profile, check_profile_class
from corl_bench.registries import BENCHMARKS, COHORTS, ENGINES, EXTRACTORS, METHODS, PROFILES
from corl_bench.registries import RegistryError
from corl_bench import placement

__all__ = ["Plan", "canonical_names", "prepare", "resolve", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    config: Config  # cohort expanded
    method_cls: type
    options: Any
    notes: tuple[str, ...] = ()
    """what the profile filled in keys nobody set, and its memory estimate (validate prints them; run.json: resolved)"""


def _lookup(registry: Any, name: str, field: str) -> Any:
    try:
        return registry.get(name)
    except RegistryError as e:
        raise ConfigError(f"{field}: {e}") from None


def _default_profile(cfg: Config) -> str:
    """``model.profile`` at its global default (validation looks up any other name early)."""
    return type(cfg.model)().profile


def _resolve_cohort(cfg: Config) -> tuple[Config, Any]:
    """``cfg`` with its cohort expanded (a registered one looked up) and the profile that cohort runs under, and
    that profile's class; one-line ConfigError for a profile or cohort that is not registered or does not fit."""
    cohort = cfg.cohort
    if not cohort.agents:  # a registered cohort (cohort.paper_row, when set, still names its paper row)
        cohort = _lookup(COHORTS, cohort.name, "cohort.name")
        if cfg.cohort.paper_row:
            cohort = dataclasses.replace(cohort, paper_row=cfg.cohort.paper_row)
    profile_name = cfg.model.profile
    if not cfg.is_set("model.profile") and cohort.profile:  # an unset profile gives way to the cohort's
        profile_name = cohort.profile
    if profile_name not in PROFILES:
        raise ConfigError(f"cohort {cohort.name!r} is defined for profile {profile_name!r}, which is not registered "
                          f"({', '.join(repr(n) for n in PROFILES.names())}); pick a cohort of a registered profile "
                          "(corl-bench ls cohorts)")
    profile_cls = _lookup(PROFILES, profile_name, "model.profile")
    check_profile_class(profile_name, profile_cls)
    if cohort.profile and cohort.profile != profile_name:
        raise ConfigError(f"cohort {cohort.name!r} is defined for profile {cohort.profile!r}, not "
                          f"{profile_name!r}; pick a cohort of that profile (corl-bench ls cohorts)")
    cfg = cfg.replace(cohort=_placed(cohort, cfg.run.agent_resources))
    if profile_name != cfg.model.profile:
        cfg = cfg.replace(model=dataclasses.replace(cfg.model, profile=profile_name))
    return cfg, profile_cls


def _placed(cohort: Any, by_name: Any) -> Any:
    """``cohort`` with ``run.agent_resources`` written into its agents' ``resources`` (one-line ConfigError for a
    name that is not an agent of the cohort)."""
    if not by_name:
        return cohort
    names = [a.name for a in cohort.agents]
    unknown = [n for n in by_name if n not in names]
    if unknown:
        raise ConfigError(f"run.agent_resources names agent {unknown[0]!r}, which cohort {cohort.name!r} does not "
                          f"have (its agents: {', '.join(names)}); use those names")
    agents = tuple(dataclasses.replace(a, resources=dict(by_name[a.name])) if a.name in by_name else a
                   for a in cohort.agents)
    return dataclasses.replace(cohort, agents=agents)


def canonical_names(cfg: Config) -> Config:
    """``cfg`` with ``method.name`` and a registered cohort's ``cohort.name`` as registered (``Co-RL`` -> ``corl``,
    ``GT_Reward`` -> ``gt-reward``, ``Cross-Family`` -> ``cross-family``: case, punctuation and spaces ignored), so
    run ids, config.yaml and run.json carry the registered name; one log line per name read otherwise. A name that
    is unknown or ambiguous stays as written (:func:`resolve` refuses it with the candidates)."""
    for section, registry in (("method", METHODS), ("cohort", COHORTS)):
        sec = getattr(cfg, section)
        if section == "cohort" and sec.agents:  # a cohort written out in the config: its name is free
            continue
        try:
            name = registry.primary(sec.name)
        except RegistryError:
            continue
        if name != sec.name:
            log.warning("%s %r read as %r", section, sec.name, name)
            cfg = cfg.replace(**{section: dataclasses.replace(sec, name=name)})
    return cfg


def resolve(cfg: Config) -> Plan:
    """Validate everything that can be checked without training; return the resolved plan. Writes nothing.

    ``corl-bench validate`` and ``corl-bench run`` both call this first, so validate refuses what run would."""
    cfg = canonical_names(cfg)
    if cfg.model.profile != _default_profile(cfg):
        _lookup(PROFILES, cfg.model.profile, "model.profile")
    method_cls = _lookup(METHODS, cfg.method.name, "method.name")
    cfg, profile_cls = _resolve_cohort(cfg)
    cohort = cfg.cohort
    defaults = profile_cls.default_benchmarks()  # the profile's own test suites, when the config keeps its default
    filled_benchmarks = bool(defaults) and not cfg.is_set("eval.benchmarks")
    if filled_benchmarks:
        cfg = cfg.replace(eval=dataclasses.replace(cfg.eval, benchmarks=tuple(defaults)))
    for agent in cohort.agents:
        profile_cls.check_agent(agent)
    cfg, backend_note = _resolve_backend(cfg, profile_cls)  # run.backend=auto: in parallel where that is faster
    cfg, filled = profile_cls.fill_defaults(cfg, method_cls)  # the profile's own sizes (hf: a CPU step)
    refilled = any(n.startswith("eval.benchmarks=") for n in filled)  # the profile chose again (hf on a CPU)
    notes = ([f"eval.benchmarks={list(defaults)} (its default suites; eval.benchmarks was not set)"]
             if filled_benchmarks and not refilled else []) + list(filled) + backend_note
    if cfg.memory.autocast == "auto":  # the machine decides, once, and the resolved config says what it chose
        cfg, why = _resolve_autocast(cfg)
        notes.append(why)
    method_cls.check_cohort(cohort.agents, cohort.name)
    _check_paper_row(cohort)
    options = method_cls.parse_options(cfg.method.options)
    method_cls(options, cohort.agents).generation_n(cfg.rollout.samples_per_prompt)  # option/rollout consistency
    for b in cfg.eval.benchmarks:
        profile_cls.check_benchmark(b, _lookup(BENCHMARKS, b, "eval.benchmarks"))  # the profile decides
    engine_cls = _lookup(ENGINES, cfg.rollout.backend, "rollout.backend")
    _check_extractor(cfg.rollout.extractor)
    _check_images(cfg, profile_cls, engine_cls)
    from corl_bench.train.monitor import check_monitor
    from corl_bench.train.select import check_selection

    check_selection(cfg, profile_cls, len(cohort.agents))  # eval.select: something to choose from, a dev split
    check_monitor(cfg)
    if cfg.run.trackers:  # run.trackers: the packages are installed (nothing imported)
        from corl_bench.train.trackers import check_trackers

        check_trackers(cfg.run.trackers)
    profile_cls.check_data(cfg)
    _check_output_dir(Path(cfg.run.output_dir))
    if hasattr(engine_cls, "check_available"):  # optional hook: an engine whose backend is not installed (vllm)
        engine_cls.check_available()
    _check_engine_options(engine_cls, cfg.rollout.backend, cfg.rollout.engine_options)
    if cfg.run.backend == "ray" and importlib.util.find_spec("ray") is None:  # validate --elsewhere: a warning
        machine_problem("run.backend=ray needs Ray: pip install -c constraints-cpu.txt -e '.[ray]'; or set "
                        "run.backend=local")
    _check_devices(cfg)
    placement.check(cfg)  # run.placement: what needs one process per agent, what cannot share a GPU
    _check_ranks(cfg)  # an agent over several ranks (FSDP2): what it does not support yet
    if (cfg.memory.lora_rank or any(a.lora_rank for a in cohort.agents)) and importlib.util.find_spec("peft") is None:
        raise ConfigError("LoRA (memory.lora_rank or an agent's lora_rank) needs peft: pip install -c "
                          "constraints-cpu.txt 'peft>=0.11'; or set memory.lora_rank=0")
    profile_cls(cfg.model).check_writable([a.family for a in cohort.agents])
    notes = [*notes, *profile_cls.check_memory(cfg, method_cls)]  # does a step fit the devices
    return Plan(cfg, method_cls, options, tuple(notes))


def _resolve_autocast(cfg: Config) -> tuple[Config, str]:
    """``memory.autocast=auto`` -> bfloat16 or off (:func:`corl_bench.train.precision.choose` on the agents' device);
    with bf16 and the fast engine, its decoding copy in bf16 too unless ``rollout.engine_options.dtype`` is set.
    Returns the config and the note that says which and why."""
    from corl_bench.train.precision import choose

    choice = choose(cfg.model.device, threads=cfg.model.threads)
    cfg = cfg.replace(memory=dataclasses.replace(cfg.memory, autocast=choice.autocast))
    note = f"memory.autocast={choice.autocast} (auto: {choice.reason})"
    options = dict(cfg.rollout.engine_options or {})
    if choice.autocast == "bfloat16" and cfg.rollout.backend == "fast" and "dtype" not in options \
            and cfg.model.dtype == "float32":
        cfg = cfg.replace(rollout=dataclasses.replace(cfg.rollout, engine_options={**options, "dtype": "bfloat16"}))
        note += "; rollout.engine_options.dtype=bfloat16 (the fast engine decodes with a bf16 copy)"
    return cfg, note


def _resolve_backend(cfg: Config, profile_cls: Any) -> tuple[Config, list[str]]:
    """``run.backend=auto`` -> ray (with ``run.cpus_per_agent``, unless set) or local, and the note that says why
    (:mod:`corl_bench.train.parallel`); any other backend as it is, no note."""
    if cfg.run.backend != "auto":
        return cfg, []
    from corl_bench.models.device import resolve_device
    from corl_bench.train.parallel import choose_backend

    devices = {a.device or cfg.model.device for a in cfg.cohort.agents}
    on_gpu = cfg.run.gpus_per_agent > 0 or any(d.startswith("cuda") or (d == "auto" and resolve_device(d) == "cuda")
                                               for d in devices)
    user_cpus = int(cfg.run.cpus_per_agent) if cfg.is_set("run.cpus_per_agent") else 0
    choice = choose_backend(len(cfg.cohort.agents), profile_cls.compute_weights(cfg), on_gpu=on_gpu,
                            cpus_per_agent=user_cpus)
    run = dataclasses.replace(cfg.run, backend=choice.backend)
    note = f"run.backend={choice.backend} (auto: {choice.reason})"
    if choice.backend == "ray" and not user_cpus:
        run = dataclasses.replace(run, cpus_per_agent=float(choice.cpus_per_agent))
        note += f"; run.cpus_per_agent={choice.cpus_per_agent}"
    return cfg.replace(run=run), [note]


def _check_extractor(name: str) -> None:
    """``rollout.extractor`` names a registered answer extractor (a plugin's through ``corl_bench.extractors``);
    ``code`` reads a program, not an answer to vote on."""
    if name in EXTRACTORS and EXTRACTORS.primary(name) != "code":
        return
    known = ", ".join(e for e in EXTRACTORS.names() if e != "code")
    raise ConfigError(f"rollout.extractor={name!r} is not a registered answer extractor (known: {known}); set "
                      "rollout.extractor=qwen, or register one through the corl_bench.extractors entry points")


def _check_ranks(cfg: Config) -> None:
    """Refuse, before anything starts, what a sharded agent (ranks > 1, :mod:`corl_bench.train.sharded`) cannot do."""
    from corl_bench.config import agent_resources

    for agent in cfg.cohort.agents:
        ranks = agent_resources(agent, cfg.run)[0]
        if ranks <= 1:
            continue
        lora = agent.lora_rank if agent.lora_rank is not None else cfg.memory.lora_rank
        for what, on in (("LoRA (lora_rank)", lora), ("memory.logit_chunk", cfg.memory.logit_chunk),
                         ("memory.shared_prefix", cfg.memory.shared_prefix)):
            if on:
                raise ConfigError(f"cohort agent {agent.name!r} trains on {ranks} ranks (FSDP2), which does not "
                                  f"support {what} yet: turn it off, or set the agent's ranks: 1")
        samples = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
        if samples < ranks:
            raise ConfigError(f"cohort agent {agent.name!r}: {samples} samples per step cannot be split over its "
                              f"{ranks} ranks; raise rollout.prompts_per_step or lower its ranks")


def _takes_images(profile_cls: Any, agent: Any) -> bool | None:
    """Whether the agent's model takes images (the profile's ``takes_images`` hook; None: not known before it is
    downloaded), else the profile's ``images`` attribute."""
    return profile_cls.takes_images(agent)


def _check_images(cfg: Config, profile_cls: Any, engine_cls: Any) -> None:
    """What a model's kind rules out, refused before anything is loaded: a vision-language agent with an engine or a
    memory option that takes no images, a text agent with a benchmark that has images."""
    image_benches = [b for b in cfg.eval.benchmarks if BENCHMARKS.get(b).modality == "image"]
    for agent in cfg.cohort.agents:
        vision = _takes_images(profile_cls, agent)
        if vision and not getattr(engine_cls, "supports_images", False):
            raise ConfigError(f"rollout.backend={cfg.rollout.backend} has no image input and agent {agent.name!r} "
                              f"({agent.family}) is a vision-language model; set rollout.backend=hf (or fast)")
        if vision and cfg.rollout.backend == "vllm" and profile_cls.own_image_codec(agent):
            raise ConfigError(f"rollout.backend=vllm takes Hugging Face VLMs with their own processor and agent "
                              f"{agent.name!r} ({agent.family}) is a corl-bench vision model that vLLM cannot load; "
                              "set rollout.backend=fast (or hf)")
        if vision is False and cfg.model.freeze_vision:
            raise ConfigError(f"model.freeze_vision is set and agent {agent.name!r} ({agent.family}) is a text model "
                              "(no vision tower); set model.freeze_vision=false")
        if vision is False and image_benches:
            raise ConfigError(f"eval.benchmarks: {image_benches[0]} has images and agent {agent.name!r} "
                              f"({agent.family}) is a text model; evaluate text benchmarks (corl-bench ls benchmarks) "
                              "or give the cohort vision-language models")


def _check_devices(cfg: Config) -> None:
    """``model.device`` and every agent's ``device`` exist here (a CUDA device that torch does not see is one line).
    Not with ``run.backend=ray``: the agents' devices are those of the nodes their actors land on."""
    if cfg.run.backend == "ray":
        return
    wanted = dict.fromkeys(a.device or cfg.model.device for a in cfg.cohort.agents)
    for device in wanted:
        if device and device.startswith("cuda"):
            from corl_bench.config import MachineError, machine_problem
            from corl_bench.models.device import resolve_device

            try:
                resolve_device(device)
            except MachineError as e:
                machine_problem(str(e))


def _check_paper_row(cohort: Any) -> None:
    """One-line ConfigError when ``cohort.paper_row`` names a paper row whose design the agents do not have (two
    agents, or three on the ring; one family or several; a rephrased view only in different-family+)."""
    row, agents = cohort.paper_row, cohort.agents
    if not row:
        return
    want, families = 3 if row == "three-agent" else 2, {a.family for a in agents}
    misfit = ""
    if len(agents) != want:
        misfit = f"has {want} agents (got {len(agents)})"
    elif row == "same-family" and len(families) > 1:
        misfit = "has one family twice (got several)"
    elif row.startswith("different-family") and len(families) < 2:
        misfit = "has agents of different families (got one)"
    elif sum(a.view == "rephrased" for a in agents) != (row == "different-family+"):
        misfit = "has one agent on the rephrased view" if row.endswith("+") else "has no rephrased view"
    if misfit:
        raise ConfigError(f"cohort {cohort.name!r}: the paper's {row} row {misfit}; fix the agents or leave "
                          "cohort.paper_row out")


def _check_engine_options(engine_cls: Any, backend: str, options: Any) -> None:
    """rollout.engine_options must be keyword options of the engine's constructor (one line naming them if not)."""
    import inspect

    if not options:
        return
    params = inspect.signature(engine_cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for key in options:
        if key not in known:
            raise ConfigError(f"rollout.engine_options: the {backend} engine has no option {key!r} (it has: "
                              f"{', '.join(known) or 'none'}); remove it or pick another rollout.backend")


def _check_output_dir(path: Path) -> None:
    """One-line ConfigError when run directories could not be created under ``path`` (nothing is created)."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise ConfigError(f"cannot create results directory {path} ({probe} is a file, not a directory); set "
                          "run.output_dir to a writable directory")
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create results directory {path} ({probe} is not writable); set "
                          "run.output_dir to a writable directory")


def prepare(cfg: Config) -> Plan:
    """The resolved :class:`Plan` of ``cfg``, the process seeded and its threads set; the
    profile's models fetched first when it downloads any (then resolved again: a model's kind is known now)."""
    import torch

    plan = resolve(cfg)
    cfg = plan.config
    torch.set_num_threads(cfg.model.threads or (os.cpu_count() or 1))
    torch.manual_seed(cfg.run.seed)
    profile_cls = PROFILES.get(cfg.model.profile)
    if profile_cls.fetch is not Profile.fetch:  # the profile downloads models: fetch, then check their kinds
        profile_cls.fetch(cfg)
        again = resolve(cfg)  # of the resolved config: what the first pass filled is set now, so keep its notes
        plan = dataclasses.replace(again, notes=tuple(dict.fromkeys((*plan.notes, *again.notes))))
    return plan


def run(cfg: Config, *, console: Any = None, resume: Path | None = None, auto_resume: bool = True,
        on_open: Callable[[Path], None] | None = None) -> Path:
    """Train and evaluate one (method, cohort, seed) cell; returns the run directory. ``resume``: continue that
    run directory from its last checkpoint (its config must equal ``cfg``); without it, an interrupted run under
    ``run.output_dir`` with exactly this config is resumed (``auto_resume=False``: always a new run), a finished one is
    not rerun. Stages: :mod:`corl_bench.train.session`; an exception marks the run failed in its run.json.
    ``on_open(run_dir)``: once run.json is written (then ``--resume run_dir`` continues it; the CLI prints that)."""
    from corl_bench.hostmem import keep_host_memory
    from corl_bench.results import run_lock
    from corl_bench.train.progress import RunProgress
    from corl_bench.train.session import Session, open_run

    plan = prepare(cfg)  # resolve (writes nothing), seed the process, fetch the profile's models
    run_dir, record = open_run(plan, resume, auto_resume)  # a new run directory, or one reopened (resumed_at)
    if record is None:
        return run_dir  # it finished already
    session = Session(plan, run_dir, record, resumed=bool(record.resumed_at))
    # freed CPU memory stays in the process while the run lasts (memory.keep_host_memory): same results, no page
    # faults on the tensors every step allocates again
    with keep_host_memory(plan.config.memory.keep_host_memory), run_lock(run_dir), session:
        if on_open is not None:
            on_open(run_dir)
        with RunProgress(console) as prog:
            session.build(prog)  # agents, method, benchmarks, trainer
            session.restore()  # a resumed run: its last checkpoint and history
            session.evaluate_base()
            session.train()
            session.evaluate_final()
    session.summary(console)
    return run_dir
