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

Mixed precision (``memory.autocast=bfloat16``), sharded agents (FSDP2 ranks; rank 0 also holds a full copy of the
weights to generate from, in host memory when its engine is vLLM) and a vLLM engine's share of the GPU are counted
as :func:`estimate` describes.
Agents of one process on one device train in turn, so a device needs every agent's resident state plus the largest
single agent's transient peak; Ray agents each have their own GPUs (``disjoint``) or share one (``timeshare``:
every agent training, or every agent generating, at once). :func:`fit_memory` picks ``memory.micro_batch`` and ``memory.logit_chunk`` for the hf
profile's CPU defaults (the largest power-of-two micro-batch whose step fits 60 % of the machine's memory, as
``auto_find_batch_size`` halves a batch until it fits), and :func:`check_memory` refuses a run whose estimated peak
exceeds the memory a device has, naming options that would fit. The prompts are the longest the run draws, in each agent's
tokens (:mod:`corl_bench.hf.promptlen`), and on a CPU under ``memory.keep_host_memory`` the heap's kept blocks are
counted (:data:`KEPT_HEAP`). These are estimates (on CUDA the context comes on top): ``results/step-costs.md``
compares them with measured CPU peaks, docs/how-to/gpu.md with GPU peaks.
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
"""prompt length the estimate assumes where the run's prompts cannot be measured (no cached tokenizer or no data here,
:mod:`corl_bench.hf.promptlen`): a MATH problem in a chat template, or the few-shot prompt; a vision-language model's
prompt has one image on top (:attr:`Arch.image_tokens`)"""
KEPT_HEAP = 2.0
"""Copies of a training step's transient memory a CPU process holds at its peak under ``memory.keep_host_memory`` (the
default, :mod:`corl_bench.hostmem`) when its step has several micro-batches: glibc's heap keeps the blocks a
micro-batch freed, and the next micro-batch, padded to another width, allocates beside rather than into them. Fitted
on the seven cells of ``results/step-costs.md`` measured at 9eaf9d5 (estimate / peak 0.88-1.04 with this value,
prompts as drawn), checked on the cells measured after (that page). Per-phase measurement of one cell (Qwen2.5-0.5B
LoRA, 8 x 4 x 32, micro-batch 16, 2 steps): peak 17.6 GB kept, 9.6 GB with every large block returned to the system,
10.0 GB estimated live. A step of one micro-batch (``memory.micro_batch`` 0 or the whole batch) is counted once: a
real-study cell (SmolLM2 x Gemma-3, 8 x 4 x 32, ``memory.shared_prefix``, 2 steps) peaked at 16.0 GB against 14.8 GB
estimated live."""
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
    def layer_params(self) -> int:
        """One decoder layer: attention (q, k, v, o; biases ignored), gated MLP (3 matrices), two norms."""
        attn = self.hidden * self.head_dim * (self.heads * 2 + self.kv_heads * 2)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        """The token embedding and, untied, the LM head."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        """Decoder parameters: the layers, the embeddings (and untied head), the final norm."""
        return self.layers * self.layer_params + self.embedding_params + self.hidden

    @property
    def matmul_params(self) -> int:
        """Weights in a matrix product per token: the decoder layers and the LM head (tied or not, it is one product)."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    def kv_bytes_per_token(self, bytes_per_value: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * bytes_per_value


