"""Models from the Hugging Face hub: the local cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
``~/.cache/huggingface/hub``) and the one download of a hub id that is not cached (:func:`fetch_hub`, before a run
writes anything, never with ``HF_HUB_OFFLINE``). Moved from ``corl_bench.eval.models`` (issue 23); whether the hub
answers at all is :mod:`corl_bench.hub_access`.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from corl_bench.config import ConfigError, machine_problem

log = logging.getLogger(__name__)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")


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
        check_hub(ref)  # raises the offline message
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


def check_hub(ref: str) -> None:
    """Whether hub id ``ref`` can be loaded here: cached, or downloadable before the run starts (a warning, once per
    id); uncached with the hub offline or unreachable is a machine problem (one line, naming the fix)."""
    if hub_snapshot(ref) is None:
        if hub_offline():  # a fact of this machine: validate --elsewhere warns, everything else refuses
            machine_problem(f"model {ref!r} is not in the local Hugging Face cache ({hub_cache_dirs()[0]}) and "
                            f"HF_HUB_OFFLINE is set: fetch it where the hub is reachable (hf download "
                            f"{ref.partition('@')[0]}) and copy the cache here, or pass a local folder")
            return
        from corl_bench.hub_access import unreachable_reason

        reason = unreachable_reason()
        if reason:
            machine_problem(f"model {ref!r} is not in the local Hugging Face cache ({hub_cache_dirs()[0]}) and "
                            f"the hub is not reachable ({reason}): fetch it where the hub is reachable (hf "
                            f"download {ref.partition('@')[0]}) and copy the cache here, or pass a local folder")
            return
        if ref not in _WARNED:
            _WARNED.add(ref)
            log.warning("model %s is not in the local Hugging Face cache (%s): it is downloaded before the run "
                        "starts (set HF_HUB_OFFLINE=1 to refuse instead)", ref, hub_cache_dirs()[0])
