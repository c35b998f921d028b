"""evalsuite.models.attention: the batch-invariant kernels against SDPA, their invariance, and where they are used."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evalsuite.models.attention import (NAME, attention_forward, cached_attention, prompt_prefill, row_prefill,
                                        use_invariant_kernels)
from evalsuite.models.invariance import MIN_ROWS, probe
from tests.conftest import make_tiny_model


def _qkv(batch: int, heads: int, kv_heads: int, n: int, length: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n, 32, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, length, 32, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, length, 32, generator=g).to(dtype)
    return q, k, v


def _chunk_mask(pads: list[int], n: int, length: int) -> torch.Tensor:
    """Rows left-padded by ``pads``, ``n`` queries at the end attending causally to everything before them."""
    i = torch.arange(length)
    q = torch.arange(length - n, length)
    mask = (i[None, :] <= q[:, None]).expand(len(pads), n, length).clone()
    for row, p in enumerate(pads):
        mask[row, :, :p] = False
    return mask[:, None]


def _exact(dtype: torch.dtype) -> bool:
    return dtype != torch.float32 and probe(dtype, (), 32).values


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cached_attention_is_sdpa(dtype, kv_heads):
    q, k, v = _qkv(3, 4, kv_heads, 5, 37, dtype)
    mask = _chunk_mask([0, 3, 6], 5, 37)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
    got = cached_attention(q, k, v, mask, 32 ** -0.5, _exact(dtype))
    assert got.shape == (3, 5, 4, 32) and got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.transpose(1, 2).float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_query_reads_the_same_whatever_else_the_tensor_holds(dtype):
    """One query over a row's keys: alone, after padding, among other rows, with masked holes and later tokens
    (a teacher-forced chunk) gives the same bits."""
    q, k, v = _qkv(1, 4, 2, 1, 40, dtype, seed=3)
    alone = cached_attention(q, k, v, None, 0.2, _exact(dtype))
    others_q, others_k, others_v = _qkv(3, 4, 2, 6, 71, dtype, seed=4)
    pad = 71 - 40 - 5 - 3  # 23 padding columns, 3 holes inside, then 5 later tokens of the chunk
    cols = torch.cat([torch.arange(pad, pad + 20), torch.arange(pad + 23, pad + 43)])
    k2, v2 = others_k.clone(), others_v.clone()
    k2[1, :, cols], v2[1, :, cols] = k[0], v[0]
    q2 = others_q.clone()
    q2[1, :, 0] = q[0, :, 0]
    mask = torch.ones(3, 1, 6, 71, dtype=torch.bool)
    mask[1, 0] = False
    mask[1, 0, 0, cols] = True
    for j in range(1, 6):  # the chunk's later queries see the row and the chunk's earlier tokens
        mask[1, 0, j, cols] = True
        mask[1, 0, j, 66:66 + j] = True
    got = cached_attention(q2, k2, v2, mask, 0.2, _exact(dtype))
    assert torch.equal(got[1, 0], alone[0, 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 7])
def test_slicing_the_batch_changes_no_bit(monkeypatch, dtype, n):
    """A chunk's scores are cut into slices of rows (``SLICE_BYTES``): a row per slice, two, or the whole batch at
    once give the same values bit for bit, masks with padding and holes included."""
    import evalsuite.models.attention as attention

    q, k, v = _qkv(5, 4, 2, n, 90, dtype, seed=7)
    mask = _chunk_mask([0, 4, 9, 30, 2], n, 90)
    mask[2, :, :, 40:43] = False  # masked holes inside a row
    per_row = 2 * max(2 * n, MIN_ROWS) * 90 * 4  # K/V heads x score rows x keys x float32 bytes
    out = []
    for budget, rows in ((1, 1), (2 * per_row, 2), (1 << 40, 5)):
        monkeypatch.setattr(attention, "SLICE_BYTES", budget)
        assert min(attention.slice_rows(4, n, 2, 90), 5) == rows
        out.append(cached_attention(q, k, v, mask, 0.2, _exact(dtype)))
    assert all(torch.equal(out[0], o) for o in out[1:])


def _prefill_mask(pads: list[int], n: int, prefix: int = 0) -> torch.Tensor:
    i = torch.arange(n)
    mask = (i[None, :] <= i[:, None]).expand(len(pads), n, n).clone()
    for row, p in enumerate(pads):
        mask[row, :, :p] = False
    return torch.cat([torch.ones(len(pads), n, prefix, dtype=torch.bool), mask], dim=-1)[:, None]


@pytest.mark.parametrize("prefix", [0, 5, 15])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_row_prefill_is_masked_sdpa_on_each_rows_own_tokens(kv_heads, prefix):
    pads, n = [0, 3, 7], 19
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, n, 32, generator=g)
    k, v = (torch.randn(3, kv_heads, prefix + n, 32, generator=g) for _ in range(2))
    mask = _prefill_mask(pads, n, prefix=prefix)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.2, enable_gqa=True).transpose(1, 2)
    got = row_prefill(q, k, v, mask, 0.2)
    assert got.shape == (3, n, 4, 32)
    for row, p in enumerate(pads):
        torch.testing.assert_close(got[row, p:], want[row, p:], atol=1e-5, rtol=1e-5)
        assert not got[row, :p].any()  # padding positions: zeros (masked everywhere after)
        own = torch.cat([torch.arange(prefix), torch.arange(prefix + p, prefix + n)])
        alone = row_prefill(q[row:row + 1, :, p:], k[row:row + 1, :, own], v[row:row + 1, :, own],
                            _prefill_mask([0], n - p, prefix=prefix), 0.2)
        assert torch.equal(got[row, p:], alone[0])  # a row's prefill does not depend on its batch


def test_dispatch():
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    q, k, v = _qkv(2, 4, 2, 4, 9, torch.float32)
    mask = _chunk_mask([0, 2], 4, 9)
    got, _ = attention_forward(module, q, k, v, mask, scaling=0.3)
    assert torch.equal(got, cached_attention(q, k, v, mask, 0.3, False))  # a chunk over a cache
    with prompt_prefill():
        got, _ = attention_forward(module, q, k, v, mask, scaling=0.3)
    assert torch.equal(got, row_prefill(q, k, v, mask, 0.3))  # marked as a prompt's prefill
    q2, k2, v2 = _qkv(2, 4, 2, 9, 9, torch.float32)
    got, _ = attention_forward(module, q2, k2, v2, None, scaling=0.3)  # no cache, no padding: a prefill
    assert torch.equal(got, row_prefill(q2, k2, v2, None, 0.3))
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    got, _ = attention_forward(module, q, k, v, additive, scaling=0.3)
    assert torch.equal(got, sdpa_attention_forward(module, q, k, v, additive, scaling=0.3)[0])  # not covered


def _decode_logits(model, ids, mask, forced):
    """Logits of a prefill and of one decode step per column of ``forced`` (the tokens fed, teacher-forced)."""
    from transformers import DynamicCache

    with torch.inference_mode(), prompt_prefill():
        out = model(ids, attention_mask=mask, past_key_values=DynamicCache(), use_cache=True)
    cache, logits = out.past_key_values, [out.logits[:, -1].float()]
    with torch.inference_mode():
        for t in range(forced.shape[1]):
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            out = model(forced[:, t:t + 1], attention_mask=mask, past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
    return torch.stack(logits, dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiny_model_decodes_like_sdpa(dtype):
    torch.manual_seed(3)
    ids = torch.randint(5, 200, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    forced = torch.randint(5, 200, (3, 6))
    model = make_tiny_model(256, seed=1, dtype=dtype, kv_heads=2)
    sdpa = _decode_logits(model, ids, mask, forced)
    assert use_invariant_kernels(model) == NAME
    ours = _decode_logits(model, ids, mask, forced)
    tol = 1e-4 if dtype == torch.float32 else 0.05
    assert (ours - sdpa).abs().max() <= tol * max(1.0, float(sdpa.abs().max()))
    assert (ours.argmax(-1) == sdpa.argmax(-1)).float().mean() > 0.9


def test_loaded_models_run_it_and_say_so(tokenizer, tiny):
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    assert tiny.model.config._attn_implementation == NAME
    assert tiny.meta["attention"] == NAME
    backend = InProcessBackend(lambda: tiny)
    assert backend.settings()["attention"] == NAME
    eager = make_tiny_model(len(tokenizer))
    eager.set_attn_implementation("eager")
    assert use_invariant_kernels(eager) == "eager"  # a model on another implementation keeps it


def test_a_cpu_whose_matmuls_fail_the_probe_keeps_sdpa(monkeypatch):
    """Where the probe fails (bf16 on CPUs with AMX), the kernels cannot make rows invariant: SDPA, no padding."""
    from evalsuite.models import attention
    from evalsuite.models.invariance import Probe, invariant

    monkeypatch.setattr(attention, "probe", lambda *a: Probe(linear=False, scores=True, values=True))
    model = make_tiny_model(256, seed=1)
    assert use_invariant_kernels(model) == "sdpa"  # SDPA's values, GQA in place: the key stays SDPA's
    assert model.config._attn_implementation == attention.SDPA_GQA
    assert not any(getattr(m, "_evalsuite_padded", False) for m in model.modules())
    assert not invariant(model)
    monkeypatch.undo()
    assert use_invariant_kernels(model) == NAME and invariant(model)


def test_a_baseline_stored_with_another_kernel_is_regenerated():
    from evalsuite.store.records import DECODE_FORMAT
    from evalsuite.run.baselines import library_versions, mismatch_reason, run_key, task_key
    from tests.conftest import prepared

    task = prepared(n=4)[0]
    old = {"decode_format": DECODE_FORMAT, "tasks": {task.name: task_key(task, 1)}, "libraries": library_versions(),
           "run": run_key(16, {"compute_dtype": "bfloat16"})}  # written before the kernel was a setting
    now = run_key(16, {"compute_dtype": "bfloat16", "attention": NAME})
    assert mismatch_reason(old, task, 1, now) == f"attention differs (stored 'sdpa', now '{NAME}')"
    assert mismatch_reason(old, task, 1, run_key(16, {"compute_dtype": "bfloat16", "attention": "sdpa"})) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_with_gqa_in_place_computes_sdpas_values(dtype):
    """``sdpa_gqa_forward`` equals transformers' SDPA (K/V heads repeated) bit for bit: masked multi-token
    forwards with padding, holes and several query lengths; other calls are transformers' own."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from evalsuite.models.attention import sdpa_gqa_forward

    gen = torch.Generator().manual_seed(4)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    for b, q, kv in [(3, 9, 300), (16, 1, 700), (2, 64, 64), (5, 17, 1100)]:
        query = torch.randn(b, 9, q, 64, generator=gen).to(dtype)
        key, value = (torch.randn(b, 3, kv, 64, generator=gen).to(dtype) for _ in range(2))
        mask = torch.ones(b, 1, q, kv, dtype=torch.bool).tril(kv - q)  # causal over the cache
        mask[0, ..., : kv // 3] = False  # a left-padded row
        mask[-1, ..., kv // 2: kv // 2 + 5] = False  # holes
        for m in (mask, None):
            got, _ = sdpa_gqa_forward(module, query, key, value, m, scaling=0.125)
            want, _ = sdpa_attention_forward(module, query, key, value, m, scaling=0.125)
            assert torch.equal(got, want), (b, q, kv, m is None)


def test_a_model_on_sdpa_gqa_gives_sdpas_logits(monkeypatch):
    """The whole model: prefill with padding, then a multi-token chunk over the cache, bit for bit as SDPA."""
    from evalsuite.models import attention
    from evalsuite.models.invariance import Probe

    monkeypatch.setattr(attention, "probe", lambda *a: Probe(linear=False, scores=True, values=True))
    ids = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, :7] = 0
    out = {}
    for name in ("sdpa", attention.SDPA_GQA):
        model = make_tiny_model(256, seed=1, kv_heads=1)
        if name != "sdpa":
            use_invariant_kernels(model)
        assert model.config._attn_implementation == name
        with torch.no_grad():
            first = model(input_ids=ids[:, :30], attention_mask=mask[:, :30], use_cache=True)
            nxt = model(input_ids=ids[:, 30:], attention_mask=mask, cache=first.past_key_values)
        out[name] = torch.cat([first.logits, nxt.logits], 1)
    assert torch.equal(out["sdpa"], out[attention.SDPA_GQA])
