"""One model layer's quantized KV cache: quantized blocks + a full-precision residual window, counted per row.

Flushes count each row's own tokens, not batch columns. A batch is laid out in columns (``[prefix][padding][own]``
in the decoder, holes in the middle of a verification pass), and the 2-D attention mask says which columns of a row
hold real tokens (``QuantKVCache.track``; without one every column is real). Row ``r``'s tokens ``[kF, (k+1)F)``
(``F`` = ``plan.flush``, counted from the row's first real token) are quantized together, once, at the update in
which the row's ``(k+1)F``-th token arrives; padding is never part of a group. So a row's K/V, and therefore its
answer, do not depend on what it was batched with or how much padding that added.

Blocks are quantized from K/V rounded to bf16 when the model computes in float32 (``_stored``).

Chunk semantics (what a forward over several tokens sees): the call's own tokens are appended, complete blocks are
flushed, then attention reads every earlier token as stored (quantized when flushed) and, with ``exact`` prefill,
the call's own tokens in full precision (``quantized`` prefill: as stored). A step-by-step decode is the special
case of one token per call; a teacher-forced pass that wants the same K/V mix at every token must end a chunk just
before a row's ``(k+1)F``-th token and feed that token alone (``flush_segments``).

The buffer holds what attention reads: dequantized flushed tokens and the full-precision residual, so a decode step
writes one token in place and a flush dequantizes only its new block (a compute copy, trading RAM for speed; not
counted in ``nbytes``). ``keep_exact`` additionally keeps every token's full-precision K/V, so a verification pass
can hand a row's state at any length to a fresh cache (``row_state``, ``adopt``): its complete blocks as this cache
quantized them (not quantized again), the rest exact.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
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


class RowMask:
    """The batch's 2-D attention mask, shared by every layer of one cache (columns of real tokens are 1)."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None

    def valid(self, batch: int, start: int, new: int, device: torch.device) -> torch.Tensor:
        """Which of the columns ``[start, start + new)`` hold real tokens, per row (all, without a mask)."""
        m = self.mask
        if m is None or m.shape[0] != batch or m.shape[1] < start + new:
            return torch.ones(batch, new, dtype=torch.bool, device=device)
        return m[:, start:start + new].to(device=device, dtype=torch.bool)


class _Buffer:
    """A growable [B, H, capacity, D] tensor whose first ``n`` columns are valid (amortized appends, no re-copy)."""

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

    def view(self) -> torch.Tensor:
        return self.t[:, :, : self.n]

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if self.t is not None:
            self.t = fn(self.t)


@dataclass(frozen=True)
class RowState:
    """One row's K/V [heads, tokens, dim] in one layer, the first ``quantized`` tokens (whole flushed blocks) as
    their dequantized codes, with the bytes one of them holds quantized (``QuantKVLayer.row_state``)."""

    keys: torch.Tensor
    values: torch.Tensor
    quantized: int = 0
    row_bytes: float = 0.0


def _stored(x: torch.Tensor) -> torch.Tensor:
    """What a block is quantized from: float32 K/V (a bf16 model computed in fp32 here) rounded to bf16, the dtype
    a deployed cache holds. Besides being what deployment quantizes, this makes the codes robust to the last-bit
    noise of batched vs one-token matmuls, which would otherwise flip a code now and then (a whole quantization
    step) and make a row's answer depend on its batch."""
    return x.to(torch.bfloat16).float() if x.dtype == torch.float32 else x


def _rows_of(q: QBlock, sel: torch.Tensor) -> QBlock:
    """The block's batch rows ``sel`` (a copy)."""
    out = replace(q)
    out.map_batch(lambda t: t.index_select(0, sel.to(t.device)))
    return out


