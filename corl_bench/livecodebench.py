"""LiveCodeBench ``code_generation_lite`` rows (release_v6 format) -> benchmark rows with decoded tests.

The release files (``test.jsonl`` ... ``test6.jsonl``; release_v6 = all six) hold one problem per line with
``question_id``, ``question_title``, ``question_content``, ``platform``, ``contest_date``, ``starter_code``,
``difficulty``, ``public_test_cases`` (a JSON string: a list of ``{"input", "output", "testtype"}``),
``private_test_cases`` (base64 of zlib of a pickled JSON string of the same list) and ``metadata`` (a JSON string;
``func_name`` for LeetCode-style functional problems).

The private tests are decoded with a restricted unpickler that refuses every global (the payload is a plain
string), so a tampered file cannot execute code at load time.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError

RELEASE_FILES = {"release_v1": ("test.jsonl",), "release_v2": ("test.jsonl", "test2.jsonl"),
                 "release_v3": ("test.jsonl", "test2.jsonl", "test3.jsonl"),
                 "release_v4": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl"),
                 "release_v5": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"),
                 "release_v6": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                                "test6.jsonl")}


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case payload")


def decode_private(payload: str) -> list[dict[str, Any]]:
    """base64(zlib(pickle(json))) -> the list of test cases."""
    raw = zlib.decompress(base64.b64decode(payload))
    text = _NoGlobals(io.BytesIO(raw)).load()
    if not isinstance(text, str):
        raise ConfigError(f"private_test_cases decoded to {type(text).__name__}, expected a JSON string")
    return json.loads(text)


def encode_private(cases: list[dict[str, Any]]) -> str:
    """The inverse of :func:`decode_private` (for fixtures)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode("ascii")


def convert(row: dict[str, Any]) -> dict[str, Any]:
    """One release row -> a benchmark row: id, question_content, starter_code, func_name, tests, metadata."""
    public = json.loads(row.get("public_test_cases") or "[]")
    private = decode_private(row["private_test_cases"]) if row.get("private_test_cases") else []
    meta = json.loads(row.get("metadata") or "{}")
    tests = [{"input": t["input"], "output": t["output"], "testtype": t.get("testtype", "stdin")}
             for t in public + private]
    return {"id": str(row["question_id"]), "question_title": row.get("question_title", ""),
            "question_content": row["question_content"], "starter_code": row.get("starter_code") or "",
            "func_name": meta.get("func_name"), "platform": row.get("platform"),
            "contest_date": row.get("contest_date"), "difficulty": row.get("difficulty"), "tests": tests,
            "n_public": len(public)}


def read_release(path: Path, release: str = "release_v6") -> list[dict[str, Any]]:
    """Rows of a release from a folder of ``test*.jsonl`` files, or from one JSONL file."""
    files = [path] if path.is_file() else [path / f for f in RELEASE_FILES[release] if (path / f).is_file()]
    if not files:
        raise ConfigError(f"{path}: no LiveCodeBench files ({', '.join(RELEASE_FILES[release])}) found")
    rows = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(convert(json.loads(line)))
                    except (KeyError, ValueError, zlib.error, pickle.UnpicklingError) as e:
                        raise ConfigError(f"{f}:{i}: not a LiveCodeBench row ({type(e).__name__}: {e})") from None
    return rows
