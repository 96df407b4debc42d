"""A KV cache that grows in place: the ``fast`` engine's answer to ``DynamicCache``'s per-token ``torch.cat``.

``transformers``' default ``DynamicCache`` appends every decoded token with ``torch.cat([keys, new], dim=-2)``: each
step copies the whole cache of every layer, so decoding T tokens moves O(T²) bytes. On CPU this is not a detail:
on SmolLM2-135M (30 layers, 3 KV heads) at 48 rows, a decode step with ``DynamicCache`` took 1.1x as long as with
this cache at 150 tokens of context and 2.3x as long at 1000 (``scripts/bench_decode_step.py``).

:class:`GrowingLayer` keeps keys and values in a buffer with spare capacity along the sequence axis and writes each
new token into it; the model sees a view ``buffer[:, :, :length]``. When the buffer is full it is reallocated half
as large again (never beyond ``limit``), so the total copy is O(T) and the spare room never exceeds half of what is
filled (or ``reserve``).

What attention computes is unchanged: the same key and value numbers, in the same order, read through a strided
view instead of a fresh contiguous tensor (tests compare the tokens of both caches).

Models whose every layer is full attention get this cache; so do models with sliding-window layers (Gemma-3) when
the whole generation fits inside the window (``limit`` < ``sliding_window``): until the window is reached a sliding
layer keeps every token and its mask is the causal one, so the same keys, values and mask reach attention (tests
compare the tokens of both caches). Otherwise :func:`growing_cache` returns ``None`` and the model keeps its own cache
class (a generation longer than the window, linear-attention layers, ``transformers`` without layered caches).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

try:  # transformers >= 4.56: a Cache is a list of per-layer objects
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # pragma: no cover - older transformers: the engine falls back to the model's own cache
    Cache = DynamicLayer = None  # type: ignore[assignment,misc]


if DynamicLayer is not None:

    class GrowingLayer(DynamicLayer):  # type: ignore[misc,valid-type]
        """One layer's keys and values, ``(batch, kv_heads, capacity, head_dim)`` buffers filled up to ``length``.

        ``reserve`` is the room made beyond the current length whenever the buffer is (re)allocated; ``limit``
        caps the capacity (prompt + max new tokens: nothing is ever written beyond it).
        """

        def __init__(self, reserve: int = 64, limit: int | None = None) -> None:
            super().__init__()
            self.reserve = max(1, reserve)
            self.limit = limit
            self.length = 0
            self._k: Optional[torch.Tensor] = None
            self._v: Optional[torch.Tensor] = None

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self.is_initialized = True

        def _capacity_for(self, needed: int) -> int:
            current = self._k.shape[-2] if self._k is not None else 0
            cap = max(needed + self.reserve, current + current // 2)  # x1.5: O(T) copies, at most +50 % memory
            return min(cap, self.limit) if self.limit is not None and self.limit >= needed else cap

        def _grow(self, needed: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
            cap = self._capacity_for(needed)
            b, h, _, d = like_k.shape
            k = like_k.new_empty((b, h, cap, d))
            v = like_v.new_empty((b, h, cap, like_v.shape[-1]))
            if self.length:
                k[:, :, : self.length].copy_(self._k[:, :, : self.length])
                v[:, :, : self.length].copy_(self._v[:, :, : self.length])
            self._k, self._v = k, v

        def _publish(self) -> None:
            self.keys = self._k[:, :, : self.length]
            self.values = self._v[:, :, : self.length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            """(B, H, T, D) new keys and values -> (B, H, length + T, D) views of all of them."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            t = key_states.shape[-2]
            if self._k is None or self.length + t > self._k.shape[-2]:
                self._grow(self.length + t, key_states, value_states)
            self._k[:, :, self.length: self.length + t].copy_(key_states)
            self._v[:, :, self.length: self.length + t].copy_(value_states)
            self.length += t
            self._publish()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def reset(self) -> None:
            self._k = self._v = None
            self.length = 0
            super().reset()

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("GrowingLayer.crop takes a negative count of tokens to remove")
            if tokens_to_remove == 0 or self._k is None:  # as DynamicLayer: nothing to crop
                return
            self.length = max(0, self.length + tokens_to_remove)
            self._publish()

        def batch_repeat_interleave(self, repeats: int) -> None:
            """Each row ``repeats`` times (the k samples of a prompt share its prefill)."""
            if self._k is None:
                return
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self._publish()

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep the rows ``indices`` (finished sequences leave the batch)."""
            if self._k is None:
                return
            self._k = self._k.index_select(0, indices.to(self._k.device))
            self._v = self._v.index_select(0, indices.to(self._v.device))
            self._publish()

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx)

    class GrowingCache(Cache):  # type: ignore[misc,valid-type]
        """A ``Cache`` of :class:`GrowingLayer`, one per decoder layer."""

        def __init__(self, num_layers: int, *, reserve: int = 64, limit: int | None = None) -> None:
            super().__init__(layers=[GrowingLayer(reserve, limit) for _ in range(num_layers)])


def growing_cache(model: Any, *, reserve: int, limit: int | None = None) -> Any:
    """A fresh :class:`GrowingCache` for ``model``, or ``None`` where the model must keep its own cache class
    (sliding-window or non-attention layers, an encoder-decoder, or a ``transformers`` without layered caches)."""
    if DynamicLayer is None:
        return None
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return None
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None)
    types = getattr(text, "layer_types", None)
    if not isinstance(n, int) or n < 1:
        return None
    if types is not None and any(t not in ("full_attention", "sliding_attention") for t in types):
        return None
    window = getattr(text, "sliding_window", None)
    sliding = "sliding_attention" in (types or ()) or (window and getattr(text, "use_sliding_window", True))
    if sliding and not (window and limit is not None and limit < window):  # the window would be reached
        return None
    return GrowingCache(n, reserve=reserve, limit=limit)
