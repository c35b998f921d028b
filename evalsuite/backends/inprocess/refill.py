"""Continuous refill: a decode pool whose finished rows' slots take the next prompts.

A per-batch decoder keeps stepping until a batch's longest answer ends, and a step on a CPU costs about the same
with 4 live rows as with 16 (it is bound by per-layer overhead, not arithmetic). This loop keeps the pool full:

* prompts wait in plan order (length-sorted); when at least ``admit_at`` slots are free (or the pool is empty)
  the next prompts are prefilled together (from the task's shared prefix, as ``engine.prefill`` does) and their
  K/V merged into the running DynamicCache: both sides are left-padded to a common length, the 2-D mask hides
  the padding, and every row keeps its own position ids, so a row attends to exactly what it would attend to in
  a batch of its own;
* finished rows leave the pool at once and columns that every remaining row masks out are cut off the front;
* the pool's cache appends in place (``growcache``: no per-step ``torch.cat`` of the whole cache);
* the pool holds at most ``max_rows`` rows and ``max_tokens`` cache columns x rows (the padded-token budget).

Only plain DynamicCache pools merge (every layer a ``DynamicLayer`` holding every token). Quantized caches
(evalsuite's, transformers' QuantizedCache) quantize groups that span tokens with flush boundaries shared by all
rows of a layer, so a merged newcomer would be grouped differently than in its own batch: those run per batch
(``engine.decode``). Greedy outputs equal per-batch decoding; sampling draws each row from its own generator
(``row_seeds``), so a row's tokens do not depend on which rows share its steps.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

from evalsuite.models.device import synchronize
from evalsuite.backends.inprocess.growcache import dynamic_layers, grow_cache
from evalsuite.backends.inprocess.decoder import (Decoded, Prefix, pick_tokens, plain_dynamic, plan_batches, prefill,
                                                  take_token)
from evalsuite.tasks.base import GenSettings


#: padded tokens per prefill forward when newcomers are admitted (``prefill_chunks``)
PREFILL_TOKENS = 4096


def can_refill(model: Any, cache: Any) -> bool:
    """Whether rows of ``cache``'s kind can be merged into a running batch (plain DynamicCache layers only)."""
    if not plain_dynamic(model):
        return False
    return cache is None or dynamic_layers(cache)


