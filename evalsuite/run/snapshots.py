"""A variant's own prompt K/V kept from its generation pass, so its KLD pass needs no second prompt prefill.

The KLD of a variant is teacher-forced: prompt, then the baseline's answer as a second chunk through the variant's
cache (``run.kld``). For a variant with its own weights the prompt part costs a full prefill, the same one its
generation just did: on long prompts (needle) that doubled the variant's cost. So while a variant generates, the
decoder's prefills (``engine.observe_prefills``) hand each prompt's full-precision K/V and last-position logits to
a ``PromptSnapshots``, row by row (padding dropped), keyed by the prompt's token ids; the KLD pass takes them back,
re-pads them into its own batch and runs only the answer chunk (``kld.from_snapshot``). A cache with exact
prefill receives these K/V exactly as its own prefill would have stored them.

Only exact prefills are observed (a ``quantized``-prefill cache runs the prompt through itself, so it is
prefilled again); snapshots live under a byte budget (memory spent for speed: about 94 MB per 2k-token prompt of
the embedded model at fp32) and are dropped when taken, when the next generation starts, or on release. The K/V
come from a batch padded differently from the KLD batch, so the KLD can differ from a recomputed one in the
last float bits (masked positions contribute exact zeros; sums may run in another order).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from evalsuite.run.engine import Prefix

Key = tuple[int, ...]
Row = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor]  # per layer (K, V) [heads, len, dim]; logits


class PromptSnapshots:
    """Per-prompt K/V + last logits of one variant's prefills, up to ``max_bytes``."""

    def __init__(self, max_bytes: int = 2 << 30, owner: str = "") -> None:
        self.max_bytes = max_bytes
        self.owner = owner  # the variant whose generation filled it
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
            if self.used + size > self.max_bytes:
                return
            kv = tuple((layer.keys[j][:, keep].clone(), layer.values[j][:, keep].clone()) for layer in cache.layers)
            self.rows[key] = (kv, last[j].clone())
            self.used += size

    def take(self, keys: Sequence[Key]) -> tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor,
                                                 torch.Tensor] | None:
        """The batch's prompt K/V left-padded into one batch (K/V per layer, last logits, 2-D mask), removed from
        the store; None unless every key is held (then nothing is removed)."""
        if not keys or any(k not in self.rows for k in keys):
            return None
        got = [self.rows.pop(k) for k in keys]
        self.used -= sum(2 * kv[0][0].numel() * kv[0][0].element_size() * len(kv) for kv, _ in got)
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

    def clear(self) -> None:
        self.rows.clear()
        self.used = 0
