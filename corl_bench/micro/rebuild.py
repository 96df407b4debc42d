"""Rebuild checks of the shipped micro checkpoints (``corl-bench warmstart``): warm-start families from scratch,
compare a rebuild with what ships (:func:`verify`), or write a rebuild into the shipped tree (:func:`ship`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corl_bench.config import ConfigError
from corl_bench.micro.shipped import ROOT, compare, manifest, write


def profile_for(family: str, model_cfg: Any = None) -> Any:
    """The micro profile (text or visual) that builds and reads ``family``."""
    from corl_bench.micro.profile import MicroProfile
    from corl_bench.micro.vl_families import is_visual
    from corl_bench.micro.vl_profile import MicroVisualProfile

    probe = MicroProfile(model_cfg)
    cls = MicroVisualProfile if is_visual(probe.family(family)) else MicroProfile
    return cls(model_cfg)


def shipped_families() -> list[str]:
    """Every registered family the project ships a checkpoint of."""
    from corl_bench.registries import FAMILIES

    return [name for name in FAMILIES.names() if manifest(name) is not None]


def rebuild(families: list[str], cache_dir: Path, progress: Any = None) -> dict[str, Path]:
    """Warm-start ``families`` from scratch under ``cache_dir`` (in parallel single-threaded processes, as every micro
    build) and return family -> built folder."""
    from corl_bench.config import ModelConfig

    cfg = ModelConfig(cache_dir=str(cache_dir), micro_checkpoints="build")
    out: dict[str, Path] = {}
    by_profile: dict[type, list[str]] = {}
    for f in families:
        by_profile.setdefault(type(profile_for(f, cfg)), []).append(f)
    for cls, names in by_profile.items():
        out.update(cls(cfg).ensure_checkpoints(names, progress))
    return out


def verify(families: list[str], cache_dir: Path, progress: Any = None,
           root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Rebuild each family from scratch and compare it with its shipped checkpoint (:func:`compare`)."""
    missing = [f for f in families if manifest(f, root) is None]
    if missing:
        raise ConfigError(f"no shipped checkpoint of {', '.join(missing)}; families that ship one: "
                          f"{', '.join(shipped_families())}")
    built = rebuild(families, cache_dir, progress)
    return {f: compare(built[f], (root or ROOT) / f) for f in families}


def ship(families: list[str], cache_dir: Path | None = None, progress: Any = None,
         root: Path | None = None) -> dict[str, Path]:
    """Warm-start each family on this machine (its cached build is reused) and write it into the shipped tree."""
    from corl_bench.models.load import default_cache_root

    built = rebuild(families, cache_dir or default_cache_root(), progress)
    out = {}
    for f in families:
        prof = profile_for(f)
        out[f] = write(built[f], f, prof.fingerprint(prof.family(f)), prof.name, root)
    return out
