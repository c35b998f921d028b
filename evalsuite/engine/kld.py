"""Teacher-forced KL divergence of a variant's next-token distribution from the baseline's (llama.cpp-style).

The baseline's own answer tokens are fed *after* the prompt as a second chunk, so a KV variant really reads its
quantized cache (a single forward pass over prompt+answer shows no KV effect in ``exact`` prefill mode).
The first answer token is predicted from the prompt chunk's last position; the rest from the answer chunk.

No second prompt prefill for a variant that shares the baseline's weights (a KV-cache-only variant, or the
baseline's noise floor) and whose cache takes an exact prefill: its prompt K/V and last-position logits are exactly
the baseline's, so the baseline pass keeps a snapshot of them (references to the prompt chunk's K/V tensors,
no copy: the answer chunk's ``update`` concatenates into new tensors) and the variant's cache is filled from it,
as the decoder's exact transfer does, before its own answer chunk. Snapshots live in ``BaselineLogprobCache``
under their own byte budget (memory spent for speed); past it the prompt is prefilled again.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F


from evalsuite.kvcache import track_mask
from evalsuite.engine.decoder import Prefix, encode_prefix, exact_prefill, fill_cache, prefill
from evalsuite.engine.generate import encode_prompts


PromptKV = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor, torch.Tensor]  # (K/V), last, mask


def _answer_logprobs(model: Any, cache: Any, last: torch.Tensor, mask: torch.Tensor, answer_ids: torch.Tensor,
                     answer_mask: torch.Tensor) -> torch.Tensor:
    """Log-probs [batch, answer_len, vocab] after a prompt prefill: ``last`` predicts the first answer token, the
    answer chunk (through the same cache) the rest."""
    first = last[:, None, :].float()
    if answer_ids.shape[1] <= 1:
        return F.log_softmax(first, dim=-1)
    full_mask = torch.cat([mask, answer_mask.to(mask.device)], dim=1)
    pos2 = mask.sum(-1, keepdim=True) + torch.arange(answer_ids.shape[1], device=mask.device).unsqueeze(0)
    track_mask(cache, full_mask[:, :-1])  # a quantized cache counts only the answers' real tokens
    out2 = model(input_ids=answer_ids[:, :-1].to(mask.device), attention_mask=full_mask[:, :-1],
                 position_ids=pos2[:, :-1], cache=cache, use_cache=True)
    return F.log_softmax(torch.cat([first, out2.logits.float()], dim=1), dim=-1)


def _chunked_logprobs(model: Any, rows: list[list[int]], prefix: Prefix | None, cache: Any | None, pad_id: int,
                      answer_ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """Log-probs [batch, answer_len, vocab] predicting each answer token: the decoder's prompt prefill (shared
    prefix, exact transfer into exact-prefill caches), then the answer as one chunk through the same cache."""
    cache, last, mask = prefill(model, rows, prefix, cache, pad_id)
    return _answer_logprobs(model, cache, last, mask, answer_ids, answer_mask)


def _from_snapshot(model: Any, kv: PromptKV, cache: Any | None, answer_ids: torch.Tensor,
                   answer_mask: torch.Tensor) -> torch.Tensor:
    """The same log-probs as ``_chunked_logprobs`` for a model with the snapshot's weights, without the prompt
    prefill: the prompt's K/V go into ``cache`` (a fresh DynamicCache when None) with one update per layer."""
    layers, last, mask = kv
    return _answer_logprobs(model, fill_cache(layers, cache, model.config, mask=mask), last, mask, answer_ids,
                            answer_mask)


