"""corl_bench.eval.sandbox: correct and failing programs, a battery of hostile programs, the fallback mode, limits.

Hostile programs run only under a mode that contains them ("root", "userns" or "uid", each skipped with the
reason where it is unavailable); the fallback mode "none" is tested with programs that cannot harm the host,
including one showing its documented weakness (network reachable).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from corl_bench.eval.sandbox import (
    SANDBOX_UID_SLOTS,
    SandboxLimits,
    _claim_uid,
    _release_uid,
    check_many,
    check_program,
    resolve_isolation,
    run_program,
)

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_mb=256, max_processes=32, max_file_mb=4,
                     max_output_bytes=4096)
SHORT = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, max_processes=16, max_file_mb=4,
                      max_output_bytes=4096)
SHARED_DATA = Path(os.environ.get("CORL_BENCH_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def _live_tasks_of(uid: int) -> list[int]:
    """Non-zombie threads whose real uid is ``uid`` (read independently of the module under test)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/task/[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]


@pytest.fixture(params=["root", "userns", "uid"])
def contained(request) -> str:
    """A mode that contains hostile programs, or a skip that says why it is unavailable here."""
    try:
        resolve_isolation(request.param)
    except RuntimeError as exc:
        pytest.skip(f"isolation mode {request.param!r} unavailable here: {exc}")
    return request.param


@pytest.fixture(params=["auto", "none"])
def any_mode(request) -> str:
    """The mode a caller gets by default, and the fallback mode forced (so nothing hides behind 'auto')."""
    return request.param


