"""Group-wise KV quantization kernels: packed asymmetric integers (8/4/2 bits) and FP8 (e4m3 / e5m2) with scales.

Tensors are ``[batch, heads, tokens, head_dim]``. A group is ``group`` consecutive values along the quantized axis:
``axis="token"`` groups along head_dim (one token's values, the per-token layout); ``axis="channel"`` groups along
the token axis (one channel over ``group`` tokens, KIVI's per-channel keys). Scales and zero points are float16
(2 bytes each); integer codes are packed along head_dim, ``8 // bits`` codes per uint8 byte.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

META_DTYPE = torch.float16
FP8_DTYPES = {"fp8e4": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2}
Axis = Literal["token", "channel"]


@dataclass
class QBlock:
    """One quantized block of K or V: ``tokens`` tokens, codes + per-group scale (and zero point for ints)."""

    data: torch.Tensor  # uint8 packed codes [B, H, T, D*bits/8] or float8 [B, H, T, D]
    scale: torch.Tensor  # float16, broadcastable against the grouped view
    zero: torch.Tensor | None  # float16 group minimum (int formats), None for FP8
    fmt: str
    bits: int
    axis: Axis
    group: int
    head_dim: int

    @property
    def tokens(self) -> int:
        return self.data.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held: payload + scales + zero points."""
        meta = self.scale.nbytes + (self.zero.nbytes if self.zero is not None else 0)
        return self.data.nbytes + meta

    def map_batch(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Apply a batch-dimension op (index_select, repeat_interleave) to every tensor of the block."""
        self.data, self.scale = fn(self.data), fn(self.scale)
        if self.zero is not None:
            self.zero = fn(self.zero)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes (< 2**bits) along the last axis, ``8 // bits`` per byte (first code in the low bits)."""
    if bits == 8:
        return codes
    per = 8 // bits
    c = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
    out = c[..., 0].clone()
    for i in range(1, per):
        out |= c[..., i] << (bits * i)
    return out


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`pack`."""
    if bits == 8:
        return packed
    per = 8 // bits
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    codes = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * per)


def _grouped(x: torch.Tensor, axis: Axis, group: int) -> tuple[torch.Tensor, int]:
    """View ``x`` with groups on their own axis; returns the view and the axis to reduce."""
    b, h, t, d = x.shape
    if axis == "token":
        return x.reshape(b, h, t, d // group, group), -1
    return x.reshape(b, h, t // group, group, d), -2


def _fp16_ceil(x: torch.Tensor) -> torch.Tensor:
    """Round a positive float32 tensor up to float16 (so a stored scale never shrinks the covered range)."""
    y = x.clamp(max=65504.0).to(META_DTYPE)
    return torch.where(y.float() < x, torch.nextafter(y, torch.full_like(y, float("inf"))), y)


def _fp16_floor(x: torch.Tensor) -> torch.Tensor:
    """Round a float32 tensor down to float16."""
    y = x.clamp(-65504.0, 65504.0).to(META_DTYPE)
    return torch.where(y.float() > x, torch.nextafter(y, torch.full_like(y, float("-inf"))), y)


def quantize(x: torch.Tensor, fmt: str, bits: int, axis: Axis, group: int) -> QBlock:
    """Quantize ``x`` [B, H, T, D] group-wise; T (channel axis) or D (token axis) must be a multiple of ``group``."""
    xg, dim = _grouped(x.float(), axis, group)
    if fmt == "int":
        levels = (1 << bits) - 1
        zero = _fp16_floor(xg.amin(dim, keepdim=True))
        span = (xg.amax(dim, keepdim=True) - zero.float()) / levels
        scale = _fp16_ceil(torch.where(span > 0, span, torch.ones_like(span)))
        codes = ((xg - zero.float()) / scale.float()).round_().clamp_(0, levels).to(torch.uint8)
        data = pack(codes.reshape(x.shape), bits)
    else:
        fp8 = FP8_DTYPES[fmt]
        fmax = torch.finfo(fp8).max
        amax = xg.abs().amax(dim, keepdim=True) / fmax
        scale = _fp16_ceil(torch.where(amax > 0, amax, torch.ones_like(amax)))
        data = (xg / scale.float()).clamp_(-fmax, fmax).to(fp8).reshape(x.shape)
        zero = None
    return QBlock(data=data, scale=scale, zero=zero, fmt=fmt, bits=bits, axis=axis, group=group,
                  head_dim=x.shape[-1])


def dequantize(q: QBlock, dtype: torch.dtype) -> torch.Tensor:
    """Reconstruct a [B, H, T, D] tensor in ``dtype``."""
    if q.fmt == "int":
        codes = unpack(q.data, q.bits)
        xg, _ = _grouped(codes, q.axis, q.group)
        out = xg.to(torch.float32) * q.scale.float() + q.zero.float()
    else:
        xg, _ = _grouped(q.data, q.axis, q.group)
        out = xg.to(torch.float32) * q.scale.float()
    b, h, t = q.data.shape[:3]
    return out.reshape(b, h, t, q.head_dim).to(dtype)
