"""Does one agent's training step fit the machine? The memory estimate of ``scripts/estimate_memory.py``, from the
model's architecture alone (no weights are read), and what the ``hf`` profile does with it.

An agent holds its parameters, their gradients and AdamW's two moments (16 bytes per parameter in float32, 8 in
bfloat16), frozen copies for a KL reference or a method's auxiliary model (weights only), and, at its peak, either
the activations of one training micro-batch plus one chunk of LM-head logits, or the KV cache of ``rollout.max_batch``
decoded sequences. Activations: with gradient checkpointing each decoder layer keeps its input (micro-batch x tokens
x hidden) and one layer is recomputed at a time (``16 x hidden + 3 x intermediate`` values per token; attention by a
fused kernel); without it every layer keeps those intermediates. The constant is fitted to ``scripts/bench_memory.py``
(SmolLM2-135M grows by 0.48 GiB per sequence of ~286 tokens: 58 KiB per token and layer measured, 54 KiB estimated).
Logits: ``logit_chunk`` rows of the vocabulary at a time, three fp32 copies (logits, log-softmax, gradient); 0 = the
whole micro-batch's completion positions at once.

Agents of one process on one device train in turn, so a device needs every agent's resident state plus the largest
single agent's transient peak. :func:`fit_memory` picks ``memory.micro_batch`` and ``memory.logit_chunk`` for the hf
profile's CPU defaults (the largest power-of-two micro-batch whose step fits 60 % of the machine's memory, as
``auto_find_batch_size`` halves a batch until it fits), and :func:`check_memory` refuses a run whose estimated peak
exceeds the memory a device has, naming options that would fit. These are estimates (allocator slack and, on CUDA, the
context come on top); the README compares them with measured peaks.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

GB = 1e9
PROMPT_TOKENS = 200
"""prompt length the estimate assumes (a MATH problem in a chat template, or the few-shot prompt); a vision-language
model's prompt has one image on top (:attr:`Arch.image_tokens`)"""
MEMORY_SHARE = 0.6
"""share of the machine's memory the hf profile's defaults may plan for (the rest: the OS, Python, the evaluator)"""


