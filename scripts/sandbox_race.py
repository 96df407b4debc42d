#!/usr/bin/env python
"""Reproduce the cross-process uid race of the code sandbox: concurrent processes, each running one program.

    python scripts/sandbox_race.py --trials 8                                   # the sandbox as installed
    python scripts/sandbox_race.py --trials 8 --module-file /tmp/old_sandbox.py  # another version of sandbox.py

Each trial starts one process per ``--sleeps`` value (default: two, sleeping 1 s and 4 s). The processes load
the sandbox module and resolve its isolation (the probe) one after the other; then all at once call
``run_program`` on a program that sleeps that long and prints ``done``. A trial fails if any process crashes or
any program does not end with status ``ok`` and stdout ``done`` (before the fix: ``FileNotFoundError`` on the
``corl-sandbox-*`` directory, or status ``killed``, because both processes ran their programs as the same uid and
one's clean-up killed the other's program or removed its directory). Prints the trials and failures; exit 1 if
any trial failed. Needs the isolation modes that drop to a sandbox uid (root or uid: run as root).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
import traceback


def load_sandbox(module_file: str | None):
    """corl_bench.eval.sandbox, or the sandbox module in ``module_file`` (stdlib-only, loaded under its own name)."""
    if not module_file:
        import corl_bench.eval.sandbox
        return corl_bench.eval.sandbox
    spec = importlib.util.spec_from_file_location("sandbox_under_test", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def child(args: argparse.Namespace) -> int:
    sandbox = load_sandbox(args.module_file)
    iso = sandbox.resolve_isolation(args.isolation)
    print(json.dumps({"ready": iso.mode}), flush=True)
    sys.stdin.readline()  # the go signal: every process has probed
    try:
        result = sandbox.run_program(f"import time\ntime.sleep({args.sleep})\nprint('done')\n",
                                     limits=sandbox.SandboxLimits(wall_seconds=args.sleep + 10))
    except Exception:
        traceback.print_exc()
        return 1
    print(json.dumps({"status": result.status, "stdout": result.stdout, "uid": result.isolation.uid,
                      "stderr": result.stderr[-300:]}), flush=True)
    return 0


def trial(args: argparse.Namespace) -> list[str]:
    """Problems of one trial (empty: every program passed)."""
    base = [sys.executable, __file__, "--child", "--isolation", args.isolation]
    if args.module_file:
        base += ["--module-file", args.module_file]
    procs, ready = [], []
    for s in args.sleeps:  # one after the other, so that only the programs overlap, not the probes
        procs.append(subprocess.Popen([*base, "--sleep", str(s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        ready.append("ready" in procs[-1].stdout.readline())
    for p in procs:
        if p.poll() is None:
            p.stdin.write("go\n")
            p.stdin.flush()
    problems = []
    for s, p, was_ready in zip(args.sleeps, procs, ready):
        out, err = p.communicate(timeout=s + 60)
        if p.returncode != 0:
            when = "" if was_ready else " in the probe (before its program)"
            problems.append(f"sleep {s}: process crashed{when}: {(err.strip().splitlines() or ['?'])[-1]}")
            continue
        result = json.loads(out.strip().splitlines()[-1])
        if result["status"] != "ok" or result["stdout"].strip() != "done":
            problems.append(f"sleep {s}: status {result['status']}, stdout {result['stdout'].strip()!r}, "
                            f"uid {result['uid']}, stderr {result['stderr'].strip()[-120:]!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--sleeps", type=float, nargs="+", default=[1.0, 4.0],
                        help="one process per value, each running a program that sleeps that many seconds")
    parser.add_argument("--module-file", help="path of a sandbox.py to test instead of corl_bench.eval.sandbox")
    parser.add_argument("--isolation", default="auto", help="isolation mode (default auto)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sleep", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    failures = 0
    for i in range(1, args.trials + 1):
        start = time.monotonic()
        problems = trial(args)
        failures += bool(problems)
        print(f"trial {i}: {'FAILED' if problems else 'ok'} ({time.monotonic() - start:.1f} s)"
              + "".join(f"\n    {p}" for p in problems), flush=True)
    print(f"module: {args.module_file or 'corl_bench.eval.sandbox'}  isolation: {args.isolation}  "
          f"sleeps: {' '.join(map(str, args.sleeps))}")
    print(f"trials: {args.trials}  failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
