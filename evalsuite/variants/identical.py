"""Whether a built variant computes exactly what the baseline computes, so its answers need not be generated.

A variant can be the baseline in disguise: ``w4g32`` of a model that ships as 4-bit groups of 32 (the embedded
SmolLM2 is GGUF Q4_1) re-quantizes every weight onto the grid it already lies on, and a ``ckpt:`` re-export of the
baseline's own file loads to the same tensors. When every module has the same class, every parameter and buffer
the same dtype, shape and bits, and the KV cache is the baseline's (no KV quantization), the forward passes are the
same floating-point program on the same inputs: generation gives the baseline's tokens and the KL divergence is 0
exactly. The Runner then copies the baseline's answers instead of generating them again (``Runner.round``), and
records why. Anything short of bit-identical (one differing value, quanto's own kernels, a quantized cache) runs.
"""
from __future__ import annotations

from typing import Any

import torch


def same_computation(model: Any, base: Any) -> bool:
    """True when ``model`` and ``base`` have the same module classes and bit-identical parameters and buffers."""
    if model is base:
        return True
    mods, base_mods = dict(model.named_modules()), dict(base.named_modules())
    if mods.keys() != base_mods.keys() or any(type(m) is not type(base_mods[k]) for k, m in mods.items()):
        return False
    return _same_tensors(dict(model.named_parameters()), dict(base.named_parameters())) and \
        _same_tensors(dict(model.named_buffers()), dict(base.named_buffers()))


def _same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(x.dtype == b[k].dtype and x.shape == b[k].shape and x.device == b[k].device and torch.equal(x, b[k])
               for k, x in a.items())
