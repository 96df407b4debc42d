"""The stages of one run, in the order :func:`corl_bench.train.runner.run` calls them.

After :func:`corl_bench.train.runner.prepare` (resolve the config, seed the process), :func:`open_run` creates the
run directory or reopens an interrupted one. A :class:`Session` then holds everything one run builds (agents, method,
trainer, benchmarks, the collapse watch, scores, the run record) while it goes through :meth:`Session.build`,
:meth:`Session.restore`, :meth:`Session.evaluate_base`, :meth:`Session.train` and :meth:`Session.evaluate_final`.
As a context manager it writes the run record's ``status``: ``running`` on entry, ``finished`` on a clean exit and
``failed`` (with the error, mapped to a :class:`ResourceError` when the machine ran out of something) when any
exception, ``KeyboardInterrupt`` included, leaves it.

The run record (:class:`corl_bench.record.RunRecord`) is written through :meth:`Session.write` only.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

from corl_bench.record import AgentEntry, RunRecord
from corl_bench.registries import BENCHMARKS, PROFILES
from corl_bench.results import RunDir, atomic_write_text
from corl_bench.train.boundary import Submitting
from corl_bench.train.resume import check_resumable, find_interrupted, restore_history

log = logging.getLogger(__name__)

__all__ = ["ResourceError", "Session", "build_agents", "default_run_id", "new_record", "open_run"]


class ResourceError(RuntimeError):
    """The machine ran out of something (disk, memory, permission); the message says what to change. The run
    directory keeps its last checkpoint, so the run resumes once the cause is fixed."""


def resource_error(exc: BaseException, run_dir: Path) -> ResourceError | None:
    """The ResourceError that says what to change when ``exc`` means the machine ran out of disk, permission or
    memory; None for any other exception."""
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


def default_run_id(cfg: Any) -> str:
    """``<method>-<cohort>[-<tag>]-s<seed>-<date>-<time>``: a new run directory's name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tag = f"-{cfg.run.tag}" if cfg.run.tag else ""
    return f"{cfg.method.name}-{cfg.cohort.name}{tag}-s{cfg.run.seed}-{stamp}"


def build_agents(plan: Any, profile: Any) -> list[Any]:
    """The run's agents in this process, each with its model loaded on its device (the profile has prepared the
    models). Everything ``resolve`` accepted gets through here (``tests/test_validate_matrix_on_cpu.py``)."""
    from corl_bench.config import agent_resources
    from corl_bench import placement
    from corl_bench.train.agent import Agent

    cfg = plan.config
    agents: list[Any] = []
    try:
        for spec in cfg.cohort.agents:
            ranks, gpus, cpus = agent_resources(spec, cfg.run)
            if ranks > 1:  # one model trained by several local processes (corl_bench.train.sharded)
                from corl_bench.train.actors import start_sharded

                agents.append(start_sharded(cfg, spec, plan.method_cls.auxiliary, ranks, gpus, cpus,
                                            engine_options=placement.engine_options(cfg)))
                continue
            agents.append(Agent(spec, *profile.load(spec.family, spec.device or cfg.model.device), cfg.grpo,
                                backend=cfg.rollout.backend, max_batch=cfg.rollout.max_batch,
                                engine_options=placement.engine_options(cfg), temperature=cfg.rollout.temperature,
                                auxiliary=plan.method_cls.auxiliary, memory=cfg.memory,
                                freeze_vision=cfg.model.freeze_vision))
    except BaseException:
        stop_sharded(agents)
        raise
    return agents


def stop_sharded(agents: Sequence[Any]) -> None:
    """Stop the ranks of every sharded agent among ``agents`` (plain in-process agents need nothing)."""
    from corl_bench.train.ranks import ShardedAgentHandle

    for a in agents:
        if isinstance(a, ShardedAgentHandle):
            a.close()


