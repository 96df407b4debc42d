"""The CLI's shared flags: the one set ``run`` and ``validate`` both take (:func:`run_flags`), old spellings kept as
hidden deprecated aliases (:func:`aliased`), the command that resumes an interrupted run or sweep, and ``--version``.

One spelling per concept across commands:

* ``--output-dir``: a directory that will hold several outputs (run directories, table files);
* ``--out`` / ``-o``: exactly one output, a file or one result folder;
* ``--benchmarks`` / ``-b``: a comma list of benchmarks (``--benchmark`` where a command takes one; each command
  also accepts the other spelling).

Nothing here imports torch or the registries.
"""

from __future__ import annotations

import functools
import inspect
import logging
import shlex
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import typer

from corl_bench.config import ConfigError, Config, load_config

log = logging.getLogger(__name__)

__all__ = ["RunFlags", "aliased", "load_run_config", "resume_command", "run_flags", "sweep_command",
           "version_text"]


@dataclass(frozen=True)
class RunFlags:
    """What ``run`` and ``validate`` were given (their shared flags)."""

    method: Optional[str] = None
    cohort: Optional[str] = None
    config: Optional[Path] = None
    seed: Optional[int] = None
    steps: Optional[int] = None
    output_dir: Optional[str] = None
    run_id: Optional[str] = None
    benchmarks: Optional[str] = None
    benchmark: Optional[str] = None
    """--benchmark, the singular spelling of --benchmarks (hidden)"""
    set_: tuple[str, ...] = ()
    resume: Optional[Path] = None
    fresh: bool = False
    verbose: bool = False


def _flags() -> list[tuple[str, Any, Any]]:
    """(parameter, type, typer option) of every shared flag, in --help order (built per call: typer copies
    nothing)."""
    return [
        ("method", Optional[str], typer.Option(None, "--method", "-m", help="registered method (corl-bench ls "
                                               "methods); case and punctuation are ignored: Co-RL reads as corl")),
        ("cohort", Optional[str], typer.Option(None, "--cohort", "-c", help="registered cohort (corl-bench ls "
                                               "cohorts); Cross-Family reads as cross-family")),
        ("config", Optional[Path], typer.Option(None, "--config", help="YAML config; flags and --set override it")),
        ("seed", Optional[int], typer.Option(None, "--seed", help="run seed (run.seed)")),
        ("steps", Optional[int], typer.Option(None, "--steps", help="training steps (run.steps)")),
        ("output_dir", Optional[str], typer.Option(None, "--output-dir", help="directory that holds the run "
                                                   "directories (run.output_dir; default results/runs)")),
        ("run_id", Optional[str], typer.Option(None, "--run-id", help="name of the run directory (run.run_id; "
                                               "default <method>-<cohort>-s<seed>-<date>-<time>)")),
        ("benchmarks", Optional[str], typer.Option(None, "--benchmarks", "-b", help="comma list of benchmarks "
                                                   "evaluated before and after training (eval.benchmarks; corl-bench "
                                                   "ls benchmarks)")),
        ("benchmark", Optional[str], typer.Option(None, "--benchmark", hidden=True, help="same as --benchmarks")),
        ("set_", list[str], typer.Option([], "--set", "-s", help="override any field, e.g. --set grpo.lr=3e-5 "
                                         "(repeatable)")),
        ("resume", Optional[Path], typer.Option(None, "--resume", help="continue this run directory from its last "
                                                "checkpoint (its config.yaml is the config)")),
        ("fresh", bool, typer.Option(False, "--fresh", help="never resume an interrupted run with the same config")),
        ("verbose", bool, typer.Option(False, "--verbose", "-v", help="log every stage (INFO)")),
    ]


