"""Can data or a model come from the Hugging Face hub here? Asked once per process, quickly, before a run writes anything.

* :func:`offline` - ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set: the hub must not be contacted.
* :func:`reachable` - one HEAD request to the hub's endpoint (``$HF_ENDPOINT``, default ``https://huggingface.co``) with
  a short timeout and no retries, through the proxies of the environment; the answer is kept for the process. Any
  HTTP answer counts as reachable; a failed name lookup, a refused connection or a timeout does not.
* :func:`dataset_cached` - a dataset repository already in the local caches of ``datasets`` or ``huggingface_hub``.
* :func:`check_dataset` - a one-line :class:`~corl_bench.config.MachineError` unless a hub dataset can be read: from
  the local cache, or from a reachable hub that has it (a warning under ``validate --elsewhere``). Validation calls it for every training set and benchmark
  that has no local copy, so an unreachable hub is one line naming the local copy to provide instead of the retries
  of ``datasets`` after the run directory exists.

Nothing here imports torch, ``datasets`` or ``huggingface_hub`` at module level.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from corl_bench.config import ConfigError, machine_problem

log = logging.getLogger(__name__)
TIMEOUT_S = 3.0
_TRUE = ("1", "true", "yes", "on")


def offline() -> bool:
    """True when the hub must not be contacted (``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` set to 1/true/yes)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


@functools.lru_cache(maxsize=None)
def _probe(url: str, timeout: float) -> str:
    """'' when ``url`` answers (any HTTP status), else the reason it does not."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return ""  # the server answered (401, 404, ...): reachable
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return f"{type(reason).__name__}: {reason}"[:120]
    return ""


def unreachable_reason() -> str:
    """'' when the hub can be contacted; else why not (offline setting, lookup failure, timeout ...)."""
    if offline():
        return "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set"
    return _probe(endpoint(), TIMEOUT_S)


def reachable() -> bool:
    return not unreachable_reason()


def _cache_roots() -> list[Path]:
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    roots = [Path(os.environ["HF_DATASETS_CACHE"])] if os.environ.get("HF_DATASETS_CACHE") else [home / "datasets"]
    roots.append(Path(os.environ["HF_HUB_CACHE"]) if os.environ.get("HF_HUB_CACHE") else home / "hub")
    return roots


def dataset_cached(repo: str) -> bool:
    """The dataset ``owner/name`` is in the local cache of ``datasets`` (``owner___name``) or ``huggingface_hub``
    (``datasets--owner--name``), so it can be read without the hub."""
    owner, _, name = repo.partition("/")
    for root in _cache_roots():
        for folder in (root / f"{owner}___{name}", root / f"datasets--{owner}--{name}"):
            if folder.is_dir() and any(folder.iterdir()):
                return True
    return False


def _exists_on_hub(repo: str) -> bool | None:
    """True / False when the hub says whether the dataset exists; None when it could not tell (auth, errors)."""
    try:
        from huggingface_hub import HfApi

        return bool(HfApi().repo_exists(repo, repo_type="dataset"))
    except Exception as e:  # noqa: BLE001 - gated repositories, rate limits: let the loader decide
        log.debug("could not ask the hub whether %s exists: %s", repo, e)
        return None


def check_dataset(repo: str, what: str, local: str) -> None:
    """One-line ConfigError unless the hub dataset ``repo`` can be read here (cached, or on a reachable hub).
    ``what``: the config field it comes from; ``local``: where a local copy goes instead (the fix)."""
    if dataset_cached(repo):
        return
    reason = unreachable_reason()
    if reason:
        machine_problem(f"{what}: no local copy and the Hugging Face hub is not reachable for {repo} ({reason}); "
                        f"{local}")
        return
    if _exists_on_hub(repo) is False:
        raise ConfigError(f"{what}: the hub has no dataset {repo} (or it is private); check the name, or {local}")