def new_record(cfg: Any, run_id: str, notes: tuple[str, ...] = ()) -> RunRecord:
    """The record of a run that starts now; ``notes``: what resolving its config filled in or estimated (the lines
    ``validate`` prints, e.g. a profile default in a key nobody set), kept as ``resolved`` (absent when none)."""
    from corl_bench.results import now_iso

    return RunRecord(run_id=run_id, method=cfg.method.name, cohort=cfg.cohort.name, profile=cfg.model.profile,
                     seed=cfg.run.seed, tag=cfg.run.tag, status="running", started_at=now_iso(),
                     agents=tuple(AgentEntry(a.name, a.family, a.view) for a in cfg.cohort.agents),
                     steps=cfg.run.steps, phases=(), timings={},
                     paper_row=cfg.cohort.paper_row or None,  # the table labels the run by its paper row
                     resolved=tuple(notes) or None)


def open_run(plan: Any, resume: Optional[Path], auto_resume: bool) -> tuple[Path, Optional[RunRecord]]:
    """(run directory, its record) to train: ``resume``, else (``auto_resume``) the interrupted run of this config
    under ``run.output_dir``, else a new directory with config.yaml and env.json written. A reopened run's record
    has this resume's time appended to ``resumed_at`` (a new one has none); it is None when the run to resume
    already finished (nothing to do)."""
    from corl_bench.config import dump_config
    from corl_bench.results import environment_record, new_run_dir, now_iso, write_json

    cfg = plan.config
    if resume is None and auto_resume:
        resume = find_interrupted(Path(cfg.run.output_dir), cfg)
        if resume is not None:
            log.warning("resuming the interrupted run %s (same config); use --fresh to start a new one", resume)
    if resume is not None:
        run_dir = Path(resume)
        record = check_resumable(run_dir, cfg)
        if record.finished:
            log.warning("%s already finished; nothing to do", run_dir)
            return run_dir, None
        return run_dir, record.replace(resumed_at=(*(record.resumed_at or ()), now_iso()))
    run_dir = new_run_dir(Path(cfg.run.output_dir), cfg.run.run_id or default_run_id(cfg))
    atomic_write_text(RunDir(run_dir).config_path, dump_config(cfg))
    write_json(RunDir(run_dir).env_path, environment_record(cfg.run.seed))
    return run_dir, new_record(cfg, run_dir.name, plan.notes)


def status_line(metrics: dict[str, dict[str, float | None]]) -> str:
    """The training bar's status: each agent's mean reward (and label accuracy where it is known)."""
    parts = []
    for name, m in metrics.items():
        lab = m.get("label/accuracy")
        parts.append(f"{name.split('-')[0]} r={m['reward/mean']:.2f}" + (f" lbl={lab:.2f}" if lab is not None else ""))
    return "  ".join(parts)


