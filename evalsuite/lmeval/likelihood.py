"""Log-likelihoods that really read a variant's KV cache: the context is one forward pass, the continuation follows
as later chunks through the same cache (``evalsuite.backends.inprocess.answer``, the continuation in chunks).

A single forward pass over context+continuation shows no KV-quantization effect at all: transformers'
QuantizedCache and evalsuite's cache in ``exact`` prefill mode hand the first call its own full-precision K/V.
Feeding the continuation as a second call makes it attend to the context's *stored* (quantized) K/V, as decoding does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from evalsuite.backends.inprocess.answer import answer_logits


@dataclass(frozen=True)
class Pair:
    """Token ids of one request: the context (never empty) and the continuation to score."""

    context: list[int]
    continuation: list[int]


def encode_pair(tokenizer: Any, context: str, continuation: str, add_special: bool, prefix_id: int,
                max_length: int) -> Pair:
    """Tokenize like lm-eval's HF backend: trailing context spaces move to the continuation, the pair is encoded
    whole and split; an empty context becomes the prefix (BOS/EOS) token; the context is cut from the left."""
    n_space = len(context) - len(context.rstrip())
    if n_space:
        context, continuation = context[:-n_space], context[-n_space:] + continuation
    if context:
        whole = tokenizer(context + continuation, add_special_tokens=add_special)["input_ids"]
        n_ctx = len(tokenizer(context, add_special_tokens=add_special)["input_ids"])
        ctx, cont = whole[:n_ctx], whole[n_ctx:]
    else:
        ctx, cont = [prefix_id], tokenizer(continuation, add_special_tokens=False)["input_ids"]
    cont = cont[-(max_length - 1):]
    return Pair(context=ctx[-(max_length - len(cont)):] or [prefix_id], continuation=cont)


def rolling_pairs(tokens: list[int], prefix_id: int, max_length: int) -> list[Pair]:
    """Disjoint rolling windows over a whole text (lm-eval's perplexity scheme): every token predicted once."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    windows = get_rolling_token_windows(token_list=tokens, prefix_token=prefix_id, max_seq_len=max_length,
                                        context_len=1)
    return [Pair(list(c), list(p)) for c, p in map(make_disjoint_window, windows)]


def _gather(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of each target token, whether it is the argmax) for logits [b, n, V] and targets [b, n]."""
    logits = logits.float()
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return lp, logits.argmax(-1) == targets


@torch.no_grad()
def chunked_logprobs(model: Any, pairs: Sequence[Pair], pad_id: int, cache: Any | None, chunk: int
                     ) -> list[tuple[float, bool]]:
    """(sum of continuation log-probs, all greedy) per pair for one batch: the contexts (left padded) in one call,
    then the continuations (right padded) in calls of at most ``chunk`` tokens, all through ``cache``
    (``backends.inprocess.answer``; the cache is not told the padding, as this bridge always ran)."""
    from transformers import DynamicCache

    cache = cache if cache is not None else DynamicCache()
    b, lc, la = len(pairs), max(len(p.context) for p in pairs), max(len(p.continuation) for p in pairs)
    ctx = torch.full((b, lc), pad_id, dtype=torch.long)
    ctx_mask = torch.zeros((b, lc), dtype=torch.long)
    cont = torch.full((b, la), pad_id, dtype=torch.long)
    cont_mask = torch.zeros((b, la), dtype=torch.long)
    for i, p in enumerate(pairs):
        ctx[i, lc - len(p.context):], ctx_mask[i, lc - len(p.context):] = torch.tensor(p.context), 1
        cont[i, :len(p.continuation)], cont_mask[i, :len(p.continuation)] = torch.tensor(p.continuation), 1
    device = model.device
    ctx, ctx_mask, cont, cont_mask = (t.to(device) for t in (ctx, ctx_mask, cont, cont_mask))
    out = model(input_ids=ctx, attention_mask=ctx_mask, position_ids=(ctx_mask.cumsum(-1) - 1).clamp(min=0),
                cache=cache, use_cache=True)
    lps, greedy, done = [], [], 0
    for logits in answer_logits(model, cache, out.logits[:, -1], ctx_mask, cont, cont_mask, chunk, track=False):
        lp, gr = _gather(logits, cont[:, done:done + logits.shape[1]])
        lps.append(lp), greedy.append(gr)
        done += logits.shape[1]
    lp_all, gr_all = torch.cat(lps, dim=1), torch.cat(greedy, dim=1)
    valid = cont_mask.bool()
    return [(float(lp_all[i][valid[i]].sum()), bool(gr_all[i][valid[i]].all())) for i in range(b)]


def score_pairs(model: Any, pairs: Sequence[Pair], pad_id: int, make_cache: Callable[[], Any] | None,
                max_batch: int, max_tokens: int, chunk: int,
                progress: Callable[[int], None] | None = None) -> list[tuple[float, bool]]:
    """Score every pair in length-sorted batches (a fresh cache per batch); results in input order."""
    from evalsuite.backends.inprocess.generate import plan_batches

    results: list[tuple[float, bool]] = [(0.0, True)] * len(pairs)  # an empty continuation: log 1, greedy
    todo = [i for i, p in enumerate(pairs) if p.continuation]
    lengths = [len(pairs[i].context) + len(pairs[i].continuation) for i in todo]
    for batch in plan_batches(lengths, max_batch, max_tokens):
        idx = [todo[j] for j in batch]
        cache = make_cache() if make_cache else None
        for i, res in zip(idx, chunked_logprobs(model, [pairs[i] for i in idx], pad_id, cache, chunk)):
            results[i] = res
        if progress:
            progress(len(idx))
    return results