@dataclass(frozen=True)
class Arch:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    vision_params: int = 0
    """a vision-language model's vision tower (:func:`vision_tower_params`); 0 for a text model"""
    image_tokens: int = 0
    """language-model tokens one image takes at most (:func:`image_tokens`); 0 for a text model"""

    @property
    def total_params(self) -> int:
        """What the agent trains and holds: the decoder and, for a vision-language model, its vision tower."""
        return self.params + self.vision_params

    @property
    def params(self) -> int:
        """Decoder parameters: attention (q, k, v, o; biases ignored), gated MLP (3 matrices), norms, embeddings."""
        attn = self.hidden * self.head_dim * (self.heads * 2 + self.kv_heads * 2)
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * per_layer + emb + self.hidden

    def kv_bytes_per_token(self, bytes_per_value: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * bytes_per_value


#: Published config.json values (huggingface.co/<id>/blob/main/config.json) of the paper's models and of the model
#: entries (read before an entry is dequantised; tests/test_fit_on_cpu.py checks them against the dequantised folder).
KNOWN = {
    "Qwen/Qwen2.5-3B": Arch("Qwen/Qwen2.5-3B", 2048, 36, 16, 2, 128, 11008, 151936, True),
    "meta-llama/Llama-3.2-3B-Instruct": Arch("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256,
                                             True),
    "Qwen/Qwen3-1.7B-Base": Arch("Qwen/Qwen3-1.7B-Base", 2048, 28, 16, 8, 128, 6144, 151936, True),
    "smol": Arch("smol", 576, 30, 9, 3, 64, 1536, 49152, True),
    "gemma3-270m": Arch("gemma3-270m", 640, 18, 4, 1, 256, 2048, 262144, True),
}


def from_config(path: Path, name: str) -> Arch:
    """The architecture in a ``config.json``. A vision-language config: its text model's sizes (``text_config``, and
    the top level for a size it leaves out, as older hub configs keep ``vocab_size`` there) and the top level's
    ``tie_word_embeddings`` (the composite model's own head decides); the vision tower is not counted."""
    top = json.loads(Path(path).read_text(encoding="utf-8"))
    c = {**top, **(top.get("text_config") or {})}
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    vision = top.get("vision_config")
    return Arch(name, hidden, c["num_hidden_layers"], heads, c.get("num_key_value_heads") or heads,
                c.get("head_dim") or hidden // heads, c["intermediate_size"], c["vocab_size"],
                bool(top.get("tie_word_embeddings", c.get("tie_word_embeddings", True))),
                vision_tower_params(vision) if isinstance(vision, dict) else 0,
                image_tokens(top, processor=_image_processor_config(Path(path).parent)))


def _image_processor_config(folder: Path) -> dict[str, Any]:
    """The folder's image processor config (``processor_config.json`` or ``preprocessor_config.json``); {} if none."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        try:
            conf = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        conf = conf.get("image_processor", conf)
        if isinstance(conf, dict):
            return conf
    return {}


IMAGE_SIDE = 1024
"""the long side (px) an image is assumed to have: the paper's VLM cap (``model.max_image_side`` in its configs)"""


def image_tokens(top: dict[str, Any], side: int = IMAGE_SIDE, processor: dict[str, Any] | None = None) -> int:
    """Language-model tokens one image of ``side`` x ``side`` px takes at most, from a VLM's ``config.json`` (0 for a
    text model): Qwen2-VL / Qwen2.5-VL: one token per (patch x merge)² px; Gemma-3: ``mm_tokens_per_image``; InternVL:
    (image_size / patch)² x downsample_ratio² a tile, 12 tiles and a thumbnail; Idefics3 / SmolVLM: (image_size /
    patch)² / scale_factor² a tile, the tiles that cover ``side`` and the whole image; LLaVA-NeXT / OneVision: a
    tile per ``image_grid_pinpoints`` cell of the largest grid (at most 9 for ``anyres_max_9``), the base image and a
    newline token per row of features;
    LLaVA and others: (image_size / patch)². Special tokens around the block are left out. ``processor``: the image
    processor's config, whose limits apply where they are lower (Qwen2-VL's ``max_pixels`` / ``size.longest_edge``,
    InternVL's ``max_patches``, Idefics3's ``size.longest_edge`` and ``max_image_size``)."""
    vc = top.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    proc = processor or {}
    size_conf = proc.get("size") if isinstance(proc.get("size"), dict) else {}
    first = lambda v: int(v[0] if isinstance(v, (list, tuple)) else v)  # noqa: E731 - sizes may be [h, w]
    patch = first(vc.get("patch_size", 14))
    if vc.get("spatial_merge_size"):
        unit = patch * int(vc["spatial_merge_size"])
        max_pixels = proc.get("max_pixels") or size_conf.get("longest_edge")
        return min(math.ceil(side / unit) ** 2, int(max_pixels) // unit ** 2 if max_pixels else math.inf)
    if top.get("mm_tokens_per_image"):
        return int(top["mm_tokens_per_image"])
    size = first(vc.get("image_size") or 224)
    grid = (size // patch) ** 2
    if top.get("downsample_ratio"):
        return int(grid * float(top["downsample_ratio"]) ** 2) * (int(proc.get("max_patches") or 12) + 1)
    if top.get("scale_factor"):
        tile = first((proc.get("max_image_size") or {}).get("longest_edge") or size)
        side = min(side, int(size_conf.get("longest_edge") or side))
        return grid // int(top["scale_factor"]) ** 2 * (math.ceil(side / tile) ** 2 + 1)
    pinpoints = top.get("image_grid_pinpoints")
    if pinpoints:
        tiles = max(first(h) * first(w) for h, w in pinpoints) // size ** 2
        limit = str(top.get("vision_aspect_ratio", ""))
        if limit.startswith("anyres_max_"):
            tiles = min(tiles, int(limit.rsplit("_", 1)[1]))
        rows = max(first(h) for h, _ in pinpoints) // size * math.isqrt(grid)  # a newline token per feature row
        return grid * (tiles + 1) + rows
    return grid


def vision_tower_params(vc: dict[str, Any]) -> int:
    """Parameters of a ViT-style vision tower from its ``vision_config``: per layer the attention (4 h²) and the MLP
    (two matrices, three for a gated ``silu`` one as Qwen2.5-VL's), plus the patch embedding; the projector / merger
    into the language model (a few percent) is not counted. Width: ``embed_dim`` where given (Qwen2-VL, whose
    ``hidden_size`` is the merger's output), else ``hidden_size``; depth: ``num_hidden_layers`` or ``depth``."""
    h = int(vc.get("embed_dim") or vc.get("hidden_size") or 0)
    layers = int(vc.get("num_hidden_layers") or vc.get("depth") or 0)
    if not h or not layers:
        return 0
    inter = int(vc.get("intermediate_size") or vc.get("mlp_ratio", 4) * h)
    mats = 3 if str(vc.get("hidden_act", "")).lower() == "silu" else 2
    patch = vc.get("patch_size", 14)
    area = patch[0] * patch[1] if isinstance(patch, (list, tuple)) else int(patch) ** 2
    channels = int(vc.get("in_channels") or vc.get("num_channels") or 3) * int(vc.get("temporal_patch_size") or 1)
    return layers * (4 * h * h + mats * h * inter + 4 * h) + channels * area * h


def arch_of(ref: str, cache_root: Path | None = None) -> Arch | None:
    """The architecture of a model reference (a folder, a cached hub id, a model entry, a paper model); None when it
    cannot be read without downloading."""
    path = Path(ref)
    if path.is_file() and path.name.endswith(".json"):
        return from_config(path, path.parent.name)
    if (path / "config.json").is_file():
        return from_config(path / "config.json", path.name)
    from corl_bench.models.entries import ENTRIES, entry_dir
    from corl_bench.models.hub import hub_snapshot
    from corl_bench.models.load import kind

    if ref in ENTRIES and cache_root is not None:
        try:
            folder = entry_dir(ref, cache_root)
        except Exception:  # noqa: BLE001 - the entry's package is missing: validation says so elsewhere
            folder = None
        if folder is not None and (folder / "config.json").is_file():
            return from_config(folder / "config.json", ref)
    if kind(ref) == "hub":
        snap = hub_snapshot(ref)
        if snap is not None:  # the downloaded config decides; the published values only before the download
            return from_config(snap / "config.json", ref)
    return KNOWN.get(ref)


def estimate(a: Arch, *, dtype_bytes: int, prompt_tokens: int, new_tokens: int, micro_batch: int, logit_chunk: int,
             checkpointing: bool, max_batch: int, copies: int = 0, lora: bool = False) -> dict[str, float]:
    """GB (1e9 bytes) of one agent's step. ``copies``: frozen weight copies (KL reference, auxiliary models);
    ``lora``: adapters only are trained (gradients and AdamW of the base weights are not held)."""
    n = a.total_params  # a VLM's vision tower trains with it (model.freeze_vision: weights only; not modelled)
    tokens = prompt_tokens + new_tokens
    weights = n * dtype_bytes * (1 + copies)
    train_state = 0 if lora else n * dtype_bytes * 3  # gradients + AdamW exp_avg + exp_avg_sq
    per_token_layer = (16 * a.hidden + 3 * a.intermediate) * dtype_bytes  # one layer's saved intermediates per token
    rows = micro_batch * tokens
    if checkpointing:
        acts = rows * a.hidden * dtype_bytes * a.layers + rows * per_token_layer
    else:
        acts = rows * per_token_layer * a.layers
    logit_rows = logit_chunk if logit_chunk > 0 else micro_batch * new_tokens
    logits = logit_rows * a.vocab * 4 * 3
    kv = max_batch * tokens * a.kv_bytes_per_token(dtype_bytes)
    train_peak = weights + train_state + acts + logits
    rollout_peak = weights + train_state + kv  # optimiser state stays resident while the agent generates
    return {"params_B": n / 1e9, "weights": weights / GB, "grads+adamw": train_state / GB, "activations": acts / GB,
            "logits": logits / GB, "kv_cache": kv / GB, "resident": (weights + train_state) / GB,
            "train_peak": train_peak / GB, "rollout_peak": rollout_peak / GB,
            "peak": max(train_peak, rollout_peak) / GB}


def machine_memory() -> int:
    """Bytes of memory this machine has (``MemTotal``; the total, not what is free now, so that the sizes chosen
    from it do not change from one run to the next)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def device_memory(device: str) -> int:
    """Bytes a device has: the machine's memory for the CPU, the GPU's total for ``cuda[:N]`` (0 if unknown)."""
    if not device.startswith("cuda"):
        return machine_memory()
    import torch

    if not torch.cuda.is_available():
        return 0
    index = int(device.split(":")[1]) if ":" in device else 0
    return int(torch.cuda.get_device_properties(index).total_memory) if index < torch.cuda.device_count() else 0


def _agent_estimate(cfg: Any, agent: Any, arch: Arch, micro_batch: int, logit_chunk: int, copies: int,
                    dtype_bytes: int) -> dict[str, float]:
    batch = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    lora = (agent.lora_rank if agent.lora_rank is not None else cfg.memory.lora_rank) > 0
    return estimate(arch, dtype_bytes=dtype_bytes, prompt_tokens=PROMPT_TOKENS + arch.image_tokens,
                    new_tokens=cfg.rollout.max_new_tokens,
                    micro_batch=micro_batch or batch, logit_chunk=logit_chunk,
                    checkpointing=cfg.memory.gradient_checkpointing,
                    max_batch=min(cfg.rollout.max_batch or batch, batch), copies=copies, lora=lora)


def device_peaks(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int, micro_batch: int | None = None,
                 logit_chunk: int | None = None) -> dict[str, float]:
    """Estimated peak GB per device: every agent's resident state there plus the largest transient peak (agents of
    one process train in turn; with ``run.backend=ray`` each agent is its own process but they may share a node)."""
    mb = cfg.memory.micro_batch if micro_batch is None else micro_batch
    lc = cfg.memory.logit_chunk if logit_chunk is None else logit_chunk
    resident: dict[str, float] = {}
    transient: dict[str, float] = {}
    for agent, arch in zip(cfg.cohort.agents, archs):
        if arch is None:
            continue
        device = _device_key(agent.device or cfg.model.device)
        est = _agent_estimate(cfg, agent, arch, mb, lc, copies, dtype_bytes)
        resident[device] = resident.get(device, 0.0) + est["resident"]
        transient[device] = max(transient.get(device, 0.0), est["peak"] - est["resident"])
    return {d: resident[d] + transient[d] for d in resident}


def _device_key(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    return "cuda:0" if device == "cuda" else device


def fit_memory(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int,
               share: float = MEMORY_SHARE) -> tuple[int, int, dict[str, float]]:
    """(micro_batch, logit_chunk, estimated peak GB per device) for the hf profile's defaults: chunked logits when the
    vocabulary is large (32k tokens or more), and the largest power-of-two micro-batch (at most the whole batch)
    whose step fits ``share`` of every device's memory; 1 when none does (then :func:`check_memory` decides)."""
    batch = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    chunk = 256 if any(a is not None and a.vocab >= 32_000 for a in archs) else 0
    mb = 1
    while mb * 2 <= batch:
        mb *= 2
    while True:
        peaks = device_peaks(cfg, archs, copies, dtype_bytes, mb, chunk)
        if mb == 1 or all(peak <= device_memory(d) * share / GB for d, peak in peaks.items()):
            return mb, chunk, peaks
        mb //= 2


def check_memory(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int) -> dict[str, float]:
    """Estimated peak GB per device; a one-line :class:`~corl_bench.config.MachineError` (a warning under ``validate
    --elsewhere``) when a device's estimate exceeds the memory it has, naming settings that would fit."""
    from corl_bench.config import machine_problem

    peaks = device_peaks(cfg, archs, copies, dtype_bytes)
    for device, peak in peaks.items():
        have = device_memory(device) / GB
        if have <= 0 or peak <= have:
            continue
        fixes = []
        for mb in (8, 4, 2, 1):
            for options, overrides in ((f"memory.micro_batch={mb} memory.logit_chunk=256", {}),
                                       (f"memory.micro_batch={mb} memory.logit_chunk=256 "
                                        "memory.gradient_checkpointing=true", {"checkpointing": True})):
                est = _with(cfg, mb, 256, **overrides)
                if max(device_peaks(est, archs, copies, dtype_bytes).values() or [0.0]) <= have * 0.9:
                    fixes.append(options)
                    break
            if fixes:
                break
        fix = fixes[0] if fixes else ("fewer or shorter rollouts (rollout.prompts_per_step, rollout.samples_per_prompt, "
                                      "rollout.max_new_tokens), memory.lora_rank=16, or a device with more memory")
        machine_problem(f"one training step needs about {peak:.1f} GB on {device} (estimated from the models' "
                        f"architectures) and it has {have:.1f} GB; set {fix}")
    return peaks


def _with(cfg: Any, micro_batch: int, logit_chunk: int, checkpointing: bool = False) -> Any:
    import dataclasses

    memory = dataclasses.replace(cfg.memory, micro_batch=micro_batch, logit_chunk=logit_chunk, shared_prefix=False,
                                 gradient_checkpointing=checkpointing or cfg.memory.gradient_checkpointing)
    return cfg.replace(memory=memory)
