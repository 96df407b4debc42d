"""The results store: run directories, environment records and crash-safe writes.

A run directory (``results/runs/<run_id>/``) holds::

    config.yaml          the resolved config (cohort expanded, defaults filled)
    env.json             package versions, python, platform, seed, git commit, command line
    run.json             method, cohort, agents, status (running | finished | failed), timings
    metrics.jsonl        one line per step and agent: rewards and label-free diagnostics
    samples.jsonl        every N steps: prompt, completion, extracted answer, pseudo-label, hidden truth, reward
    eval/<phase>/<agent>/<benchmark>.jsonl   per-sample predictions (phase: base | final)
    checkpoints/final/<agent>/               save_pretrained folders

JSON files are written atomically (temporary file in the same directory, fsync, rename); JSONL files are appended
one complete line at a time.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

TRACKED_PACKAGES = ("corl-bench", "torch", "transformers", "tokenizers", "math-verify", "numpy", "rich", "typer",
                    "pyyaml", "lm-eval", "datasets")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
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


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` (``.lock``, fcntl) while a process writes it; a second process gets
    a one-line error instead of interleaving its writes (the lock dies with its holder, even on SIGKILL)."""
    import fcntl

    from corl_bench.config import ConfigError

    fd = os.open(run_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
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
