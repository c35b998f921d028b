"""Teacher-forced passes over (prompt, baseline answer) batches, and the KL divergence between two of them.

Weights: one forward over ``[left padding][prompt][answer]``; the baseline's input to every decoder layer is kept,
so a pass in which only layer ``i`` changed starts at layer ``i`` (layers below it compute what the baseline
computed). KV: the prompt is prefilled in full precision (what an ``exact``-prefill cache stores, as the decoder
does), then the answer runs as a second chunk through the cache (``backends.inprocess.answer``), so attention reads
quantized K/V; the baseline's prompt K/V are computed once and copied into each cache. Log-probs come out as
[batch, answer_len, vocab].
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from evalsuite.backends.inprocess.answer import snapshot_answer_logprobs


@dataclass
class Batch:
    """Prompts and the baseline's answers (token ids), with their padded tensors built once."""

    prompts: list[list[int]]
    answers: list[list[int]]
    pad_id: int

    @property
    def answer_lens(self) -> list[int]:
        return [len(a) for a in self.answers]

    def single(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, mask, positions) of prompt+answer rows, left-padded to one length."""
        rows = [p + a for p, a in zip(self.prompts, self.answers)]
        n = max(len(r) for r in rows)
        ids = torch.tensor([[self.pad_id] * (n - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (n - len(r)) + [1] * len(r) for r in rows])
        return ids, mask, (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)

    def answer_chunk(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask) of the answers, right-padded."""
        a = max(self.answer_lens)
        ids = torch.tensor([x + [self.pad_id] * (a - len(x)) for x in self.answers])
        mask = torch.tensor([[1] * len(x) + [0] * (a - len(x)) for x in self.answers])
        return ids, mask


def layer_list(model: Any) -> torch.nn.ModuleList:
    return model.model.layers


@contextmanager
def from_layer(model: Any, start: int) -> Iterator[None]:
    """Run only decoder layers ``start..`` (the caller feeds the baseline's input to layer ``start``)."""
    layers = layer_list(model)
    if start == 0:
        yield
        return
    model.model.layers = torch.nn.ModuleList(list(layers)[start:])
    try:
        yield
    finally:
        model.model.layers = layers


@torch.no_grad()
def single_pass(model: Any, batch: Batch, start: int = 0, hidden: list[torch.Tensor] | None = None,
                capture: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Answer log-probs of one forward (from layer ``start`` fed ``hidden[start]``); with ``capture`` also the
    input of every decoder layer (the baseline's, kept for later passes)."""
    dev = model.device
    ids, mask, pos = (t.to(dev) for t in batch.single())
    a = max(batch.answer_lens)
    kept: list[torch.Tensor] = []
    hooks = []
    if capture:
        for layer in layer_list(model):
            hooks.append(layer.register_forward_pre_hook(
                lambda _m, args, kw: kept.append((args[0] if args else kw["hidden_states"]).detach()),
                with_kwargs=True))
    try:
        with from_layer(model, start):
            inputs = {"inputs_embeds": hidden[start]} if start else {"input_ids": ids}
            out = model(**inputs, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=a + 1)
    finally:
        for h in hooks:
            h.remove()
    logits = out.logits.float()
    rows = [F.pad(logits[r, a - n: a], (0, 0, 0, a - n)) for r, n in enumerate(batch.answer_lens)]
    return F.log_softmax(torch.stack(rows), dim=-1), kept


@dataclass
class PromptState:
    """The baseline's prompt prefill of one batch: per-layer K/V, last-position logits, mask."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    last: torch.Tensor
    mask: torch.Tensor


@torch.no_grad()
def prompt_prefill(model: Any, batch: Batch) -> PromptState:
    """Prefill the left-padded prompts in a DynamicCache (full precision)."""
    n = max(len(p) for p in batch.prompts)
    ids = torch.tensor([[batch.pad_id] * (n - len(p)) + p for p in batch.prompts], device=model.device)
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in batch.prompts], device=model.device)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1)
    return PromptState([(layer.keys, layer.values) for layer in cache.layers], out.logits[:, -1].float(), mask)


@torch.no_grad()
def chunked_pass(model: Any, batch: Batch, state: PromptState, cache: Any) -> torch.Tensor:
    """Answer log-probs with the prompt's K/V (``state``) written into ``cache`` and the answer as a second chunk
    (``cache`` None: a DynamicCache, i.e. the unquantized baseline). The cache is not told the padding (a
    quantized cache groups padding columns with real tokens, as these measurements always have)."""
    ids, amask = batch.answer_chunk()
    return snapshot_answer_logprobs(model, (tuple(state.kv), state.last, state.mask), cache, ids, amask,
                                    track=False)


def kld_sums(base_lp: torch.Tensor, var_lp: torch.Tensor, lens: list[int]) -> tuple[float, int, int]:
    """(sum of KL(base || variant) over answer tokens, top-1 agreements, tokens) of one batch."""
    kl = (base_lp.exp() * (base_lp - var_lp)).sum(-1).clamp(min=0.0)
    agree = base_lp.argmax(-1) == var_lp.argmax(-1)
    valid = torch.zeros_like(kl, dtype=torch.bool)
    for r, n in enumerate(lens):
        valid[r, :n] = True
    return float(kl[valid].sum()), int(agree[valid].sum()), int(valid.sum())
