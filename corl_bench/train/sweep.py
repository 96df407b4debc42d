"""``corl-bench sweep``: a grid of methods x cohorts x seeds from one YAML, run one cell after another.

    name: micro-quick
    output_dir: results/sweeps/micro-quick     # cells go to <output_dir>/runs/<method>-<cohort>-s<seed>/
    methods: [corl, ttrl, gt-reward]
    cohorts: [single, cross-family]
    seeds: [0, 1, 2]
    set: {run.steps: 30}                       # --set overrides for every cell (optional)
    cells:                                     # extra cells beyond the product (optional)
      - {method: corl, cohort: three-agent}
      - {method: ttrl, cohort: single, tag: budget-matched, set: {rollout.prompts_per_step: 32}}

Pairs a method cannot run (a multi-agent method on ``single``) are skipped and listed, not errors. A finished cell
is skipped; an interrupted one is resumed from its last checkpoint (same config required); the rest start fresh.
A tagged extra cell is a variant with its own overrides: its run id and ``run.json`` carry the tag, and tables keep
it in its own row. One progress display covers the whole grid; each cell's own output is quiet (its run directory has everything).

Several workers may share one grid: start the same sweep in two shells (on a 2-core machine with ``--threads 1``
each, which for the micro models gives more throughput than one worker with two threads). A worker claims a cell
(an ``flock`` on ``<output_dir>/.claims/<run id>.lock``, released even on SIGKILL) before running it; a cell
claimed by another worker is reported as running elsewhere and left to it.

``keep: <folder>`` (optional; e.g. a folder under ``results/`` that git tracks) makes a grid survive the machine: every
finished cell is copied to ``<keep>/runs/<run id>/`` without its ``checkpoints/`` (weights and optimiser state: the
metrics, samples, predictions, config and run.json stay, which is all tables and reports read), and a cell found
finished there counts as finished. Commit the folder and the sweep resumes on another machine with the cells that
are still missing; ``corl-bench table -r <keep>`` and the study scripts regenerate everything from it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import yaml

from corl_bench.config import ConfigError, load_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    method: str
    cohort: str
    seed: int
    tag: str = ""
    sets: tuple[tuple[str, Any], ...] = ()
    """this cell's own --set overrides (after the sweep's)"""

    @property
    def run_id(self) -> str:
        tag = f"-{self.tag}" if self.tag else ""
        return f"{self.method}-{self.cohort}{tag}-s{self.seed}"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    output_dir: str
    methods: tuple[str, ...] = ()
    cohorts: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)
    set: dict[str, Any] = field(default_factory=dict)
    cells: tuple[dict[str, Any], ...] = ()
    keep: str = ""
    """a folder that keeps every finished cell without its checkpoints (module docstring); "" = none"""
    prune: bool = False
    """delete a finished cell's ``checkpoints/`` under ``output_dir`` once it is kept (needs ``keep``): a real-model
    cell's resume checkpoint holds weights and AdamW state (5-6 GB for SmolLM2 x Gemma-3), which a grid of 18 cells
    would otherwise leave on the disk"""

    @property
    def results_dir(self) -> Path:
        """Where the finished cells are read from by tables and studies: ``keep`` when set, else ``output_dir``."""
        return Path(self.keep or self.output_dir)


def load_sweep(path: Path) -> SweepSpec:
    if not path.is_file():
        raise ConfigError(f"sweep file {path} does not exist; pass a YAML with methods, cohorts and seeds")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a sweep is a mapping with methods, cohorts and seeds")
    valid = {"name", "output_dir", "methods", "cohorts", "seeds", "set", "cells", "keep", "prune"}
    unknown = sorted(set(raw) - valid)
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]!r} is not a sweep field; valid: {', '.join(sorted(valid))}")
    name = str(raw.get("name") or path.stem)
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"{path}: seeds must be a list of integers, e.g. [0, 1, 2]")
    for key in ("methods", "cohorts"):
        if not isinstance(raw.get(key, []), list):
            raise ConfigError(f"{path}: {key} must be a list of names")
    if not isinstance(raw.get("set", {}), dict):
        raise ConfigError(f"{path}: set must be a mapping of config fields, e.g. {{run.steps: 30}}")
    cells = raw.get("cells", [])
    if not isinstance(cells, list) or not all(isinstance(c, dict) and {"method", "cohort"} <= set(c) for c in cells):
        raise ConfigError(f"{path}: cells must be a list of {{method: ..., cohort: ...}}")
    for c in cells:
        extra = sorted(set(c) - {"method", "cohort", "tag", "set"})
        if extra:
            raise ConfigError(f"{path}: cell field {extra[0]!r} is unknown; a cell has method, cohort, tag and set")
        if not isinstance(c.get("set", {}), dict):
            raise ConfigError(f"{path}: a cell's set must be a mapping, e.g. {{rollout.prompts_per_step: 32}}")
        if c.get("set") and not c.get("tag"):
            raise ConfigError(f"{path}: cell {c['method']} x {c['cohort']} has its own set but no tag; add e.g. "
                              "tag: budget-matched so its runs get their own id and table row")
    if not isinstance(raw.get("prune", False), bool):
        raise ConfigError(f"{path}: prune must be true or false")
    if raw.get("prune") and not raw.get("keep"):
        raise ConfigError(f"{path}: prune deletes a finished cell's checkpoints once it is kept; set keep: <folder> "
                          "too (or drop prune)")
    cells = [{**c, "method": _registered("method", c["method"]), "cohort": _registered("cohort", c["cohort"])}
             for c in cells]
    return SweepSpec(name=name, output_dir=str(raw.get("output_dir") or f"results/sweeps/{name}"),
                     methods=tuple(dict.fromkeys(_registered("method", m) for m in raw.get("methods", []))),
                     cohorts=tuple(dict.fromkeys(_registered("cohort", c) for c in raw.get("cohorts", []))),
                     seeds=tuple(seeds), set=dict(raw.get("set", {})), cells=tuple(cells),
                     keep=str(raw.get("keep") or ""), prune=bool(raw.get("prune", False)))


def _registered(kind: str, name: Any) -> str:
    """A sweep's method or cohort name as registered (``Co-RL`` -> ``corl``; one log line when it was written
    otherwise), so its cells' run ids use it; an unknown or ambiguous name stays as written (plan() refuses it)."""
    from corl_bench.registries import COHORTS, METHODS, RegistryError

    try:
        primary = (METHODS if kind == "method" else COHORTS).primary(str(name))
    except RegistryError:
        return str(name)
    if primary != str(name):
        log.warning("%s %r read as %r", kind, name, primary)
    return primary


