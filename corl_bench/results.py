"""The results store: run directories, environment records and crash-safe writes.

A run directory (``results/runs/<run_id>/``) holds::

    config.yaml          the resolved config (cohort expanded, defaults filled)
    env.json             package versions, python, platform, seed, git commit, command line
    run.json             method, cohort, agents, status (running | finished | failed), timings
    metrics.jsonl        one line per step and agent: rewards and label-free diagnostics; plus an event row
                         (``"event": "collapse-alarm"``) when the collapse alarm fires, which step readers skip
    samples.jsonl        every N steps: prompt, completion, extracted answer, pseudo-label, hidden truth, reward
    eval/<phase>/<agent>/<benchmark>.jsonl   per-sample predictions (phase: base | step-NNNNNN | final)
    eval/<phase>/<agent>/eval_manifest.json  per benchmark: version and decoding (``corl-bench eval`` targets)
    selection/<phase>/<agent>/<benchmark>.jsonl   eval.select dev / label-free: the held-out split's predictions
    checkpoints/step-NNNNNN/, checkpoints/latest   resumable training checkpoints (corl_bench.train.checkpoint)
    checkpoints/final/<agent>/               save_pretrained folders
    .lock                held (flock) by the process that writes the run

:class:`RunDir` is the one place that knows these names: every reader (table, plots, report, study, probe, sweep,
``corl-bench eval`` targets, scripts) goes through its path properties and readers, and :func:`find_runs` lists
the run directories under a results directory.

JSON files are written atomically (temporary file in the same directory, fsync, rename); JSONL files are appended
one complete line at a time.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import json
import re
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from corl_bench.record import RunRecord

TRACKED_PACKAGES = ("corl-bench", "torch", "transformers", "tokenizers", "math-verify", "numpy", "rich", "typer",
                    "pyyaml", "lm-eval", "datasets")


def sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (data files, model parts)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part: a temporary file
    in the same directory, fsync, mode 0644, ``os.replace``; parent directories are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` as UTF-8 (newlines written as they are)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append complete lines (one ``write`` per batch of rows, each row ends with a newline)."""
    payload = "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows)
    if not payload:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(payload)
        f.flush()


def read_jsonl(path: Path, error: type[Exception] = ValueError, name: str | None = None) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL file (blank lines skipped); ``error("<name> line N ...")`` on a bad line."""
    name = name or str(path)
    rows = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise error(f"{name} line {lineno} is not UTF-8 text; re-export the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{name} line {lineno} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise error(f"{name} line {lineno} is not a JSON object")
            rows.append(row)
    return rows


def read_complete_rows(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of a JSONL file this project appends to, tolerating interrupted writes: returns (the rows that are
    complete JSON objects, the line numbers that are not — the torn last line of a killed process). Blank lines
    are skipped; a missing file has no rows."""
    if not path.is_file():
        return [], []
    rows, torn = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn.append(lineno)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            torn.append(lineno)
    return rows, torn


def read_json(path: Path) -> dict[str, Any]:
    obj = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(obj, dict):
        raise ValueError(f"{path} is not a JSON object")
    return obj


# ------------------------------------------------------------------------------------------ run directories
RUN_INFO = "run.json"
CONFIG = "config.yaml"
ENV = "env.json"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
EVAL = "eval"
EVAL_MANIFEST = "eval_manifest.json"
SELECTION = "selection"
CHECKPOINTS = "checkpoints"
FINAL = "final"
LOCK = ".lock"


EVENT = "event"
"""The key that marks an event row of metrics.jsonl (a collapse alarm): rows with it are not step metrics."""


def is_event(row: Mapping[str, Any]) -> bool:
    """Whether a metrics.jsonl row is an event (e.g. ``"event": "collapse-alarm"``) rather than one step's metrics
    of one agent; every reader of step metrics skips these."""
    return EVENT in row


def step_phase(step: int) -> str:
    """The evaluation phase after ``step`` training steps (``step-000020``); the others are ``base`` and ``final``."""
    return f"step-{step:06d}"


