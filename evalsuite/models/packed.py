"""Prepacked bf16 Linear weights on the CPU: faster decode steps, and batch-invariant rows on CPUs with AMX.

torch runs a bf16 ``F.linear`` on the CPU through oneDNN with the weight in its plain layout: every call reorders
the weight into oneDNN's blocked layout first, and picks its kernel by the call's row count. Two costs follow:

* **Speed.** At decode's few rows the reorder is most of the call. SmolLM2-135M's projections at 16 rows took
  25-91 us per call with ``F.linear`` against 21-38 us packed; the 49,152-row ``lm_head`` 2.5 ms against 1.3 ms.
  (A 2-core Xeon with AMX, flags avx512_bf16 amx_bf16, torch 2.13; ``benchmarks/cpu/packed_linear.py``.)
* **Batch invariance.** On CPUs with AMX, oneDNN switches kernels by the row count (``evalsuite.cpu.onednn``): a row
  is computed differently at 33-299 rows than at <= 32, so verification needed near-tie margins in bf16.

Packing once with a batch hint of one row (``torch.ops.mkldnn._reorder_linear_weight(w, 1)``, the op
``torch.compile``'s weight freezing uses) fixes the kernel: every row is the same whatever the call's row count
(``models.invariance.probe`` checks it at the model's shapes), equal bit for bit to ``F.linear`` at <= 32 rows, and
as fast as ``F.linear`` at prefill's thousands of rows.

Design: ``pack_linears`` gives every plain bf16 ``nn.Linear`` on the CPU an instance ``forward`` that packs its
weight on first use and again whenever the weight is replaced or changed in place (so a variant built from a
packed model by copying and quantizing never multiplies by stale weights). The module stays an ``nn.Linear``
holding its ``weight``: everything that reads weights (variant builds, fingerprints, byte counts) is unchanged.
A gradient-tracking call, another dtype or device falls back to ``F.linear``. A deep copy starts unpacked.

Trade: the packed copy is held next to the weight, so a model's Linear weights take twice their bytes. Models are
packed only when that copy fits in a quarter of the memory available (``MEMORY_SHARE``); ``EVALSUITE_PACK=0``
turns packing off. Whether a model runs packed is part of a run's settings and of a stored baseline's key
(``setting``): packed and plain calls of 33-299 rows round differently.
"""
from __future__ import annotations

import os
import types
import weakref
from typing import Any

import torch
import torch.nn.functional as F

MEMORY_SHARE = 0.25  #: pack only when the packed copies fit in this share of the available memory
ENV = "EVALSUITE_PACK"


class _Pack:
    """A module's packed weight and the weight it was packed from (a weak reference and its version)."""

    __slots__ = ("ref", "version", "ptr", "tensor")

    def __init__(self) -> None:
        self.ref: Any = None
        self.version = self.ptr = -1
        self.tensor: torch.Tensor | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> "_Pack":
        return _Pack()  # an opaque oneDNN tensor cannot be copied; the copy packs its own weight on first use

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_Pack, ())

    def get(self, weight: torch.Tensor) -> torch.Tensor:
        """The packed form of ``weight``, packed again when it is another tensor or was changed in place."""
        version = _version(weight)
        if self.ref is None or self.ref() is not weight or self.version != version or self.ptr != weight.data_ptr():
            self.tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)
            self.ref, self.version, self.ptr = weakref.ref(weight), version, weight.data_ptr()
        return self.tensor


def _version(weight: torch.Tensor) -> int:
    """In-place changes counted by autograd (-2 for an inference tensor, which counts none: it cannot be changed
    in place outside inference mode)."""
    try:
        return weight._version
    except RuntimeError:
        return -2


def _packed_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = self.weight
    if x.dtype != w.dtype or x.device != w.device or (torch.is_grad_enabled() and (w.requires_grad
                                                                                  or x.requires_grad)):
        return F.linear(x, w, self.bias)
    return torch.ops.mkldnn._linear_pointwise(x, self._evalsuite_pack.get(w), self.bias, "none", [], "")


def supported() -> bool:
    """Whether this torch and CPU run oneDNN bf16 matmuls (AVX-512-BF16 or AMX) and packing is not turned off."""
    if os.environ.get(ENV, "1") == "0":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and hasattr(torch.ops.mkldnn,
                                                                              "_reorder_linear_weight")
    except (AttributeError, RuntimeError):
        return False


def _candidates(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Plain bf16 ``nn.Linear`` layers on the CPU that compute ``F.linear`` with their ``weight``: not a module
    whose forward another library wrapped on the instance (compressed-tensors' quantized forward), nor one whose
    weight was replaced by other parameters (compressed-tensors' packed form)."""
    return [m for m in model.modules() if type(m) is torch.nn.Linear
            and isinstance(m.__dict__["_parameters"].get("weight"), torch.Tensor)
            and m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"
            and ("forward" not in m.__dict__ or is_packed(m)) and not hasattr(m, "quantization_scheme")]


def available_bytes(path: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes (None where it cannot be read)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def pack_linears(model: torch.nn.Module) -> int:
    """Run every plain bf16 ``nn.Linear`` of ``model`` on the CPU from a prepacked weight (see the module
    docstring); idempotent, and modules added later (quantization) need another call. A module already set up
    starts unpacked again (its weight may have changed). Returns the modules set up (0: not supported, or the
    packed copies would not fit in ``MEMORY_SHARE`` of the available memory; then none of them is packed)."""
    mods = _candidates(model)
    if not mods or not supported():
        return 0
    new = [m for m in mods if not is_packed(m)]
    need = sum(m.weight.numel() * m.weight.element_size() for m in new)
    free = available_bytes()
    if new and free is not None and need > MEMORY_SHARE * free:
        unpack_linears(model)  # all or none: a deep copy of a packed model must not run half packed
        return 0
    for mod in mods:
        mod._evalsuite_pack = _Pack()
        mod.forward = types.MethodType(_packed_forward, mod)
    return len(mods)


def unpack_linears(model: torch.nn.Module) -> None:
    """Run every packed Linear layer of ``model`` as a plain one again (its packed copy freed)."""
    for mod in model.modules():
        if is_packed(mod):
            del mod.forward, mod._evalsuite_pack


def is_packed(module: torch.nn.Module) -> bool:
    """Whether ``module`` runs from a prepacked weight (``pack_linears``)."""
    fwd = module.__dict__.get("forward")
    return isinstance(fwd, types.MethodType) and fwd.__func__ is _packed_forward


def packed_model(model: Any) -> bool:
    """Whether every bf16 CPU Linear of ``model`` is packed (and there is at least one)."""
    mods = _candidates(model) if isinstance(model, torch.nn.Module) else []
    return bool(mods) and all(is_packed(m) for m in mods)


def setting(model: Any) -> str:
    """How ``model``'s Linear layers run, for a run's settings and a stored baseline's key."""
    return "packed1" if packed_model(model) else "plain"


def linear_fn(weight: torch.Tensor, packed: bool) -> Any:
    """``x -> x @ weight.T`` as a packed or a plain Linear computes it (the invariance probe's Linear)."""
    if not packed:
        return lambda x: F.linear(x, weight)
    pack = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, pack, None, "none", [], "")
