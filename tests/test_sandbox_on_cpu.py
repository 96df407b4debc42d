"""corl_bench.sandbox: correct and failing programs, a battery of hostile programs, the fallback mode, limits.

Hostile programs run only under a mode that contains them ("root", "userns" or "uid", each skipped with the
reason where it is unavailable); the fallback mode "none" is tested with programs that cannot harm the host,
including one showing its documented weakness (network reachable).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from corl_bench.sandbox import (
    SandboxLimits,
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
    else:  # the child's pid is a host pid
        assert not _alive(int(result.stdout.split()[0]))


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
