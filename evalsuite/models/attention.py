"""The attention every in-process model runs: transformers' SDPA, except for single-query decode steps and the
prefill of left-padded prompts on the CPU.

A decode step attends one query per row to the whole cache. On the CPU, PyTorch's fused SDPA kernel
(``_scaled_dot_product_flash_attention_for_cpu``) is slow at that shape in bf16: measured on a 2-core AVX-512-bf16
EPYC at SmolLM2-135M's shape (9 query heads over 3 K/V heads, head dim 64), batch 16, a layer's call takes 3.2 ms
at 300 cached tokens and 19.6 ms at 2,048 (54% of an unpadded decode step's CPU time at 300), against 0.5 and
3.2 ms for the same product as two batched matmuls (the query heads grouped onto their K/V head, no
``repeat_kv``) with float32 scores and softmax (``benchmarks/decode_attention.py``). Its error against a float32
reference is the fused kernel's (both accumulate in float32). In the engine the gain is smaller than the call's,
because transformers already packs the query heads at a padded decode step: the embedded model's needle answers
(16 samples, bf16, batch 16) generate in 36.3 s against 38.3 s, and a batch-16 step at 1,200 cached tokens takes
156 ms against 174 ms.

A prefill of left-padded prompts gets an explicit boolean mask from transformers, and the CPU's fused kernel then
computes every block of the square, the masked half and the padding included. In bf16/fp16 on the CPU, when the
mask is exactly causal over a shared prefix and each row's own tokens (``padded_causal``), each row instead runs
SDPA with ``is_causal=True`` over those tokens only, which skips the masked blocks: 2.1-2.9x faster per layer call
at needle lengths (rows of 600-2,000 tokens), 1.4x at 300-550; the prefill attention of 16 needle samples' generation
took 9.9 s against 16.0 s. Padding positions get zeros (their K/V are masked everywhere after). Other multi-token
chunks (a KLD or verification pass after a cached prompt) and float32 (where SDPA is as fast) keep SDPA.

What it changes: float rounding only. Answers generated with it can differ from SDPA's where two tokens nearly tie,
as between any two kernels, so the kernel is part of a run's settings (``attention``) and of a stored baseline's
key: a baseline generated with another kernel is regenerated, never mixed in.
"""
from __future__ import annotations

from typing import Any

import torch

#: the name registered with transformers' AttentionInterface; it is a stored baseline's ``attention`` key, so it
#: changes whenever the kernels' rounding does (2: per-row causal prefill of padded prompts)
NAME = "evalsuite_sdpa2"
HALF = (torch.bfloat16, torch.float16)  #: dtypes that take ``decode_attention`` and ``padded_causal`` (fp32: SDPA)


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                     scaling: float) -> torch.Tensor:
    """Attention of one query per row: query [B, H, 1, D], key/value [B, KH, L, D] (H a multiple of KH), mask
    None or [B, 1, 1, L] (bool: True attends; or additive float). Returns [B, 1, H, D] (transformers' layout)."""
    b, h, _, d = query.shape
    kh, length = key.shape[1], key.shape[2]
    grouped = query.reshape(b, kh, h // kh, d)  # query head j uses K/V head j // (h // kh), as repeat_kv does
    scores = torch.matmul(grouped.float(), key.float().transpose(-1, -2)) * scaling  # [B, KH, G, L]
    if mask is not None:
        mask = mask.reshape(mask.shape[0], 1, 1, length)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [B, KH, G, Dv]
    return out.reshape(b, 1, h, value.shape[-1])


def padded_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                  scaling: float) -> torch.Tensor | None:
    """Prefill attention of left-padded rows after an optional shared prefix: query [B, H, n, D], key/value
    [B, KH, P + n, D] (P cached prefix tokens every row attends to, then each row's padding and own tokens).
    Each row runs SDPA's ``is_causal`` square over prefix + own tokens (zero queries stand in for the prefix's,
    whose outputs are dropped, so only a prefix of at most n/2 qualifies); padding positions get zeros. Returns
    [B, n, H, D], or None unless ``mask`` ([B, 1, n, P + n] bool) is exactly that pattern (a sliding window or any
    other keeps the caller's kernel)."""
    b, h, n, d = query.shape
    total = key.shape[2]
    prefix = total - n
    if mask.dtype != torch.bool or tuple(mask.shape) != (b, 1, n, total) or prefix < 0 or h % key.shape[1]:
        return None
    if 2 * prefix > n:  # a chunk after a long cache (a KLD pass): the stand-in queries would cost more than the mask
        return None
    pads = (total - mask[:, 0, -1, :].sum(-1)).tolist()  # the last query sees the prefix and its row's own tokens
    tril = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    for i, p in enumerate(pads):
        rows = mask[i, 0, p:]
        if (p >= n or not rows[:, :prefix].all() or rows[:, prefix:prefix + p].any()
                or not torch.equal(rows[:, prefix + p:], tril[: n - p, : n - p])):
            return None
    out = query.new_zeros(b, n, h, value.shape[-1])
    for i, p in enumerate(pads):
        q, k, v = query[i:i + 1, :, p:], key[i:i + 1, :, prefix + p:], value[i:i + 1, :, prefix + p:]
        if prefix:
            q = torch.cat([q.new_zeros(1, h, prefix, d), q], dim=2)
            k = torch.cat([key[i:i + 1, :, :prefix], k], dim=2)
            v = torch.cat([value[i:i + 1, :, :prefix], v], dim=2)
        got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling,
                                                               enable_gqa=True)
        out[i, p:] = got[0, :, prefix:].transpose(0, 1)
    return out


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``decode_attention`` for a single bf16/fp16 query without
    dropout, softcap or position bias; ``padded_causal`` for a bf16/fp16 CPU prefill of padded rows; else
    transformers' own ``sdpa_attention_forward`` (float32 is unchanged: SDPA is as fast there, and fp32 runs stay
    bit-identical to before)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    single = query.shape[2] == 1 and query.shape[1] % key.shape[1] == 0 and query.dtype in HALF
    plain = not dropout and kwargs.get("softcap") is None and kwargs.get("position_bias") is None
    mask_ok = attention_mask is None or attention_mask.shape[-2] == 1 and attention_mask.shape[1] == 1
    plain = plain and not kwargs.get("output_attentions")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if single and plain and mask_ok:
        return decode_attention(query, key, value, attention_mask, scale), None
    prefill = 1 < query.shape[2] <= key.shape[2] and query.dtype in HALF and query.device.type == "cpu"
    if prefill and plain and attention_mask is not None:
        out = padded_causal(query, key, value, attention_mask, scale)
        if out is not None:
            return out, None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def register() -> str:
    """Register ``NAME`` with transformers (attention and its mask: SDPA's); idempotent. Returns ``NAME``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME


def use_decode_attention(model: Any) -> str:
    """Switch ``model`` (loaded with SDPA) to ``NAME``; a model on another implementation (eager, flash, a
    remote-code model) keeps it. Returns the implementation the model now runs."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current != "sdpa":
        return str(current)
    register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, AttributeError, ImportError):  # a model class that refuses custom kernels keeps SDPA
        return "sdpa"
    return str(model.config._attn_implementation)