#: Published config.json values (huggingface.co/<id>/blob/main/config.json) of the paper's models and of the model
#: entries (read before an entry is dequantised; tests/test_fit_on_cpu.py checks them against the dequantised folder).
KNOWN = {
    "Qwen/Qwen2.5-3B": Arch("Qwen/Qwen2.5-3B", 2048, 36, 16, 2, 128, 11008, 151936, True),
    "meta-llama/Llama-3.2-3B-Instruct": Arch("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256,
                                             True),
    "Qwen/Qwen3-1.7B-Base": Arch("Qwen/Qwen3-1.7B-Base", 2048, 28, 16, 8, 128, 6144, 151936, True),
    "Qwen/Qwen2.5-7B": Arch("Qwen/Qwen2.5-7B", 3584, 28, 28, 4, 128, 18944, 152064, False),
    "meta-llama/Llama-3.1-8B-Instruct": Arch("meta-llama/Llama-3.1-8B-Instruct", 4096, 32, 32, 8, 128, 14336, 128256,
                                             False),
    "smol": Arch("smol", 576, 30, 9, 3, 64, 1536, 49152, True),
    "gemma3-270m": Arch("gemma3-270m", 640, 18, 4, 1, 256, 2048, 262144, True),
    # the Qwen2.5-Coder GGUFs carry their own output.weight (quantised unlike token_embd): untied once dequantised
    "qwen2.5-coder-0.5b": Arch("qwen2.5-coder-0.5b", 896, 24, 14, 2, 64, 4864, 151936, False),
    "qwen2.5-coder-1.5b": Arch("qwen2.5-coder-1.5b", 1536, 28, 12, 2, 128, 8960, 151936, False),
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
             checkpointing: bool, max_batch: int, copies: int = 0, lora: bool = False, mixed_precision: bool = False,
             ranks: int = 1, engine_gb: float = 0.0, engine_dtype_bytes: int = 2, engine_sleeps: bool = False,
             shared_prefix: bool = False, kept_heap: float = 1.0
             ) -> dict[str, float]:
    """GB (1e9 bytes) of one agent's step on its busiest GPU (rank 0, which also generates). ``copies``: frozen
    weight copies (KL reference, auxiliary models); ``lora``: adapters only are trained (gradients and AdamW of the
    base weights are not held).

    ``mixed_precision`` (``memory.autocast=bfloat16``, weights in ``dtype_bytes`` = 4): weights, gradients and AdamW
    stay fp32 (16 bytes per parameter); the matmul outputs a layer keeps are bf16 (2 bytes), the residual stream
    (each checkpointed layer's input) stays fp32 (the embedding and the residual adds are fp32 under autocast);
    logits: the bf16 head output plus the three fp32 copies (14 bytes a value); and the bf16 weight casts the
    matmuls keep for backward (one layer and the LM head with checkpointing, every layer without).

    ``ranks`` > 1 (FSDP2, :mod:`corl_bench.train.sharded`): the policy, its gradients and AdamW state are 1/ranks a
    rank; rank 0 also keeps a full copy of the weights (it generates from it; refreshed after every step) — on the
    GPU with an in-process engine, in host memory when its engine is vLLM (``engine_gb`` > 0: the copy only feeds the
    weight sync; an auxiliary EMA model would put one on every rank, not modelled) — and the frozen copies whole,
    plus what FSDP2 gathers: the current and the prefetched layer, and the root's embeddings and head, which stay
    unsharded from forward to backward. ``micro_batch`` is per rank.

    ``shared_prefix`` (``memory.shared_prefix``): no logits on the prompt positions, only the completions'.

    ``engine_gb``: a vLLM engine's reservation (``gpu_memory_utilization`` x the GPU) for its own weights (in
    ``engine_dtype_bytes``) and KV cache, which then is not counted here; awake through training unless
    ``engine_sleeps`` (``sleep_level`` > 0, as ``run.placement=timeshare`` sets: asleep while its agent trains).
    0: the in-process engine, whose KV cache of ``max_batch`` sequences (in the weights' dtype) sits beside the
    resident state.

    ``kept_heap``: how many copies of the training transient (activations, logits, casts, gathered layers) the
    process holds at its peak: 1 = live memory only; :data:`KEPT_HEAP` on a CPU under ``memory.keep_host_memory``,
    whose heap keeps what a micro-batch freed while the next one allocates its own."""
    n = a.total_params  # a VLM's vision tower trains with it (model.freeze_vision: weights only; not modelled)
    tokens = prompt_tokens + new_tokens
    act_b = 2 if mixed_precision else dtype_bytes  # matmul outputs under autocast
    sharded = n * dtype_bytes / ranks
    full = n * dtype_bytes if ranks > 1 and not engine_gb else 0  # rank 0's full copy, on the GPU (docstring)
    weights = sharded + full + n * dtype_bytes * copies
    train_state = 0 if lora else n * dtype_bytes * 3 / ranks  # gradients + AdamW exp_avg + exp_avg_sq
    gathered = (2 * a.layer_params + a.embedding_params) * dtype_bytes if ranks > 1 else 0
    per_token_layer = (16 * a.hidden + 3 * a.intermediate) * act_b  # one layer's saved intermediates per token
    rows = micro_batch * tokens
    if checkpointing:
        acts = rows * a.hidden * dtype_bytes * a.layers + rows * per_token_layer
    elif mixed_precision:
        acts = rows * (per_token_layer + a.hidden * dtype_bytes) * a.layers
    else:
        acts = rows * per_token_layer * a.layers
    # unchunked: the logits of every position (prompt too), except with memory.shared_prefix (no logits on the
    # prompt's positions: corl_bench.train.prefix)
    logit_rows = logit_chunk if logit_chunk > 0 else (micro_batch * new_tokens if shared_prefix else rows)
    logits = logit_rows * a.vocab * (4 * 3 + (2 if mixed_precision else 0))
    casts = 0
    if mixed_precision:
        casts = ((1 if checkpointing else a.layers) * a.layer_params + a.vocab * a.hidden) * 2
    kv = 0 if engine_gb else max_batch * tokens * a.kv_bytes_per_token(dtype_bytes)
    engine = engine_gb * GB
    resident = weights + train_state
    train_peak = resident + (gathered + acts + logits + casts) * kept_heap + (0 if engine_sleeps else engine)
    rollout_peak = resident + kv + engine  # optimiser state stays resident while the agent generates
    return {"params_B": n / 1e9, "kept_heap": kept_heap, "weights": weights / GB, "full_copy": full / GB,
            "grads+adamw": train_state / GB,
            "gathered": gathered / GB, "activations": acts / GB, "logits": logits / GB, "casts": casts / GB,
            "kv_cache": kv / GB, "engine": engine_gb, "engine_kv_room": (engine - n * engine_dtype_bytes) / GB
            if engine_gb else 0.0, "resident": resident / GB, "train_peak": train_peak / GB,
            "rollout_peak": rollout_peak / GB, "peak": max(train_peak, rollout_peak) / GB}


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
    """Bytes a device has: the machine's memory for the CPU, the GPU's total for ``cuda[:N]`` (0 if unknown); a
    :func:`device_peaks` label (``"cuda:0 (a0, rank 0 of 4)"``) is read as its device."""
    device = device.split()[0] if device.strip() else device
    if not device.startswith("cuda"):
        return machine_memory()
    import torch

    if not torch.cuda.is_available():
        return 0
    index = int(device.split(":")[1]) if ":" in device else 0
    return int(torch.cuda.get_device_properties(index).total_memory) if index < torch.cuda.device_count() else 0