def cell_config(spec: SweepSpec, cell: Cell) -> Any:
    sets = [f"{k}={v}" for k, v in spec.set.items()] + [f"{k}={v}" for k, v in cell.sets]
    tag = [f"run.tag={cell.tag}"] if cell.tag else []
    return load_config(None, sets + tag + [f"method.name={cell.method}", f"cohort.name={cell.cohort}",
                                           f"run.seed={cell.seed}", f"run.output_dir={Path(spec.output_dir) / 'runs'}",
                                           f"run.run_id={cell.run_id}"])


def plan(spec: SweepSpec) -> tuple[list[Cell], list[str]]:
    """(valid cells, seed by seed, and the skipped pairs with the reason). Every config is resolved before anything runs."""
    from corl_bench.train.runner import resolve

    pairs: list[tuple[str, str, str, tuple[tuple[str, Any], ...]]] = [
        (m, c, "", ()) for m in spec.methods for c in spec.cohorts]
    for c in spec.cells:
        pair = (str(c["method"]), str(c["cohort"]), str(c.get("tag") or ""), tuple((c.get("set") or {}).items()))
        if pair[:3] not in [p[:3] for p in pairs]:
            pairs.append(pair)
    cells, skipped = [], []
    for seed in spec.seeds:  # seed-major: a grid stopped early still has whole seeds
        for method, cohort, tag, sets in pairs:
            cell = Cell(method, cohort, seed, tag, sets)
            try:
                resolve(cell_config(spec, cell))
            except ConfigError as e:
                if "agents but cohort" in str(e) or "at most" in str(e):
                    if seed == spec.seeds[0]:
                        skipped.append(f"{method} x {cohort}{' (' + tag + ')' if tag else ''}: {e}")
                    continue
                raise ConfigError(f"sweep cell {cell.run_id}: {e}") from None
            cells.append(cell)
    return cells, skipped


