"""The micro families' warm-started checkpoints as shipped with the project (``corl_bench/micro/checkpoints/``).

A warm start stops when a dev check crosses a threshold, so a small difference in float arithmetic between two CPUs
can change where it stops and therefore which models every micro result is about. The project therefore ships the
checkpoints its README and studies were measured on, and a run reads them (``model.micro_checkpoints=shipped``, the
default) instead of rebuilding them; a rebuild is a check (``corl-bench warmstart --verify FAMILY``), not a dependency.

Each folder holds the ``save_pretrained`` files, the tokenizer (and a VLM's image-processor config and vision codec),
``warmstart.json`` and ``manifest.json``: the recipe's fingerprint (the family definition, its suites' version and
the cache layout; see :func:`corl_bench.micro.profile.fingerprint`), the sha256 of every file, the stop step, the
dev checks and the versions it was built with. A shipped checkpoint is used only while its fingerprint matches the
family's current recipe (a changed recipe is built in the cache, with a warning, until its checkpoint is rebuilt and
committed: ``corl-bench warmstart --write FAMILY``; a test fails until then) and only while its files match their
hashes (else a one-line error).
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import shutil
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent / "checkpoints"
"""where the shipped checkpoints live (package data)"""
MANIFEST = "manifest.json"
_VERIFIED: set[Path] = set()
_WARNED: set[str] = set()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(family: str, root: Path | None = None) -> dict[str, Any] | None:
    """The shipped manifest of ``family`` (None when the project ships no checkpoint of it)."""
    path = (root or ROOT) / family / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def verify_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Files of ``folder`` that are missing or whose sha256 differs from ``files`` (name -> sha256)."""
    return [name for name, digest in sorted(files.items())
            if not (folder / name).is_file() or sha256(folder / name) != digest]


def find(family: str, fingerprint: str, root: Path | None = None) -> Path | None:
    """The shipped checkpoint folder of ``family`` if one ships for this recipe (``fingerprint``), its files checked
    once per process; None when none ships or it was built from another recipe (warned once). A shipped folder whose
    files do not match their hashes is a one-line ConfigError."""
    folder = (root or ROOT) / family
    man = manifest(family, root)
    if man is None:
        return None
    if man.get("fingerprint") != fingerprint:
        if family not in _WARNED:
            _WARNED.add(family)
            log.warning("the shipped checkpoint of %s was built from another recipe (fingerprint %s, the family's is "
                        "%s): this recipe is warm-started in the cache; ship it with corl-bench warmstart --write %s",
                        family, man.get("fingerprint"), fingerprint, family)
        return None
    if folder not in _VERIFIED:
        bad = verify_files(folder, man["files"])
        if bad:
            raise ConfigError(f"the shipped checkpoint of {family} ({folder}) does not match its manifest "
                              f"({', '.join(bad)} changed or missing); reinstall corl-bench (or git checkout "
                              f"{folder.name}), or set model.micro_checkpoints=build to warm-start it here")
        _VERIFIED.add(folder)
    return folder


def describe(folder: Path) -> dict[str, Any]:
    """What identifies a checkpoint folder: the weights' sha256, the stop step and the dev checks of its warm start."""
    record = json.loads((folder / "warmstart.json").read_text(encoding="utf-8"))
    return {"weights_sha256": sha256(folder / "model.safetensors"), "steps": record.get("steps"),
            "dev_checks": record.get("dev_checks")}


def compare(built: Path, shipped: Path) -> dict[str, Any]:
    """Whether a rebuilt checkpoint is the shipped one: the weights' hash, the stop step, the final dev accuracy."""
    a, b = describe(built), describe(shipped)
    last = lambda d: (d["dev_checks"] or [[None, None]])[-1][1]  # noqa: E731
    return {"same_weights": a["weights_sha256"] == b["weights_sha256"], "same_steps": a["steps"] == b["steps"],
            "steps": (b["steps"], a["steps"]), "dev": (last(b), last(a)),
            "sha256": (b["weights_sha256"][:12], a["weights_sha256"][:12])}


def write(source: Path, family: str, fingerprint: str, profile: str, root: Path | None = None) -> Path:
    """Copy a built checkpoint folder into the shipped tree with its manifest (replacing what was there)."""
    import torch
    import transformers

    target = (root or ROOT) / family
    tmp = target.with_name(f"{family}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files = {}
    for f in sorted(p for p in source.iterdir() if p.is_file() and p.name != MANIFEST):
        shutil.copy2(f, tmp / f.name)
        files[f.name] = sha256(tmp / f.name)
    record = json.loads((source / "warmstart.json").read_text(encoding="utf-8"))
    man = {"family": family, "profile": profile, "fingerprint": fingerprint, "steps": record.get("steps"),
           "dev_checks": record.get("dev_checks"), "files": files,
           "built_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "python": platform.python_version(), "machine": platform.machine(),
                          "processor": platform.processor() or None, "threads": 1}}
    (tmp / MANIFEST).write_text(json.dumps(man, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    _VERIFIED.discard(target)
    return target