ASSUMED_GPU_GB = 80.0
"""a GPU's memory where the estimate cannot read it (no CUDA here): an 80 GB A100 / H100, for a vLLM engine's share"""
_ENGINE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def _agent_estimate(cfg: Any, agent: Any, arch: Arch, micro_batch: int, logit_chunk: int, copies: int,
                    dtype_bytes: int, engine: tuple[float, int, bool] = (0.0, 2, False),
                    prompt: int | None = None) -> dict[str, float]:
    from corl_bench.config import agent_resources

    batch = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    ranks = agent_resources(agent, cfg.run)[0]
    lora = (agent.lora_rank if agent.lora_rank is not None else cfg.memory.lora_rank) > 0
    device = _device_key(agent.device or cfg.model.device)
    rows = math.ceil(batch / ranks)
    several = math.ceil(rows / (micro_batch or rows)) > 1  # micro-batches of other widths, one after the other
    kept = KEPT_HEAP if device == "cpu" and cfg.memory.keep_host_memory and several else 1.0
    return estimate(arch, dtype_bytes=dtype_bytes, prompt_tokens=(prompt or PROMPT_TOKENS) + arch.image_tokens,
                    new_tokens=cfg.rollout.max_new_tokens,
                    micro_batch=micro_batch or rows, logit_chunk=logit_chunk,
                    checkpointing=cfg.memory.gradient_checkpointing,
                    max_batch=min(cfg.rollout.max_batch or batch, batch), copies=copies, lora=lora,
                    mixed_precision=cfg.memory.autocast == "bfloat16", ranks=ranks, engine_gb=engine[0],
                    engine_dtype_bytes=engine[1], engine_sleeps=engine[2], shared_prefix=cfg.memory.shared_prefix,
                    kept_heap=kept)


