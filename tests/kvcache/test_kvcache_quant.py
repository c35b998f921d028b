"""Quantization kernels of evalsuite's KV cache: packing, round-trip error bounds, bytes."""
from __future__ import annotations

import pytest
import torch

from evalsuite.kvcache.quant import FP8_DTYPES, dequantize, pack, quantize, unpack


def _kv(tokens: int = 64, dim: int = 32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, tokens, dim, generator=g)
    x[..., 5] *= 20  # an outlier channel, as real keys have
    return x


@pytest.mark.parametrize("bits", [4, 2])
def test_pack_roundtrip_and_size(bits: int) -> None:
    codes = torch.randint(0, 1 << bits, (2, 3, 7, 32), dtype=torch.uint8)
    packed = pack(codes, bits)
    assert packed.dtype == torch.uint8 and packed.shape[-1] == 32 * bits // 8
    assert torch.equal(unpack(packed, bits), codes)


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("axis", ["token", "channel"])
def test_int_roundtrip_within_half_step(bits: int, axis: str) -> None:
    x = _kv()
    q = quantize(x, "int", bits, axis, 16)
    err = (dequantize(q, torch.float32) - x).abs()
    b, h, t, d = x.shape
    shape = (b, h, t, d // 16, 16) if axis == "token" else (b, h, t // 16, 16, d)
    bound = (q.scale.float() / 2 * (1 + 1e-3) + 1e-6).expand(shape).reshape(x.shape)
    assert (err <= bound).all()
    # the step really is the group range / levels (not a loose bound): error is a sizeable fraction of it
    assert err.max() > bound.max() / 4
    assert q.scale.dtype == torch.float16 and q.zero.dtype == torch.float16


def test_int_error_grows_as_bits_shrink() -> None:
    x = _kv()
    errs = [(dequantize(quantize(x, "int", b, "token", 32), torch.float32) - x).abs().mean() for b in (8, 4, 2)]
    assert errs[0] * 8 < errs[1] and errs[1] * 2 < errs[2]


@pytest.mark.parametrize("fmt,mant", [("fp8e4", 3), ("fp8e5", 2)])
def test_fp8_roundtrip_relative_error(fmt: str, mant: int) -> None:
    x = _kv()
    q = quantize(x, fmt, 8, "token", 32)
    assert q.data.dtype == FP8_DTYPES[fmt] and q.zero is None
    err = (dequantize(q, torch.float32) - x).abs()
    tiny = torch.finfo(FP8_DTYPES[fmt]).smallest_normal
    scale = q.scale.float().expand(2, 3, 64, 1, 32).reshape(x.shape)
    assert (err <= x.abs() * 2.0 ** -(mant + 1) * 1.001 + scale * tiny).all()


def test_constant_group_is_exact_for_int() -> None:
    x = torch.full((1, 1, 8, 32), 0.375)  # zero range: scale falls back to 1, the zero point holds the value
    for bits in (8, 4, 2):
        assert torch.equal(dequantize(quantize(x, "int", bits, "channel", 8), torch.float32), x)


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_block_bytes_are_packed(bits: int) -> None:
    x = _kv(tokens=64, dim=32)
    q = quantize(x, "int", bits, "channel", 16)
    n = 2 * 3 * 64 * 32
    assert q.data.nbytes == n * bits // 8
    assert q.nbytes == n * bits // 8 + 2 * 2 * (n // 16)  # fp16 scale + zero per group of 16
    qf = quantize(x, "fp8e5", 8, "token", 32)
    assert qf.nbytes == n + 2 * (n // 32)
