"""Run untrusted Python programs (model-generated code for HumanEval, MBPP, LiveCodeBench) in a limited process.

Contract: ``run_program(source) -> ExecResult``. Each call writes ``source`` to ``prog.py`` in a fresh temporary
directory (its cwd, HOME and TMPDIR), starts ``python -s prog.py`` with a scrubbed environment (PATH, HOME,
TMPDIR, LANG, PYTHONHASHSEED=0, PYTHONSAFEPATH=1; not ``-I``, which would ignore PYTHONHASHSEED) and hard rlimits
(CPU seconds, address space, processes + threads, file size incl. stdout/stderr, no core dumps), kills the whole
process group after ``wall_seconds``, captures stdout/stderr up to a cap (head and tail kept) and removes the
directory afterwards. ``check_program(program, tests)`` runs program + tests and passes only if the tests ran to
their end; ``check_many`` does that for many pairs on a thread pool (the subprocesses do the work).

Isolation is chosen once per process by probing (:func:`resolve_isolation`) and returned with every result, so a
result records what contained it. Modes, strongest first:

* ``root`` (euid 0): ``unshare`` gives the program its own PID, mount (private /proc), IPC and network namespaces,
  then ``setpriv`` drops to an unprivileged uid with no-new-privs. Each concurrent run gets a uid of its own
  (from ``SANDBOX_UID_BASE``, owned by no account; see "uid slots" below), so one run's fork bomb cannot use up
  another's process limit and runs cannot touch each other's files. The program is PID 1 of its namespace: when
  it exits or is killed, the kernel kills every process it started, even those that left the group with
  ``setsid`` (as PID 1 it has ``os.getppid() == 0`` and ignores signals it sends itself without a handler). No
  network, not even loopback. RLIMIT_NPROC, never enforced for uid 0, counts only this run's processes. It can
  write only its directory and world-writable places such as /tmp (swept afterwards); it can read world-readable
  files.
* ``userns`` (not root, unprivileged user namespaces allowed): the same namespaces, but the program runs as the
  calling user, so that user's files are NOT protected. RLIMIT_NPROC counts all of the user's processes, so it
  is set to their current count + ``max_processes`` (concurrent runs share that headroom).
* ``uid`` (root where namespaces are refused, e.g. a default Docker container): the uid drop only. No network
  or PID isolation: the program reaches the host's network and sees host processes (it cannot signal them).
  Processes that left the group are killed afterwards by signalling everything of the run's uid.
* ``none``: rlimits and a new session only, as the calling user; as root that means no process limit, any file
  writable and any process killable. A warning is logged once. Processes that left the group survive the run.

uid slots (modes root and uid): the ``SANDBOX_UID_SLOTS`` uids are claimed across threads AND processes of the
host. A run holds an exclusive ``flock`` on ``<SANDBOX_LOCK_DIR>/<uid>.lock`` (/run/corl-sandbox, made on first
use, mode 0700 and owned by root, so a sandbox uid can neither enter it nor delete or replace a lock; where /run
is missing, corl-sandbox-locks under the temp directory) from before its program starts until its clean-up
(killing every process of the uid, removing the uid's files from /tmp, /var/tmp and /dev/shm) has ended. Each
claim opens the lock anew (flock is per open file description) and a per-process set keeps threads off the slots
their process holds. When all slots are busy, a run waits (backoff up to 0.25 s) rather than share one. The
kernel drops the lock of a process that dies; the first byte of the lock file says whether its last holder
released it clean (no process of the uid left), and if not, the next run that claims the slot kills the uid's
processes and sweeps its files before its program starts. So a run's directory (made by root, then given to the
run's uid) and its processes are only ever cleaned up by that run.

Where the kernel does not allow a network namespace, "auto" ends in ``uid`` (root) or ``none``: the program has
the host's network, a warning says so, and ``isolation.network_namespace`` is False in every result. In ``root``
and ``uid`` modes, files the run's uid left in /tmp, /var/tmp and /dev/shm are removed after the run. Not
contained in any mode: reading world-readable files, CPU contention with the host (use at most as many workers
as cores you can spare), and a program that reads its own source to fake the end-of-tests marker.
Linux only; stdlib only.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import math
import os
import secrets
import shutil
import signal
import subprocess
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MODES = ("root", "userns", "uid", "none")
STATUSES = ("ok", "error", "timeout", "memory", "killed", "incomplete")
SYSTEM_PYTHON = "/usr/bin/python3"
SANDBOX_UID_BASE = 1_999_990_000  # far above login users (< 60000), nobody (65534) and the usual subuid ranges
SANDBOX_UID_SLOTS = 64  # at most this many runs at once in the root/uid modes, over all processes of the host
SANDBOX_LOCK_DIR = "/run/corl-sandbox"  # the slot locks; not world-writable, unlike /tmp, and not age-cleaned
_NAMESPACES = ["--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--ipc"]
_SWEPT_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
# What unshare (util-linux 2.38) prints, exiting 1, when its child died of SIGKILL (CPU limit, OOM killer).
_UNSHARE_KILLED = "unshare: sigprocmask unblock failed: Invalid argument"
# setpriv can exec a binary the dropped uid cannot reach (seen: a pyenv python under /root, mode 700), whose loader
# then falls back to the system libpython. So the probe checks that the uid itself can reach the interpreter.
_PROBE = """\
import collections, json, math, os, re, sys
if not os.access(sys.executable, os.X_OK):
    sys.exit(f"{sys.executable} is not executable by uid {os.getuid()}")