def engine_share(cfg: Any, kind: str, dtype_bytes: int, gpu_gb: float) -> tuple[float, int, bool]:
    """(GB an agent's vLLM engine reserves: ``gpu_memory_utilization`` x ``gpu_gb``, bytes per engine weight, whether
    it sleeps while its agent trains: ``sleep_level`` > 0, which ``timeshare`` sets) under placement ``kind``; (0, 2, False) for an in-process engine (hf, fast).
    The share: the engine option, else what :func:`corl_bench.placement.engine_options` gives (timeshare:
    0.3 / agents), else the engine's default (0.3)."""
    if cfg.rollout.backend != "vllm":
        return 0.0, 2, False
    from corl_bench import placement

    opts = placement.engine_options(cfg, placement.Placement(kind, (), sleep=kind == "timeshare"))
    share = float(opts.get("gpu_memory_utilization", placement.DEFAULT_GPU_MEMORY))
    sleeps = int(opts.get("sleep_level", 0)) > 0  # timeshare sets 1; any placement may ask for it
    return share * gpu_gb, _ENGINE_BYTES.get(str(opts.get("dtype")), dtype_bytes), sleeps


def agent_estimates(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int,
                    micro_batch: int | None = None, logit_chunk: int | None = None, gpu_gb: float | None = None,
                    cluster_gpus: float | None = None, prompts: Sequence[int | None] | None = None
                    ) -> tuple[str, list[tuple[Any, str, dict[str, float]]]]:
    """(placement kind, [(cohort agent, its device, :func:`estimate` of its busiest GPU)] for agents of known
    architecture). ``prompts``: each agent's longest prompt in tokens (:func:`corl_bench.hf.promptlen.longest_prompts`;
    None or a None entry: :data:`PROMPT_TOKENS`). The placement: ``local`` for ``run.backend=local``, else what
    :func:`corl_bench.placement.resolve` picks for ``cluster_gpus`` (None: as if every agent had its GPUs).
    A vLLM engine's share is of ``gpu_gb`` (default: the device's memory, else :data:`ASSUMED_GPU_GB`)."""
    from corl_bench import placement

    mb = cfg.memory.micro_batch if micro_batch is None else micro_batch
    lc = cfg.memory.logit_chunk if logit_chunk is None else logit_chunk
    kind = placement.resolve(cfg, cluster_gpus).kind if cfg.run.backend == "ray" else "local"
    rows = []
    for i, (agent, arch) in enumerate(zip(cfg.cohort.agents, archs)):
        if arch is None:
            continue
        device = _device_key(agent.device or cfg.model.device)
        gb = gpu_gb or (device_memory(device) / GB if device.startswith("cuda") else 0.0) or ASSUMED_GPU_GB
        engine = engine_share(cfg, "disjoint" if kind == "local" else kind, dtype_bytes, gb)
        prompt = prompts[i] if prompts else None
        rows.append((agent, device, _agent_estimate(cfg, agent, arch, mb, lc, copies, dtype_bytes, engine, prompt)))
    return kind, rows


def device_peaks(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int, micro_batch: int | None = None,
                 logit_chunk: int | None = None, gpu_gb: float | None = None,
                 cluster_gpus: float | None = None, prompts: Sequence[int | None] | None = None) -> dict[str, float]:
    """Estimated peak GB per device (:func:`agent_estimates`). ``run.backend=local``: every agent's resident state
    on its device plus the largest transient peak (agents of one process train in turn). ``run.backend=ray`` (the
    agents work at the same time): ``disjoint`` — one entry per agent, its rank 0's GPU (``"cuda:0 (a0, rank 0 of
    4)"``); ``timeshare`` — one GPU for all, the larger of every agent training and every agent generating at once."""
    from corl_bench.config import agent_resources

    kind, rows = agent_estimates(cfg, archs, copies, dtype_bytes, micro_batch, logit_chunk, gpu_gb, cluster_gpus,
                                 prompts)
    resident: dict[str, float] = {}
    transient: dict[str, float] = {}
    for agent, device, est in rows:
        if kind == "disjoint":
            ranks = agent_resources(agent, cfg.run)[0]
            resident[f"{device} ({agent.name}{f', rank 0 of {ranks}' if ranks > 1 else ''})"] = est["peak"]
        elif kind == "timeshare":  # the agents train at the same time, and generate at the same time
            key = f"{device} (timeshare: {', '.join(a.name for a in cfg.cohort.agents)})"
            resident[key] = resident.get(key, 0.0) + est["rollout_peak"]
            transient[key] = transient.get(key, 0.0) + est["train_peak"]
        else:
            always = est["resident"] + est["engine"]  # a vLLM engine on the local backend never sleeps
            resident[device] = resident.get(device, 0.0) + always
            transient[device] = max(transient.get(device, 0.0), est["peak"] - always)
    if kind == "timeshare":
        return {k: max(resident[k], transient[k]) for k in resident}
    return {d: resident[d] + transient.get(d, 0.0) for d in resident}


