"""Teacher-forced KL divergence of a variant's next-token distribution from the baseline's (llama.cpp-style).

The baseline's own answer tokens are fed *after* the prompt as a second chunk, so a KV variant really reads its
quantized cache (a single forward pass over prompt+answer shows no KV effect in ``exact`` prefill mode).
The first answer token is predicted from the prompt chunk's last position; the rest from the answer chunk.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from evalsuite.run.engine import Prefix, encode_prefix, prefill
from evalsuite.run.generate import encode_prompts


def _chunked_logprobs(model: Any, rows: list[list[int]], prefix: Prefix | None, cache: Any | None, pad_id: int,
                      answer_ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """Log-probs [batch, answer_len, vocab] predicting each answer token: the decoder's prompt prefill (shared
    prefix, exact transfer into exact-prefill caches), then the answer as one chunk through the same cache."""
    cache, last, mask = prefill(model, rows, prefix, cache, pad_id)
    first = last[:, None, :].float()
    if answer_ids.shape[1] <= 1:
        return F.log_softmax(first, dim=-1)
    full_mask = torch.cat([mask, answer_mask.to(mask.device)], dim=1)
    pos2 = mask.sum(-1, keepdim=True) + torch.arange(answer_ids.shape[1], device=mask.device).unsqueeze(0)
    out2 = model(input_ids=answer_ids[:, :-1].to(mask.device), attention_mask=full_mask[:, :-1],
                 position_ids=pos2[:, :-1], cache=cache, use_cache=True)
    return F.log_softmax(torch.cat([first, out2.logits.float()], dim=1), dim=-1)


class BaselineLogprobCache:
    """Keeps the baseline's answer log-probs (bf16) between variants, up to a byte budget, so the baseline's
    teacher-forced pass runs once per batch instead of once per variant."""

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._store: dict[Any, torch.Tensor] = {}

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


@torch.no_grad()
def teacher_forced_kld(base_model: Any, var_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]],
                       answers: Sequence[str], make_cache: Callable[[], Any] | None = None,
                       base_cache: BaselineLogprobCache | None = None, cache_key: Any = None,
                       prefix_len: int = 0) -> list[tuple[list[float], int, int]]:
    """Per sample: (KL(base || variant) per answer token, top-1 agreements, answer tokens) for one batch.

    With ``base_cache`` and ``cache_key`` the baseline's log-probs of this batch are computed once and reused.
    ``prefix_len`` tokens shared by every prompt are encoded once per model and batch, as the decoder does."""
    ids = encode_prompts(tokenizer, prompts)
    rows = [x[prefix_len:] for x in ids]
    saved = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        ans = tokenizer([a if a else tokenizer.eos_token for a in answers], return_tensors="pt", padding=True,
                        add_special_tokens=False)
    finally:
        tokenizer.padding_side = saved
    args = (tokenizer.pad_token_id, ans["input_ids"], ans["attention_mask"])
    head = ids[0][:prefix_len]
    cache = base_cache if base_cache is not None and cache_key is not None else BaselineLogprobCache(0)
    base_lp = cache.get(cache_key, lambda: _chunked_logprobs(base_model, rows, encode_prefix(base_model, head),
                                                               None, *args))
    var_cache = make_cache() if make_cache else None
    var_lp = _chunked_logprobs(var_model, rows, encode_prefix(var_model, head, var_cache), var_cache, *args)
    var_lp = var_lp.to(torch.bfloat16).float()  # rounded like the cached baseline, so identical inputs give 0
    kl = (base_lp.exp() * (base_lp - var_lp)).sum(-1).clamp(min=0.0)  # [batch, answer_len]
    agree = base_lp.argmax(-1) == var_lp.argmax(-1)
    out = []
    for row in range(kl.shape[0]):
        n = int(ans["attention_mask"][row].sum())
        out.append((kl[row, :n].tolist(), int(agree[row, :n].sum()), n))
    return out