print("sandbox-ok")
"""
# Runs in the host interpreter between fork and the sandbox command: set the limits, then exec (no preexec_fn,
# which is unsafe with the threads of check_many). A limit above the hard limit we hold is clamped to it.
_LIMITS_THEN_EXEC = """\
import os, resource, sys
for name, value in zip(("CPU", "AS", "NPROC", "FSIZE", "CORE"), map(int, sys.argv[1:6])):
    which = getattr(resource, "RLIMIT_" + name)
    hard = resource.getrlimit(which)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))
os.execv(sys.argv[6], sys.argv[6:])
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits. cpu_seconds is per process (RLIMIT_CPU: rounded up to whole seconds); max_processes
    counts threads too."""

    cpu_seconds: float = 3  # the standard HumanEval / MBPP (code_eval) timeout, as CPU time so load does not fail it
    wall_seconds: float = 10.0  # catches sleeping and blocking programs
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    max_processes: int = 32
    max_file_mb: int = 16  # any file written, stdout and stderr included
    max_output_bytes: int = 64 * 1024  # per stream; beyond it the head and tail halves are kept

    def __post_init__(self) -> None:
        def whole(v: object, low: int) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= low

        def positive(v: object) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0

        checks = (
            ("cpu_seconds", positive(self.cpu_seconds), "a number of seconds > 0"),
            ("wall_seconds", positive(self.wall_seconds), "a number of seconds > 0"),
            ("memory_mb", whole(self.memory_mb, 64), "a whole number >= 64 (the interpreter alone maps ~30 MB)"),
            ("max_processes", whole(self.max_processes, 1), "a whole number >= 1 (threads count too)"),
            ("max_file_mb", whole(self.max_file_mb, 1), "a whole number >= 1"),
            ("max_output_bytes", whole(self.max_output_bytes, 64), "a whole number >= 64"),
        )
        for name, ok, fix in checks:
            if not ok:
                raise ValueError(f"SandboxLimits.{name}={getattr(self, name)!r} is invalid: use {fix}")


@dataclass(frozen=True)
class Isolation:
    """What contained a run (see the module docstring); record it with results."""

    mode: str  # one of MODES
    python: str  # interpreter that ran the program
    uid: int | None  # uid the program ran as, seen from the host (None before a run: each run gets its own)
    uid_dropped: bool  # an unprivileged uid of its own (modes root, uid)
    pid_namespace: bool  # every process dies with the program; host processes invisible
    network_namespace: bool  # no network at all


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one program. status: ok (exit 0), error (exit != 0), timeout (wall or CPU limit, or a failure
    after 90 % of the CPU budget), memory (MemoryError), killed (other signal), incomplete (check_program: exit 0
    before the tests ended)."""

    status: str
    returncode: int  # exit code, or -signal
    stdout: str
    stderr: str
    truncated: bool  # stdout or stderr exceeded max_output_bytes (the middle was dropped)
    wall_seconds: float
    cpu_seconds: float  # user + system time of the program and the children it waited for
    isolation: Isolation

    @property
    def passed(self) -> bool:
        return self.status == "ok"


_slots_lock = threading.Lock()  # guards the three below
_slots_held: set[int] = set()  # uids this process's threads hold
_slots_pid = os.getpid()  # the process _slots_held belongs to (a forked child starts with none held)
_lock_dir: str | None = None  # created on first use
_SLOT_CLEAN, _SLOT_IN_USE = b"c", b"u"  # first byte of a slot's lock file: how its last holder released it
_resolved: dict[tuple[str, str | None], Isolation] = {}
_resolve_lock = threading.Lock()


