"""Prompt K/V kept from one pass for another, so the same prompt is not prefilled twice by the same weights.

Two uses, both through ``engine.observe_prefills``:

* a weight-only variant (its own weights, unquantized cache) keeps the K/V of its generation's prefills for its
  KLD pass. That KLD is teacher-forced (prompt, then the baseline's answer as a second chunk through the variant's
  cache, ``backends.inprocess.kld``), and its prompt part was a full prefill, the same one the generation had just done:
  on long prompts (needle) it doubled the variant's cost. The KLD pass takes the snapshots back and runs only the answer
  chunk. On by default: it changes a measurement in its last float bits, never an answer.
* opt-in (``--reuse-prompt-kv``): the baseline's generation keeps its prompts' K/V (oldest evicted past the
  budget), and a KV-cache-only variant with exact prefill starts its generation from them instead of a prefill
  (the provider answers only when it holds every prompt of the batch). Off by default because it changes
  *answers*: a quantized cache groups tokens across the batch's padding, so K/V laid out ``[padding][prompt]``
  instead of the decoder's ``[prefix][padding][own]`` quantize differently, and the variant's answers would
  depend on the baseline's batching (a resumed run, or the lm-eval bridge, would not reproduce them). Measured
  on the embedded model: ``kv4g32r16`` answers changed on a 3-sample arithmetic task.

Each prefill hands over its prompts' full-precision K/V and last-position logits row by row (padding dropped),
keyed by the prompt's token ids; a taker re-pads them into its own batch (``[padding][prompt]``, the mask hiding
the padding). Only exact prefills take part (a ``quantized``-prefill cache runs the prompt through itself).
Both live in one ``PromptStore`` under one byte budget (memory spent for speed: about 94 MB per 2k-token prompt of
the embedded model at fp32), as two parts: a variant's rows are held until its KLD pass takes them (a full store
keeps the first ones), the baseline's are a cache whose oldest rows make room for any new row. Trade: the K/V come
from a batch padded differently from the one that uses them, so with an unquantized cache results differ from a
recomputed prefill in the last float bits (masked positions contribute exact zeros; sums may run in another order),
as batch composition already does.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from evalsuite.backends.inprocess.decoder import Prefix, fill_cache, left_pad
from evalsuite.backends.inprocess.spill import Key, PromptDisk, Row, kv_bytes

#: the one byte budget of an in-process backend's prompt K/V snapshots (both uses; 0 = none kept)
PROMPT_KV_BYTES = 4 << 30



class PromptSnapshots:
    """Per-prompt K/V + last logits of one variant's prefills, up to ``max_bytes`` (in a ``store``: up to the
    store's one budget, shared with its other parts)."""

    def __init__(self, max_bytes: int = 2 << 30, owner: str = "", evict: bool = False,
                 store: PromptStore | None = None) -> None:
        self.max_bytes = max_bytes
        self.owner = owner  # the variant whose generation filled it
        self.evict = evict  # when full: drop the oldest prompts for new ones (else keep the first ones)
        self.store = store
        self.used = 0
        self.rows: dict[Key, Row] = {}
        #: the baseline's part beside a stored baseline: every row observed is written there too, and ``take``
        #: reads from there what memory does not hold (``backends.inprocess.spill``)
        self.spill: PromptDisk | None = None

    def observe(self, prefix: Prefix | None, rows: Sequence[Sequence[int]], cache: Any, last: torch.Tensor,
                mask: torch.Tensor) -> None:
        """Keep each row's unpadded K/V (from a DynamicCache laid out ``[prefix][padding][own]``) while they fit."""
        head = tuple(prefix.ids) if prefix else ()
        for j, row in enumerate(rows):
            key = head + tuple(row)
            if key in self.rows:
                continue
            keep = mask[j].bool()
            kept = None
            if self.spill is not None and not self.spill.has(key):
                self.spill.put(key, kept := self._row(cache, j, keep, last))
            size = sum(2 * int(keep.sum()) * layer.keys[j, :, :1].numel() * layer.keys.element_size()
                       for layer in cache.layers)
            if not self._make_room(size):
                if self.spill is None:
                    return
                continue  # memory is full; the rest still go to disk
            self.rows[key] = kept if kept is not None else self._row(cache, j, keep, last)
            self.used += size

    @staticmethod
    def _row(cache: Any, j: int, keep: torch.Tensor, last: torch.Tensor) -> Row:
        kv = tuple((layer.keys[j][:, keep].clone(), layer.values[j][:, keep].clone()) for layer in cache.layers)
        return kv, last[j].clone()

    def take(self, keys: Sequence[Key], keep: bool = False
             ) -> tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor, torch.Tensor] | None:
        """The batch's prompt K/V left-padded into one batch (K/V per layer, last logits, 2-D mask), removed from
        the store unless ``keep``; None unless every key is held (then nothing is removed)."""
        got = self._gather(keys) if keys else None
        if got is None:
            return None
        if not keep:
            for k in dict.fromkeys(keys):
                if k in self.rows:
                    self._drop(k)
        layers, mask = left_pad([kv for kv, _ in got])
        return layers, torch.stack([last for _, last in got]), mask

    def _gather(self, keys: Sequence[Key]) -> list[Row] | None:
        """Every key's row, from memory or (what memory lacks) from ``spill``, read only when all are there; a
        row read from disk is kept in memory while it fits. None when some key is held nowhere."""
        missing = [k for k in dict.fromkeys(keys) if k not in self.rows]
        if missing and (self.spill is None or not self.spill.held(missing)):
            return None
        have = {k: self.rows[k] for k in keys if k in self.rows}
        for k in missing:
            row = self.spill.get(k) if self.spill is not None else None
            if row is None:
                return None
            have[k] = row
            size = kv_bytes(row[0])
            if self._make_room(size):
                self.rows[k] = row
                self.used += size
        return [have[k] for k in keys]

    def provide(self, config: Any) -> Any:
        """A prefill provider (``engine.observe_prefills``) answering from these snapshots, which stay held:
        the baseline's prompts serve every variant that shares its weights."""
        def provide(prefix: Prefix | None, rows: Sequence[Sequence[int]]) -> Any:
            head = tuple(prefix.ids) if prefix else ()
            got = self.take([head + tuple(r) for r in rows], keep=True)
            return None if got is None else (fill_cache(got[0], None, config), got[1], got[2])

        return provide

    def _make_room(self, size: int) -> bool:
        """Whether ``size`` more bytes fit, once the rows that may go for them have gone (see ``PromptStore``)."""
        if self.store is not None:
            return self.store.make_room(size)
        while self.evict and self.rows and self.used + size > self.max_bytes:
            self.drop_oldest()
        return self.used + size <= self.max_bytes

    def drop_oldest(self) -> None:
        """Drop the row held longest."""
        self._drop(next(iter(self.rows)))

    def _drop(self, key: Key) -> None:
        kv, _ = self.rows.pop(key)
        self.used -= kv_bytes(kv)

    def clear(self) -> None:
        self.rows.clear()
        self.used = 0


