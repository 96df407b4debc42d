"""One run end to end: resolve and validate the config, build agents, evaluate, train, evaluate, summarise.

``resolve`` does every check that can fail *before* anything is written, so a bad method, cohort, option or field
leaves ``results/`` untouched.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_bench.config import Config, ConfigError, dump_config
from corl_bench.registries import BENCHMARKS, COHORTS, ENGINES, METHODS, PROFILES
from corl_bench.results import RunDir, atomic_write_text, is_event, read_complete_rows
from corl_bench.registries import RegistryError

log = logging.getLogger(__name__)
DEFAULT_PROFILE = "micro"


class ResourceError(RuntimeError):
    """The machine ran out of something (disk, memory, permission); the message says what to change. The run
    directory keeps its last checkpoint, so the run resumes once the cause is fixed."""


def _resource_error(exc: BaseException, run_dir: Path) -> ResourceError | None:
    import errno

    resume = f"then resume with: corl-bench run --resume {run_dir}"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError(f"disk full while writing {exc.filename or run_dir}; free space (or set "
                             f"run.output_dir on another disk), {resume}")
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        return ResourceError(f"cannot write {exc.filename or run_dir} ({exc.strerror}); make it writable, {resume}")
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()):
        return ResourceError("out of memory; lower rollout.prompts_per_step, rollout.samples_per_prompt or "
                             f"rollout.max_new_tokens (or eval.max_new_tokens), {resume}")
    return None


@dataclass(frozen=True)
class Plan:
    config: Config  # cohort expanded
    method_cls: type
    options: Any
    notes: tuple[str, ...] = ()
    """what the profile chose where the config left a default, and its memory estimate (validate prints them)"""


def _lookup(registry: Any, name: str, field: str) -> Any:
    try:
        return registry.get(name)
    except RegistryError as e:
        raise ConfigError(f"{field}: {e}") from None


def resolve(cfg: Config) -> Plan:
    """Validate everything that can be checked without training; return the resolved plan. Writes nothing.

    ``corl-bench validate`` and ``corl-bench run`` both call this first, so validate refuses what run would."""
    if cfg.model.profile != DEFAULT_PROFILE:
        _lookup(PROFILES, cfg.model.profile, "model.profile")
    method_cls = _lookup(METHODS, cfg.method.name, "method.name")
    cohort = cfg.cohort
    if not cohort.agents:  # a registered cohort (cohort.paper_row, when set, still names its paper row)
        cohort = _lookup(COHORTS, cohort.name, "cohort.name")
        if cfg.cohort.paper_row:
            cohort = dataclasses.replace(cohort, paper_row=cfg.cohort.paper_row)
    profile_name = cfg.model.profile
    if profile_name == DEFAULT_PROFILE and cohort.profile:  # the default profile gives way to the cohort's own
        profile_name = cohort.profile
    if profile_name not in PROFILES:
        raise ConfigError(f"cohort {cohort.name!r} is defined for profile {profile_name!r}, which is not registered "
                          f"({', '.join(repr(n) for n in PROFILES.names())}); pick a cohort of a registered profile "
                          "(corl-bench ls cohorts)")
    profile_cls = _lookup(PROFILES, profile_name, "model.profile")
    if cohort.profile and cohort.profile != profile_name:
        raise ConfigError(f"cohort {cohort.name!r} is defined for profile {cohort.profile!r}, not "
                          f"{profile_name!r}; pick a cohort of that profile (corl-bench ls cohorts)")
    cfg = cfg.replace(cohort=cohort)
    if profile_name != cfg.model.profile:
        cfg = cfg.replace(model=dataclasses.replace(cfg.model, profile=profile_name))
    defaults = getattr(profile_cls, "default_benchmarks", None)  # optional hook: the profile's own test suites
    if defaults is not None and cfg.eval.benchmarks == type(cfg.eval)().benchmarks:
        cfg = cfg.replace(eval=dataclasses.replace(cfg.eval, benchmarks=tuple(defaults())))
    for agent in cohort.agents:
        profile_cls.check_agent(agent)
    notes: list[str] = []
    fill = getattr(profile_cls, "fill_defaults", None)  # optional hook: the profile's own sizes (hf: a CPU step)
    if fill is not None:
        cfg, notes = fill(cfg, method_cls)
    method_cls.check_cohort(cohort.agents, cohort.name)
    _check_paper_row(cohort)
    options = method_cls.parse_options(cfg.method.options)
    method_cls(options, cohort.agents).generation_n(cfg.rollout.samples_per_prompt)  # option/rollout consistency
    for b in cfg.eval.benchmarks:
        profile_cls.check_benchmark(b, _lookup(BENCHMARKS, b, "eval.benchmarks"))  # the profile decides
    engine_cls = _lookup(ENGINES, cfg.rollout.backend, "rollout.backend")
    _check_images(cfg, profile_cls, engine_cls)
    from corl_bench.train.monitor import check_monitor
    from corl_bench.train.select import check_selection

    check_selection(cfg, profile_cls, len(cohort.agents))  # eval.select: something to choose from, a dev split
    check_monitor(cfg)
    if cfg.run.trackers:  # run.trackers: the packages are installed (nothing imported)
        from corl_bench.train.trackers import check_trackers

        check_trackers(cfg.run.trackers)
    check_data = getattr(profile_cls, "check_data", None)  # optional hook (corl_bench.profile)
    if check_data is not None:
        check_data(cfg)
    _check_output_dir(Path(cfg.run.output_dir))
    if hasattr(engine_cls, "check_available"):  # optional hook: an engine whose backend is not installed (vllm)
        engine_cls.check_available()
    _check_engine_options(engine_cls, cfg.rollout.backend, cfg.rollout.engine_options)
    if cfg.run.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("run.backend=ray needs Ray: pip install -c constraints-cpu.txt -e '.[ray]'; or set "
                          "run.backend=local")
    _check_devices(cfg)
    if (cfg.memory.lora_rank or any(a.lora_rank for a in cohort.agents)) and importlib.util.find_spec("peft") is None:
        raise ConfigError("LoRA (memory.lora_rank or an agent's lora_rank) needs peft: pip install -c "
                          "constraints-cpu.txt 'peft>=0.11'; or set memory.lora_rank=0")
    profile_cls(cfg.model).check_writable([a.family for a in cohort.agents])
    check_memory = getattr(profile_cls, "check_memory", None)  # optional hook: does a step fit the devices
    if check_memory is not None:
        notes = [*notes, *check_memory(cfg, method_cls)]
    return Plan(cfg, method_cls, options, tuple(notes))


def _takes_images(profile_cls: Any, agent: Any) -> bool | None:
    """Whether the agent's model takes images (the profile's ``takes_images`` hook; None: not known before it is
    downloaded), else the profile's ``images`` attribute."""
    hook = getattr(profile_cls, "takes_images", None)
    return hook(agent) if hook is not None else bool(getattr(profile_cls, "images", False))