def resolve_isolation(isolation: str = "auto", python: str | None = None) -> Isolation:
    """The isolation runs will get: a forced mode, or for "auto" the strongest that works here (probed once).

    The interpreter is ``python``, else the real path of sys.executable if the sandbox uid can run it, else
    /usr/bin/python3. Raises RuntimeError (listing what failed) when nothing works.
    """
    if isolation not in ("auto", *MODES):
        raise ValueError(f"isolation={isolation!r} is invalid: use 'auto' or one of {MODES}")
    with _resolve_lock:
        if (isolation, python) not in _resolved:
            _resolved[(isolation, python)] = _probe(isolation, python)
        return _resolved[(isolation, python)]


def _probe(isolation: str, python: str | None) -> Isolation:
    root = os.geteuid() == 0
    modes = (isolation,) if isolation != "auto" else ("root", "uid", "none") if root else ("userns", "none")
    pythons = [python] if python else list(dict.fromkeys([os.path.realpath(sys.executable), SYSTEM_PYTHON]))
    failures = []
    for mode in modes:
        if mode in ("root", "uid") and not root:
            failures.append(f"{mode}: needs euid 0")
            continue
        if mode == "userns" and root:
            failures.append("userns: would run the program as root (no process limit); use 'root'")
            continue
        tools = {"root": ("unshare", "setpriv"), "userns": ("unshare", "setpriv"), "uid": ("setpriv",)}
        missing = [t for t in tools.get(mode, ()) if shutil.which(t) is None]
        if missing:
            failures.append(f"{mode}: {', '.join(missing)} not found (util-linux)")
            continue
        for exe in pythons:
            dropped, namespaces = mode in ("root", "uid"), mode in ("root", "userns")
            iso = Isolation(mode, exe, None if dropped else os.getuid(), dropped, namespaces, namespaces)
            probe = _execute(_PROBE, "", SandboxLimits(wall_seconds=20), iso)
            if probe.stdout.strip() == "sandbox-ok":
                level = logging.INFO if iso.network_namespace else logging.WARNING
                logger.log(level, "sandbox isolation %r with %s%s", mode, exe, "" if iso.network_namespace else
                           ": NO network or PID isolation" + ("" if iso.uid_dropped else ", no file isolation"))
                return iso
            why = (probe.stderr.strip().splitlines() or [probe.status])[-1]
            failures.append(f"{mode} with {exe}: {why}")
    raise RuntimeError(f"no usable sandbox for isolation={isolation!r}: " + "; ".join(failures))


def run_program(source: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
                python: str | None = None, isolation: str = "auto") -> ExecResult:
    """Run ``source`` as a Python program under ``limits`` (see the module docstring) and report how it ended."""
    return _execute(source, stdin, limits, resolve_isolation(isolation, python))


def check_program(program: str, tests: str, **kwargs) -> ExecResult:
    """Run ``program`` followed by ``tests`` (asserts); ``.passed`` only if the process exits 0 after the last test.

    A random marker printed after the tests catches programs that exit 0 early (``sys.exit(0)``, ``os._exit(0)``):
    their status becomes "incomplete". The marker is removed from stdout. kwargs go to :func:`run_program`.
    """
    marker = f"corl-sandbox-tests-done-{secrets.token_hex(8)}"
    result = run_program(f"{program}\n\n{tests}\n\nprint({marker!r})\n", **kwargs)
    out = result.stdout.rstrip("\n")
    if out.endswith(marker):
        return dataclasses.replace(result, stdout=out[: -len(marker)])
    return dataclasses.replace(result, status="incomplete") if result.status == "ok" else result


def check_many(pairs: Sequence[tuple[str, str]], *, workers: int = 2, **kwargs) -> list[ExecResult]:
    """check_program over (program, tests) pairs with ``workers`` threads; results in input order."""
    resolve_isolation(kwargs.get("isolation", "auto"), kwargs.get("python"))  # probe (and warn) once, up front
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda pair: check_program(*pair, **kwargs), pairs))


def _execute(source: str, stdin: str, limits: SandboxLimits, iso: Isolation) -> ExecResult:
    if not iso.uid_dropped:
        return _run(source, stdin, limits, iso, os.getuid())[0]
    uid, lock_fd, unclean = _claim_uid()
    no_process_left = False
    try:
        if unclean:
            _clear_leftovers(uid)
        result, no_process_left = _run(source, stdin, limits, iso, uid)
        return result
    finally:
        try:
            no_process_left = no_process_left or _kill_uid(uid)  # (if _run did not get to it)
            _remove_files_of(uid)
        finally:
            _release_uid(uid, lock_fd, clean=no_process_left)