class QuantKVLayer(CacheLayerMixin):
    """KV cache layer storing each row's flushed tokens quantized and its newest ones in full precision."""

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, plan: LayerPlan, rows: RowMask | None = None, keep_exact: bool = False) -> None:
        super().__init__()
        self.plan = plan
        self.rows = rows if rows is not None else RowMask()
        self.keep_exact = keep_exact
        self._reset_state()

    def _reset_state(self) -> None:
        self.k_blocks: list[QBlock] = []
        self.v_blocks: list[QBlock] = []
        self._kbuf, self._vbuf = _Buffer(), _Buffer()
        self._exact = (_Buffer(), _Buffer())
        self.valid: torch.Tensor | None = None  # [B, columns] bool: columns holding real tokens
        self.count: torch.Tensor | None = None  # [B] real tokens held
        self.qcount: torch.Tensor | None = None  # [B] of which quantized (a multiple of flush)
        self.length = 0  # columns held
        self._row_bytes = 0.0  # bytes of one quantized token of one row (payload + scales), once known
        self.is_initialized = False

    @property
    def n_quant(self) -> int:
        """Quantized tokens of the row that holds most (every row's, when the batch has no padding)."""
        return int(self.qcount.max()) if self.qcount is not None and self.qcount.numel() else 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b = key_states.shape[0]
        self.valid = torch.zeros(b, 0, dtype=torch.bool, device=key_states.device)
        self.count = torch.zeros(b, dtype=torch.long, device=key_states.device)
        self.qcount = torch.zeros_like(self.count)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new K/V, flush each row's complete blocks, return every column's K/V as attention sees them."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, start, new = key_states.shape[0], self.length, key_states.shape[-2]
        valid = self.rows.valid(b, start, new, key_states.device)
        self._kbuf.append(key_states)
        self._vbuf.append(value_states)
        if self.keep_exact:
            self._exact[0].append(key_states)
            self._exact[1].append(value_states)
        self.valid = torch.cat([self.valid, valid], dim=1)
        self.count = self.count + valid.sum(1)
        self.length += new
        flushed = self._flush()
        keys, values = self._kbuf.view(), self._vbuf.view()
        if self.plan.prefill == "exact" and flushed:
            if start == 0:
                return key_states, value_states  # this call's own tokens attend to themselves exactly
            keys = torch.cat([keys[:, :, :start], key_states], dim=-2)
            values = torch.cat([values[:, :, :start], value_states], dim=-2)
        return keys, values

    def _flush(self) -> bool:
        """Quantize every row's complete blocks of ``flush`` real tokens; True when anything was flushed. All
        pending blocks of all rows are quantized in one call (a prefill or a rebuilt cache completes many at once):
        the kernels work group by group, so a block's codes do not depend on what it is quantized with."""
        f = self.plan.flush
        pending = (self.count - self.count % f - self.qcount) // f
        if not bool((pending > 0).any()):
            return False
        rows = torch.repeat_interleave(torch.arange(len(pending), device=pending.device), pending)
        first = torch.repeat_interleave(self.qcount, pending)
        nth = torch.arange(len(rows), device=rows.device) - torch.repeat_interleave(pending.cumsum(0) - pending,
                                                                                   pending)
        self._flush_blocks(rows, first + nth * f, nth)
        self.qcount = self.qcount + pending * f
        return True

    def _flush_blocks(self, rows: torch.Tensor, starts: torch.Tensor, nth: torch.Tensor) -> None:
        """Quantize, for each ``(rows[i], starts[i])``, that row's real tokens ``[start, start + flush)`` (gathered
        over its columns: padding and holes are never part of a block); stored as one ``QBlock`` per ``nth``
        (the rows' first, second, ... pending block), as block-by-block flushing stored them."""
        p, f = self.plan, self.plan.flush
        valid = self.valid[rows]
        rank = valid.cumsum(1) - 1
        q = starts[:, None]
        cols = (valid & (rank >= q) & (rank < q + f)).nonzero()[:, 1].view(len(rows), f)
        where = (rows[:, None], slice(None), cols)
        k = _stored(self._kbuf.t[where].permute(0, 2, 1, 3))  # [R, H, F, D]
        v = _stored(self._vbuf.t[where].permute(0, 2, 1, 3))
        kq = quantize(k, p.fmt, p.bits, p.key_axis, p.key_group)
        vq = quantize(v, p.fmt, p.bits, "token", p.value_group)
        for i in range(int(nth.max()) + 1):
            sel = (nth == i).nonzero().flatten()
            self.k_blocks.append(_rows_of(kq, sel))
            self.v_blocks.append(_rows_of(vq, sel))
        self._row_bytes = (kq.nbytes + vq.nbytes) / (len(rows) * f)
        self._kbuf.t[where] = dequantize(kq, self.dtype).permute(0, 2, 1, 3)
        self._vbuf.t[where] = dequantize(vq, self.dtype).permute(0, 2, 1, 3)

    def row_state(self, row: int, tokens: int) -> RowState:
        """``row``'s first ``tokens`` real tokens as a layer holding only them stores them: the complete blocks
        as this layer flushed them (their dequantized codes: the same codes, since a block is quantized from the
        same K/V), the rest full precision (from the exact shadow where a later flush has quantized them here)."""
        cols = self.valid[row].nonzero().flatten()[:tokens]
        q = tokens - tokens % self.plan.flush
        k, v = self._kbuf.view()[row][:, cols], self._vbuf.view()[row][:, cols]
        if int(self.qcount[row]) > q and tokens > q:
            if not self.keep_exact:
                raise EvalsuiteError("evalsuite KV cache: exact K/V were not kept (keep_exact=False)")
            k[:, q:] = self._exact[0].view()[row][:, cols[q:]]
            v[:, q:] = self._exact[1].view()[row][:, cols[q:]]
        return RowState(k, v, q, self._row_bytes)

    def adopt(self, keys: torch.Tensor, values: torch.Tensor, quantized: torch.Tensor, row_bytes: float) -> None:
        """A fresh layer's first update from rows whose first ``quantized[r]`` real tokens are whole blocks'
        dequantized codes (``row_state``): they are stored as flushed, not quantized again (bit-identical to an
        update with their full-precision K/V, at no quantization cost); the rest is appended as ``update`` does."""
        if self.is_initialized or self.keep_exact:
            raise EvalsuiteError("evalsuite KV cache: adopt needs a fresh layer that keeps no exact K/V")
        if bool((quantized % self.plan.flush).any()):
            raise EvalsuiteError("evalsuite KV cache: adopted rows must hold whole quantized blocks")
        self.lazy_initialization(keys, values)
        self.qcount = quantized.to(device=self.count.device, dtype=self.count.dtype)
        self._row_bytes = row_bytes
        self.update(keys, values)

    def drop_newest(self, drop: torch.Tensor) -> None:
        """Stop counting the columns ``drop`` marks among the newest ``drop.shape[1]`` ([batch, n] bool): they
        become holes (a drafted forward's rejected tokens, ``backends.inprocess.drafted``). Only tokens no flush has
        quantized can be dropped."""
        n = drop.shape[1]
        gone = self.valid[:, -n:] & drop.to(device=self.valid.device, dtype=torch.bool)
        rank = self.valid.cumsum(1)[:, -n:] - 1
        if bool((gone & (rank < self.qcount[:, None])).any()):
            raise EvalsuiteError("evalsuite KV cache: cannot drop tokens that were already quantized")
        self.valid[:, -n:] &= ~gone
        self.count = self.count - gone.sum(1)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def nbytes(self) -> int:
        """Bytes held: quantized payload + scales/zero points + the full-precision residual (not the compute copy,
        nor the exact shadow)."""
        if not self.is_initialized or self._kbuf.t is None:
            return 0
        _, h, _, d = self._kbuf.t.shape
        residual = int((self.count - self.qcount).sum())
        quant = round(self._row_bytes * int(self.qcount.sum()))
        return quant + 2 * residual * h * d * self._kbuf.t.element_size()

    def reset(self) -> None:
        self._reset_state()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the newest columns; only columns no row has quantized yet can be dropped."""
        n = -tokens_to_remove if tokens_to_remove < 0 else self.length - tokens_to_remove
        if n <= 0:
            return
        dropped = self.valid[:, self.length - n:].sum(1)
        if bool((self.count - dropped < self.qcount).any()):
            raise EvalsuiteError("evalsuite KV cache: cannot crop tokens that were already quantized")
        self.length -= n
        self.count = self.count - dropped
        self.valid = self.valid[:, : self.length]
        for buf in (self._kbuf, self._vbuf, *self._exact):
            buf.n = min(buf.n, self.length)

    def _map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Batch ops move whole rows (the stored blocks keep the rows they were flushed with)."""
        for buf in (self._kbuf, self._vbuf, *self._exact):
            buf.map_batch(fn)
        self.valid, self.count, self.qcount = fn(self.valid), fn(self.count), fn(self.qcount)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices, ...])