class Session:
    """One run between opening its directory and writing its end (see the module docstring for the stages)."""

    def __init__(self, plan: Any, run_dir: Path, record: RunRecord, *, resumed: bool) -> None:
        self.plan, self.cfg = plan, plan.config
        self.run_dir, self.rd = Path(run_dir), RunDir(run_dir)
        self.record, self.resumed = record, resumed
        self.started = time.time() - float(record.wall_seconds or 0.0)  # wall time counts over every process
        self.trackers: list[Any] = []
        self.actors: list[Any] = []
        self.scores: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, dict[str, Any]]] = []
        self.start = 0  # the first step to train (a resumed run's checkpoint step)
        self.watch: Any = None  # the collapse watch (restore)
        self.prog: Any = None  # the progress display (build)
        self.profile: Any = None  # the profile instance (__enter__)
        self.agents: list[Any] = []  # build: Agents, or Ray actors (run.backend=ray)

    # ------------------------------------------------------------------ the record
    def write(self, **changes: Any) -> None:
        """Apply ``changes`` and the collapse watch's fields to the record, and write run.json."""
        if self.watch is not None:
            changes = {**self.watch.changes(), **changes}
        self.record = self.record.replace(**changes)
        self.rd.write_record(self.record)

    def _trained_steps(self) -> int:
        """The steps the final weights have: run.steps, or where the collapse alarm stopped the run."""
        if self.watch is not None and self.watch.stopped:
            return self.watch.stopped_after_step
        return self.record.stopped_after_step if self.record.stopped_after_step is not None else self.cfg.run.steps

    # ------------------------------------------------------------------ status: running / finished / failed
    def __enter__(self) -> "Session":
        self.write(status="running")
        self.profile = PROFILES.get(self.cfg.model.profile)(self.cfg.model)
        self.profile.configure(self.cfg)  # the run's data and benchmarks (corl_bench.profile)
        return self

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        from corl_bench.results import now_iso

        friendly = None
        try:
            if exc is not None:
                friendly = self._fail(exc)
        finally:
            self.close()
        if exc is not None:
            if friendly is not None:
                raise friendly from None
            return False
        self.write(status="finished", finished_at=now_iso(), wall_seconds=time.time() - self.started, error=None)
        return False

    def _fail(self, exc: BaseException) -> Any:
        """Mark the run failed (the error in one line); the ResourceError to raise instead, if the machine ran out
        of something."""
        from corl_bench.results import now_iso
        friendly = resource_error(exc, self.run_dir)
        try:
            self.write(status="failed", error=str(friendly) if friendly else f"{type(exc).__name__}: {exc}",
                       finished_at=now_iso(), wall_seconds=time.time() - self.started)
        except OSError:
            pass  # the disk is full or read-only: run.json keeps its previous content
        return friendly

    def close(self) -> None:
        """Stop the agents' actors and close the trackers (each run once, whatever happened)."""
        if self.actors:
            from corl_bench.train.actors import stop_agents

            stop_agents(self.actors)
        if self.trackers:
            from corl_bench.train.trackers import close_trackers

            close_trackers(self.trackers)

    # ------------------------------------------------------------------ build
    def build(self, prog: Any) -> None:
        """Models loaded as agents, the method, benchmarks, checkpoint selector, decontaminated data, trainer."""
        from corl_bench.eval.evaluator import n_generations
        from corl_bench.train.select import Selector
        from corl_bench.train.trainer import Trainer

        cfg, self.prog = self.cfg, prog
        t0 = time.perf_counter()
        prog.warm_start(self.profile, [a.family for a in cfg.cohort.agents])
        if cfg.run.backend == "ray":  # one actor per agent, each loads its own model where it runs
            from corl_bench.train.actors import start_agents

            self.agents = self.actors = start_agents(cfg, self.plan.method_cls.auxiliary)
            self.record = self.record.replace(actors={a.name: a.where for a in self.actors})
        else:
            self.agents = build_agents(self.plan, self.profile)
            from corl_bench.config import agent_resources

            if any(agent_resources(s, cfg.run)[0] > 1 for s in cfg.cohort.agents):  # sharded agents' processes
                from corl_bench.train.ranks import ShardedAgentHandle

                self.actors = [a for a in self.agents if isinstance(a, ShardedAgentHandle)]
        self.method = self.plan.method_cls(self.plan.options, cfg.cohort.agents)
        self.record = self.record.replace(teachers=self.method.teachers()).with_timing(
            "models", time.perf_counter() - t0)
        self.benches = {b: (BENCHMARKS.get(b).version, self.profile.benchmark(b))
                        for b in cfg.eval.benchmarks}
        self.total_gen = sum(n_generations(cfg.eval, len(items)) for _, items in self.benches.values()) * len(
            self.agents)
        self.selector = Selector(cfg, self.profile, self.run_dir)  # eval.select: dev / label-free evaluate a split
        self._decontaminate()
        self.trainer = Trainer(cfg, self.agents, self.method, self.profile, self.run_dir)

    def _decontaminate(self) -> None:
        """The profile's contamination check, before the first training problem is drawn (recorded in run.json)."""
        against = {b: items for b, (_, items) in self.benches.items()}
        if self.selector.split:  # the dev split chooses the checkpoint: it must not be trained on either
            against[self.selector.benchmark] = self.selector.items
        report = self.profile.decontaminate(against)
        if report is not None:
            self.record = self.record.replace(contamination=report)
            (log.warning if report.get("dropped") else log.info)(
                "contamination check of %s against %s: dropped %d of %d training problems",
                report.get("training_set"), ", ".join(against), report.get("dropped", 0),
                report.get("problems_before", 0))

    def restore(self) -> None:
        """A resumed run back at its last checkpoint (weights, optimiser, data and RNG state), its metrics cut back
        to it; trackers opened and the collapse watch replayed over the kept history."""
        from corl_bench.train.checkpoint import latest_checkpoint, load_checkpoint
        from corl_bench.train.monitor import CollapseWatch

        checkpoint = latest_checkpoint(self.run_dir) if self.resumed else None
        if checkpoint is not None:
            state = load_checkpoint(checkpoint, self.trainer.group)  # each agent reads its own file
            self.trainer.load_state_dict(state)
            self.start = state["step"]
            log.warning("resumed %s at step %d from %s", self.run_dir.name, self.start, checkpoint.name)
        self.history = restore_history(self.run_dir, self.start)
        if self.cfg.run.trackers:  # wandb / tensorboard mirror metrics.jsonl (off by default)
            from corl_bench.train.trackers import open_trackers

            self.trackers = open_trackers(self.cfg, self.run_dir, self.start)
        self.watch = CollapseWatch(self.cfg, self.rd.metrics_path)  # the collapse alarm (label-free signals)
        self.watch.replay(self.history)

    # ------------------------------------------------------------------ evaluate and train
    def evaluate(self, phase: str) -> None:
        """Every agent on every benchmark (and the selector's split) as evaluation ``phase``, written fresh; the
        phase recorded in run.json and mirrored to the trackers."""
        from corl_bench.eval import evaluator
        from corl_bench.eval.specs import get_spec
        from corl_bench.results import phase_step
        from corl_bench.train.progress import Eta

        cfg, prog, t = self.cfg, self.prog, time.perf_counter()
        total = self.total_gen + self.selector.generations(phase, len(self.agents))
        task, eta = prog.add(f"eval {phase}", total), Eta(total, "generations")

        def advance(n: int) -> None:
            prog.advance(task, n)
            eta.advance(n)

        from corl_bench.profile import asked_decoding, asked_items

        specs = {b: get_spec(b) for b in self.benches}
        lock = threading.Lock()

        def counted(n: int) -> None:
            with lock:
                advance(n)

        def one(a: Any) -> dict:
            """Agent ``a`` on every benchmark, each benchmark one chunk (the one evaluation path's seed rule)."""
            seed, scores = evaluator.eval_seed(cfg.run.seed, a.spec.seed_offset), {}
            for b, (_, items) in self.benches.items():
                scores[b] = evaluator.evaluate(  # ask_as_trained: in a's format
                    a.generate, specs[b], asked_items(self.profile, specs[b], items[: cfg.eval.max_problems or None],
                                                      a.spec),
                    out_path=self.rd.predictions_path(phase, a.name, b),
                    decoding=asked_decoding(self.profile, specs[b], evaluator.run_decoding(cfg.eval, specs[b]),
                                            a.spec),
                    seed=seed, resume=False,
                    tokenizer=getattr(a, "tokenizer", None),  # spec items: the agent's chat template
                    progress=counted)
                log.info("eval %s %s %s: %s", phase, b, a.name, eta.line())
            return scores

        done = self.scores.setdefault(phase, {})
        if len(self.agents) > 1 and all(isinstance(a, Submitting) for a in self.agents):
            # agents in their own processes (Ray actors): evaluated at the same time, as they train; each agent's
            # generations, seeds and files are its own, so the predictions are those of one after another
            with ThreadPoolExecutor(len(self.agents), thread_name_prefix="eval") as pool:
                futures = [pool.submit(one, a) for a in self.agents]
                for a, f in zip(self.agents, futures):
                    done[a.name] = f.result()
        else:
            for a in self.agents:
                done[a.name] = one(a)
        self.selector.evaluate(phase, self.agents, advance=advance)
        self.record = self.record.with_phase(phase, time.perf_counter() - t)
        self.write()
        for tr in self.trackers:  # run.trackers mirror the scores at the step they belong to
            tr.log_eval(phase, phase_step(phase, self._trained_steps()), self.scores[phase])

    def evaluate_base(self) -> None:
        """The base phase (eval.before): read back when a resumed run has it, evaluated when training starts."""
        from corl_bench.eval.evaluator import load_scores

        if not self.cfg.eval.before:
            return
        if "base" in (self.record.phases or ()):
            self.scores["base"] = {a.name: load_scores(self.rd.eval_dir("base", a.name), self.benches)
                                   for a in self.agents}
        elif self.start == 0:
            self.evaluate("base")

    def train(self) -> None:
        """Steps ``start`` .. run.steps: metrics written, intermediate evaluations (eval.every), checkpoints
        (run.checkpoint_every, the last step, an early stop); stops on the collapse alarm when told to."""
        from corl_bench.train.checkpoint import save_checkpoint
        from corl_bench.train.trainer import step_rows

        cfg, prog, watch, t = self.cfg, self.prog, self.watch, time.perf_counter()
        task = prog.add("train", cfg.run.steps)
        prog.advance(task, self.start)
        from corl_bench.train.progress import Eta

        eta = Eta(cfg.run.steps, "steps", done=self.start)
        every = cfg.run.checkpoint_every
        for step in range(self.start, cfg.run.steps):
            if watch.stopped:  # a resumed run that had stopped on a collapse alarm: straight to final
                break
            result = self.trainer.step(step)
            self.trainer.write(result)
            for tr in self.trackers:
                tr.log_step(step, step_rows(result))
            self.history.append(result.metrics)
            stop = watch.observe(step, result.metrics, say=prog.alarm)  # event row; True: stop_on_collapse
            prog.advance(task, 1, status=status_line(result.metrics) + watch.status())
            eta.advance(1)
            log.info("train: %s", eta.line())
            if cfg.eval.every and (step + 1) % cfg.eval.every == 0 and step + 1 < cfg.run.steps and not stop:
                self.evaluate(f"step-{step + 1:06d}")  # before the checkpoint: a crash in it is redone on resume
            if every and ((step + 1) % every == 0 or step + 1 == cfg.run.steps or stop):
                save_checkpoint(self.run_dir, step + 1, self.trainer.group, self.trainer.state_dict())
            if stop:
                break
        self.record = self.record.with_timing("train", time.perf_counter() - t, add=True)

    def evaluate_final(self) -> None:
        """The final phase, the checkpoint eval.select chooses, and the final weights (run.save_checkpoints)."""
        reph = self.profile.rephraser()  # hf: the model that rephrased the training problems (None elsewhere)
        if reph is not None:
            self.record = self.record.replace(rephrase={"model": reph.model_ref, "cache": str(reph.dir),
                                                        **reph.stats})
        self.evaluate("final")
        selection = self.selector.record([a.name for a in self.agents], self._trained_steps(),
                                         self.watch.alarm_steps())
        if selection is not None:
            self.record = self.record.replace(selection=selection)
        if self.cfg.run.save_checkpoints:
            self.trainer.group.save({a.name: self.rd.final_checkpoint(a.name) for a in self.agents})

    def summary(self, console: Any) -> None:
        """The end-of-run table: base -> final scores, label-free diagnostics, the alarm, the checkpoint, timings."""
        from corl_bench.train.progress import summary_table

        summary_table(console, self.record, self.scores, self.history)