def _check_images(cfg: Config, profile_cls: Any, engine_cls: Any) -> None:
    """What a model's kind rules out, refused before anything is loaded: a vision-language agent with an engine or a
    memory option that takes no images, a text agent with a benchmark that has images."""
    image_benches = [b for b in cfg.eval.benchmarks if BENCHMARKS.get(b).modality == "image"]
    for agent in cfg.cohort.agents:
        vision = _takes_images(profile_cls, agent)
        if vision and not getattr(engine_cls, "supports_images", False):
            raise ConfigError(f"rollout.backend={cfg.rollout.backend} has no image input and agent {agent.name!r} "
                              f"({agent.family}) is a vision-language model; set rollout.backend=hf")
        if vision and (cfg.memory.shared_prefix or cfg.memory.logit_chunk):
            raise ConfigError(f"agent {agent.name!r} ({agent.family}) is a vision-language model: memory.shared_prefix "
                              "and memory.logit_chunk do not take images yet; set memory.shared_prefix=false "
                              "memory.logit_chunk=0")
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


def default_run_id(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tag = f"-{cfg.run.tag}" if cfg.run.tag else ""
    return f"{cfg.method.name}-{cfg.cohort.name}{tag}-s{cfg.run.seed}-{stamp}"


#: Config fields that only say how a run is shown, never how it trains: a run resumes whatever they hold now (a run
#: started before ``cohort.paper_row`` existed resumes under a cohort that names its paper row; its record keeps
#: what it was started with).
RESUME_IGNORES = frozenset({"cohort.paper_row"})


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "",
                ignore: frozenset[str] = frozenset()) -> list[str]:
    """Dotted paths whose values differ between two config dicts, with both values (paths in ``ignore`` skipped)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b, path = old.get(key), new.get(key), f"{prefix}{key}"
        if path in ignore:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, path + ".", ignore)
        elif a != b:
            out.append(f"{path} ({a!r} -> {b!r})")
    return out


def stored_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.yaml as the current code reads it: fields added since the run was started take their
    defaults, so a run written by an older version resumes when nothing it set has changed."""
    import yaml

    from corl_bench.config import config_from_dict

    path = RunDir(run_dir).config_path
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no config.yaml; it is not a corl-bench run directory")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return config_from_dict(raw).to_dict()
    except ConfigError as e:
        raise ConfigError(f"{path} no longer loads ({e}); start a new run") from None


