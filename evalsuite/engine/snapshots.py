"""Prompt K/V kept from one pass for another, so the same prompt is not prefilled twice by the same weights.

Two uses, both through ``engine.observe_prefills``:

* a weight-only variant (its own weights, unquantized cache) keeps the K/V of its generation's prefills for its
  KLD pass. That KLD is teacher-forced (prompt, then the baseline's answer as a second chunk through the variant's
  cache, ``run.kld``), and its prompt part was a full prefill, the same one the generation had just done: on long
  prompts (needle) it doubled the variant's cost. The KLD pass takes the snapshots back and runs only the answer
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
Snapshots live under byte budgets (memory spent for speed: about 94 MB per 2k-token prompt of the embedded model at
fp32). Trade: the K/V come from a batch padded differently from the one that uses them, so with an unquantized
cache results differ from a recomputed prefill in the last float bits (masked positions contribute exact zeros;
sums may run in another order), as batch composition already does.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from evalsuite.engine.decoder import Prefix, fill_cache

Key = tuple[int, ...]
Row = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor]  # per layer (K, V) [heads, len, dim]; logits


class PromptSnapshots:
    """Per-prompt K/V + last logits of one variant's prefills, up to ``max_bytes``."""

    def __init__(self, max_bytes: int = 2 << 30, owner: str = "", evict: bool = False) -> None:
        self.max_bytes = max_bytes
        self.owner = owner  # the variant whose generation filled it
        self.evict = evict  # when full: drop the oldest prompts for new ones (else keep the first ones)
        self.used = 0
        self.rows: dict[Key, Row] = {}

    def observe(self, prefix: Prefix | None, rows: Sequence[Sequence[int]], cache: Any, last: torch.Tensor,
                mask: torch.Tensor) -> None:
        """Keep each row's unpadded K/V (from a DynamicCache laid out ``[prefix][padding][own]``) while they fit."""
        head = tuple(prefix.ids) if prefix else ()
        for j, row in enumerate(rows):
            key = head + tuple(row)
            if key in self.rows:
                continue
            keep = mask[j].bool()
            size = sum(2 * int(keep.sum()) * layer.keys[j, :, :1].numel() * layer.keys.element_size()
                       for layer in cache.layers)
            while self.evict and self.rows and self.used + size > self.max_bytes:
                self._drop(next(iter(self.rows)))
            if self.used + size > self.max_bytes:
                return
            kv = tuple((layer.keys[j][:, keep].clone(), layer.values[j][:, keep].clone()) for layer in cache.layers)
            self.rows[key] = (kv, last[j].clone())
            self.used += size

    def take(self, keys: Sequence[Key], keep: bool = False
             ) -> tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor, torch.Tensor] | None:
        """The batch's prompt K/V left-padded into one batch (K/V per layer, last logits, 2-D mask), removed from
        the store unless ``keep``; None unless every key is held (then nothing is removed)."""
        if not keys or any(k not in self.rows for k in keys):
            return None
        got = [self.rows[k] for k in keys]
        if not keep:
            for k in dict.fromkeys(keys):
                self._drop(k)
        width = max(kv[0][0].shape[1] for kv, _ in got)
        first = got[0][0][0][0]
        mask = torch.zeros(len(got), width, dtype=torch.long, device=first.device)
        layers = []
        for i in range(len(got[0][0])):
            k = first.new_zeros(len(got), first.shape[0], width, first.shape[2])
            v = torch.zeros_like(k)
            for b, (kv, _) in enumerate(got):
                n = kv[i][0].shape[1]
                k[b, :, width - n:], v[b, :, width - n:] = kv[i][0], kv[i][1]
                mask[b, width - n:] = 1
            layers.append((k, v))
        return tuple(layers), torch.stack([last for _, last in got]), mask

    def provide(self, config: Any) -> Any:
        """A prefill provider (``engine.observe_prefills``) answering from these snapshots, which stay held:
        the baseline's prompts serve every variant that shares its weights."""
        def provide(prefix: Prefix | None, rows: Sequence[Sequence[int]]) -> Any:
            head = tuple(prefix.ids) if prefix else ()
            got = self.take([head + tuple(r) for r in rows], keep=True)
            return None if got is None else (fill_cache(got[0], None, config), got[1], got[2])

        return provide

    def _drop(self, key: Key) -> None:
        kv, _ = self.rows.pop(key)
        self.used -= sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)

    def clear(self) -> None:
        self.rows.clear()
        self.used = 0