def _run(source: str, stdin: str, limits: SandboxLimits, iso: Isolation, uid: int) -> tuple[ExecResult, bool]:
    """One run as ``uid`` (modes root and uid: a slot the caller holds) and whether no process of it is left."""
    no_process_left = not iso.uid_dropped
    workdir = tempfile.mkdtemp(prefix="corl-sandbox-")
    try:
        with open(os.path.join(workdir, "prog.py"), "w", encoding="utf-8") as f:
            f.write(source)
        if iso.uid_dropped:
            os.chown(workdir, uid, uid)
        nproc = limits.max_processes + (0 if iso.uid_dropped else len(_tasks_of(uid)))
        rlimits = [math.ceil(limits.cpu_seconds), limits.memory_mb << 20, nproc, limits.max_file_mb << 20, 0]
        cmd = [sys.executable, "-I", "-S", "-c", _LIMITS_THEN_EXEC, *map(str, rlimits),
               *_isolation_prefix(iso.mode, uid), iso.python, "-s", "prog.py"]
        # -I would imply -E and so ignore PYTHONHASHSEED; the environment is scrubbed instead.
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONSAFEPATH": "1"}
        with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
            fin.write(stdin.encode("utf-8"))
            fin.seek(0)
            start = time.monotonic()
            proc = subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=workdir, env=env,
                                    start_new_session=True)
            expired = threading.Event()
            timer = threading.Timer(limits.wall_seconds, lambda: (expired.set(), _kill_group(proc.pid)))
            timer.start()
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: the group id stays ours
            timer.cancel()
            _kill_group(proc.pid)  # background children left in the group
            _, wait_status, usage = os.wait4(proc.pid, 0)
            proc.returncode = returncode = os.waitstatus_to_exitcode(wait_status)
            wall = time.monotonic() - start
            if iso.uid_dropped:
                no_process_left = _kill_uid(uid)
            stdout, cut_out = _read_capped(fout, limits.max_output_bytes)
            stderr, cut_err = _read_capped(ferr, limits.max_output_bytes)
    finally:
        _remove_tree(workdir)
    if iso.pid_namespace and returncode == 1 and stderr.rstrip().endswith(_UNSHARE_KILLED):
        returncode, stderr = -signal.SIGKILL, stderr.rstrip()[: -len(_UNSHARE_KILLED)]
    cpu = usage.ru_utime + usage.ru_stime
    status = _status(returncode, stderr, cpu, expired.is_set(), limits)
    return ExecResult(status, returncode, stdout, stderr, cut_out or cut_err, round(wall, 3), round(cpu, 3),
                      dataclasses.replace(iso, uid=uid)), no_process_left


def _status(returncode: int, stderr: str, cpu: float, expired: bool, limits: SandboxLimits) -> str:
    # At the CPU limit (soft = hard) the kernel sends SIGKILL; rusage reads up to ~6 % below the limit, so a
    # failure after 90 % of the CPU budget counts as a timeout.
    if expired or (returncode != 0 and cpu >= 0.9 * math.ceil(limits.cpu_seconds)):
        return "timeout"
    if returncode == 0:
        return "ok"
    if (stderr.strip().splitlines() or [""])[-1].startswith("MemoryError"):
        return "memory"
    return "killed" if returncode < 0 else "error"


def _isolation_prefix(mode: str, uid: int) -> list[str]:
    drop = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--no-new-privs", "--"]
    unshare = shutil.which("unshare") or "unshare"
    if mode == "root":
        return [unshare, *_NAMESPACES, "--", *drop]
    if mode == "userns":
        return [unshare, "--user", "--map-root-user", *_NAMESPACES, "--", drop[0], "--no-new-privs", "--"]
    return drop if mode == "uid" else []


def _lock_directory() -> str:
    """The directory of the slot locks, made on first use (call with _slots_lock held)."""
    global _lock_dir
    if _lock_dir is None:
        path = SANDBOX_LOCK_DIR
        if not os.path.isdir(os.path.dirname(path)):
            path = os.path.join(tempfile.gettempdir(), "corl-sandbox-locks")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RuntimeError(f"cannot make the sandbox lock directory {path}: {exc}") from exc
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise RuntimeError(f"sandbox lock directory {path} is not a directory owned by uid {os.geteuid()}: "
                               "remove it (a sandboxed program may have made it)")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
        _lock_dir = path
    return _lock_dir