def _device_key(device: str) -> str:
    if device == "auto":
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    return "cuda:0" if device == "cuda" else device


def fit_memory(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int,
               share: float = MEMORY_SHARE, prompts: Sequence[int | None] | None = None
               ) -> tuple[int, int, dict[str, float]]:
    """(micro_batch, logit_chunk, estimated peak GB per device) for the hf profile's defaults: chunked logits when the
    vocabulary is large (32k tokens or more), and the largest power-of-two micro-batch (at most the whole batch)
    whose step fits ``share`` of every device's memory; 1 when none does (then :func:`check_memory` decides)."""
    batch = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    chunk = 256 if any(a is not None and a.vocab >= 32_000 for a in archs) else 0
    mb = 1
    while mb * 2 <= batch:
        mb *= 2
    while True:
        peaks = device_peaks(cfg, archs, copies, dtype_bytes, mb, chunk, prompts=prompts)
        if mb == 1 or all(peak <= device_memory(d) * share / GB for d, peak in peaks.items()):
            return mb, chunk, peaks
        mb //= 2


def check_memory(cfg: Any, archs: Sequence[Arch | None], copies: int, dtype_bytes: int,
                 prompts: Sequence[int | None] | None = None) -> dict[str, float]:
    """Estimated peak GB per device; a one-line :class:`~corl_bench.config.MachineError` (a warning under ``validate
    --elsewhere``) when a device's estimate exceeds the memory it has, naming settings that would fit."""
    from corl_bench.config import machine_problem

    peaks = device_peaks(cfg, archs, copies, dtype_bytes, prompts=prompts)
    for device, peak in peaks.items():
        have = device_memory(device) / GB
        if have <= 0 or peak <= have:
            continue
        fixes = []
        chunk = 0 if _sharded(cfg) else 256  # a sharded agent has no chunked logits yet
        # the options below turn memory.shared_prefix off (it combines with neither): say so when it was on
        off = "memory.shared_prefix=false " if cfg.memory.shared_prefix else ""
        for mb in (8, 4, 2, 1):
            for options, overrides in ((f"{off}memory.micro_batch={mb} memory.logit_chunk={chunk}", {}),
                                       (f"{off}memory.micro_batch={mb} memory.logit_chunk={chunk} "
                                        "memory.gradient_checkpointing=true", {"checkpointing": True})):
                est = _with(cfg, mb, chunk, **overrides)
                if max(device_peaks(est, archs, copies, dtype_bytes, prompts=prompts).values() or [0.0]) <= have * 0.9:
                    fixes.append(options)
                    break
            if fixes:
                break
        fix = fixes[0] if fixes else ("fewer or shorter rollouts (rollout.prompts_per_step, rollout.samples_per_prompt, "
                                      "rollout.max_new_tokens), " + ("more ranks per agent (its gpus / ranks)" if
                                      _sharded(cfg) else "memory.lora_rank=16") + ", or a device with more memory")
        machine_problem(f"one training step needs about {peak:.1f} GB on {device} (estimated from the models' "
                        f"architectures) and it has {have:.1f} GB; set {fix}")
    return peaks


def _sharded(cfg: Any) -> bool:
    from corl_bench.config import agent_resources

    return any(agent_resources(a, cfg.run)[0] > 1 for a in cfg.cohort.agents)


def _with(cfg: Any, micro_batch: int, logit_chunk: int, checkpointing: bool = False) -> Any:
    import dataclasses

    memory = dataclasses.replace(cfg.memory, micro_batch=micro_batch, logit_chunk=logit_chunk, shared_prefix=False,
                                 gradient_checkpointing=checkpointing or cfg.memory.gradient_checkpointing)
    return cfg.replace(memory=memory)
