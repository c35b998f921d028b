"""One model layer's quantized KV cache: append-only quantized blocks + a full-precision residual window."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from transformers.cache_utils import CacheLayerMixin

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.quant import QBlock, dequantize, quantize


@dataclass(frozen=True)
class LayerPlan:
    """Resolved storage settings of a layer (see ``cache.plan_for``)."""

    fmt: str  # "int" | "fp8e4" | "fp8e5"
    bits: int
    key_axis: str  # "channel" (groups along tokens) | "token" (groups along head_dim)
    key_group: int
    value_group: int
    flush: int  # tokens flushed at once: residual rounded up to a whole number of key token-groups
    prefill: str  # "exact" | "quantized"
    keep_dequantized: bool = True


class _Buffer:
    """A growable [B, H, capacity, D] tensor whose first ``n`` tokens are valid (amortized appends, no re-copy)."""

    def __init__(self) -> None:
        self.t: torch.Tensor | None = None
        self.n = 0

    def append(self, x: torch.Tensor) -> None:
        need = self.n + x.shape[-2]
        if self.t is None or need > self.t.shape[-2]:
            cap = need + max(256, need // 4)
            grown = x.new_empty(*x.shape[:2], cap, x.shape[-1])
            if self.t is not None and self.n:
                grown[:, :, : self.n] = self.t[:, :, : self.n]
            self.t = grown
        self.t[:, :, self.n : need] = x
        self.n = need

    def view(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        return self.t[:, :, start : self.n if stop is None else stop]

    def drop_front(self, k: int) -> None:
        """Forget the first ``k`` tokens (moves the rest to the front)."""
        rest = self.n - k
        if rest:
            self.t[:, :, :rest] = self.t[:, :, k : self.n].clone()
        self.n = rest

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if self.t is not None:
            self.t = fn(self.t)


class QuantKVLayer(CacheLayerMixin):
    """KV cache layer storing flushed tokens quantized (append-only) and the newest ones in full precision.

    With ``keep_dequantized`` one buffer holds what attention reads: the dequantized flushed tokens followed by the
    full-precision residual, so a decode step writes one token in place and a flush dequantizes only its new block.
    Without it, every step dequantizes all blocks (the naive cost) and only the residual buffer is kept.
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, plan: LayerPlan) -> None:
        super().__init__()
        self.plan = plan
        self._reset_state()

    def _reset_state(self) -> None:
        self.k_blocks: list[QBlock] = []
        self.v_blocks: list[QBlock] = []
        self._kbuf, self._vbuf = _Buffer(), _Buffer()
        self.length = 0  # tokens held
        self.n_quant = 0  # of which quantized
        self.is_initialized = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new K/V, flush full residual blocks, return every token's K/V as attention should see them."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, new = self.length, key_states.shape[-2]
        self._kbuf.append(key_states)
        self._vbuf.append(value_states)
        self.length += new
        residual = self.length - self.n_quant
        n_flush = residual - residual % self.plan.flush
        if n_flush:
            self._flush(n_flush)
        keys, values = self._full()
        if self.plan.prefill == "exact" and self.n_quant > start:
            # this call's own tokens were just quantized: let this call still attend to them exactly
            if start == 0:
                return key_states, value_states
            keys = torch.cat([keys[:, :, :start], key_states], dim=-2)
            values = torch.cat([values[:, :, :start], value_states], dim=-2)
        return keys, values

    def _flush(self, n: int) -> None:
        """Quantize the oldest ``n`` residual tokens into new blocks; stored blocks are never touched again."""
        p = self.plan
        off = self.n_quant if p.keep_dequantized else 0
        kq = quantize(self._kbuf.view(off, off + n), p.fmt, p.bits, p.key_axis, p.key_group)
        vq = quantize(self._vbuf.view(off, off + n), p.fmt, p.bits, "token", p.value_group)
        self.k_blocks.append(kq)
        self.v_blocks.append(vq)
        if p.keep_dequantized:
            self._kbuf.t[:, :, off : off + n] = dequantize(kq, self.dtype)
            self._vbuf.t[:, :, off : off + n] = dequantize(vq, self.dtype)
        else:
            self._kbuf.drop_front(n)
            self._vbuf.drop_front(n)
        self.n_quant += n

    def _full(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.plan.keep_dequantized or not self.k_blocks:
            return self._kbuf.view(), self._vbuf.view()
        keys = [dequantize(b, self.dtype) for b in self.k_blocks] + [self._kbuf.view()]
        values = [dequantize(b, self.dtype) for b in self.v_blocks] + [self._vbuf.view()]
        return torch.cat(keys, dim=-2), torch.cat(values, dim=-2)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def nbytes(self) -> int:
        """Bytes held: quantized payload + scales/zero points + the full-precision residual (not the compute copy)."""
        blocks = sum(b.nbytes for b in self.k_blocks) + sum(b.nbytes for b in self.v_blocks)
        if not self.is_initialized or self._kbuf.t is None:
            return blocks
        b, h, _, d = self._kbuf.t.shape
        return blocks + 2 * (self.length - self.n_quant) * b * h * d * self._kbuf.t.element_size()

    def reset(self) -> None:
        self._reset_state()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the newest ``-tokens_to_remove`` tokens; only residual (not yet quantized) tokens can be dropped."""
        n = -tokens_to_remove if tokens_to_remove < 0 else self.length - tokens_to_remove
        if n <= 0:
            return
        if n > self.length - self.n_quant:
            raise EvalsuiteError("evalsuite KV cache: cannot crop tokens that were already quantized")
        self.length -= n
        self._kbuf.n -= n
        self._vbuf.n -= n

    def _map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Batch ops are exact on quantized data: every group lies within one (batch, head) row."""
        for block in self.k_blocks + self.v_blocks:
            block.map_batch(fn)
        self._kbuf.map_batch(fn)
        self._vbuf.map_batch(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices, ...])
