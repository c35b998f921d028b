"""Weight memory: bytes actually held (packed data + scales + zero points + unquantized tensors) and the formula."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from evalsuite.variants.forms import WeightSpec
from evalsuite.variants.mixed import resolve_rules, rule_bytes


def _leaf_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """Plain tensors inside a (possibly nested) quanto tensor subclass."""
    if hasattr(t, "__tensor_flatten__") and type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return [leaf for n in names for leaf in _leaf_tensors(getattr(t, n))]
    if isinstance(t, torch.nn.Parameter) and hasattr(t.data, "__tensor_flatten__") and type(t.data) is not torch.Tensor:
        return _leaf_tensors(t.data)
    return [t]


def held_bytes(model: torch.nn.Module, float_bytes: int | None = None) -> int:
    """Bytes held by all parameters and buffers; shared (tied) storage is counted once. ``float_bytes`` counts
    every floating-point tensor at that width: the bytes of the model as deployed in its weights' dtype when it
    computes in a wider one here (``--dtype auto`` chose fp32 for bf16 weights)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    tensors = list(model.parameters()) + list(model.buffers())
    for t in tensors:
        for leaf in _leaf_tensors(t):
            key = (leaf.untyped_storage().data_ptr(), leaf.untyped_storage().nbytes())
            if key in seen:
                continue
            seen.add(key)
            width = float_bytes if float_bytes is not None and leaf.is_floating_point() else leaf.element_size()
            total += leaf.numel() * width
    return total


@dataclass(frozen=True)
class WeightBytes:
    measured: int
    formula: int
    quantized_params: int
    unquantized_params: int
    float_bytes: int | None = None  # the float width bytes were counted at (None: the model's own)


def formula_bytes(model: torch.nn.Module, spec: WeightSpec, dtype_bytes: int = 2) -> tuple[int, int, int]:
    """First-order formula: quantized N × bits/8 + group metadata, plus unquantized params × dtype bytes.

    Metadata: asymmetric int4/int2 keep a scale and a zero point per group; int8 and float8 keep one scale per
    output row. Each quantized module is counted at the precision the spec assigns it (mixed precision: the first
    matching ``[...]`` option), not at what the module reports. Returns (bytes, quantized params, unquantized
    params). Tied weights count once.
    """
    from optimum.quanto import QModuleMixin

    quantized = {n: m for n, m in model.named_modules() if isinstance(m, QModuleMixin) and m.weight_qtype is not None}
    rules = _rules(model, spec) if spec.fmt != "none" else {}
    q_params, total = 0, 0.0
    for name, mod in quantized.items():
        rule = rules.get(name, spec)
        if rule is None:
            raise ValueError(f"{name} is quantized but {spec.name} keeps it")
        payload, meta = rule_bytes(rule, mod.weight.shape[0], mod.weight.shape[-1], dtype_bytes)
        q_params += mod.weight.numel()
        total += payload + meta
    quantized_ids = {id(m) for m in quantized.values()}
    seen: set[int] = set()
    unq = 0
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            if (id(mod) in quantized_ids and name == "weight") or p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            unq += p.numel()
    return int(total + unq * dtype_bytes), q_params, unq


def _rules(model: torch.nn.Module, spec: WeightSpec) -> dict[str, WeightSpec | None]:
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) or hasattr(m, "weight_qtype")]
    return resolve_rules(names, spec)


def weight_bytes(model: torch.nn.Module, spec: WeightSpec, float_bytes: int | None = None) -> WeightBytes:
    """Measured bytes beside the formula for one (possibly quantized) model; ``float_bytes`` as in
    ``held_bytes`` (default: the model's own float width)."""
    dtype_bytes = float_bytes or next(p for p in model.parameters() if p.is_floating_point()).element_size()
    formula, q, unq = formula_bytes(model, spec, dtype_bytes)
    return WeightBytes(measured=held_bytes(model, float_bytes), formula=formula, quantized_params=q,
                       unquantized_params=unq, float_bytes=float_bytes)
