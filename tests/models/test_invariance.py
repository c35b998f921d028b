"""evalsuite.models.invariance: a row's logits do not depend on its batch, padding or chunking."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from evalsuite.models.attention import prompt_prefill, use_invariant_kernels
from evalsuite.models.invariance import MIN_ROWS, invariant, linear_shapes, pad_small_batches, probe
from tests.conftest import make_tiny_model


def _row_logits(model, prompts: list[list[int]], answer: list[int], chunked: bool) -> torch.Tensor:
    """Row 0's logits after its prompt and after each ``answer`` token: the prompts left-padded in one batch, the
    answer fed one token per step (``chunked`` False) or in one chunk."""
    b, s = len(prompts), max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (s - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (s - len(p)) + [1] * len(p) for p in prompts])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with prompt_prefill():
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        logits, nxt = [out.logits[0, -1]], mask.sum(-1)
        feeds = [answer] if chunked else [[t] for t in answer]
        for feed in feeds:
            k = len(feed)
            mask = torch.cat([mask, mask.new_ones(b, k)], dim=1)
            out = model(input_ids=torch.tensor([feed] * b), attention_mask=mask,
                        position_ids=nxt[:, None] + torch.arange(k)[None], cache=cache, use_cache=True)
            nxt = nxt + k
            logits += list(out.logits[0])
    return torch.stack(logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_computes_the_same_bits_alone_batched_and_chunked(dtype):
    model = make_tiny_model(300, seed=2, dtype=dtype, layers=2, kv_heads=2)
    use_invariant_kernels(model)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (23, 9, 41, 17)]
    answer = torch.randint(5, 300, (12,), generator=g).tolist()
    alone = _row_logits(model, prompts[:1], answer, chunked=False)
    if not invariant(model):  # this CPU's matmuls are not row-invariant: verification keeps its margins
        pytest.skip(f"the probe found this CPU's {dtype} matmuls not batch-invariant: {probe.cache_info()}")
    for rows, chunked in ((prompts, False), (prompts[:1], True), (prompts, True), (prompts[:2], False)):
        assert torch.equal(_row_logits(model, rows, answer, chunked), alone), (len(rows), chunked)


def test_small_linear_calls_are_padded_and_unpadded():
    lin = torch.nn.Linear(16, 5)
    seen = []
    lin.register_forward_hook(lambda m, a, o: seen.append(a[0].shape))
    x = torch.randn(2, 1, 16)
    want = lin(x)
    assert pad_small_batches(torch.nn.Sequential(lin)) == 1
    assert pad_small_batches(torch.nn.Sequential(lin)) == 0  # idempotent
    got = lin(x)
    assert seen[-1] == (MIN_ROWS, 16) and got.shape == (2, 1, 5)
    torch.testing.assert_close(got, want)
    big = torch.randn(3, 4, 16)
    assert lin(big).shape == (3, 4, 5) and seen[-1] == (3, 4, 16)  # enough rows: untouched


def test_invariant_only_for_padded_plain_linears_on_the_cpu():
    model = make_tiny_model(300, seed=2, dtype=torch.float32)
    assert not invariant(model)  # SDPA, no padding
    use_invariant_kernels(model)
    assert invariant(model) == probe(torch.float32, linear_shapes(model), 32).ok
    model.lm_head = torch.nn.Linear(128, 300, bias=False)  # a module added after: not padded
    assert not invariant(model)


def test_quantized_weights_are_padded_again(tiny):
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    built = build_variant(tiny, parse_variant("w4g32"), kernels="dequantized")
    assert all(getattr(m, "_evalsuite_padded", False) for m in built.model.modules()
               if type(m) is torch.nn.Linear)
    assert invariant(built.model) == invariant(tiny.model)
    quanto = build_variant(tiny, parse_variant("w4g32"), kernels="quanto")
    assert not invariant(quanto.model)  # quanto's own kernels: not covered
