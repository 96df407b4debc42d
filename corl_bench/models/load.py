"""Models to evaluate or train, by reference: a named entry, a checkpoint folder, a hub id, or a micro family
(moved from ``corl_bench.eval.models``, issue 23).

    smol, gemma3-270m   a named GGUF entry (:mod:`corl_bench.models.entries`; also ``qwen2.5-coder-0.5b`` and
                        ``qwen2.5-coder-1.5b``), dequantised once and cached
    <folder>            any ``save_pretrained`` folder (a run's ``checkpoints/final/<agent>``, a hub snapshot)
    <owner/name>        a hub id (``Qwen/Qwen2.5-3B``, optionally ``@revision``), loaded from the local Hugging Face
                        cache; one not cached is downloaded once by :func:`~corl_bench.models.hub.fetch_hub` (before a
                        run writes anything), never with ``HF_HUB_OFFLINE``
    <family>            a micro family (``qwen2-bpe`` ...), from the micro profile's cache (``corl-bench eval`` only),
                        loaded through :data:`corl_bench.registries.PROFILES`

Every loader returns ``(model, tokenizer)`` with the model in eval mode and a left-padding tokenizer that has a
pad token (the rollout engine needs both). :func:`check_ref` tells whether a reference can be loaded without
loading any weights (``corl-bench validate``). Nothing here imports torch at module level.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError
from corl_bench.models.device import resolve_device, resolve_dtype
from corl_bench.models.entries import ENTRIES, check_entry, dequantise
from corl_bench.models.hub import HUB_ID, check_hub, fetch_hub, hub_snapshot
from corl_bench.models.hf_vlm import ProcessorCodec, is_processor_vlm, load_processor
from corl_bench.models.images import CODEC_FILE, VisionCodec, attach

log = logging.getLogger(__name__)


def default_cache_root() -> Path:
    """Where built and converted models are cached: ``$CORL_BENCH_CACHE``, else ``~/.cache/corl-bench`` (the micro
    checkpoints, the dequantised entries; moved from ``corl_bench.micro.profile``)."""
    env = os.environ.get("CORL_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "corl-bench"


def check_creatable(path: Path, what: str, fix: str) -> None:
    """ConfigError unless ``path`` exists as a writable directory or its nearest existing ancestor is writable (a
    model cache about to be filled; moved from ``corl_bench.micro.profile``)."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot create {what} {path} ({probe} is not a writable directory); {fix}")


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
        check_hub(ref)
    elif k == "unknown" or (k == "family" and not families):
        from corl_bench.registries import FAMILIES

        extra = f", a micro family ({', '.join(FAMILIES.names())})" if families else ""
        raise ConfigError(f"model {ref!r} is not a model folder, a hub id (owner/name in the local Hugging Face "
                          f"cache), a model entry ({', '.join(ENTRIES)}){extra}")
    return k


def takes_images(ref: str) -> bool | None:
    """Whether the model of a (non-family) reference takes images, read from its files without loading it: a
    vision-language checkpoint written by corl-bench (it holds the image layout, ``corl_vision_codec.json``) does,
    and so does any image-text-to-text checkpoint with its processor (Qwen2-VL, InternVL, LLaVA, ...:
    :func:`corl_bench.models.hf_vlm.is_processor_vlm`); a model entry or any other folder loads as a text model. None
    for a hub id that is not cached yet."""
    if kind(ref) == "entry":
        return False
    folder = _local_folder(ref)
    if folder is None:
        return None
    return (folder / CODEC_FILE).is_file() or is_processor_vlm(folder)


def has_own_codec(ref: str) -> bool:
    """Whether a reference is a vision-language checkpoint written by corl-bench with its own image codec
    (``corl_vision_codec.json``): transformers loads it through corl-bench only, vLLM not at all."""
    folder = _local_folder(ref)
    return folder is not None and (folder / CODEC_FILE).is_file()


def _local_folder(ref: str) -> Path | None:
    """The folder a folder reference names, or a cached hub id's snapshot; None otherwise (entries, uncached ids)."""
    k = kind(ref)
    return Path(ref) if k == "folder" else hub_snapshot(ref) if k == "hub" else None


def _finish(model: Any, tok: Any) -> tuple[Any, Any]:
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok


def load_tokenizer(path: Path, trust_remote_code: bool = False) -> Any:
    """A folder's tokenizer. Tokenizers saved as a plain ``PreTrainedTokenizerFast`` (the micro families) are loaded
    as such: ``AutoTokenizer`` would rebuild e.g. a Qwen2 tokenizer that tokenizes differently. A vision-language
    folder with its own processor gives the processor's tokenizer carrying the codec, so a prompt rendered before (or
    without) the model is loaded places its images as the loaded model's would."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if not (path / CODEC_FILE).is_file() and is_processor_vlm(path):  # a VLM's tokenizer carries its processor
        proc = load_processor(path, trust_remote_code)
        return attach(proc.tokenizer, ProcessorCodec(proc))
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
                trust_remote_code: bool = False, max_image_side: int = 0) -> tuple[Any, Any]:
    """A ``save_pretrained`` folder; ``dtype`` None keeps the saved dtype handling of transformers (fp32 for the
    micro families and the dequantised entries), ``device`` None leaves the model on the CPU. A vision-language
    folder loads with ``AutoModelForImageTextToText`` and its tokenizer carries the codec: the one written by
    corl-bench's micro families (``corl_vision_codec.json``) or else the model's own processor
    (:class:`corl_bench.models.hf_vlm.ProcessorCodec`; ``max_image_side``: its images are downscaled to that longer
    side first, 0 = as given)."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a model folder (no config.json); pass a save_pretrained folder, a run "
                          f"directory, a micro family or one of: {', '.join(ENTRIES)}")
    processor_vlm = not (path / CODEC_FILE).is_file() and is_processor_vlm(path)
    if processor_vlm:  # any Hugging Face VLM: its processor's tokenizer, image processor and chat template
        proc = load_processor(path, trust_remote_code)
        tok = attach(proc.tokenizer, ProcessorCodec(proc, max_image_side=max_image_side))
    else:
        tok = load_tokenizer(path, trust_remote_code)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code} if trust_remote_code else {}
    where = resolve_device(device) if device else None
    if dtype is not None:
        kwargs["dtype"] = resolve_dtype(dtype, where or "cpu")
    if (path / CODEC_FILE).is_file():  # a vision-language checkpoint written by corl-bench (micro-visual, a run)
        from transformers import AutoModelForImageTextToText

        attach(tok, VisionCodec.from_pretrained(path, tok))
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
    elif processor_vlm:
        from transformers import AutoModelForImageTextToText

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
               trust_remote_code: bool = False, max_image_side: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a named entry, a folder, a cached hub id or a micro family (module docstring)."""
    root = cache_root or default_cache_root()
    if check_ref(ref, families=True) == "family":
        return load_family(ref)
    return load_folder(model_folder(ref, root), device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                       max_image_side=max_image_side)


def load_family(name: str) -> tuple[Any, Any]:
    """A registered family's checkpoint, loaded by the profile the family names (``family.profile``), found through
    the registries: this layer imports no profile."""
    from corl_bench.registries import FAMILIES, PROFILES

    return PROFILES.get(FAMILIES.get(name).profile)().load(name)
