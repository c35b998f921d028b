"""A teacher-forced pass over prompt + a given answer that gives each token exactly the K/V mix decoding gives it.

Verification, and KLD with ``--verify on``, read their logits from it. It is not ``backends.inprocess.answer`` (the
answer log-probs after a prefill that ``--verify off``'s KLD, sensitivity and the lm-eval bridge share): its chunks end
at each row's flush boundaries, which that one-chunk helper cannot give.

* The prompt is prefilled exactly as the decoder prefills it (``engine.prefill``: shared prefix, exact transfer
  into exact-prefill caches, or the prompt through a quantized-prefill cache), or its K/V come from a snapshot of
  the same weights' prefill.
* The answer follows in chunks. An unquantized cache takes it in one chunk. evalsuite's quantized cache flushes a
  row's ``(k+1)F``-th token's block at the update that appends it (``kvcache.layer``), so decoding gives tokens of a
  block full-precision K/V of their block-mates, and the block's last token (the flush step) quantized ones. A chunk
  therefore ends just before a row's ``(k+1)F``-th token, which is fed alone; rows whose chunk is shorter than the
  batch's widest are padded with masked holes (the cache counts only real tokens). So every token reads exactly
  what the decoder's step would have read; only float rounding differs (batched vs one-token matmuls).
* Only the last hidden state of each answer position goes through ``lm_head`` (no vocabulary-sized work on prompt
  or padding positions); the caller turns them into logits row by row (``Forced.logits``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from evalsuite.kvcache import QuantKVCache, track_mask
from evalsuite.kvcache.layer import QuantKVLayer, RowState
from evalsuite.backends.inprocess.decoder import Prefix, fill_cache, prefill

PromptKV = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor, torch.Tensor]  # (K/V), last, mask


@dataclass
class Forced:
    """What a pass leaves: the cache after it, its 2-D mask, each row's prompt length and answer hidden states."""

    model: Any
    cache: Any
    mask: torch.Tensor  # [batch, columns]: 1 where a real token sits
    prompt_len: list[int]  # real prompt tokens per row
    last: torch.Tensor  # [batch, vocab] logits after the prompt (predicting answer token 0)
    hidden: list[torch.Tensor]  # per row [fed, hidden]: after answer token j (predicting token j + 1)

    def logits(self, row: int) -> torch.Tensor:
        """[fed + 1, vocab] logits in the model's dtype: position k predicts answer token k."""
        h, first = self.hidden[row], self.last[row:row + 1]
        if not len(h):
            return first
        tail = output_logits(self.model, h)
        return torch.cat([first.to(tail.dtype), tail], dim=0)

    def row_kv(self, row: int, tokens: int) -> tuple[RowState, ...]:
        """Per layer, ``row``'s first ``tokens`` real tokens as a cache holding only them stores them (a quantized
        layer's complete blocks as this pass quantized them: ``QuantKVLayer.row_state``)."""
        cols = self.mask[row].nonzero().flatten()[:tokens]
        return tuple(layer.row_state(row, tokens) if isinstance(layer, QuantKVLayer)
                     else RowState(layer.keys[row][:, cols], layer.values[row][:, cols])
                     for layer in self.cache.layers)