class PromptStore:
    """Every prompt K/V snapshot of a backend under one byte budget, in parts by kind: ``part("variant")`` a
    variant's own rows for its KLD pass, ``part("base", evict=True)`` the baseline's for every later pass.

    A part that does not evict holds its rows until they are taken (when nothing more fits, it keeps the first
    ones); a part that evicts is a cache: when a new row of any part needs room, its oldest rows go first."""

    def __init__(self, max_bytes: int = PROMPT_KV_BYTES) -> None:
        self.max_bytes = max_bytes
        self.parts: dict[str, PromptSnapshots] = {}

    @property
    def used(self) -> int:
        return sum(p.used for p in self.parts.values())

    def part(self, kind: str, owner: str = "", evict: bool = False) -> PromptSnapshots:
        """A fresh, empty part ``kind`` under this store's budget; the one it replaces is emptied and keeps nothing
        more (a pass still holding it finds no rows)."""
        old = self.parts.get(kind)
        if old is not None:
            old.clear()
            old.store, old.max_bytes = None, 0
        self.parts[kind] = PromptSnapshots(self.max_bytes, owner=owner, evict=evict, store=self)
        return self.parts[kind]

    def make_room(self, size: int) -> bool:
        """Drop the oldest rows of evicting parts until ``size`` more bytes fit; whether they do."""
        while self.used + size > self.max_bytes:
            victim = next((p for p in self.parts.values() if p.evict and p.rows), None)
            if victim is None:
                break
            victim.drop_oldest()
        return self.used + size <= self.max_bytes

    def clear(self) -> None:
        for p in self.parts.values():
            p.clear()