def run_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``func`` (a command taking ``flags: RunFlags`` and its own parameters) every shared flag: ``run`` and
    ``validate`` are both decorated, so they take the same flags by construction."""
    own = [p for p in inspect.signature(func).parameters.values() if p.name != "flags"]
    shared = _flags()
    names = [name for name, _, _ in shared]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        values = {n: kwargs.pop(n) for n in names}
        return func(flags=RunFlags(**{**values, "set_": tuple(values["set_"])}), **kwargs)

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=t) for n, t, opt in shared]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    command.__signature__ = inspect.Signature(own + params)  # type: ignore[attr-defined]
    # resolved types, not strings: typer would evaluate strings in this module's namespace
    hints = {k: v for k, v in typing.get_type_hints(func).items() if k not in ("flags", "return")}
    command.__annotations__ = {**hints, **{n: t for n, t, _ in shared}}
    del command.__wrapped__  # typer must read the signature above, not func's
    return command


def load_run_config(flags: RunFlags) -> Config:
    """The config ``run`` would run with these flags (before resolving): a run directory's config.yaml for
    ``--resume``, else ``--config``, with the flags and ``--set`` on top; one-line ConfigError otherwise."""
    config = flags.config
    if flags.resume is not None:
        if not (flags.resume / "config.yaml").is_file():
            raise ConfigError(f"--resume {flags.resume}: no config.yaml there; pass a run directory (results/runs/...)")
        config = config or flags.resume / "config.yaml"
    overrides = []
    for key, val in (("method.name", flags.method), ("cohort.name", flags.cohort), ("run.seed", flags.seed),
                     ("run.steps", flags.steps), ("run.output_dir", flags.output_dir), ("run.run_id", flags.run_id)):
        if val is not None:
            overrides.append(f"{key}={val}")
    benchmarks = aliased("--benchmarks", flags.benchmarks, "--benchmark", flags.benchmark, deprecated=False)
    if benchmarks is not None:
        names = [b.strip() for b in benchmarks.split(",") if b.strip()]
        if not names:
            raise ConfigError(f"--benchmarks {benchmarks!r} names no benchmark; pass e.g. -b gsm8k,math500")
        overrides.append(f"eval.benchmarks=[{','.join(names)}]")
    return load_config(config, overrides + list(flags.set_))


def aliased(new_flag: str, new: Any, old_flag: str, old: Any, *, deprecated: bool = True) -> Any:
    """The value of ``new_flag`` given under either spelling; the old one still works, with one deprecation line
    (``deprecated=False``: two equal spellings, no line). Both given with different values: a ConfigError."""
    if old is None or old == new:
        return new
    if new is not None:
        raise ConfigError(f"{new_flag} {new} and {old_flag} {old} disagree; pass {new_flag} only")
    if deprecated:
        log.warning("%s is deprecated; use %s (same meaning)", old_flag, new_flag)
    return old


def resume_command(run_dir: Path, verbose: bool = False) -> str:
    """The command that continues ``run_dir`` from its last checkpoint (its config.yaml holds every flag)."""
    return shlex.join(["corl-bench", "run", "--resume", str(run_dir), *(["-v"] if verbose else [])])


def sweep_command(spec: Path, *, threads: int = 0, ray: bool = False, ray_address: str = "", cpus_per_cell: float = 1.0,
                  cells: Sequence[str] = (), verbose: bool = False) -> str:
    """The sweep command that resumes an interrupted sweep: the same one (finished cells are skipped, the
    interrupted one resumed from its last checkpoint), never with ``--rerun`` (that would set its cells aside
    again)."""
    argv = ["corl-bench", "sweep", str(spec)]
    argv += ["--threads", str(threads)] if threads else []
    argv += ["--ray"] if ray else []
    argv += ["--ray-address", ray_address] if ray_address else []
    argv += ["--cpus-per-cell", f"{cpus_per_cell:g}"] if cpus_per_cell != 1.0 else []
    for cell in cells:
        argv += ["--cell", cell]
    return shlex.join(argv + (["-v"] if verbose else []))


def version_text() -> str:
    """``corl-bench <version>`` and, from a git checkout, ``(git <commit>)`` (``+dirty`` with uncommitted changes)."""
    import importlib.metadata

    from corl_bench.results import git_commit

    try:
        version = importlib.metadata.version("corl-bench")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    commit = git_commit()
    return f"corl-bench {version}" + (f" (git {commit})" if commit else "")