def phase_step(phase: str, steps: int | None) -> int | None:
    """Training steps behind an evaluation phase: base -> 0, step-N -> N, final -> ``steps``; None if unknown."""
    if phase == "base":
        return 0
    if phase == "final":
        return steps
    match = re.fullmatch(r"step-(\d+)", phase)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class RunDir:
    """One run directory: the paths of everything it holds, and readers for them. Nothing is read or created on
    construction; a reader raises what reading raises (``FileNotFoundError``, ``ValueError`` for bad JSON, ...)
    unless it says otherwise, so each caller words its own one-line error."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        """The run id the directory is named after."""
        return self.path.name

    # -------------------------------------------------------------------- paths (what the runner writes)
    @property
    def info_path(self) -> Path:
        return self.path / RUN_INFO

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def env_path(self) -> Path:
        return self.path / ENV

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK

    @property
    def eval_root(self) -> Path:
        """``eval/``: one folder per phase, one per agent below it."""
        return self.path / EVAL

    @property
    def selection_root(self) -> Path:
        """``selection/``: predictions on the held-out split that ``eval.select`` dev / label-free decide on
        (``selection/<phase>/<agent>/<benchmark>.jsonl``), kept apart from ``eval/`` so no table shows them."""
        return self.path / SELECTION

    def selection_path(self, phase: str, agent: str, benchmark: str) -> Path:
        return self.selection_root / phase / agent / f"{benchmark}.jsonl"

    @property
    def checkpoints_dir(self) -> Path:
        """``checkpoints/``: resumable ``step-NNNNNN`` folders and ``latest`` (see corl_bench.train.checkpoint),
        and ``final/<agent>``."""
        return self.path / CHECKPOINTS

    def eval_dir(self, phase: str, agent: str) -> Path:
        """``eval/<phase>/<agent>/``: that agent's predictions files of that phase."""
        return self.eval_root / phase / agent

    def predictions_path(self, phase: str, agent: str, benchmark: str) -> Path:
        return self.eval_dir(phase, agent) / f"{benchmark}.jsonl"

    def manifest_path(self, phase: str, agent: str) -> Path:
        return self.eval_dir(phase, agent) / EVAL_MANIFEST

    def step_checkpoint(self, step: int) -> Path:
        """``checkpoints/step-NNNNNN``: the resumable checkpoint after ``step`` steps."""
        return self.checkpoints_dir / f"step-{step:06d}"

    def final_checkpoint(self, agent: str) -> Path:
        """``checkpoints/final/<agent>``: the agent's final weights as a ``save_pretrained`` folder."""
        return self.checkpoints_dir / FINAL / agent

    # -------------------------------------------------------------------- readers
    def is_run(self) -> bool:
        """Whether the directory holds a run.json (what makes a directory a run)."""
        return self.info_path.is_file()

    def info(self) -> dict[str, Any]:
        """run.json as a raw dict (``json.JSONDecodeError`` / ``ValueError`` when it is not a JSON object); readers
        use :meth:`record`."""
        return read_json(self.info_path)

    def record(self) -> RunRecord:
        """run.json as a :class:`~corl_bench.record.RunRecord` (raises as :meth:`info` when the file is missing,
        not JSON or not an object; a wrong or missing field is tolerated, see :mod:`corl_bench.record`)."""
        return RunRecord.from_dict(self.info())

    def write_record(self, record: RunRecord) -> None:
        """Write run.json (atomically): the one place a run record is written."""
        write_json(self.info_path, record.to_dict())

    def env(self) -> dict[str, Any]:
        return read_json(self.env_path)

    def config(self) -> dict[str, Any]:
        """config.yaml as a dict ({} for an empty file; ``ValueError`` when it is not a mapping)."""
        import yaml

        cfg = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        if cfg is None:
            return {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{self.config_path} is not a mapping")
        return cfg

    def agents(self) -> list[dict[str, Any]]:
        """run.json's ``agents`` (name, family, view) in cohort order; entries without a name are left out."""
        return [a.to_dict() for a in self.record().agents or ()]

    def metrics(self, *, error: type[Exception] = ValueError, complete_only: bool = False) -> list[dict[str, Any]]:
        """The per-step rows of metrics.jsonl (event rows such as a collapse alarm are left out: :meth:`events`);
        ``complete_only`` skips a torn last line (a killed run) instead of raising ``error``. A missing file raises
        ``FileNotFoundError`` (strict) or has no rows (``complete_only``)."""
        return [r for r in self._rows(self.metrics_path, error, complete_only) if not is_event(r)]

    def events(self, *, error: type[Exception] = ValueError, complete_only: bool = True) -> list[dict[str, Any]]:
        """The event rows of metrics.jsonl (``{"step", "agent", "event": "collapse-alarm", ...}``), in file order;
        none when the file is missing."""
        if not self.metrics_path.is_file():
            return []
        return [r for r in self._rows(self.metrics_path, error, complete_only) if is_event(r)]

    def samples(self, *, error: type[Exception] = ValueError, complete_only: bool = False) -> list[dict[str, Any]]:
        """The rows of samples.jsonl (as :meth:`metrics`)."""
        return self._rows(self.samples_path, error, complete_only)

    @staticmethod
    def _rows(path: Path, error: type[Exception], complete_only: bool) -> list[dict[str, Any]]:
        return read_complete_rows(path)[0] if complete_only else read_jsonl(path, error, str(path))

    def phases(self) -> list[str]:
        """The evaluation phases present under ``eval/`` (folder names, sorted)."""
        root = self.eval_root
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def evaluated_agents(self, phase: str) -> list[str]:
        """The agents with a predictions folder in ``phase`` (sorted)."""
        root = self.eval_root / phase
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def benchmarks(self, phase: str, agent: str) -> list[str]:
        """The benchmarks with a predictions file for ``agent`` in ``phase``, in the order of their file names."""
        folder = self.eval_dir(phase, agent)
        return [p.stem for p in sorted(folder.glob("*.jsonl"))] if folder.is_dir() else []

    def predictions(self, phase: str, agent: str, benchmark: str, *, error: type[Exception] = ValueError,
                    name: str | None = None) -> list[dict[str, Any]]:
        """The prediction rows of one (phase, agent, benchmark); ``error("<name> line N ...")`` on a bad line."""
        return read_jsonl(self.predictions_path(phase, agent, benchmark), error, name)

    def manifest(self, phase: str, agent: str) -> dict[str, Any]:
        """eval_manifest.json of one agent folder ({} when there is none)."""
        path = self.manifest_path(phase, agent)
        return read_json(path) if path.is_file() else {}

    def manifest_paths(self) -> list[Path]:
        """Every ``eval/<phase>/<agent>/eval_manifest.json`` (sorted)."""
        return sorted(self.eval_root.glob(f"*/*/{EVAL_MANIFEST}"))


def find_runs(results_dir: Path | str) -> list[RunDir]:
    """Every run directory under ``results_dir`` (recursively, itself included), sorted by path."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        return []
    return [RunDir(p) for p in sorted({p.parent for p in results_dir.rglob(RUN_INFO) if p.is_file()})]


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` (``.lock``, fcntl) while a process writes it; a second process gets
    a one-line error instead of interleaving its writes (the lock dies with its holder, even on SIGKILL)."""
    import fcntl

    from corl_bench.config import ConfigError

    fd = os.open(RunDir(run_dir).lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{run_dir} is being written by another corl-bench process; wait for it or pick "
                              "another run") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit of the corl-bench checkout (``+dirty`` when it has uncommitted changes), None outside git."""
    where = cwd or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment_record(seed: int) -> dict[str, Any]:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "packages": versions, "seed": seed, "git_commit": git_commit(),
            "argv": sys.argv, "created_at": now_iso()}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_dir(output_dir: Path, run_id: str) -> Path:
    """Create ``output_dir/run_id`` exclusively (``-2``, ``-3``... when the name is taken by a concurrent run)."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from corl_bench.config import ConfigError

        raise ConfigError(f"cannot create results directory {output_dir} ({e.strerror}); "
                          f"set run.output_dir to a writable path") from None
    for i in range(1, 1000):
        path = output_dir / (run_id if i == 1 else f"{run_id}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as e:
            from corl_bench.config import ConfigError

            raise ConfigError(f"cannot write in results directory {output_dir} ({e.strerror}); set "
                              f"run.output_dir to a writable path") from None
    raise RuntimeError(f"could not find a free run directory name for {run_id} in {output_dir}")