def check_resumable(run_dir: Path, cfg: Config) -> dict[str, Any]:
    """run.json of ``run_dir`` if ``cfg`` is the config it was started with; one-line ConfigError naming changes."""
    changed = config_diff(stored_config(run_dir), cfg.to_dict(), ignore=RESUME_IGNORES)
    if changed:
        shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise ConfigError(f"cannot resume {run_dir}: the config changed: {shown}; resume with the original config "
                          "or start a new run")
    return RunDir(run_dir).info()


def find_interrupted(output_dir: Path, cfg: Config) -> Path | None:
    """The newest run under ``output_dir`` that did not finish and was started with exactly this config."""
    if not output_dir.is_dir():
        return None
    want = cfg.to_dict()
    found = []
    for rd in (RunDir(p) for p in output_dir.iterdir() if p.is_dir()):
        try:
            if rd.is_run() and rd.info().get("status") != "finished" and not config_diff(
                    stored_config(rd.path), want, ignore=RESUME_IGNORES):
                found.append(rd.path)
        except (OSError, ValueError, ConfigError):
            continue
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _history(run_dir: Path, start: int) -> list[dict[str, dict[str, Any]]]:
    """metrics.jsonl cut back to the steps before ``start`` (rows written after the checkpoint are dropped);
    returns the kept rows as per-step {agent: metrics} for the summary."""
    rd = RunDir(run_dir)
    by_step: dict[int, dict[str, Any]] = {}
    for path in (rd.metrics_path, rd.samples_path):
        if not path.is_file():
            continue
        rows = [r for r in read_complete_rows(path)[0] if r.get("step", 0) < start]
        atomic_write_text(path, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows))
        if path == rd.metrics_path:
            for r in rows:
                if not is_event(r):  # a collapse alarm is kept in the file but is not a step's metrics
                    by_step.setdefault(r["step"], {})[r["agent"]] = r
    return [by_step[s] for s in sorted(by_step)]


def build_agents(plan: Plan, profile: Any) -> list[Any]:
    """The run's agents in this process, each with its model loaded on its device (the profile has prepared the
    models). Everything ``resolve`` accepted gets through here (``tests/test_validate_matrix_on_cpu.py``)."""
    from corl_bench.profile import load_for
    from corl_bench.train.agent import Agent

    cfg = plan.config
    return [Agent(spec, *load_for(profile, spec.family, spec.device or cfg.model.device), cfg.grpo,
                  backend=cfg.rollout.backend, max_batch=cfg.rollout.max_batch,
                  engine_options=dict(cfg.rollout.engine_options), temperature=cfg.rollout.temperature,
                  auxiliary=plan.method_cls.auxiliary, memory=cfg.memory)
            for spec in cfg.cohort.agents]


