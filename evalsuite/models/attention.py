"""The attention every in-process model runs on the CPU: batch-invariant kernels (``models.invariance``).

A token's attention output must not depend on the other rows of its batch, on its row's padding or holes, or on
whether it is fed alone (a decode step) or with later tokens (a teacher-forced pass, where later tokens are masked).
Two kernels, registered with transformers' ``AttentionInterface`` as ``NAME``:

* ``cached_attention``: every forward that reads a cache (decode steps, verification and KLD chunks). Scores are an
  fp32 matmul of the query rows (padded to ``MIN_ROWS``) against every key column (at least ``MIN_KEYS``: masked
  zero columns pad fewer); its reduction runs over the head dimension only, so a score does not depend on the
  other columns. Masked columns get ``-inf``; the max is exact; ``exp`` is elementwise; the denominator is summed
  exactly: each term in [0, 1] rounded to a grid of 2**-24 (an integer in float32), summed in float64 (every
  partial sum is representable, so the order does not matter; the rounding costs at most keys x 2**-25 of the
  denominator). The probabilities times the values (``weighted_values``) must not depend on where a row's keys sit
  either: each row's attended keys are re-laid from column 0, so two layouts of the same row differ only in masked
  columns at the end; then one matmul in the values' dtype where ``models.invariance.probe`` shows that trailing
  zero columns leave its result bit for bit unchanged (bf16 on AVX-512-BF16 CPUs: oneDNN), else (float32: MKL
  blocks its reduction by the total length) fixed-size float32 blocks of ``BLOCK`` keys added in order. So a query
  reads exactly its own row's unmasked keys in order, whatever else the tensor holds.
* ``row_prefill``: a prompt's prefill (``engine.prefill`` marks it with ``prompt_prefill``; so is any forward with
  nothing cached before its queries). Each row runs SDPA alone over its own real columns (shared prefix + its own
  tokens, no padding): ``is_causal`` where the pattern is causal (zero queries stand in for a short prefix's), an
  explicit mask of that row otherwise. The kernel depends on the row only, so a prompt's K/V are the same in any
  batch.

Measured on a 2-core AVX-512-BF16 EPYC (SmolLM2-135M, ``benchmarks/cpu/decode_attention.py``): see docs/verification.md.
Other devices, additive masks, soft-capping, sinks and ``output_attentions`` keep transformers' SDPA (and
``models.invariance.invariant`` is False there), and so does a model on a CPU whose matmuls fail the probe at its
shapes and dtype (bf16 on CPUs with AMX, ``evalsuite.cpu.onednn``): there these kernels cannot make a row's logits
batch-invariant, and cost a quarter of a run's time (a whole run 136 s against 103 s with SDPA). Such a model runs
``SDPA_GQA``: SDPA's values bit for bit, without transformers' per-forward copy of every K/V head in masked
multi-token forwards (``sdpa_gqa_forward``).

What it changes against SDPA: float rounding only; the kernel's name is part of a run's settings and of a stored
baseline's key (a baseline generated with another kernel is regenerated, never mixed in).
"""
from __future__ import annotations

import contextlib
import weakref
from contextvars import ContextVar
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from evalsuite.models.invariance import (BLOCK, MIN_KEYS, MIN_ROWS, NAME, head_dim, linear_shapes, pad_small_batches,
                                         probe)

#: transformers' SDPA with GQA in place on the CPU (``sdpa_gqa_forward``): the same values as ``"sdpa"``
SDPA_GQA = "evalsuite_sdpa_gqa"
from evalsuite.models.packed import pack_linears

#: bytes of one slice's float32 scores in ``cached_attention`` (measured: benchmarks/cpu/decode_attention.py)
SLICE_BYTES = 1 << 20
FIXED = 2.0 ** 24  #: the denominator's fixed-point grid (a float32 integer per key; exact sums up to 2**29 keys)
_PREFILL: ContextVar[bool] = ContextVar("evalsuite_prompt_prefill", default=False)
_LAST: list[Any] = [None, None, None]  #: ``_layout``'s last mask (a weak reference), key count, layout


@contextlib.contextmanager
def prompt_prefill() -> Iterator[None]:
    """Within the block, multi-token forwards are prompt prefills (``row_prefill``), not chunks over a cache."""
    token = _PREFILL.set(True)
    try:
        yield
    finally:
        _PREFILL.reset(token)


