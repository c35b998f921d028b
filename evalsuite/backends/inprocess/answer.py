"""Log-probs of a given answer after a prompt prefill, the answer fed as a second chunk through the same cache.

The one such pass behind teacher-forced KLD (``backends.inprocess.kld``), the sensitivity measurements
(``sensitivity.forward``) and the lm-eval bridge's log-likelihoods (``lmeval.likelihood``). A single forward
over prompt+answer shows no KV-quantization effect (an ``exact``-prefill cache hands the first call its own
full-precision K/V); fed after the prompt, the answer attends to the prompt's *stored* (quantized) K/V, as decoding
does. The prompt chunk's last-position logits predict the first answer token, the answer chunk (all but its last
token) the rest.

Verification's pass (``backends.inprocess.forced``) is not this one: a quantized cache re-quantizes at flush boundaries
there, so it feeds each row's answer in ragged chunks that end where decoding would flush.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from evalsuite.kvcache import track_mask
from evalsuite.backends.inprocess.decoder import Prefix, fill_cache, prefill

PromptKV = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor, torch.Tensor]  # (K/V), last, mask


@torch.no_grad()
def answer_logits(model: Any, cache: Any, last: torch.Tensor, mask: torch.Tensor, answer_ids: torch.Tensor,
                  answer_mask: torch.Tensor, chunk: int | None = None, track: bool = True, upcast: bool = True
                  ) -> Iterator[torch.Tensor]:
    """Float logits predicting each answer token, a chunk at a time ([batch, n, vocab], the n summing to the
    answer length): first ``last`` [batch, vocab] (the prompt's last position), then the answers (right-padded
    ``answer_ids`` / ``answer_mask``, all but the last token) through ``cache`` after the prompt (2-D ``mask``) in
    calls of at most ``chunk`` tokens (None: one call). ``track``: tell an evalsuite quantized cache each call's
    mask, so it groups only real tokens (False: it counts padding columns too, as the sensitivity and lm-eval
    passes always have). ``upcast`` False: in the model's dtype (the caller converts what it uses)."""
    yield last[:, None, :].float() if upcast else last[:, None, :]
    dev, n = mask.device, answer_ids.shape[1] - 1
    ids, amask, start = answer_ids.to(dev), answer_mask.to(dev), mask.sum(-1, keepdim=True)
    step = chunk or max(n, 1)
    for s in range(0, n, step):
        e = min(s + step, n)
        mask = torch.cat([mask, amask[:, s:e]], dim=1)
        if track:
            track_mask(cache, mask)
        pos = start + torch.arange(s, e, device=dev).unsqueeze(0)
        out = model(input_ids=ids[:, s:e], attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        yield out.logits.float() if upcast else out.logits


@torch.no_grad()
def answer_logprobs(model: Any, cache: Any, last: torch.Tensor, mask: torch.Tensor, answer_ids: torch.Tensor,
                    answer_mask: torch.Tensor, track: bool = True) -> torch.Tensor:
    """Full-vocabulary log-probs [batch, answer_len, vocab] of ``answer_logits`` (the answer in one chunk)."""
    chunks = list(answer_logits(model, cache, last, mask, answer_ids, answer_mask, track=track))
    return F.log_softmax(torch.cat(chunks, dim=1), dim=-1)


@torch.no_grad()
def answer_logit_rows(model: Any, cache: Any, last: torch.Tensor, mask: torch.Tensor, answer_ids: torch.Tensor,
                      answer_mask: torch.Tensor, track: bool = True) -> list[tuple[torch.Tensor, ...]]:
    """Per row, the logits (model dtype) at its own answer positions only (n = its real answer tokens, at least 1),
    as views (the prompt's last position [1, vocab], then the answer chunk's [n - 1, vocab]): what
    ``answer_logprobs`` turns into log-probs there, without the float [batch, answer, vocab] tensors of the whole
    padded batch (1.2 GB for 16 json answers of 192 tokens)."""
    first, *rest = answer_logits(model, cache, last, mask, answer_ids, answer_mask, track=track, upcast=False)
    body = rest[0] if rest else first[:, :0]
    lens = [max(int(n), 1) for n in answer_mask.sum(-1)]
    return [(first[r], body[r, : n - 1]) for r, n in enumerate(lens)]


@torch.no_grad()
def prefill_answer_logprobs(model: Any, rows: Sequence[Sequence[int]], prefix: Prefix | None, cache: Any | None,
                            pad_id: int, answer_ids: torch.Tensor, answer_mask: torch.Tensor,
                            logit_rows: bool = False) -> Any:
    """``answer_logprobs`` after the decoder's prompt prefill of ``rows`` (shared ``prefix``, exact transfer into
    exact-prefill caches; ``cache`` None: a DynamicCache); ``logit_rows``: the per-row logits of ``answer_logit_rows``
    instead (the caller takes the log-softmax where it needs it)."""
    cache, last, mask = prefill(model, rows, prefix, cache, pad_id)
    return (answer_logit_rows if logit_rows else answer_logprobs)(model, cache, last, mask, answer_ids, answer_mask)


@torch.no_grad()
def snapshot_answer_logprobs(model: Any, kv: PromptKV, cache: Any | None, answer_ids: torch.Tensor,
                             answer_mask: torch.Tensor, track: bool = True, logit_rows: bool = False) -> Any:
    """The same log-probs for a model with the snapshot's weights, without the prompt prefill: the prompt's K/V
    (``kv``: per-layer K/V, last logits, 2-D mask) go into ``cache`` (None: a fresh DynamicCache) with one update
    per layer. ``track`` as in ``answer_logits`` (it also covers the prompt's K/V); ``logit_rows`` as above."""
    layers, last, mask = kv
    cache = fill_cache(layers, cache, model.config, mask=mask if track else None)
    return (answer_logit_rows if logit_rows else answer_logprobs)(model, cache, last, mask, answer_ids, answer_mask,
                                                                    track=track)