def run(cfg: Config, *, console: Any = None, resume: Path | None = None, auto_resume: bool = True) -> Path:
    """Train and evaluate one (method, cohort, seed) cell; returns the run directory.

    ``resume``: continue that run directory from its last checkpoint (its config must equal ``cfg``). Without it,
    an interrupted run under ``run.output_dir`` with exactly this config is resumed (``auto_resume=False``:
    always start a new run). A finished run is not rerun.
    """
    import torch

    from corl_bench.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from corl_bench.eval.evaluator import eval_seed, evaluate, load_scores, n_generations, run_decoding
    from corl_bench.eval.specs import get_spec
    from corl_bench.train.monitor import CollapseWatch
    from corl_bench.train.progress import RunProgress, summary_table
    from corl_bench.train.select import Selector
    from corl_bench.results import environment_record, new_run_dir, now_iso, run_lock, write_json
    from corl_bench.train.trainer import Trainer

    plan = resolve(cfg)
    cfg = plan.config
    torch.set_num_threads(cfg.model.threads or (os.cpu_count() or 1))
    torch.manual_seed(cfg.run.seed)
    fetch = getattr(PROFILES.get(cfg.model.profile), "fetch", None)  # optional hook: download before writing
    if fetch is not None:
        fetch(cfg)
        plan = resolve(cfg)  # a model just downloaded: its kind (text / vision-language) is known now
    if resume is None and auto_resume:
        resume = find_interrupted(Path(cfg.run.output_dir), cfg)
        if resume is not None:
            log.warning("resuming the interrupted run %s (same config); use --fresh to start a new one", resume)
    if resume is not None:
        run_dir = Path(resume)
        info = check_resumable(run_dir, cfg)
        if info.get("status") == "finished":
            log.warning("%s already finished; nothing to do", run_dir)
            return run_dir
        info.setdefault("resumed_at", []).append(now_iso())
    else:
        run_dir = new_run_dir(Path(cfg.run.output_dir), cfg.run.run_id or default_run_id(cfg))
        atomic_write_text(RunDir(run_dir).config_path, dump_config(cfg))
        write_json(RunDir(run_dir).env_path, environment_record(cfg.run.seed))
        info = {"run_id": run_dir.name, "method": cfg.method.name, "cohort": cfg.cohort.name,
                "profile": cfg.model.profile, "seed": cfg.run.seed, "tag": cfg.run.tag, "status": "running",
                "started_at": now_iso(),
                "agents": [{"name": a.name, "family": a.family, "view": a.view} for a in cfg.cohort.agents],
                "steps": cfg.run.steps, "phases": [], "timings": {}}
        if cfg.cohort.paper_row:  # the paper's row the cohort reproduces: the table labels the run by it
            info["paper_row"] = cfg.cohort.paper_row
    started = time.time() - float(info.get("wall_seconds") or 0.0)
    rd = RunDir(run_dir)
    with run_lock(run_dir):
        info.update(status="running")
        write_json(rd.info_path, info)
        profile = PROFILES.get(cfg.model.profile)(cfg.model)
        if hasattr(profile, "configure"):  # optional hook: the run's data and benchmarks (corl_bench.profile)
            profile.configure(cfg)
        trackers: list[Any] = []
        actors: list[Any] = []
        try:
            with RunProgress(console) as prog:
                t0 = time.perf_counter()
                prog.warm_start(profile, [a.family for a in cfg.cohort.agents])
                if cfg.run.backend == "ray":  # one actor per agent, each loads its own model where it runs
                    from corl_bench.train.actors import start_agents

                    agents = actors = start_agents(cfg, plan.method_cls.auxiliary)
                else:
                    agents = build_agents(plan, profile)
                method = plan.method_cls(plan.options, cfg.cohort.agents)
                info["teachers"] = method.teachers()
                info["timings"]["models"] = time.perf_counter() - t0
                benches = {b: (BENCHMARKS.get(b).version, profile.benchmark(b))
                           for b in cfg.eval.benchmarks}
                total_gen = sum(n_generations(cfg.eval, len(items)) for _, items in benches.values()) * len(agents)
                scores: dict[str, dict[str, Any]] = {}
                selector = Selector(cfg, profile, run_dir)  # eval.select: dev / label-free evaluate their split

                def run_eval(phase: str) -> None:
                    t = time.perf_counter()
                    task = prog.add(f"eval {phase}", total_gen + selector.generations(phase, len(agents)))
                    specs = {b: get_spec(b) for b in benches}
                    for a in agents:  # each benchmark one chunk (the one evaluation path's seed rule), written fresh
                        seed = eval_seed(cfg.run.seed, a.spec.seed_offset)
                        scores.setdefault(phase, {})[a.name] = {b: evaluate(
                            a.generate, specs[b], items[: cfg.eval.max_problems or None],
                            out_path=rd.predictions_path(phase, a.name, b),
                            decoding=run_decoding(cfg.eval, specs[b]), seed=seed, resume=False,
                            tokenizer=getattr(a, "tokenizer", None),  # spec items: the agent's chat template
                            progress=lambda n: prog.advance(task, n)) for b, (_, items) in benches.items()}
                    selector.evaluate(phase, agents, advance=lambda n: prog.advance(task, n))
                    info["phases"] = [p for p in info["phases"] if p != phase] + [phase]
                    info["timings"][f"eval_{phase}"] = time.perf_counter() - t
                    write_json(rd.info_path, info)
                    for tr in trackers:  # run.trackers mirror the scores at the step they belong to
                        tr.log_eval(phase, phase_step(phase, info.get("stopped_after_step", cfg.run.steps)),
                                    scores[phase])

                if hasattr(profile, "decontaminate"):  # before the first training problem is drawn
                    against = {b: items for b, (_, items) in benches.items()}
                    if selector.split:  # the dev split chooses the checkpoint: it must not be trained on either
                        against[selector.benchmark] = selector.items
                    report = profile.decontaminate(against)
                    if report is not None:
                        info["contamination"] = report
                        (log.warning if report.get("dropped") else log.info)(
                            "contamination check of %s against %s: dropped %d of %d training problems",
                            report.get("training_set"), ", ".join(against), report.get("dropped", 0),
                            report.get("problems_before", 0))
                trainer = Trainer(cfg, agents, method, profile, run_dir)
                checkpoint = latest_checkpoint(run_dir) if resume is not None else None
                start = 0
                if checkpoint is not None:
                    state = load_checkpoint(checkpoint, agents)
                    trainer.load_state_dict(state)
                    start = state["step"]
                    log.warning("resumed %s at step %d from %s", run_dir.name, start, checkpoint.name)
                history = _history(run_dir, start)
                if cfg.run.trackers:  # wandb / tensorboard mirror metrics.jsonl (off by default)
                    from corl_bench.results import phase_step
                    from corl_bench.train.trackers import open_trackers
                    from corl_bench.train.trainer import step_rows

                    trackers = open_trackers(cfg, run_dir, start)
                watch = CollapseWatch(cfg, rd.metrics_path, info)  # the collapse alarm (label-free signals)
                watch.replay(history)
                if cfg.eval.before:
                    if "base" in info["phases"]:
                        scores["base"] = {a.name: load_scores(rd.eval_dir("base", a.name), benches)
                                          for a in agents}
                    elif start == 0:
                        run_eval("base")
                t = time.perf_counter()
                task = prog.add("train", cfg.run.steps)
                prog.advance(task, start)
                every = cfg.run.checkpoint_every
                for step in range(start, cfg.run.steps):
                    if watch.stopped:  # a resumed run that had stopped on a collapse alarm: straight to final
                        break
                    result = trainer.step(step)
                    trainer.write(result)
                    for tr in trackers:
                        tr.log_step(step, step_rows(result))
                    history.append(result.metrics)
                    stop = watch.observe(step, result.metrics, say=prog.alarm)  # event row; True: stop_on_collapse
                    prog.advance(task, 1, status=_status_line(result.metrics) + watch.status())
                    if cfg.eval.every and (step + 1) % cfg.eval.every == 0 and step + 1 < cfg.run.steps and not stop:
                        run_eval(f"step-{step + 1:06d}")  # before the checkpoint: a crash in it is redone on resume
                    if every and ((step + 1) % every == 0 or step + 1 == cfg.run.steps or stop):
                        save_checkpoint(run_dir, step + 1, agents, trainer.state_dict())
                    if stop:
                        break
                info["timings"]["train"] = info["timings"].get("train", 0.0) + time.perf_counter() - t
                reph = profile.rephraser() if hasattr(profile, "rephraser") else None  # hf: the rephrased view
                if reph is not None:
                    info["rephrase"] = {"model": reph.model_ref, "cache": str(reph.dir), **reph.stats}
                run_eval("final")
                selection = selector.record([a.name for a in agents], info.get("stopped_after_step", cfg.run.steps),
                                            watch.alarm_steps())
                if selection is not None:
                    info["selection"] = selection
                if cfg.run.save_checkpoints:
                    for a in agents:
                        a.save(rd.final_checkpoint(a.name))
        except BaseException as e:
            friendly = _resource_error(e, run_dir)
            info.update(status="failed", error=str(friendly) if friendly else f"{type(e).__name__}: {e}",
                        finished_at=now_iso(), wall_seconds=time.time() - started)
            try:
                write_json(rd.info_path, info)
            except OSError:
                pass  # the disk is full or read-only: run.json keeps its previous content
            if friendly is not None:
                raise friendly from None
            raise
        finally:
            if actors:
                from corl_bench.train.actors import stop_agents

                stop_agents(actors)
            if trackers:
                from corl_bench.train.trackers import close_trackers

                close_trackers(trackers)
        info.update(status="finished", finished_at=now_iso(), wall_seconds=time.time() - started)
        info.pop("error", None)
        write_json(rd.info_path, info)
    summary_table(console, info, scores, history)
    return run_dir


def _status_line(metrics: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for name, m in metrics.items():
        lab = m.get("label/accuracy")
        parts.append(f"{name.split('-')[0]} r={m['reward/mean']:.2f}" + (f" lbl={lab:.2f}" if lab is not None else ""))
    return "  ".join(parts)