def _left_pad(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    if n <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class Pool:
    """The running batch: its cache, 2-D mask, next positions, last logits and the rows it holds."""

    def __init__(self) -> None:
        self.cache: DynamicCache | None = None
        self.mask = self.next_pos = self.logits = None
        self.rows: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def merge(self, rows: list[int], cache: DynamicCache, logits: torch.Tensor, mask: torch.Tensor) -> None:
        """Append newly prefilled rows: both sides left-padded to the wider one's columns."""
        if self.cache is None or not self.rows:
            self.cache, self.logits, self.mask, self.rows = grow_cache(cache), logits, mask, list(rows)
            self.next_pos = mask.sum(-1)
            return
        w = max(self.width(), mask.shape[1])
        a, b = w - self.width(), w - mask.shape[1]
        for mine, new in zip(self.cache.layers, cache.layers):
            mine.set(torch.cat([_left_pad(mine.keys, a, 2), _left_pad(new.keys, b, 2)], dim=0),
                     torch.cat([_left_pad(mine.values, a, 2), _left_pad(new.values, b, 2)], dim=0))
        self.mask = torch.cat([_left_pad(self.mask, a, 1), _left_pad(mask, b, 1)], dim=0)
        self.next_pos = torch.cat([self.next_pos, mask.sum(-1)])
        self.logits = torch.cat([self.logits, logits], dim=0)
        self.rows += rows

    def keep(self, keep: list[int]) -> None:
        """Keep the rows at positions ``keep``; drop leading columns no remaining row attends to."""
        if not keep:
            self.cache, self.mask, self.next_pos, self.logits, self.rows = None, None, None, None, []
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        mask = self.mask[idx]
        cut = int((mask.sum(0) > 0).nonzero()[0])
        self.mask = mask[:, cut:]
        for layer in self.cache.layers:
            layer.set(layer.keys[idx, :, cut:], layer.values[idx, :, cut:])
        self.next_pos = self.next_pos[idx]
        self.rows = [self.rows[j] for j in keep]


def _admit(model: Any, pool: Pool, pending: deque, ids: Sequence[Sequence[int]], prefix: Prefix | None,
           pad_id: int, max_rows: int, max_tokens: int) -> list[int]:
    """Prefill as many waiting prompts as fit the pool's row and token budget; return their row indices."""
    taken: list[int] = []
    p = len(prefix.ids) if prefix else 0
    while pending and len(pool) + len(taken) < max_rows:
        width = max([pool.width()] + [p + len(ids[r]) for r in taken + [pending[0]]])
        if (taken or len(pool)) and width * (len(pool) + len(taken) + 1) > max_tokens:
            break
        taken.append(pending.popleft())
    for chunk in prefill_chunks([p + len(ids[r]) for r in taken], PREFILL_TOKENS):
        rows = [taken[j] for j in chunk]
        cache, logits, mask = prefill(model, [ids[r] for r in rows], prefix, None, pad_id)
        pool.merge(rows, cache, logits, mask)
    return taken


def prefill_chunks(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Positions of admitted prompts grouped for prefill: in length order, each group's padded size (longest x
    rows) at most ``max_tokens`` (one prompt alone may exceed it). A prefill's matmuls are already at full rate
    from about a thousand tokens, so one forward over every newcomer only adds padding: with HumanEval's prompts
    (50 to 400 tokens) in one batch most of its work was padding."""
    return plan_batches(lengths, max(1, len(lengths)), max_tokens)


def decode_refill(model: Any, tokenizer: Any, ids: Sequence[Sequence[int]], gen: GenSettings,
                  prefix: Prefix | None, stop_ids: set[int], seeds: Sequence[int], max_rows: int,
                  max_tokens: int, order: Sequence[int] | None = None, admit_at: int | None = None
                  ) -> Iterator[tuple[int, Decoded]]:
    """Decode every row of ``ids`` (prompts without the prefix) through one refilled pool; yield (row, Decoded)
    as rows finish. ``order`` is the admission order (default: as given); ``stamps`` are the row's own
    (admission, then each step it took part in)."""
    with torch.no_grad():
        yield from _loop(model, tokenizer, ids, gen, prefix, stop_ids, seeds, max_rows, max_tokens,
                         list(order) if order is not None else list(range(len(ids))),
                         admit_at or max(1, max_rows // 4))


def _loop(model: Any, tokenizer: Any, ids: Sequence[Sequence[int]], gen: GenSettings, prefix: Prefix | None,
          stop_ids: set[int], seeds: Sequence[int], max_rows: int, max_tokens: int, order: list[int],
          admit_at: int) -> Iterator[tuple[int, Decoded]]:
    if gen.max_new_tokens <= 0:
        yield from ((r, Decoded(ids=[], stamps=[time.perf_counter()])) for r in order)
        return
    pending, pool = deque(order), Pool()
    out = {r: Decoded(ids=[]) for r in order}
    rngs: dict[int, torch.Generator] = {}
    stops = [s for s in gen.stop if s]
    text_of: Callable[[list[int]], str] = lambda x: tokenizer.decode(x, skip_special_tokens=True)  # noqa: E731
    while pending or len(pool):
        if pending and (not len(pool) or max_rows - len(pool) >= min(admit_at, len(pending))):
            synchronize(model.device)
            t0 = time.perf_counter()
            for r in _admit(model, pool, pending, ids, prefix, tokenizer.pad_token_id, max_rows, max_tokens):
                out[r].stamps.append(t0)
                if gen.temperature > 0:
                    rngs[r] = torch.Generator().manual_seed(int(seeds[r]))
        tok = pick_tokens(pool.logits, gen, [rngs[r] for r in pool.rows] if rngs else None).cpu()
        synchronize(model.device)
        now = time.perf_counter()
        keep = []
        for j, r in enumerate(pool.rows):
            out[r].stamps.append(now)
            if take_token(out[r], int(tok[j]), stop_ids, gen, stops, text_of):
                keep.append(j)
                continue
            yield r, out.pop(r)
        if len(keep) < len(pool):
            pool.keep(keep)
            tok = tok[keep]
        if not len(pool):
            continue
        pool.mask = torch.cat([pool.mask, pool.mask.new_ones(len(pool), 1)], dim=-1)
        res = model(input_ids=tok[:, None].to(pool.mask.device), attention_mask=pool.mask,
                    position_ids=pool.next_pos[:, None], cache=pool.cache, use_cache=True)
        pool.next_pos = pool.next_pos + 1
        pool.logits = res.logits[:, -1, :]
