"""evalsuite.models.attention: the single-query decode kernel against SDPA, and where it is used."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from evalsuite.models.attention import (NAME, attention_forward, decode_attention, padded_causal,
                                        use_decode_attention)
from tests.conftest import make_tiny_model


def _qkv(batch: int, heads: int, kv_heads: int, length: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, 1, 32, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, length, 32, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, length, 32, generator=g).to(dtype)
    return q, k, v


def _padding_mask(batch: int, length: int) -> torch.Tensor:
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    for row in range(batch):
        mask[row, :, :, : 3 * row] = False  # row r is left-padded by 3r columns
    return mask


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("masked", [False, True])
def test_decode_attention_is_sdpa_in_float32(kv_heads, masked):
    q, k, v = _qkv(3, 4, kv_heads, 37, torch.float32)
    mask = _padding_mask(3, 37) if masked else None
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    got = decode_attention(q, k, v, mask, 32 ** -0.5)
    assert got.shape == (3, 1, 4, 32)
    torch.testing.assert_close(got.transpose(1, 2), want, atol=1e-5, rtol=1e-5)


def test_additive_float_mask_equals_boolean_mask():
    q, k, v = _qkv(3, 4, 2, 20, torch.float32)
    mask = _padding_mask(3, 20)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(decode_attention(q, k, v, additive, 0.2), decode_attention(q, k, v, mask, 0.2))


def test_bf16_decode_attention_is_as_close_to_float32_as_sdpa():
    q, k, v = _qkv(4, 9, 3, 300, torch.bfloat16)
    mask = _padding_mask(4, 300)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
    sdpa_err = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).float() - ref).abs().max()
    ours_err = (decode_attention(q, k, v, mask, 32 ** -0.5).transpose(1, 2).float() - ref).abs().max()
    assert ours_err <= 2 * sdpa_err + 1e-3


def test_float32_and_multi_token_queries_go_to_sdpa_unchanged():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    q, k, v = _qkv(2, 4, 2, 9, torch.float32)
    mask = _padding_mask(2, 9)
    ours, _ = attention_forward(module, q, k, v, mask, scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
    assert torch.equal(ours, theirs)  # float32: the very same call
    q3 = torch.randn(2, 4, 3, 32, dtype=torch.bfloat16)
    k3, v3 = k.to(torch.bfloat16), v.to(torch.bfloat16)
    ours, _ = attention_forward(module, q3, k3, v3, None, scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, q3, k3, v3, None, scaling=0.3)
    assert torch.equal(ours, theirs)  # a multi-token chunk: SDPA


def _prefill_mask(pads: list[int], n: int, window: int | None = None, prefix: int = 0) -> torch.Tensor:
    """transformers' boolean prefill mask for rows left-padded by ``pads`` after ``prefix`` cached tokens every
    row attends to (optionally a sliding window)."""
    i = torch.arange(n)
    mask = (i[None, :] <= i[:, None]).expand(len(pads), n, n).clone()
    if window is not None:
        mask &= i[None, :] > i[:, None] - window
    for row, p in enumerate(pads):
        mask[row, :, :p] = False
    return torch.cat([torch.ones(len(pads), n, prefix, dtype=torch.bool), mask], dim=-1)[:, None]


@pytest.mark.parametrize("prefix", [0, 5])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_padded_causal_is_masked_sdpa_on_each_rows_own_tokens(kv_heads, prefix):
    pads, n = [0, 3, 7], 19
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, n, 32, generator=g)
    k, v = (torch.randn(3, kv_heads, prefix + n, 32, generator=g) for _ in range(2))
    mask = _prefill_mask(pads, n, prefix=prefix)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.2, enable_gqa=True).transpose(1, 2)
    got = padded_causal(q, k, v, mask, 0.2)
    assert got.shape == (3, n, 4, 32)
    for row, p in enumerate(pads):
        torch.testing.assert_close(got[row, p:], want[row, p:], atol=1e-5, rtol=1e-5)
        assert not got[row, :p].any()  # padding positions: zeros (masked everywhere after)


def test_padded_causal_leaves_other_masks_to_sdpa():
    q = k = v = torch.randn(2, 2, 12, 16)
    assert padded_causal(q, k, v, _prefill_mask([0, 2], 12, window=4), 0.25) is None  # a sliding window
    leaky = _prefill_mask([0, 3], 12)
    leaky[1, 0, 5, 1] = True  # a real token attending to padding
    assert padded_causal(q, k, v, leaky, 0.25) is None
    assert padded_causal(q, k, v, _prefill_mask([0, 3], 12).float(), 0.25) is None  # an additive mask
    assert padded_causal(q, k, v, _prefill_mask([0, 3], 12), 0.25) is not None
    long_cache = torch.randn(2, 2, 12 + 7, 16)  # a chunk after a cache longer than half of it: the mask is cheaper
    assert padded_causal(q, long_cache, long_cache, _prefill_mask([0, 3], 12, prefix=7), 0.25) is None
    row_padded = _prefill_mask([0, 0], 12, prefix=4)
    row_padded[1, 0, :, :2] = False  # the cached part padded for one row (a KLD pass after a batched prompt)
    cached = torch.randn(2, 2, 16, 16)
    assert padded_causal(q, cached, cached, _prefill_mask([0, 0], 12, prefix=4), 0.25) is not None
    assert padded_causal(q, cached, cached, row_padded, 0.25) is None


def test_bf16_padded_prefill_takes_the_causal_path():
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 10, 32, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 10, 32, generator=g).to(torch.bfloat16) for _ in range(2))
    mask = _prefill_mask([0, 4], 10)
    ours, _ = attention_forward(module, q, k, v, mask, scaling=0.3)
    assert torch.equal(ours, padded_causal(q, k, v, mask, 0.3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, scale=0.3,
                                         enable_gqa=True).transpose(1, 2)
    assert (ours[1, 4:].float() - ref[1, 4:]).abs().max() < 0.02


def _decode_logits(model, ids, mask, forced):
    """Logits of a prefill and of one decode step per column of ``forced`` (the tokens fed, teacher-forced)."""
    with torch.inference_mode():
        out = model(ids, attention_mask=mask, past_key_values=DynamicCache(), use_cache=True)
        cache, logits = out.past_key_values, [out.logits[:, -1].float()]
        for t in range(forced.shape[1]):
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            out = model(forced[:, t:t + 1], attention_mask=mask, past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
    return torch.stack(logits, dim=1)


def test_tiny_model_decodes_the_same_under_either_kernel():
    torch.manual_seed(3)
    ids = torch.randint(5, 200, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    forced = torch.randint(5, 200, (3, 6))
    model = make_tiny_model(256, seed=1, dtype=torch.bfloat16, kv_heads=2)
    sdpa = _decode_logits(model, ids, mask, forced)
    assert use_decode_attention(model) == NAME
    ours = _decode_logits(model, ids, mask, forced)
    torch.testing.assert_close(ours[:, 0], sdpa[:, 0], atol=0.05 * float(sdpa.abs().max()), rtol=0)  # prefill
    assert (ours - sdpa).abs().max() < 0.05 * sdpa.abs().max()
    assert (ours.argmax(-1) == sdpa.argmax(-1)).float().mean() > 0.9
    model32 = make_tiny_model(256, seed=1, dtype=torch.float32, kv_heads=2)
    before = _decode_logits(model32, ids, mask, forced)
    use_decode_attention(model32)
    assert torch.equal(_decode_logits(model32, ids, mask, forced), before)  # float32: bit-identical


def test_loaded_models_run_it_and_say_so(tokenizer, tiny):
    from evalsuite.engine.inprocess import InProcessBackend

    assert tiny.model.config._attn_implementation == NAME
    assert tiny.meta["attention"] == NAME
    backend = InProcessBackend(lambda: tiny)
    assert backend.settings()["attention"] == NAME
    eager = make_tiny_model(len(tokenizer))
    eager.set_attn_implementation("eager")
    assert use_decode_attention(eager) == "eager"  # a model on another implementation keeps it


def test_a_baseline_stored_with_another_kernel_is_regenerated():
    from evalsuite.core.records import DECODE_FORMAT
    from evalsuite.run.baselines import library_versions, mismatch_reason, run_key, task_key
    from tests.conftest import prepared

    task = prepared(n=4)[0]
    old = {"decode_format": DECODE_FORMAT, "tasks": {task.name: task_key(task, 1)}, "libraries": library_versions(),
           "run": run_key(16, {"compute_dtype": "bfloat16"})}  # written before the kernel was a setting
    now = run_key(16, {"compute_dtype": "bfloat16", "attention": NAME})
    assert mismatch_reason(old, task, 1, now) == f"attention differs (stored 'sdpa', now '{NAME}')"
    assert mismatch_reason(old, task, 1, run_key(16, {"compute_dtype": "bfloat16", "attention": "sdpa"})) is None
