"""The model layer, below every other package: what a model reference is and how it loads.

* :mod:`corl_bench.models.load`     - references (entry, folder, hub id, micro family): :func:`kind`, :func:`check_ref`,
  :func:`load_model`, :func:`load_folder`, :func:`load_tokenizer`, the cache root
* :mod:`corl_bench.models.entries`  - the named GGUF model entries (``smol``, ``gemma3-270m``, ``qwen2.5-coder-0.5b``,
  ``qwen2.5-coder-1.5b``) and their dequantising
* :mod:`corl_bench.models.hub`      - the local Hugging Face cache and the one download of an uncached hub id
* :mod:`corl_bench.models.device`   - ``model.device`` / ``model.dtype`` resolved at load time
* :mod:`corl_bench.models.images`   - the vision codec (tokenizer + image processor + image-token layout)
* :mod:`corl_bench.models.lora`     - LoRA adapters merged into plain weights (for a weight sync)

Evaluation, training, reporting and every profile import this package; it imports none of them (a micro family is
reached through :data:`corl_bench.registries.PROFILES`). ``tests/test_architecture_on_cpu.py`` holds the rule.
Nothing here imports torch at module level.
"""