def cached_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                     scaling: float, exact_values: bool) -> torch.Tensor:
    """query [B, H, n, D], key/value [B, KH, L, D] (H a multiple of KH), mask None or bool [B, 1, n, L] (True
    attends). Returns [B, n, H, Dv]. ``exact_values``: see ``weighted_values`` (``one_matmul``).

    The batch runs in slices of rows whose float32 scores fit ``SLICE_BYTES`` (``slice_rows``): a chunk of many
    queries makes [rows, K/V heads, queries, keys] tensors that ten elementwise passes would otherwise stream from
    memory. Every operation below is per row (a batched matmul computes each batch entry alone, the reductions run
    over one row's keys), so the slices give the same values bit for bit."""
    b, h, n, _ = query.shape
    key, value, mask = _min_keys(key, value, mask, n)
    idx, allowed = _layout(mask, b, n, key.shape[2], query.device)
    step = slice_rows(h, n, key.shape[1], key.shape[2])
    masks = mask.split(step) if mask is not None else [None] * -(-b // step)
    parts = [_attend(q, k, v, m, (i, a), scaling, exact_values) for q, k, v, m, i, a in
             zip(query.split(step), key.split(step), value.split(step), masks, idx.split(step), allowed.split(step))]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def slice_rows(heads: int, n: int, kv_heads: int, length: int) -> int:
    """Batch rows per slice of ``cached_attention``: as many as keep one slice's float32 scores within
    ``SLICE_BYTES`` (at least one)."""
    per_row = kv_heads * max((heads // kv_heads) * n, MIN_ROWS) * length * 4
    return max(1, SLICE_BYTES // per_row)


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
            layout: tuple[torch.Tensor, torch.Tensor], scaling: float, exact_values: bool) -> torch.Tensor:
    """``cached_attention`` of some rows, their key columns' ``layout`` given (``_layout``)."""
    b, h, n, d = query.shape
    kh, length = key.shape[1], key.shape[2]
    rows = (h // kh) * n
    q = query.reshape(b, kh, rows, d).float() * scaling  # query head j uses K/V head j // (h // kh), as repeat_kv
    if rows < MIN_ROWS:
        q = torch.cat([q, q.new_zeros(b, kh, MIN_ROWS - rows, d)], dim=2)
    scores = torch.matmul(q, key.float().transpose(-1, -2))  # [B, KH, max(G*n, MIN_ROWS), L]
    scores = scores[:, :, :rows] if rows < MIN_ROWS else scores
    if mask is not None:  # in place, broadcast over the query heads of a K/V head
        scores.view(b, kh, h // kh, n, length).masked_fill_(~mask.reshape(b, 1, 1, n, length), float("-inf"))
    top = scores.amax(-1, keepdim=True).clamp(min=torch.finfo(torch.float32).min)  # a row masked everywhere: 0s
    e = (scores - top).exp_()
    # the denominator exactly, so in any order: e on a grid of 2**-24 (integers in float32), summed in float64
    total = torch.round(e * FIXED).sum(-1, keepdim=True, dtype=torch.float64).float() / FIXED
    probs = e.div_(total.clamp(min=torch.finfo(torch.float32).tiny))
    out = weighted_values(probs, value, layout, n, exact_values).to(value.dtype)
    return out.reshape(b, kh, h // kh, n, -1).reshape(b, h, n, -1).transpose(1, 2)


def _min_keys(key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, n: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """At least ``MIN_KEYS`` key columns (fewer take another score kernel): masked zero columns added."""
    b, kh, length, d = key.shape
    if length >= MIN_KEYS:
        return key, value, mask
    extra = MIN_KEYS - length
    key = torch.cat([key, key.new_zeros(b, kh, extra, d)], dim=2)
    value = torch.cat([value, value.new_zeros(b, kh, extra, value.shape[-1])], dim=2)
    if mask is None:
        mask = torch.ones(b, 1, n, length, dtype=torch.bool, device=key.device)
    return key, value, torch.cat([mask, mask.new_zeros(*mask.shape[:3], extra)], dim=-1)


def _layout(mask: torch.Tensor | None, b: int, n: int, length: int, device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx [B, W]: each row's attended columns in order, then a stand-in for the masked tail; mask [B, 1, n, W]),
    W a multiple of ``BLOCK``. Every layer of a forward gets the same mask object: computed once per mask."""
    if mask is not None and _LAST[0] is not None and _LAST[0]() is mask and _LAST[1] == length:
        return _LAST[2]
    cols = torch.arange(length, device=device)
    real = mask[:, 0].any(1) if mask is not None else torch.ones(b, length, dtype=torch.bool, device=device)
    order = torch.where(real, cols, length).sort(dim=-1).values  # real columns first, in order; then ``length``
    width = -(-length // BLOCK) * BLOCK
    order = torch.cat([order, order.new_full((b, width - length), length)], dim=-1)
    idx = order.clamp(max=length - 1)  # a stand-in column for the masked tail (finite, never attended)
    full = mask if mask is not None else torch.ones(b, 1, n, length, dtype=torch.bool, device=device)
    out = (idx, full.gather(-1, idx[:, None, None, :].expand(b, 1, n, width)) & (order < length)[:, None, None, :])
    if mask is not None:
        _LAST[:] = [weakref.ref(mask), length, out]
    return out


def _gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [B, KH, L, D] at columns idx [B, W] of each row: [B, KH, W, D] (rows of D values copied, no copy of x)."""
    b, kh, length, d = x.shape
    s0, s1, s2, s3 = x.stride()
    if s3 != 1 or s2 != d or s0 % d or s1 % d:
        x = x.contiguous()
        s0, s1, s2, _ = x.stride()
    rows = (b - 1) * s0 // d + (kh - 1) * s1 // d + length
    flat = x.as_strided((rows, d), (d, 1))
    start = (torch.arange(b, device=x.device)[:, None] * (s0 // d) + torch.arange(kh, device=x.device) * (s1 // d))
    return flat.index_select(0, (start[:, :, None] + idx[:, None, :]).reshape(-1)).view(b, kh, -1, d)


def weighted_values(probs: torch.Tensor, value: torch.Tensor, layout: tuple[torch.Tensor, torch.Tensor], n: int,
                    one_matmul: bool) -> torch.Tensor:
    """probs [B, KH, R, L] (0 where masked) x value [B, KH, L, Dv], invariant to padding, holes and masked later
    columns: each row's attended columns re-laid from column 0 (``layout``, from ``_layout``: what differs between two
    layouts of the same row is then only masked columns at the end), at least ``MIN_ROWS`` rows. ``one_matmul``: one
    matmul in the values' dtype (its reduction ignores trailing zero columns, per ``models.invariance.probe``); else
    float32 in fixed-size blocks of ``BLOCK`` keys, the blocks' partial sums added in order (trailing blocks of
    masked keys add exact zeros). Returns [B, KH, R, Dv]."""
    b, kh, rows, length = probs.shape
    idx, allowed = layout
    width, dv = idx.shape[1], value.shape[-1]
    r = max(rows, MIN_ROWS)
    p = probs.gather(-1, idx[:, None, None, :].expand(b, kh, rows, width))
    p.view(b, kh, rows // n, n, width).masked_fill_(~allowed.view(b, 1, 1, n, width), 0.0)  # the tail's stand-in
    if r > rows:
        p = torch.cat([p, p.new_zeros(b, kh, r - rows, width)], dim=2)
    v = _gather_rows(value, idx)
    if one_matmul:
        return torch.matmul(p.to(v.dtype), v)[:, :, :rows]
    blocks = width // BLOCK
    part = torch.matmul(p.view(b, kh, r, blocks, BLOCK).transpose(2, 3), v.float().view(b, kh, blocks, BLOCK, dv))
    return part[:, :, :, :rows].cumsum(dim=2)[:, :, -1]


def _row(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor, scaling: float
         ) -> torch.Tensor:
    """SDPA of one row's real queries [1, H, m, D] over its real keys [1, KH, c, D]; ``allowed`` [m, c]."""
    m, c = allowed.shape
    prefix = c - m
    causal = prefix >= 0 and bool(allowed[:, :prefix].all()) and torch.equal(
        allowed[:, prefix:], torch.ones(m, m, dtype=torch.bool, device=allowed.device).tril())
    if causal and prefix == 0:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=True)
    if causal and 2 * prefix <= m:  # zero queries stand in for the prefix's, their outputs are dropped
        q = torch.cat([query.new_zeros(1, query.shape[1], prefix, query.shape[-1]), query], dim=2)
        out = F.scaled_dot_product_attention(q, key, value, is_causal=True, scale=scaling, enable_gqa=True)
        return out[:, :, prefix:]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling, enable_gqa=True)


def row_prefill(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                scaling: float) -> torch.Tensor:
    """Prefill attention, each row alone over its real columns (see the module docstring). query [B, H, n, D],
    key/value [B, KH, L, D] (the queries are the last n columns), mask None (causal, no padding: n == L) or bool
    [B, 1, n, L]. Returns [B, n, H, Dv]; padding queries (their own column masked) get zeros."""
    if mask is None:
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2)
    b, h, n, _ = query.shape
    length = key.shape[2]
    out = query.new_zeros(b, n, h, value.shape[-1])
    for i in range(b):
        m = mask[i, 0]
        qs = m[:, length - n:].diagonal().nonzero().flatten()  # a real token attends to itself; padding does not
        if not len(qs):
            continue
        ks = m[qs].any(0).nonzero().flatten()
        got = _row(query[i:i + 1, :, qs], key[i:i + 1, :, ks], value[i:i + 1, :, ks], m[qs][:, ks], scaling)
        out[i, qs] = got[0].transpose(0, 1)
    return out


def _plain(dropout: float, kwargs: dict[str, Any]) -> bool:
    """No dropout, soft-capping, position bias, sinks or attention outputs: what both kernels here compute."""
    return (not dropout and kwargs.get("softcap") is None and kwargs.get("position_bias") is None
            and kwargs.get("s_aux") is None and not kwargs.get("output_attentions"))


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``row_prefill`` for prompt prefills, ``cached_attention`` for
    every other forward, on the CPU; transformers' ``sdpa_attention_forward`` for what these do not cover."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    n, length = query.shape[2], key.shape[2]
    bool_mask = attention_mask is None or attention_mask.dtype == torch.bool
    fits = query.shape[1] % key.shape[1] == 0 and (attention_mask is not None or n == 1 or n == length)
    if query.device.type != "cpu" or not (_plain(dropout, kwargs) and bool_mask and fits):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if n > 1 and (_PREFILL.get() or n == length):  # marked, or nothing cached before these queries
        return row_prefill(query, key, value, attention_mask, scale), None
    exact = value.dtype != torch.float32 and probe(value.dtype, (), query.shape[-1]).values
    return cached_attention(query, key, value, attention_mask, scale, exact), None


def sdpa_gqa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA (``SDPA_GQA``), except a masked multi-token forward of a grouped-query model on the CPU:
    transformers copies every K/V head ``num_key_value_groups`` times there (``repeat_kv``, because CUDA's kernels
    cannot mask with GQA), which on a long cache costs more than the attention itself; torch's CPU kernel attends
    each query head to its K/V head in place (``enable_gqa``) and computes the same values bit for bit
    (``tests/models/test_attention.py``). So a run's attention key stays ``"sdpa"``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if (query.device.type != "cpu" or groups == 1 or query.shape[2] == 1 or attention_mask is None
            or attention_mask.dtype != torch.bool or not _plain(dropout, kwargs)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                         enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register ``NAME`` and ``SDPA_GQA`` with transformers (attention and their mask: SDPA's); idempotent.
    Returns ``NAME``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    for name, fn in ((NAME, attention_forward), (SDPA_GQA, sdpa_gqa_forward)):
        AttentionInterface.register(name, fn)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return NAME


def _switch(model: Any, name: str) -> bool:
    """Run ``model`` on ``name`` (registered here); False where its class refuses custom kernels."""
    register()
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError, ImportError):
        return False
    return True


def use_invariant_kernels(model: Any) -> str:
    """Pack ``model``'s bf16 Linear weights on the CPU (``models.packed``); switch it (loaded with SDPA) to ``NAME``
    and pad its small Linear calls (``models.invariance``) where the probe shows this machine's matmuls can be
    batch-invariant at its shapes and dtype; a model on another implementation (eager, flash, a remote-code model)
    keeps it, and on a CPU where the probe fails it keeps SDPA's values through ``SDPA_GQA``. Returns the
    attention key of a run (``"sdpa"`` for SDPA's values). Call again after replacing modules (quantization adds
    Linear layers)."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    pack_linears(model)  # bf16 on the CPU: prepacked weights (``models.packed``)
    if current not in ("sdpa", SDPA_GQA, NAME):
        return str(current)
    param = next(model.parameters(), None)
    # probed at load (cached per dtype and shapes) with plain Linear calls: where they are not batch-invariant at the
    # model's shapes (bf16 on CPUs with AMX: evalsuite.cpu.onednn) the kernels cost more than exact verification saves.
    # Packed Linear layers pass the probe there too, but the kernels then cost 1.6x a whole run (models.packed)
    ok = param is None or param.device.type != "cpu" or probe(param.dtype, linear_shapes(model), head_dim(config)).ok
    if current in ("sdpa", SDPA_GQA) and not ok:
        if param is not None and param.device.type == "cpu" and current == "sdpa":
            _switch(model, SDPA_GQA)
        return "sdpa"
    if current != NAME and not _switch(model, NAME):
        return "sdpa"
    pad_small_batches(model)
    return str(model.config._attn_implementation)