@pytest.fixture
def listener():
    """A TCP socket listening on 127.0.0.1 in the test process (non-blocking: accept() tells if anyone came)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        srv.setblocking(False)
        yield srv


def _connect_program(port: int) -> str:
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\nprint('sent')\n"


# --- ordinary programs, every mode ---------------------------------------------------------------------------

def test_correct_program_passes(any_mode):
    result = check_program("def add(a, b):\n    return a + b\n", "assert add(2, 3) == 5\n", limits=FAST,
                           isolation=any_mode)
    assert result.passed and result.status == "ok" and result.returncode == 0
    assert result.stdout == ""  # the end-of-tests marker is removed


def test_failing_assert_fails(any_mode):
    result = check_program("def add(a, b):\n    return a - b\n", "assert add(2, 3) == 5\n", limits=FAST,
                           isolation=any_mode)
    assert not result.passed and result.status == "error" and "AssertionError" in result.stderr


def test_exit_zero_before_the_tests_is_incomplete(any_mode):
    for early_exit in ("import sys; sys.exit(0)", "import os; os._exit(0)"):
        result = check_program(f"def add(a, b):\n    return 0\n{early_exit}\n", "assert add(2, 3) == 5\n",
                               limits=FAST, isolation=any_mode)
        assert result.returncode == 0 and result.status == "incomplete" and not result.passed, early_exit


def test_stdin_is_passed_and_environment_scrubbed(any_mode, monkeypatch):
    monkeypatch.setenv("CORL_SECRET_TOKEN", "do-not-leak")
    src = "import json, os\nprint(input())\nprint(json.dumps(dict(os.environ)))\n"
    result = run_program(src, stdin="hello\n", limits=FAST, isolation=any_mode)
    first, env = result.stdout.splitlines()
    env = json.loads(env)
    assert result.passed and first == "hello"
    assert "CORL_SECRET_TOKEN" not in env and env["PYTHONHASHSEED"] == "0" and env["PATH"] == "/usr/bin:/bin"


def test_infinite_loop_times_out_on_the_cpu_limit(any_mode):
    result = run_program("while True:\n    pass\n", limits=SHORT, isolation=any_mode)
    assert result.status == "timeout" and not result.passed
    assert result.wall_seconds < SHORT.wall_seconds  # the CPU limit, not the wall clock, stopped it


def test_sleeping_program_times_out_on_the_wall_clock_and_its_children_die(any_mode):
    src = "import subprocess, time\nprint(subprocess.Popen(['sleep', '60']).pid, flush=True)\ntime.sleep(60)\n"
    result = run_program(src, limits=SHORT, isolation=any_mode)
    assert result.status == "timeout" and SHORT.wall_seconds <= result.wall_seconds < SHORT.wall_seconds + 2
    if result.isolation.pid_namespace:
        assert not _live_tasks_of(result.isolation.uid)
    else:  # the child's pid is a host pid; SIGKILL to its group is delivered asynchronously (a loaded machine: ms)
        pid, deadline = int(result.stdout.split()[0]), time.monotonic() + 5.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)


def test_memory_bomb_is_stopped_by_the_address_space_limit(any_mode):
    src = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert result.status == "memory" and not result.passed


def test_huge_output_is_truncated_to_the_cap_keeping_head_and_tail(any_mode):
    src = "print('HEAD')\nfor _ in range(2000):\n    print('x' * 1000)\nprint('TAIL')\n"  # 2 MB < max_file_mb
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert result.passed and result.truncated
    assert len(result.stdout) < FAST.max_output_bytes + 100
    assert result.stdout.startswith("HEAD") and result.stdout.rstrip().endswith("TAIL")
    assert "bytes cut by the sandbox" in result.stdout


def test_output_beyond_the_file_size_limit_stops_the_program(any_mode):
    src = "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n"  # endless: stopped at max_file_mb
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert not result.passed and "File too large" in result.stderr
    assert len(result.stdout) < FAST.max_output_bytes + 100


def test_huge_file_is_stopped_by_the_file_size_limit(any_mode):
    src = "with open('big', 'wb') as f:\n    for _ in range(64):\n        f.write(b'0' * (1 << 20))\n"
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert result.status == "error" and "File too large" in result.stderr


def test_temp_dir_is_removed_even_if_made_unreadable(any_mode):
    src = ("import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)\n"
           "print(os.getcwd())\n")
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert result.passed
    workdir = result.stdout.strip()
    assert workdir.startswith(tempfile.gettempdir()) and not os.path.exists(workdir)


def test_program_removing_its_own_directory_is_harmless(any_mode):
    src = "import os, shutil\nshutil.rmtree(os.getcwd())\nprint('removed')\n"
    result = run_program(src, limits=FAST, isolation=any_mode)
    assert result.passed and result.stdout.strip() == "removed"


def test_check_many_keeps_input_order(any_mode):
    pairs = [(f"def f():\n    return {i}\n", f"assert f() == {i if i % 2 else -1}\n") for i in range(6)]
    results = check_many(pairs, workers=2, limits=FAST, isolation=any_mode)
    assert [r.passed for r in results] == [bool(i % 2) for i in range(6)]


# --- the fallback mode: what it records and what it does not contain -----------------------------------------

def test_none_mode_records_that_nothing_is_isolated():
    result = run_program("print(1)", limits=FAST, isolation="none")
    iso = result.isolation
    assert iso.mode == "none" and iso.uid == os.getuid()
    assert not (iso.uid_dropped or iso.pid_namespace or iso.network_namespace)


def test_none_mode_does_not_block_the_network(listener):
    """The documented weakness of the fallback: a program reaches a socket on the host."""
    result = run_program(_connect_program(listener.getsockname()[1]), limits=FAST, isolation="none")
    assert result.passed and result.stdout.strip() == "sent"
    listener.accept()[0].close()  # the connection arrived


# --- hostile programs under a containing mode ----------------------------------------------------------------

def test_program_runs_unprivileged_in_its_own_namespaces(contained):
    src = "import os\nprint(os.getuid(), os.getpid())\n"
    result = run_program(src, limits=FAST, isolation=contained)
    uid, pid = map(int, result.stdout.split())
    iso = result.isolation
    assert result.passed and iso.mode == contained
    if iso.uid_dropped:
        assert uid == iso.uid != 0 and iso.uid != os.getuid()
    if iso.pid_namespace:
        assert pid == 1


def test_fork_bomb_is_contained_and_leaves_no_process(contained):
    src = ("import os, time\n"
           "while True:\n"
           "    try:\n"
           "        if os.fork() == 0:\n"
           "            os.setsid()  # children leave the process group\n"
           "        else:\n"
           "            print('forked', flush=True)\n"
           "    except OSError:\n"
           "        time.sleep(0.05)\n")
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=2, memory_mb=256, max_processes=16)
    result = run_program(src, limits=limits, isolation=contained)
    assert result.status == "timeout" and not result.passed
    assert result.stdout.count("forked") <= limits.max_processes  # RLIMIT_NPROC held
    uid = result.isolation.uid if result.isolation.uid_dropped else None
    if uid is not None:
        assert _live_tasks_of(uid) == []


def test_deleting_files_outside_its_directory_is_denied(contained):
    if contained == "userns":
        pytest.skip("userns mode runs the program as the calling user, whose files it can change (documented)")
    outside = tempfile.mkdtemp(prefix="corl-sandbox-test-")
    try:
        os.chmod(outside, 0o755)  # reachable and readable, not writable
        sentinel = Path(outside, "sentinel.txt")
        sentinel.write_text("keep me")
        src = (f"import os, shutil\nprint(open({str(sentinel)!r}).read())\n"
               f"for attempt in (lambda: os.remove({str(sentinel)!r}), lambda: shutil.rmtree({outside!r}),\n"
               f"                lambda: open({str(sentinel)!r}, 'w').write('gone'),\n"
               f"                lambda: open(os.path.join({outside!r}, 'new'), 'w')):\n"
               "    try:\n        attempt()\n    except PermissionError:\n        print('denied')\n"
               "raise SystemExit(1)\n")
        result = run_program(src, limits=FAST, isolation=contained)
        assert not result.passed and result.stdout.split() == ["keep", "me"] + ["denied"] * 4
        assert sentinel.read_text() == "keep me" and os.listdir(outside) == ["sentinel.txt"]
    finally:
        sentinel.unlink(missing_ok=True)
        os.rmdir(outside)


def test_files_left_in_world_writable_dirs_are_removed(contained):
    if contained == "userns":
        pytest.skip("userns mode runs as the calling user: its files in /tmp are indistinguishable from theirs")
    litter = Path(tempfile.gettempdir(), f"corl-sandbox-litter-{os.getpid()}")
    src = f"open({str(litter)!r}, 'w').write('x')\nprint('wrote')\n"
    result = run_program(src, limits=FAST, isolation=contained)
    assert result.passed and result.stdout.strip() == "wrote"
    assert not litter.exists()


def test_killing_its_parent_and_everything_else_fails(contained):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        src = ("import os, signal\n"
               "assert os.getuid() != 0, 'refusing to run unsandboxed'  # guard: a broken sandbox must not kill all\n"
               f"for target in (os.getppid(), {os.getpid()}, {bystander.pid}, -1):\n"
               "    try:\n        os.kill(target, signal.SIGKILL)\n    except OSError as exc:\n"
               "        print('failed', target, exc.errno)\n"
               "raise SystemExit(1)\n")
        result = run_program(src, limits=FAST, isolation=contained)
        assert not result.passed and result.status == "error"
        assert bystander.poll() is None  # still running; and so is this test process
        assert f"failed {bystander.pid}" in result.stdout
    finally:
        bystander.kill()
        bystander.wait()


def test_network_is_unreachable(contained, listener):
    if contained == "uid":
        pytest.skip("uid mode has no network namespace (documented); see test_none_mode_does_not_block_the_network")
    result = run_program(_connect_program(listener.getsockname()[1]), limits=FAST, isolation=contained)
    assert not result.passed and "unreachable" in result.stderr
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected


# --- arguments ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("cpu_seconds", 0), ("cpu_seconds", "3"), ("wall_seconds", -1),
                                          ("memory_mb", 8), ("max_processes", 0), ("max_file_mb", 0),
                                          ("max_output_bytes", 10)])
def test_invalid_limits_raise_a_message_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SandboxLimits\.{field}=.* is invalid: use "):
        SandboxLimits(**{field: value})


def test_fractional_cpu_seconds_round_up_to_whole_seconds():
    result = run_program("while True:\n    pass\n", limits=SandboxLimits(cpu_seconds=0.5, wall_seconds=4))
    assert result.status == "timeout" and 0.9 <= result.cpu_seconds < 1.5


def test_unknown_isolation_mode_is_rejected():
    with pytest.raises(ValueError, match="isolation='jail' is invalid"):
        resolve_isolation("jail")


def test_missing_interpreter_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no usable sandbox"):
        resolve_isolation("none", python="/nonexistent/python3")


# --- reference solutions --------------------------------------------------------------------------------------

@pytest.mark.shared_data
def test_reference_solutions_pass_under_the_sandbox():
    if not (SHARED_DATA / "humaneval" / "test.jsonl").exists() or not (SHARED_DATA / "mbpp" / "test.jsonl").exists():
        pytest.skip(f"no HumanEval / MBPP data under {SHARED_DATA} (set CORL_BENCH_DATA)")

    def rows(name: str) -> list[dict]:
        with open(SHARED_DATA / name / "test.jsonl", encoding="utf-8") as f:
            return [json.loads(line) for _, line in zip(range(10), f, strict=False)]

    pairs = [(r["prompt"] + r["canonical_solution"], f"{r['test']}\ncheck({r['entry_point']})\n")
             for r in rows("humaneval")]
    pairs += [(r["code"], r["test_setup_code"] + "\n" + "\n".join(r["test_list"])) for r in rows("mbpp")]
    results = check_many(pairs, workers=2)
    assert [r.status for r in results] == ["ok"] * 20


# --- uid slots across processes --------------------------------------------------------------------------------

# A process that runs a batch with check_many. It loads corl_bench.eval.sandbox, or for a manual check of another
# version the file named by CORL_TEST_SANDBOX_MODULE_FILE (e.g. git show HEAD~1:corl_bench/sandbox.py > f).
_RACE_CHILD = """\
import importlib.util, json, os, sys
path = os.environ.get("CORL_TEST_SANDBOX_MODULE_FILE")
if path:
    spec = importlib.util.spec_from_file_location("sandbox_under_test", path)
    sandbox = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sandbox)
