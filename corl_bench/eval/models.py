"""Re-export for existing imports (scripts, plugins, notebooks): model references, entries and the hub cache moved
to the model layer :mod:`corl_bench.models` (issue 23). New code imports from there:

* :mod:`corl_bench.models.load`     - ``kind``, ``check_ref``, ``load_model``, ``load_folder``, ``load_tokenizer``,
  ``model_folder``, ``takes_images``
* :mod:`corl_bench.models.entries`  - ``ENTRIES``, ``GGUFEntry``, ``check_entry``, ``assemble``, ``dequantise`` ...
* :mod:`corl_bench.models.hub`      - ``HUB_ID``, ``hub_cache_dirs``, ``hub_snapshot``, ``fetch_hub``, ``hub_offline``
"""

from __future__ import annotations

from corl_bench.models.entries import (ENTRIES, GGUFEntry, assemble, check_entry, dequantise, entry_dir,
                                       expected_sha256, gguf_path, gguf_size)
from corl_bench.models.hub import HUB_ID, fetch_hub, hub_cache_dirs, hub_offline, hub_snapshot
from corl_bench.models.load import (check_ref, kind, load_folder, load_model, load_tokenizer, model_folder,
                                    takes_images)

__all__ = ["ENTRIES", "GGUFEntry", "HUB_ID", "assemble", "check_entry", "check_ref", "dequantise", "entry_dir",
           "expected_sha256", "fetch_hub", "gguf_path", "gguf_size", "hub_cache_dirs", "hub_offline", "hub_snapshot",
           "kind", "load_folder", "load_model", "load_tokenizer", "model_folder", "takes_images"]