class BaselineLogprobCache:
    """Keeps the baseline's answer log-probs (bf16) between variants, up to a byte budget, so the baseline's
    teacher-forced pass runs once per batch instead of once per variant. (Prompt K/V live in one store,
    ``run.snapshots.PromptSnapshots``, filled by the baseline's generation.)"""

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._store: dict[Any, Any] = {}

    def get_rows(self, key: Any, compute: Callable[[], list[torch.Tensor]]) -> list[torch.Tensor]:
        """Per-row bf16 log-probs (a verification pass's baseline side), kept under the same byte budget."""
        if key in self._store:
            return self._store[key]
        rows = [r.to(torch.bfloat16) for r in compute()]
        size = sum(r.numel() * 2 for r in rows)
        if self.used + size <= self.max_bytes:
            self._store[key] = rows
            self.used += size
        return rows

    def get(self, key: Any, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key in self._store:
            return self._store[key].float()
        value = compute()
        size = value.numel() * 2
        if self.used + size <= self.max_bytes:
            self._store[key] = value.to(torch.bfloat16)
            self.used += size
            return self._store[key].float()  # the same rounding whether cached or not
        return value.to(torch.bfloat16).float()


def encode_answers(tokenizer: Any, answers: Sequence[str]) -> Any:
    """The answers as teacher-forced (right-padded ids + mask, no special tokens; an empty answer is EOS)."""
    saved = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        return tokenizer([a if a else tokenizer.eos_token for a in answers], return_tensors="pt", padding=True,
                         add_special_tokens=False)
    finally:
        tokenizer.padding_side = saved


def _baseline_pass(base_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], ans: Any,
                   cache: BaselineLogprobCache, cache_key: Any, prefix_len: int,
                   snapshot: PromptKV | None = None) -> tuple[torch.Tensor, tuple]:
    """The baseline's answer log-probs (cached under ``cache_key``) and the (rows, head, args) a variant reuses.
    ``snapshot``: the baseline's prompt K/V kept from its generation (``run.snapshots``), used instead of a prompt
    prefill (then kept for KV-only variants as a prefill's would be)."""
    ids = encode_prompts(tokenizer, prompts)
    rows = [x[prefix_len:] for x in ids]
    args = (tokenizer.pad_token_id, ans["input_ids"], ans["attention_mask"])
    head = ids[0][:prefix_len]

    def compute() -> torch.Tensor:
        if snapshot is None:
            return _chunked_logprobs(base_model, rows, encode_prefix(base_model, head), None, *args)
        return _from_snapshot(base_model, snapshot, None, *args[1:])
    return cache.get(cache_key, compute), (rows, head, args)


@torch.no_grad()
def baseline_answer_logprobs(base_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]],
                             answers: Sequence[str], base_cache: BaselineLogprobCache | None = None,
                             cache_key: Any = None, prefix_len: int = 0) -> tuple[torch.Tensor, list[list[int]]]:
    """The baseline's full-vocabulary log-probs [batch, answer_len, vocab] at each answer token (bf16-rounded, as
    ``teacher_forced_kld`` compares them) and each answer's token ids (unpadded)."""
    ans = encode_answers(tokenizer, answers)
    cache = base_cache if base_cache is not None and cache_key is not None else BaselineLogprobCache(0)
    base_lp, _ = _baseline_pass(base_model, tokenizer, prompts, ans, cache, cache_key, prefix_len)
    ids = [row[:int(m.sum())].tolist() for row, m in zip(ans["input_ids"], ans["attention_mask"])]
    return base_lp, ids


@torch.no_grad()
def teacher_forced_kld(base_model: Any, var_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]],
                       answers: Sequence[str], make_cache: Callable[[], Any] | None = None,
                       base_cache: BaselineLogprobCache | None = None, cache_key: Any = None,
                       prefix_len: int = 0, var_snapshot: PromptKV | None = None,
                       base_snapshot: PromptKV | None = None) -> list[tuple[list[float], int, int]]:
    """Per sample: (KL(base || variant) per answer token, top-1 agreements, answer tokens) for one batch.

    With ``base_cache`` and ``cache_key`` the baseline's log-probs of this batch are computed once and reused.
    ``prefix_len`` tokens shared by every prompt are encoded once per model and batch, as the decoder does.
    ``var_snapshot``: the variant's own prompt K/V, last logits and mask for this batch, kept from its generation
    (``run.snapshots``); used instead of a prompt prefill when its cache takes an exact prefill. ``base_snapshot``:
    the same for the baseline, kept from the baseline's generation."""
    ans = encode_answers(tokenizer, answers)
    cache = base_cache if base_cache is not None and cache_key is not None else BaselineLogprobCache(0)
    base_lp, (rows, head, args) = _baseline_pass(base_model, tokenizer, prompts, ans, cache, cache_key,
                                                 prefix_len, base_snapshot)
    var_cache = make_cache() if make_cache else None
    if var_snapshot is not None and exact_prefill(var_cache):
        var_lp = _from_snapshot(var_model, var_snapshot, var_cache, *args[1:])
    elif var_model is base_model and exact_prefill(var_cache) and base_snapshot is not None:
        var_lp = _from_snapshot(var_model, base_snapshot, var_cache, *args[1:])
    else:
        var_lp = _chunked_logprobs(var_model, rows, encode_prefix(var_model, head, var_cache), var_cache, *args)
    var_lp = var_lp.to(torch.bfloat16).float()  # rounded like the cached baseline, so identical inputs give 0
    kl = (base_lp.exp() * (base_lp - var_lp)).sum(-1).clamp(min=0.0)  # [batch, answer_len]
    agree = base_lp.argmax(-1) == var_lp.argmax(-1)
    out = []
    for row in range(kl.shape[0]):
        n = int(ans["attention_mask"][row].sum())
        out.append((kl[row, :n].tolist(), int(agree[row, :n].sum()), n))
    return out
