"""Near-ties decided by the decoder itself: one decode step at each position whose pass margin is too thin to trust.

On kernels that are not batch-invariant (``models.invariance``) a teacher-forced pass and a step-by-step decode
round differently, so where a position's top-2 margin is below ``verify.NEAR_TIE`` the pass's choice is no
evidence of the decode's. Such a position is decided the way decoding decides it: the row's cache is rebuilt for
the prompt + the baseline's first ``t - 1`` answer tokens (their K/V from the pass, in a fresh cache of the
variant's kind that adopts the blocks the pass had quantized, the ones decoding had quantized, without quantizing
them again: ``fill_rows``), token ``t - 1`` is fed as one
decode step, and that step's logits choose token ``t``. If the choice is the baseline's token the row goes on
being verified from the pass (its later positions were computed from that same token); otherwise the row diverges
at ``t`` and its tail starts from the step's logits. The K/V of the kept prefix are the pass's in both cases, as a
tail's are (equal to decoding's to float rounding); only the choices at near-ties change hands.

Position 0 is the prompt's own prefill (``engine.prefill``, the decoder's): its logits are already the decode's.
Every near-tie of a batch is stepped in one forward per group of rows, within a token budget: a group costs one
decode step over its rows plus the cache rebuild, where a tail costs a step per remaining answer token.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from transformers import DynamicCache

from evalsuite.store.records import Reference
from evalsuite.backends.inprocess.decoder import left_pad, plan_batches
from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache import track_mask
from evalsuite.kvcache.layer import QuantKVLayer, RowState

#: rows x cache columns of one stepping group (the decoder's default padded-token budget)
STEP_TOKENS = 24576


def scan(logits: torch.Tensor, ref: Reference, stop_ids: set[int], margin: float
         ) -> tuple[int | None, list[int], int]:
    """(first position the pass clearly leaves ``ref``: a different choice by at least ``margin``; the
    near-ties before it; positions compared). Position k < len(ids) must pick ids[k]; after an EOS-ended answer,
    position len(ids) must pick a stop token."""
    n = len(ref.ids)
    checks = n + 1 if ref.stop == "eos" else n
    top = logits[:checks].topk(2, dim=-1).values
    tie = ((top[:, 0] - top[:, 1]).float() < margin).tolist()
    choice = logits[:checks].argmax(-1).tolist()  # as decoding picks (argmax breaks an exact tie the same way)
    ties: list[int] = []
    for k in range(checks):
        if tie[k]:
            ties.append(k)
        elif not (choice[k] in stop_ids if k == n else choice[k] == ref.ids[k]):
            return k, ties, k + 1
    return None, ties, checks


def agrees(logits: torch.Tensor, ref: Reference, k: int, stop_ids: set[int]) -> bool:
    """Whether ``logits`` (one position's) choose what ``ref`` has at position ``k`` (a stop token after it)."""
    choice = int(logits.argmax(-1))
    return choice in stop_ids if k == len(ref.ids) else choice == ref.ids[k]


#: one row's K/V per layer (``Forced.row_kv``: a quantized layer's complete blocks as the pass quantized them)
RowKV = tuple[RowState, ...]


def fill_rows(kvs: Sequence[RowKV], cache: Any, config: Any) -> tuple[Any, torch.Tensor]:
    """``cache`` filled with each row's K/V (rows left-padded to the longest), holding what decoding had built:
    a quantized layer adopts the blocks the pass had quantized (``QuantKVLayer.adopt``: not quantized again),
    the rest is written as an exact prefill writes it; returns (cache, 2-D mask)."""
    layers, mask = left_pad([[(state.keys, state.values) for state in one] for one in kvs])
    work = cache if cache is not None else DynamicCache(config=config)
    track_mask(work, mask)
    for i, (k, v) in enumerate(layers):
        quantized = torch.tensor([one[i].quantized for one in kvs], dtype=torch.long)
        if bool(quantized.any()):
            layer = work.layers[i]
            if not isinstance(layer, QuantKVLayer):
                raise EvalsuiteError("verification: quantized rows can only be adopted by evalsuite's KV cache")
            layer.adopt(k, v, quantized, max(one[i].row_bytes for one in kvs))
        else:
            work.update(k, v, i)
    return work, mask


@torch.no_grad()
def step_logits(forced: Any, pairs: Sequence[tuple[int, int]], refs: Sequence[Reference],
                make_cache: Callable[[], Any], max_tokens: int = STEP_TOKENS) -> dict[tuple[int, int], torch.Tensor]:
    """The decoder's own logits at answer position ``t`` of pass row ``r`` for every ``(r, t)`` (t >= 1): the
    cache rebuilt for the prompt + the first ``t - 1`` answer tokens, token ``t - 1`` fed as one decode step."""
    lens = [forced.prompt_len[r] + t - 1 for r, t in pairs]
    out: dict[tuple[int, int], torch.Tensor] = {}
    for group in plan_batches([n + 1 for n in lens], len(pairs), max_tokens):
        rows = [pairs[j][0] for j in group]
        kvs = [forced.row_kv(r, lens[j]) for r, j in zip(rows, group)]
        cache, mask = fill_rows(kvs, make_cache(), forced.model.config)
        tok = torch.tensor([[refs[r].ids[t - 1]] for r, t in (pairs[j] for j in group)], device=mask.device)
        pos = mask.sum(-1, keepdim=True)
        mask = torch.cat([mask, mask.new_ones(len(group), 1)], dim=-1)
        track_mask(cache, mask)
        res = forced.model(input_ids=tok, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        for b, j in enumerate(group):
            out[pairs[j]] = res.logits[b, -1]
    return out