def _claim_uid() -> tuple[int, int, bool]:
    """Claim a free uid slot, across threads and processes: (uid, fd holding its exclusive flock, unclean).

    unclean: its last holder did not release it as clean (it died mid-run, or the slot is new), so processes or
    files of the uid may be left. Waits while all slots are busy. Release with :func:`_release_uid`.
    """
    global _slots_pid
    delay, since, warn_at = 0.01, time.monotonic(), 60.0
    while True:
        with _slots_lock:
            if _slots_pid != os.getpid():  # forked: the parent's threads, and the slots they hold, are not here
                _slots_held.clear()
                _slots_pid = os.getpid()
            directory = _lock_directory()
            for uid in range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_UID_SLOTS):
                if uid in _slots_held:
                    continue
                fd = os.open(os.path.join(directory, f"{uid}.lock"),
                             os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    unclean = os.pread(fd, 1, 0) != _SLOT_CLEAN
                    os.pwrite(fd, _SLOT_IN_USE, 0)
                except OSError:
                    os.close(fd)
                    raise
                _slots_held.add(uid)
                return uid, fd, unclean
        if time.monotonic() - since > warn_at:
            logger.warning("all %d sandbox uid slots busy for %.0f s (locks in %s); still waiting",
                           SANDBOX_UID_SLOTS, warn_at, directory)
            warn_at *= 2
        time.sleep(delay)
        delay = min(2 * delay, 0.25)


def _release_uid(uid: int, fd: int, clean: bool = False) -> None:
    """Release a claimed slot; clean: no process of the uid is left (its files are swept)."""
    try:
        if clean:
            os.pwrite(fd, _SLOT_CLEAN, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)  # also for copies of fd that a fork made meanwhile
    finally:
        os.close(fd)
        with _slots_lock:
            _slots_held.discard(uid)


def _clear_leftovers(uid: int) -> None:
    """Kill the processes and sweep the files of a just claimed uid that its last holder may have left."""
    tasks = _tasks_of(uid)
    if tasks:
        _kill_uid(uid)
    removed = _remove_files_of(uid)
    if tasks or removed:
        logger.info("sandbox uid %d: killed %d tasks and removed %d files left by an earlier run", uid, len(tasks),
                    removed)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tasks_of(uid: int) -> list[int]:
    """Live (non-zombie) threads whose real uid is ``uid`` (RLIMIT_NPROC counts these, and zombies)."""
    tasks = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
                    tasks.append(int(tid))
        except (OSError, KeyError, ValueError):
            continue  # exited meanwhile
    return tasks


def _kill_uid(uid: int) -> bool:
    """Kill every process of a sandbox uid (also those that left the group) and wait until none is left (True)."""
    deadline = time.monotonic() + 5.0
    while _tasks_of(uid):
        if time.monotonic() > deadline:
            logger.warning("sandbox uid %d still has processes after 5 s", uid)
            return False
        # kill(-1) as that uid reaches exactly the processes of that uid, in any PID namespace.
        subprocess.run([shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                        "--", "/bin/sh", "-c", "kill -9 -1"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=5, check=False)
        time.sleep(0.01)
    return True


def _remove_files_of(uid: int) -> int:
    """Remove what a sandbox uid left in the world-writable directories; how many entries were removed."""
    removed = 0
    for top in _SWEPT_DIRS:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                continue  # gone meanwhile
            except OSError as exc:
                logger.warning("could not remove %s left by sandbox uid %d: %s", entry.path, uid, exc)
    return removed


def _remove_tree(path: str) -> None:
    """Remove a run directory, also where the program (running as us) made parts of it unreadable."""
    try:
        shutil.rmtree(path)
        return
    except OSError:
        if not os.path.lexists(path):
            return  # the program removed it itself (it can: it ran as the directory's owner)
    os.chmod(path, 0o700)
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            if not os.path.islink(os.path.join(root, d)):
                os.chmod(os.path.join(root, d), 0o700)
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        logger.warning("could not remove sandbox directory %s", path)


def _read_capped(f, cap: int) -> tuple[str, bool]:
    """(text, truncated): the whole stream, or its first and last cap // 2 bytes around a marker."""
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    if size <= cap:
        return f.read().decode("utf-8", "replace"), False
    head = f.read(cap // 2)
    f.seek(size - cap // 2)
    tail = f.read()
    marker = f"\n[... {size - len(head) - len(tail)} bytes cut by the sandbox ...]\n"
    return head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace"), True