def output_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``lm_head`` (and the model's final logit soft-capping, if any) over some positions' last hidden states."""
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return cap * torch.tanh(logits / cap) if cap else logits


def segment_block(cache: Any) -> int | None:
    """The token count a chunk must not cross (the gcd of the quantized layers' flush blocks), None for caches
    that never re-quantize what they hold (a chunk of any length is exact there)."""
    if isinstance(cache, QuantKVCache):
        sizes = cache.flush_sizes()
        return math.gcd(*sizes) if sizes else None
    return None


def chunk_len(count: int, left: int, block: int | None) -> int:
    """How many answer tokens a row holding ``count`` tokens feeds in its next chunk (``left`` still to feed)."""
    if block is None or left == 0:
        return left
    if (count + 1) % block == 0:
        return 1  # this token completes a block: its step flushes, so it goes alone
    return min(left, block - 1 - count % block)


#: a forward's fixed cost in padded token slots (~0.1 s per forward of SmolLM2-135M against ~2.5 ms per token at
#: prefill widths on a 2-core CPU) times the forwards a batch's pass takes (prefill, answer chunks, baseline side)
BATCH_OVERHEAD = 160
#: attention over ``P`` cached keys costs about ``P / ATTEND_KEYS`` of a token's projections (measured: an answer
#: token of SmolLM2-135M on a 2-core AVX2 CPU, fp32, ~1.9 ms more at 1,000 keys than its ~2.2 ms of projections;
#: a quantized cache dequantizes every key too). 1,000 ran needle's passes 5-10% faster than 4,000 (the FLOP count)
ATTEND_KEYS = 1000


def plan_passes(prompt_lens: Sequence[int], answer_lens: Sequence[int], prefill: bool, max_batch: int,
                max_tokens: int) -> list[list[int]]:
    """Batches of row indices for teacher-forced passes, chosen to spend the fewest padded token slots.

    A pass pads every row to its batch's longest answer (and, where the prompts are ``prefill``ed rather than
    taken from a snapshot, to its longest prompt), and each answer token attends to the batch's widest prompt. So
    rows sorted by that cost are cut into contiguous batches by dynamic programming: the cost of a batch is its
    rows x (longest prompt if ``prefill``, plus longest answer x (1 + longest prompt / ``ATTEND_KEYS``)), plus
    ``BATCH_OVERHEAD`` per batch; at most ``max_batch`` rows and ``max_tokens`` padded prompt + answer tokens each.
    With batch-invariant kernels the batching changes no value (``models.invariance``)."""
    n = len(prompt_lens)

    def slots(prompt: int, answer: int) -> float:  # one row's cost in a batch of these widths
        return (prompt if prefill else 0) + answer * (1 + prompt / ATTEND_KEYS)

    order = sorted(range(n), key=lambda i: (slots(prompt_lens[i], answer_lens[i]), i))
    best, cut = [0.0] + [math.inf] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        top_p = top_a = 0
        for i in range(j - 1, -1, -1):  # the batch order[i:j]
            top_p, top_a = max(top_p, prompt_lens[order[i]]), max(top_a, answer_lens[order[i]])
            rows = j - i
            if rows > 1 and (rows > max_batch or rows * (top_p + top_a) > max_tokens):
                break
            cost = best[i] + rows * slots(top_p, top_a) + BATCH_OVERHEAD
            if cost < best[j]:
                best[j], cut[j] = cost, i
    batches, j = [], n
    while j > 0:
        batches.append(order[cut[j]:j])
        j = cut[j]
    return batches[::-1]


def feed_rows(model: Any, cache: Any, mask: torch.Tensor, counts: Sequence[int], chunks: Sequence[Sequence[int]],
              pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of each row's ``chunks`` tokens after its ``counts`` real tokens (rows with fewer tokens padded
    with masked holes, which the cache does not count); returns (the grown mask, last hidden states [batch, widest
    chunk, hidden])."""
    dev, width = mask.device, max(len(c) for c in chunks)
    ids = torch.full((len(chunks), width), pad_id, dtype=torch.long)
    seg = torch.zeros(len(chunks), width, dtype=mask.dtype)
    pos = torch.zeros(len(chunks), width, dtype=torch.long)
    for r, c in enumerate(chunks):
        ids[r, : len(c)] = torch.tensor(list(c), dtype=torch.long)
        seg[r, : len(c)] = 1
        pos[r] = counts[r] + torch.arange(width).clamp(max=max(len(c) - 1, 0))
    mask = torch.cat([mask, seg.to(dev)], dim=1)
    track_mask(cache, mask)
    out = model.get_decoder()(input_ids=ids.to(dev), attention_mask=mask, position_ids=pos.to(dev), cache=cache,
                              use_cache=True).last_hidden_state
    return mask, out


@torch.no_grad()
def forced_pass(model: Any, rows: Sequence[Sequence[int]], prefix: Prefix | None, cache: Any, pad_id: int,
                answers: Sequence[Sequence[int]], snapshot: PromptKV | None = None) -> Forced:
    """Prefill ``rows`` (prompts without ``prefix``), or take their K/V from ``snapshot``, then feed each row's
    ``answers`` tokens through ``cache`` (None: a DynamicCache), chunked as decoding would flush them."""
    if snapshot is not None:
        layers, last, mask = snapshot
        cache = fill_cache(layers, cache, model.config, mask=mask)
    else:
        cache, last, mask = prefill(model, rows, prefix, cache, pad_id)
    counts = [int(c) for c in mask.sum(-1)]
    prompt_len = list(counts)
    fed = [0] * len(answers)
    hidden: list[list[torch.Tensor]] = [[] for _ in answers]
    block = segment_block(cache)
    while any(f < len(a) for f, a in zip(fed, answers)):
        take = [chunk_len(c, len(a) - f, block) for c, f, a in zip(counts, fed, answers)]
        mask, out = feed_rows(model, cache, mask, counts, [a[f:f + m] for a, f, m in zip(answers, fed, take)],
                              pad_id)
        for r, m in enumerate(take):
            if m:
                hidden[r].append(out[r, :m])
            counts[r] += m
            fed[r] += m
    hs = [torch.cat(h) if h else last.new_zeros(0, 0) for h in hidden]
    return Forced(model=model, cache=cache, mask=mask, prompt_len=prompt_len, last=last, hidden=hs)
