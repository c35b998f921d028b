"""Weight memory: bytes actually held (packed data + scales + zero points + unquantized tensors) and the formula."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from evalsuite.variants.spec import WeightSpec


def _leaf_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """Plain tensors inside a (possibly nested) quanto tensor subclass."""
    if hasattr(t, "__tensor_flatten__") and type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return [leaf for n in names for leaf in _leaf_tensors(getattr(t, n))]
    if isinstance(t, torch.nn.Parameter) and hasattr(t.data, "__tensor_flatten__") and type(t.data) is not torch.Tensor:
        return _leaf_tensors(t.data)
    return [t]


def held_bytes(model: torch.nn.Module) -> int:
    """Bytes held by all parameters and buffers; shared (tied) storage is counted once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    tensors = list(model.parameters()) + list(model.buffers())
    for t in tensors:
        for leaf in _leaf_tensors(t):
            key = (leaf.untyped_storage().data_ptr(), leaf.untyped_storage().nbytes())
            if key in seen:
                continue
            seen.add(key)
            total += leaf.numel() * leaf.element_size()
    return total


@dataclass(frozen=True)
class WeightBytes:
    measured: int
    formula: int
    quantized_params: int
    unquantized_params: int


def formula_bytes(model: torch.nn.Module, spec: WeightSpec, dtype_bytes: int = 2) -> tuple[int, int, int]:
    """First-order formula: quantized N × bits/8 + group metadata, plus unquantized params × dtype bytes.

    Metadata: asymmetric int4/int2 keep a scale and a zero point per group; int8 and float8 keep one scale per
    output row. Returns (bytes, quantized params, unquantized params). Tied weights count once.
    """
    from optimum.quanto import QModuleMixin

    quantized_ids: set[int] = set()
    q_params, meta = 0, 0
    if spec.fmt != "none":
        for mod in model.modules():
            if isinstance(mod, QModuleMixin) and mod.weight_qtype is not None:
                w = mod.weight
                out_rows = w.shape[0]
                n = w.numel()
                q_params += n
                quantized_ids.add(id(mod))
                if spec.fmt == "int" and spec.bits < 8:
                    meta += (n // (mod.weight_group_size or w.shape[-1])) * 2 * dtype_bytes
                else:
                    meta += out_rows * dtype_bytes
    seen: set[int] = set()
    unq = 0
    for mod in model.modules():
        if id(mod) in quantized_ids:
            for name, p in mod.named_parameters(recurse=False):
                if name != "weight" and p.data_ptr() not in seen:
                    seen.add(p.data_ptr())
                    unq += p.numel()
            continue
        for _, p in mod.named_parameters(recurse=False):
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                unq += p.numel()
    payload = q_params * spec.bytes_per_param if spec.fmt != "none" else 0
    return int(payload + meta + unq * dtype_bytes), q_params, unq


def weight_bytes(model: torch.nn.Module, spec: WeightSpec) -> WeightBytes:
    """Measured bytes beside the formula for one (possibly quantized) model."""
    dtype_bytes = next(p for p in model.parameters() if p.is_floating_point()).element_size()
    formula, q, unq = formula_bytes(model, spec, dtype_bytes)
    return WeightBytes(measured=held_bytes(model), formula=formula, quantized_params=q, unquantized_params=unq)
