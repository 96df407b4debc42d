"""Grading code completions: build the test program of a HumanEval / MBPP / LiveCodeBench item and run it in the
sandbox (:mod:`corl_bench.eval.sandbox`). A completion is correct iff the program runs to the end of its tests within
the limits (``check_program``: a program that exits 0 early, before the tests, fails).

* HumanEval — the program is ``prompt + completion`` (a continuation of the function) followed by the task's
  ``test`` and ``check(entry_point)``; when the extracted code already defines ``entry_point`` (a chat model that
  rewrites the whole function in a fenced block) the prompt is not prepended.
* MBPP — ``test_imports`` + code + ``test_setup_code`` + every assert of ``test_list``.
* LiveCodeBench — a driver runs the solution once per test case inside one sandboxed process: stdin problems get
  the input on ``sys.stdin`` and their stdout is compared line by line (whitespace-stripped, floats within 1e-6);
  functional (LeetCode) problems call ``Solution().<func_name>(*args)`` with JSON-decoded arguments.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

PER_TEST_SECONDS = 6.0  # LiveCodeBench's default per-test timeout


def humaneval_program(code: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    entry = meta["entry_point"]
    body = code if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.M) else meta["prompt"] + code
    return body, f"{meta['test']}\n\ncheck({entry})\n"


def mbpp_program(code: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    imports = "\n".join(meta.get("imports") or [])
    return f"{imports}\n{code}", f"{meta.get('setup') or ''}\n" + "\n".join(meta["tests"]) + "\n"


_LCB_DRIVER = r'''
import io, json, sys
CODE = {code!r}
TESTS = json.loads({tests!r})
FUNC = {func!r}

def _same(got, want):
    g, w = got.strip().splitlines(), want.strip().splitlines()
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        a, b = a.strip(), b.strip()
        if a == b:
            continue
        ta, tb = a.split(), b.split()
        if len(ta) != len(tb):
            return False
        try:
            if any(abs(float(x) - float(y)) > 1e-6 for x, y in zip(ta, tb)):
                return False
        except ValueError:
            return False
    return True

def _stdin(case):
    sys.stdin = io.TextIOWrapper(io.BytesIO(case["input"].encode()))
    out = io.StringIO()
    sys.stdout = out
    try:
        exec(compile(CODE, "solution.py", "exec"), {{"__name__": "__main__"}})
    except SystemExit:
        pass
    finally:
        sys.stdout = sys.__stdout__
    return _same(out.getvalue(), case["output"])

def _functional(case):
    ns = {{"__name__": "solution"}}
    exec(compile("from typing import *\n" + CODE, "solution.py", "exec"), ns)
    fn = getattr(ns["Solution"](), FUNC)
    args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
    got = fn(*args)
    got = json.loads(json.dumps(got))  # tuples -> lists, as the expected JSON
    return got == json.loads(case["output"])

for i, case in enumerate(TESTS):
    ok = _functional(case) if case.get("testtype") == "functional" else _stdin(case)
    if not ok:
        sys.stderr.write(f"test {{i}} failed\n")
        sys.exit(1)
'''


def livecodebench_program(code: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    return _LCB_DRIVER.format(code=code, tests=json.dumps(meta["tests"]), func=meta.get("func_name")), ""


PROGRAMS = {"humaneval": humaneval_program, "mbpp": mbpp_program, "livecodebench": livecodebench_program}


def program_for(code: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """(program, tests) for :func:`corl_bench.eval.sandbox.check_program`."""
    return PROGRAMS[meta["kind"]](code, meta)


def cpu_seconds(meta: Mapping[str, Any], base: float) -> float:
    """CPU budget of one program: ``base`` for HumanEval/MBPP; per test case for LiveCodeBench (capped at 60 s)."""
    if meta["kind"] == "livecodebench":
        return min(60.0, PER_TEST_SECONDS * max(1, len(meta["tests"])))
    return base


def run_tests(code: str | None, meta: Mapping[str, Any], *, timeout: float = 10.0) -> tuple[bool, str]:
    """(passed, status) of one completion's extracted code against its item's tests, in the sandbox."""
    from corl_bench.eval.sandbox import SandboxLimits, check_program

    if code is None or not code.strip():
        return False, "no-code"
    cpu = cpu_seconds(meta, timeout)
    program, tests = program_for(code, meta)
    result = check_program(program, tests, limits=SandboxLimits(cpu_seconds=cpu, wall_seconds=cpu * 2 + 5))
    return result.passed, result.status


def run_many(jobs: Sequence[tuple[str | None, Mapping[str, Any]]], *, timeout: float = 10.0,
             workers: int = 2) -> list[tuple[bool, str]]:
    """:func:`run_tests` over many (code, meta) pairs; the subprocesses run ``workers`` at a time."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda job: run_tests(job[0], job[1], timeout=timeout), jobs))
