"""Drafted tails: a diverged row's greedy tail decoded several tokens per forward, with drafts from the baseline's
answer and the row's own text, accepting exactly what step-by-step decoding would have produced.

After verification finds a row's first divergence, the variant still has to decode the rest of its answer. A CPU
decode step costs about the same for 1 token as for 10 per row (it is bound by per-layer overhead), and a variant
that departed from the baseline's answer often comes back to it, or repeats itself. So each forward feeds, per row,
its next token (the decoder's own choice) followed by a draft of up to ``DRAFT`` tokens: the continuation of an
earlier occurrence of the row's last 1-3 tokens in its own tokens or in the baseline's answer
(prompt-lookup decoding, Saxena 2023, with the baseline's answer as the text: ``Drafter``). The forward's logits then say, for
every fed token, what greedy decoding picks after it: the draft is accepted up to its first token the variant would
not have chosen, and that position's choice is the next token. Rejected tokens stay in the cache as masked holes,
never attended to and never counted by a quantized cache (``QuantKVCache.drop_newest``), so nothing is re-prefilled.

Exactness is the verification pass's (``backends.inprocess.forced``):

* a quantized cache flushes a row's ``(k+1)F``-th token's block at the update that appends it, so a row's fed tokens
  never cross a flush: the token completing a block goes alone (it is always the decoder's own choice) and a
  draft stops before the next one. Every token reads exactly the K/V mix a decode step gives it. Where near-ties
  are checked, a forward in which some row's token completes a block is one token wide for every row, so that
  token's logits are a decode step's (it is quantized at once and cannot be fed again);
* on kernels that are not batch-invariant a choice whose top-2 margin is below the near-tie threshold
  (``verify.NEAR_TIE``) is not trusted from a multi-token forward: the token before it is rejected and fed again
  in a one-token-wide forward (a decode step), whose logits decide. With batch-invariant kernels the margin is 0.

Greedy only (verification is). The answer, its stop reason (a stop token, a stop string, ``max_new_tokens``) and
every choice are the decoder's (``backends.inprocess.decoder.take_token``); only the number of forwards changes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from evalsuite.backends.inprocess.decoder import Decoded, take_token
from evalsuite.backends.inprocess.forced import chunk_len, feed_rows, output_logits, segment_block
from evalsuite.tasks.base import GenSettings

DRAFT = 8  # at most this many draft tokens fed after a row's next token
#: tokens per forward the drafts may bring it to (rows x (1 + draft)); measured on kv8g32's code tails (bf16, 2-core
#: AMX Xeon) 32 -> 80 -> 160 tokens: 165 -> 130 -> 115 forwards, 18.6 -> 17.1 -> 15.2 s (docs/verification.md)
TOKENS = 160
NGRAM = 3  # longest suffix looked up


class Drafter:
    """Proposes a row's next tokens from its last ``NGRAM`` (then fewer) tokens: what followed their most recent
    earlier occurrence in the row's own ids (read live from ``own``: the baseline's verified prefix, then the tail;
    continued periodically past its end, so a loop is drafted whole),
    else what followed their occurrence in the baseline's answer nearest to the row's position (the variant left
    the baseline's answer there and often rejoins it). Measured on make gate's stored tails, this order takes
    slightly fewer forwards than either source alone first (docs/verification.md)."""

    def __init__(self, corpus: Sequence[int], own: list[int]) -> None:
        self.corpus, self.own = list(corpus), own
        self.in_corpus = _positions(self.corpus)
        self.in_own: dict[int, list[int]] = {}
        self.seen = 0

    def propose(self, k: int) -> list[int]:
        own = self.own
        for i in range(self.seen, len(own)):
            self.in_own.setdefault(own[i], []).append(i)
        self.seen = len(own)
        if k <= 0 or not own:
            return []
        here = len(own) - 1
        for n in range(min(NGRAM, len(own)), 0, -1):
            pat = own[here - n + 1:]
            hits = [i for i in reversed(self.in_own.get(pat[-1], [])) if n - 1 <= i < here
                    and own[i - n + 1:i + 1] == pat]
            if hits:
                return _repeat(own, hits[0] + 1, k)
            hits = [i for i in self.in_corpus.get(pat[-1], []) if n - 1 <= i < len(self.corpus) - 1
                    and self.corpus[i - n + 1:i + 1] == pat]
            if hits:
                i = min(hits, key=lambda i: abs(i - here))
                return self.corpus[i + 1:i + 1 + k]
        return []


def _repeat(own: list[int], start: int, k: int) -> list[int]:
    """``k`` tokens of ``own`` from ``start`` on, read past its end into the draft itself: a row repeating a
    span gets a draft as long as asked, not only the part of the span it has written."""
    out: list[int] = []
    for j in range(start, start + k):
        out.append(own[j] if j < len(own) else out[j - len(own)])
    return out


def _positions(seq: Sequence[int]) -> dict[int, list[int]]:
    at: dict[int, list[int]] = {}
    for i, t in enumerate(seq):
        at.setdefault(t, []).append(i)
    return at


def drop_newest(cache: Any, drop: torch.Tensor) -> None:
    """Tell ``cache`` that the masked-out columns among its newest ``drop.shape[1]`` hold no token (a quantized
    cache stops counting them; other caches only need the attention mask)."""
    if hasattr(cache, "drop_newest"):
        cache.drop_newest(drop)


def _feed(model: Any, cache: Any, mask: torch.Tensor, fed: list[list[int]], pad_id: int
          ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """One forward of every row's ``fed`` tokens (``forced.feed_rows``); returns (the new mask, the logits after
    each fed token [real positions, vocab], their (row, column) order)."""
    mask, hidden = feed_rows(model, cache, mask, mask.sum(-1).tolist(), fed, pad_id)
    where = [(r, c) for r, f in enumerate(fed) for c in range(len(f))]
    rows = torch.tensor([r for r, _ in where], device=mask.device)
    cols = torch.tensor([c for _, c in where], device=mask.device)
    return mask, output_logits(model, hidden[rows, cols]), where


def _accept(row: Decoded, fed: list[int], choice: list[int], trusted: list[bool], take: Callable[[Decoded, int], bool]
            ) -> tuple[int, int | None, bool]:
    """Walk one row's fed tokens against the choices after them: (tokens of ``fed`` kept in the cache, the next
    token to feed or None when the row ended, whether that token must be fed alone)."""
    for c in range(len(fed)):
        if not trusted[c]:
            return c, fed[c], True  # a near-tie in a wide forward: feed fed[c] again, alone
        t = choice[c]
        if c + 1 < len(fed) and t == fed[c + 1]:
            if not take(row, t):
                return c + 2, None, False
            continue
        return c + 1, (t if take(row, t) else None), False
    raise AssertionError("unreachable: the last fed token always decides")


@torch.no_grad()
def decode_drafted(model: Any, tokenizer: Any, cache: Any, logits: torch.Tensor, mask: torch.Tensor,
                   gen: GenSettings, stop_ids: set[int], out: list[Decoded], corpora: Sequence[Sequence[int]],
                   margin: float, draft: int = DRAFT, tokens: int | None = None) -> list[Decoded]:
    """Greedy decoding from a filled ``cache`` whose next-token ``logits`` (trusted) are given, as
    ``decoder.decode_from`` decodes, with drafted forwards; ``out`` holds each row's ids so far and ``corpora``
    each row's draft text (the baseline's answer). ``margin``: the near-tie threshold (0 on invariant kernels);
    drafts are as long as ``draft`` and ``tokens`` (default ``TOKENS``) per forward allow."""
    tokens = TOKENS if tokens is None else tokens
    stops = [s for s in gen.stop if s]
    text_of = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    take = lambda row, t: take_token(row, t, stop_ids, gen, stops, text_of)  # noqa: E731
    block = segment_block(cache)
    drafters = [Drafter(c, d.ids) for c, d in zip(corpora, out)]
    live, pend, alone = [], [], []
    for j, t in enumerate(logits.argmax(-1).tolist()):
        if take(out[j], t):
            live.append(j)
            pend.append(t)
            alone.append(False)
    mask = _select(cache, mask, live, len(out))
    while live:
        caps = [chunk_len(int(n), 10**9, block) for n in mask.sum(-1).tolist()]
        # one token per row when a near-tie waits for its decode step, or (margin > 0) when a row's next token
        # completes a quantized block: that token is flushed at once, so it could not be fed again
        wide = not any(alone) and (margin <= 0 or min(caps) > 1)
        k = min(draft, max(0, tokens // len(live) - 1)) if wide else 0
        fed = [[p] + drafters[j].propose(min(k, cap - 1, gen.max_new_tokens - len(out[j].ids)))
               for j, p, cap in zip(live, pend, caps)]
        mask, lg, where = _feed(model, cache, mask, fed, tokenizer.pad_token_id)
        width = max(len(f) for f in fed)
        top = lg.topk(2, dim=-1).values
        trusted = ((top[:, 0] - top[:, 1]).float() >= margin).tolist() if width > 1 else [True] * len(where)
        choice = lg.argmax(-1).tolist()
        drop = torch.zeros(len(live), width, dtype=torch.bool)
        keep, at = [], 0
        for b, (j, f) in enumerate(zip(live, fed)):
            n, nxt, solo = _accept(out[j], f, choice[at:at + len(f)], trusted[at:at + len(f)], take)
            at += len(f)
            drop[b, n:len(f)] = True
            if nxt is not None:
                keep.append(b)
                pend[b], alone[b] = nxt, solo
        if bool(drop.any()):
            drop = drop.to(mask.device)
            mask[:, -width:] = mask[:, -width:].masked_fill(drop, 0)
            drop_newest(cache, drop)
        if len(keep) < len(live):
            mask = _select(cache, mask, keep, len(live))
        live, pend, alone = [live[b] for b in keep], [pend[b] for b in keep], [alone[b] for b in keep]
    return out


def _select(cache: Any, mask: torch.Tensor, keep: list[int], rows: int) -> torch.Tensor:
    """Keep rows ``keep`` of the cache and mask (nothing done when every row stays)."""
    if len(keep) == rows:
        return mask
    if keep:
        idx = torch.tensor(keep, device=mask.device)
        cache.reorder_cache(idx)
        return mask[idx]
    return mask[:0]