else:
    import corl_bench.eval.sandbox as sandbox
mode, pairs = json.loads(sys.stdin.readline())
sandbox.resolve_isolation(mode)
print("ready", flush=True)
sys.stdin.readline()  # go: every process has probed
limits = sandbox.SandboxLimits(cpu_seconds=2, wall_seconds=8, memory_mb=256, max_processes=16, max_file_mb=4,
                               max_output_bytes=4096)
results = sandbox.check_many(pairs, workers=3, limits=limits, isolation=mode)
print(json.dumps([[r.status, r.stdout, r.isolation.uid] for r in results]), flush=True)
"""


def _race_batch(proc: int, token: str) -> tuple[list[tuple[str, str]], list[str | None]]:
    """(program, tests) pairs of one process and the stdout each correct one must print (None: hostile)."""
    good = ("import os, time\nopen('mine', 'w').write('{name}')\ntime.sleep({sleep})\n"
            "assert open('mine').read() == '{name}' and os.path.exists('prog.py')\nprint('done {name}')\n")
    hostile = [  # each runs as the uid of its slot and attacks whatever else runs as that uid
        "import os, signal, time\nfor _ in range(12):\n    time.sleep(0.1)\n"
        "    try:\n        os.kill(-1, signal.SIGKILL)\n    except OSError:\n        pass\nprint('still here')\n",
        f"import os, shutil\nfor d in ('/tmp', '/var/tmp', '/dev/shm'):\n"
        f"    open(os.path.join(d, 'corl-race-{token}-p{proc}-{{i}}'), 'w').write('x')\n"
        "for e in os.scandir('/tmp'):  # other runs' directories\n"
        "    if e.name.startswith('corl-sandbox-') and e.path != os.getcwd():\n"
        "        shutil.rmtree(e.path, ignore_errors=True)\nprint('littered')\n",
        f"import subprocess\nsubprocess.Popen(['sleep', '30.{token}'], start_new_session=True)\nprint('forked')\n",
    ]
    pairs, expected = [], []
    for i in range(9):
        if i % 3 == 1:
            pairs.append((hostile[(i // 3 + proc) % 3].replace("{i}", str(i)), ""))
            expected.append(None)
        else:
            name = f"p{proc}-{i}"
            pairs.append((good.format(name=name, sleep=0.5 + 0.25 * ((i + proc) % 7)), "assert True\n"))
            expected.append(f"done {name}\n")
    return pairs, expected


@pytest.mark.slow  # ~10 s per mode on 2 cores
@pytest.mark.parametrize("mode", ["root", "uid"])
def test_concurrent_processes_never_share_a_sandbox_uid(mode):
    """3 processes x 3 threads: correct programs (sleeping 0.5-2 s) run beside hostile ones as other uid slots;
    each correct program passes and nothing crashes. With a per-process uid pool, every round fails."""
    try:
        resolve_isolation(mode)
    except RuntimeError as exc:
        pytest.skip(f"isolation mode {mode!r} (sandbox uid slots) unavailable here: {exc}")
    token = str(os.getpid())
    for round_ in range(2):
        batches = [_race_batch(p, token) for p in range(3)]
        procs = []
        for pairs, _ in batches:  # probes one after the other, then all batches at once
            procs.append(subprocess.Popen([sys.executable, "-c", _RACE_CHILD], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            procs[-1].stdin.write(json.dumps([mode, pairs]) + "\n")
            procs[-1].stdin.flush()
            assert procs[-1].stdout.readline().strip() == "ready", procs[-1].communicate()[1][-2000:]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outputs):
            last = (err.strip().splitlines() or ["?"])[-1]
            assert p.returncode == 0, f"round {round_}: a process crashed: {last}\n{err[-3000:]}"
        for (_, expected), (out, _) in zip(batches, outputs):
            results = json.loads(out.strip().splitlines()[-1])
            for want, (status, stdout, uid) in zip(expected, results, strict=True):
                if want is not None:
                    assert (status, stdout) == ("ok", want), f"round {round_}, uid {uid}: {status} {stdout!r}"
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not list(Path(d).glob(f"corl-race-{token}-*")), f"litter left in {d}"
    sleepers = [c for c in Path("/proc").glob("[0-9]*/cmdline") if f"30.{token}".encode() in _read(c)]
    assert not sleepers, "a forked child outlived its run"


@pytest.mark.parametrize("mode", ["root", "uid"])
def test_a_run_waits_while_another_process_holds_every_slot(mode):
    """Slots are claimed across processes; when none is free a run waits (the holder here dies without
    releasing: the kernel drops its locks)."""
    try:
        resolve_isolation(mode)
    except RuntimeError as exc:
        pytest.skip(f"isolation mode {mode!r} (sandbox uid slots) unavailable here: {exc}")
    holder = subprocess.Popen([sys.executable, "-c", "import time, corl_bench.eval.sandbox as s\n"
                               "held = [s._claim_uid() for _ in range(s.SANDBOX_UID_SLOTS)]\n"
                               "print('held', flush=True)\ntime.sleep(1.5)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        result = run_program("print('ran')", limits=FAST, isolation=mode)
        assert result.passed and result.stdout.strip() == "ran"
        assert time.monotonic() - start > 1.0  # it waited for the holder to die
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("mode", ["root", "uid"])
def test_leftovers_of_a_slot_are_cleared_before_its_next_program(mode):
    """What a holder that died left under its uid (processes, files in /tmp and /dev/shm) is removed when the slot
    is claimed again, before the program starts."""
    try:
        resolve_isolation(mode)
    except RuntimeError as exc:
        pytest.skip(f"isolation mode {mode!r} (sandbox uid slots) unavailable here: {exc}")
    held = [_claim_uid()[:2] for _ in range(SANDBOX_UID_SLOTS)]  # every slot: the run gets the one let go below
    uid, fd = held.pop(0)
    litter = [Path(d, f"corl-leftover-{os.getpid()}") for d in ("/tmp", "/dev/shm")]
    sleeper = None
    try:
        for path in litter:
            path.write_text("x")
            os.chown(path, uid, uid)
        sleeper = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "30"],
                                   start_new_session=True)
        deadline = time.monotonic() + 5
        while not _live_tasks_of(uid) and time.monotonic() < deadline:  # until setpriv has dropped to the uid
            time.sleep(0.02)
        _release_uid(uid, fd)  # not declared clean, as by a holder that died mid-run
        src = f"import os\nprint([os.path.exists(p) for p in {[str(p) for p in litter]!r}])\n"
        result = run_program(src, limits=FAST, isolation=mode)
        assert result.isolation.uid == uid and result.passed and result.stdout.strip() == "[False, False]"
        assert sleeper.wait(timeout=5) == -9
    finally:
        for other_uid, other_fd in held:
            _release_uid(other_uid, other_fd)
        for path in litter:
            path.unlink(missing_ok=True)
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