def select(spec: SweepSpec, cells: Sequence[Cell], wanted: Sequence[str]) -> list[Cell]:
    """The cells named by run id in ``wanted`` (``corl-bench sweep --cell``), in grid order; all of them when
    ``wanted`` is empty. An unknown name is a one-line ConfigError with the closest run id and every cell."""
    import difflib

    ids = [c.run_id for c in cells]
    for name in wanted:
        if name not in ids:
            close = difflib.get_close_matches(name, ids, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ";"
            raise ConfigError(f"sweep {spec.name} has no cell {name!r}{hint} its cells: {', '.join(ids) or '(none)'}")
    return [c for c in cells if not wanted or c.run_id in wanted]


#: Where ``--rerun`` moves a cell's earlier directories: ``<root>/replaced/<run id>-<time>/``, their ``run.json``
#: renamed to this (tables and sweeps then do not count the old run; rename it back to restore it).
REPLACED_RECORD = "run.replaced.json"


def set_aside(spec: SweepSpec, cell: Cell) -> list[tuple[Path, Path]]:
    """Move the cell's directories (under ``output_dir`` and ``keep``) to ``<root>/replaced/<run id>-<time>/`` so
    that it starts afresh and nothing it wrote is lost; (from, to) for each one moved."""
    import time

    from corl_bench.results import RunDir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for root in dict.fromkeys([spec.output_dir] + ([spec.keep] if spec.keep else [])):
        src = Path(root) / "runs" / cell.run_id
        if not src.exists():
            continue
        dest = Path(root) / "replaced" / f"{cell.run_id}-{stamp}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)
        record = RunDir(dest).info_path
        if record.is_file():
            os.replace(record, dest / REPLACED_RECORD)
        log.warning("sweep %s: %s moved to %s to run it afresh (its run.json is now %s there)", spec.name, src, dest,
                    REPLACED_RECORD)
        moved.append((src, dest))
    return moved


def cell_status(spec: SweepSpec, cell: Cell) -> str:
    """finished (under ``output_dir`` or ``keep``) | interrupted | new"""
    from corl_bench.results import RunDir

    if finished_dir(spec, cell) is not None:
        return "finished"  # kept (possibly on another machine) or finished here
    return "interrupted" if RunDir(Path(spec.output_dir) / "runs" / cell.run_id).is_run() else "new"


def finished_dir(spec: SweepSpec, cell: Cell) -> Path | None:
    """The cell's finished run directory: the kept copy first, then ``output_dir``'s; None when it has not finished."""
    for root in ([spec.keep] if spec.keep else []) + [spec.output_dir]:
        path = Path(root) / "runs" / cell.run_id
        if _finished(path):
            return path
    return None


#: Fields a finished cell may hold otherwise than the sweep resolves now: where it was written, how many threads and
#: processes ran it (run.backend=auto resolves per machine; the results are those of local).
FINISHED_IGNORES = frozenset({"run.output_dir", "model.threads", "run.backend", "run.cpus_per_agent"})


def check_finished(spec: SweepSpec, cells: Sequence[Cell]) -> None:
    """Refuse (one line) a finished cell that ran with another config than the sweep now gives it: counting it as
    done would report its numbers under settings it never had (a sweep file edited since, or a profile default
    that replaced a value the sweep set)."""
    from corl_bench.train.resume import RESUME_IGNORES, config_diff, stored_config
    from corl_bench.train.runner import resolve

    for cell in cells:
        where = finished_dir(spec, cell)
        if where is None:
            continue
        changed = config_diff(stored_config(where), resolve(cell_config(spec, cell)).config.to_dict(),
                              ignore=RESUME_IGNORES | FINISHED_IGNORES)
        if changed:
            shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
            raise ConfigError(f"sweep {spec.name}: finished cell {where} ran with another config than the sweep "
                              f"gives it now ({shown}, as ran -> as the sweep resolves); write the values it ran "
                              "with into the sweep (or a tagged cell), or move the cell away to run it again")


def _finished(path: Path) -> bool:
    from corl_bench.results import RunDir

    run = RunDir(path)
    try:
        return run.is_run() and run.record().finished
    except (OSError, ValueError):
        return False


def keep_cell(spec: SweepSpec, cell: Cell) -> Path | None:
    """Copy a finished cell into ``<keep>/runs/<run id>`` without ``checkpoints/`` (atomically: a copy beside it,
    then a rename), then with ``prune`` delete the cell's ``checkpoints/`` under ``output_dir``; None when the sweep
    keeps nothing or the cell is not finished under ``output_dir``."""
    import shutil

    src = Path(spec.output_dir) / "runs" / cell.run_id
    if not spec.keep or not _finished(src):
        return None
    dest = Path(spec.keep) / "runs" / cell.run_id
    if dest.resolve() == src.resolve():
        return dest
    tmp = dest.parent / f".tmp-{cell.run_id}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("checkpoints", ".lock"))
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    if spec.prune:
        shutil.rmtree(src / "checkpoints", ignore_errors=True)
    return dest


@contextlib.contextmanager
def claim(spec: SweepSpec, cell: Cell) -> Iterator[bool]:
    """Yields True while this process holds the cell's claim, False if another worker holds it."""
    import fcntl

    folder = Path(spec.output_dir) / ".claims"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{cell.run_id}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def run_sweep(spec: SweepSpec, *, console: Any = None, on_cell: Callable[[Cell, str], None] | None = None,
              threads: int = 0, ray_address: str | None = None, cpus_per_cell: float = 1.0,
              only: Sequence[str] = (), rerun: bool = False) -> dict[str, list[str]]:
    """Run every cell not yet finished (``threads``: torch threads per cell, 0 = the config's); returns run ids as
    {finished, skipped, elsewhere, resumed, ran, failed}. ``ray_address`` (``""``: a local Ray or
    ``$RAY_ADDRESS``; ``auto``: the cluster running here): every cell is a Ray task with ``cpus_per_cell`` CPUs.
    ``only``: just these cells (run ids); ``rerun`` (with ``only``): start them afresh, their earlier directories
    moved aside first (:func:`set_aside`)."""
    import dataclasses

    if rerun and not only:
        raise ConfigError("--rerun starts named cells afresh; name them with --cell RUN_ID (corl-bench sweep SPEC "
                          "--dry-run lists them)")
    if rerun and ray_address is not None:
        raise ConfigError("--rerun does not run through --ray yet; rerun the cell without --ray")
    if threads:
        spec = dataclasses.replace(spec, set={**spec.set, "model.threads": threads})
    if ray_address is not None:
        return _run_sweep_ray(spec, console, ray_address, cpus_per_cell, only)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    cells, skipped = plan(spec)
    cells = select(spec, cells, only)
    if not rerun:  # a rerun cell's earlier config does not matter: it is set aside
        check_finished(spec, cells)
    out: dict[str, list[str]] = {"finished": [], "skipped": skipped, "elsewhere": [], "resumed": [], "ran": [],
                                 "failed": []}
    console = console or Console(stderr=True)
    quiet = Console(quiet=True)
    with Progress(TextColumn(f"[bold]sweep {spec.name}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[cell]}"),
                  console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("sweep", total=len(cells), cell="")
        for cell in cells:
            with claim(spec, cell) as mine:
                if not mine:
                    out["elsewhere"].append(cell.run_id)
                    _plain(console, f"sweep {spec.name}: {cell.run_id} (running in another worker)")
                else:
                    if rerun:
                        set_aside(spec, cell)
                    _run_cell(spec, cell, out, progress, task, console, quiet, on_cell)
            progress.advance(task, 1)
    return out


def _plain(console: Any, text: str) -> None:
    """Off a terminal (logs, pipes) the live bar is disabled: one plain timestamped line per cell instead."""
    if not console.is_terminal:
        import time

        console.print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", markup=False, highlight=False, soft_wrap=True)


def _run_cell(spec: SweepSpec, cell: Cell, out: dict[str, list[str]], progress: Any, task: Any, console: Any,
              quiet: Any, on_cell: Callable[[Cell, str], None] | None) -> None:
    """Run (or resume, or skip as finished) one claimed cell and record its outcome in ``out``."""
    from corl_bench.train.runner import run

    status = cell_status(spec, cell)  # read after claiming: another worker may have finished it meanwhile
    progress.update(task, cell=f"{cell.run_id} ({status})")
    _plain(console, f"sweep {spec.name}: {cell.run_id} ({status})")
    if on_cell is not None:
        on_cell(cell, status)
    if status == "finished":
        keep_cell(spec, cell)  # a cell finished before the sweep kept anything (or kept elsewhere: a no-op)
        out["finished"].append(cell.run_id)
        return
    run_dir = Path(spec.output_dir) / "runs" / cell.run_id
    try:
        run(cell_config(spec, cell), console=quiet, resume=run_dir if status == "interrupted" else None,
            auto_resume=False)
    except ConfigError:
        raise
    except Exception as e:  # one cell's failure (e.g. NaN) must not stop the grid
        log.error("sweep cell %s failed: %s", cell.run_id, e)
        out["failed"].append(cell.run_id)
    else:
        keep_cell(spec, cell)
        out["resumed" if status == "interrupted" else "ran"].append(cell.run_id)


def _ray_cell(spec: SweepSpec, cell: Cell, families: dict[str, Any]) -> tuple[str, str]:
    """One cell inside a Ray task: claim, run or resume (as a worker of the plain sweep would); (run id, outcome
    key of :func:`run_sweep`'s result)."""
    from rich.console import Console

    from corl_bench.train.actors import register_families

    register_families(families)  # families the driver registered at run time
    out: dict[str, list[str]] = {k: [] for k in ("finished", "elsewhere", "resumed", "ran", "failed")}
    with claim(spec, cell) as mine:
        if not mine:
            return cell.run_id, "elsewhere"

        class _Progress:
            def update(self, *a: Any, **k: Any) -> None:
                return None

        _run_cell(spec, cell, out, _Progress(), None, Console(quiet=True), Console(quiet=True), None)
    return cell.run_id, next(k for k, v in out.items() if v)


def _run_sweep_ray(spec: SweepSpec, console: Any, address: str, cpus: float, only: Sequence[str] = ()
                   ) -> dict[str, list[str]]:
    """The grid as Ray tasks: every unfinished cell submitted at once, Ray places them on free CPUs (any node)."""
    from rich.console import Console

    from corl_bench.train.actors import forwarded_env, init_ray, runtime_families
    from corl_bench.train.runner import resolve

    cells, skipped = plan(spec)
    cells = select(spec, cells, only)
    check_finished(spec, cells)
    ray = init_ray(address)
    out: dict[str, list[str]] = {"finished": [], "skipped": skipped, "elsewhere": [], "resumed": [], "ran": [],
                                 "failed": []}
    console = console or Console(stderr=True)
    todo = []
    for cell in cells:
        if cell_status(spec, cell) == "finished":
            out["finished"].append(cell.run_id)
        else:
            todo.append(cell)
    cohorts = {c.cohort for c in todo}
    families = runtime_families({a.family for c in todo  # runtime-registered ones travel with the tasks
                                 for a in resolve(cell_config(spec, c)).config.cohort.agents})
    task = ray.remote(_ray_cell).options(num_cpus=cpus, max_retries=0, runtime_env={"env_vars": forwarded_env()})
    pending = {task.remote(spec, cell, families): cell for cell in todo}
    log.info("sweep %s: %d cells as Ray tasks (%d cohorts), %s CPU each", spec.name, len(todo), len(cohorts), cpus)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        cell = pending.pop(done[0])
        try:
            run_id, outcome = ray.get(done[0])
        except Exception as e:  # noqa: BLE001 - a task that died (node lost, out of memory)
            log.error("sweep cell %s failed in its Ray task: %s", cell.run_id, e)
            run_id, outcome = cell.run_id, "failed"
        out[outcome].append(run_id)
        _plain(console, f"sweep {spec.name}: {run_id} {outcome}")
    return out


def describe(result: dict[str, list[str]]) -> Sequence[str]:
    lines = [f"{k}: {len(v)}" + (f" ({', '.join(v)})" if v and k != "finished" else "") for k, v in result.items()]
    return lines
