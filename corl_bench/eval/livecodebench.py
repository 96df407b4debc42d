"""LiveCodeBench ``code_generation_lite`` rows (release_v6 format) -> benchmark rows with decoded tests.

The release files (``test.jsonl`` ... ``test6.jsonl``; release_vN = the first N files, see :data:`RELEASE_FILES`)
hold one problem per line with ``question_id``, ``question_title``, ``question_content``, ``platform``,
``contest_id``, ``contest_date``, ``starter_code``, ``difficulty``, ``public_test_cases`` (a JSON string: a list of
``{"input", "output", "testtype"}``), ``private_test_cases`` (base64 of zlib of a pickled JSON string of the same
list) and ``metadata`` (a JSON string; ``func_name`` for LeetCode-style functional problems).

They are read from a local folder (``--data-dir``), or downloaded from the hub repository
``livecodebench/code_generation_lite`` file by file with ``huggingface_hub.hf_hub_download`` (the dataset's loading
script no longer runs with ``datasets`` >= 4; the hub cache and ``HF_HUB_OFFLINE`` apply). Every row, from either
place, goes through :func:`convert`. ``corl-bench data prepare`` freezes the converted rows as one file,
``<folder>/<release>.jsonl`` (:func:`frozen_name`), which :func:`read_release` reads back as is.

The private tests are decoded with a restricted unpickler that refuses every global (the payload is a plain
string), so a tampered file cannot execute code at load time.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import pickle
import zlib
from pathlib import Path
from typing import Any, Iterable

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)

HUB_REPO = "livecodebench/code_generation_lite"
"""the hub dataset repository of the release files"""
RELEASE_FILES = {"release_v1": ("test.jsonl",), "release_v2": ("test.jsonl", "test2.jsonl"),
                 "release_v3": ("test.jsonl", "test2.jsonl", "test3.jsonl"),
                 "release_v4": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl"),
                 "release_v5": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"),
                 "release_v6": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                                "test6.jsonl")}
"""release -> its files in the hub repository (each release adds one file; release_v6 = all six, 1055 problems)"""
DEFAULT_RELEASE = "release_v6"
CONVERTED_FIELDS = ("id", "question_content", "tests")
"""a row with these fields (and no ``question_id``) is already converted (a frozen copy) and is read as is"""


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


def is_converted(row: dict[str, Any]) -> bool:
    return "question_id" not in row and all(k in row for k in CONVERTED_FIELDS)


def release_files(release: str) -> tuple[str, ...]:
    """The hub files of ``release`` (one-line ConfigError for an unknown release)."""
    try:
        return RELEASE_FILES[release]
    except KeyError:
        raise ConfigError(f"unknown LiveCodeBench release {release!r}; valid: {', '.join(RELEASE_FILES)}") from None


def frozen_name(release: str) -> str:
    """The file ``corl-bench data prepare`` writes the converted rows of ``release`` to, inside the folder."""
    release_files(release)
    return f"{release}.jsonl"


def read_files(files: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows of JSONL files in the release layout (converted), or already converted (kept as they are)."""
    rows = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                        rows.append(rec if is_converted(rec) else convert(rec))
                    except (KeyError, ValueError, TypeError, AttributeError, zlib.error,
                            pickle.UnpicklingError) as e:
                        raise ConfigError(f"{f}:{i}: not a LiveCodeBench row ({type(e).__name__}: "
                                          f"{str(e)[:160]})") from None
    return rows


def read_release(path: Path, release: str = DEFAULT_RELEASE) -> list[dict[str, Any]]:
    """Rows of a release from one JSONL file, or from a folder: its frozen ``<release>.jsonl`` if there is one,
    else the release's ``test*.jsonl`` files that it holds."""
    files = release_files(release)
    if path.is_file():
        return read_files([path])
    frozen = path / frozen_name(release)
    if frozen.is_file():
        return read_files([frozen])
    present = [path / f for f in files if (path / f).is_file()]
    if not present:
        raise ConfigError(f"{path}: no LiveCodeBench files found; put the {release} files of {HUB_REPO} "
                          f"({', '.join(files)}) or a frozen {frozen.name} (`corl-bench data prepare`) there")
    if len(present) < len(files):
        log.warning("%s: only %d of the %d %s files are there (missing %s); the set is incomplete", path,
                    len(present), len(files), release, ", ".join(f for f in files if not (path / f).is_file()))
    return read_files(present)


def _download(filename: str, revision: str | None = None) -> Path:
    """One release file from the hub (or the local hub cache); tests replace this function."""
    from huggingface_hub import hf_hub_download  # optional; lazy

    return Path(hf_hub_download(repo_id=HUB_REPO, filename=filename, repo_type="dataset", revision=revision))


def download_release(release: str = DEFAULT_RELEASE, revision: str | None = None, local: str = "livecodebench"
                     ) -> list[Path]:
    """Paths of the release's files, downloaded from the hub (or found in its cache); ``local`` names the folder
    the errors point to."""
    files = release_files(release)
    names = files[0] if len(files) == 1 else f"{files[0]} ... {files[-1]}"
    fix = (f"pass --data-dir DIR (or set $CORL_BENCH_DATA) where DIR/{local}/ holds the {release} files of "
           f"{HUB_REPO} ({names}) or a frozen {frozen_name(release)}")
    paths = []
    for name in files:
        try:
            paths.append(_download(name, revision))
        except ImportError:
            raise ConfigError(f"LiveCodeBench {release}: no local copy and `huggingface_hub` is not installed; "
                              f"{fix}, or `pip install huggingface_hub`") from None
        except Exception as e:  # offline and not cached, network, auth, missing revision ...
            first = (str(e).splitlines() or [""])[0].split(". ")[0][:160]
            raise ConfigError(f"LiveCodeBench {release}: could not get {name} from the hub {HUB_REPO} "
                              f"({type(e).__name__}: {first}); {fix}") from None
        log.info("LiveCodeBench %s: %s -> %s", release, name, paths[-1])
    return paths


def from_hub(release: str = DEFAULT_RELEASE, revision: str | None = None, local: str = "livecodebench"
             ) -> list[dict[str, Any]]:
    """The release's rows from the hub, each through :func:`convert` (so they carry their tests)."""
    return read_files(download_release(release, revision, local))
