"""``--device auto|cpu|cuda|cuda:N``: where the baseline (and so every variant, cache and KLD pass) runs.

Design: the device is decided once, when the baseline loads, and everything else *follows the model*. The engine,
the KV caches, the KLD pass, the variants and the sensitivity passes never read a global device: they create
tensors on ``model.device`` (or on the device of the tensor they extend), so a variant built from a CUDA baseline
(a deep copy, quantized in place) runs on CUDA too, and CPU runs take exactly the code paths they took before.

* ``auto`` is CUDA (device 0) when ``torch.cuda.is_available()``, else the CPU.
* ``cuda`` / ``cuda:N`` without CUDA, with N out of range, or any other spelling is an ``EvalsuiteError``: one
  line, exit 2, raised before a model loads or a run folder is created.
* A model too big for the chosen GPU's free memory loads with ``device_map="auto"`` (accelerate spreads it over
  the visible GPUs, then the CPU); see ``evalsuite.models.loader.placement``.
* Sampling stays on the CPU (per-row ``torch.Generator`` on the CPU over CPU probabilities), so a seeded run
  samples the same tokens on either device for the same logits.
* Timings call ``synchronize(device)`` before reading the clock: CUDA kernels run asynchronously, so a clock
  read without it measures the launch, not the work. On the CPU it does nothing.

This module imports torch only inside its functions: the torch-free core (gate, report, stats, store) may
import names from ``evalsuite.models`` without pulling torch in.
"""
from __future__ import annotations

import re
from typing import Any

from evalsuite.errors import EvalsuiteError

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N"
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def parse_device(spec: str | None = "auto") -> str:
    """The ``--device`` value normalized (``auto``, ``cpu``, ``cuda``, ``cuda:N``), checked for spelling only
    (no torch, no GPU query: e.g. for a command that only writes where a later run should go)."""
    text = (spec or "auto").strip().lower()
    if text in ("auto", "cpu") or _CUDA.match(text):
        return text
    raise EvalsuiteError(f"bad --device {spec!r}: expected one of {DEVICE_CHOICES}")


def resolve_device(spec: str | None = "auto") -> Any:
    """``torch.device`` for a ``--device`` value (None = ``auto``); a bad or unavailable one is an EvalsuiteError."""
    import torch

    text = parse_device(spec)
    if text == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise EvalsuiteError(f"--device {spec}: CUDA is not available on this machine (use --device cpu or auto)")
    m = _CUDA.match(text)
    index = int(m[1]) if m and m[1] is not None else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise EvalsuiteError(f"--device {spec}: no such GPU (this machine has {count}: cuda:0..cuda:{count - 1})")
    return torch.device("cuda", index)


def device_name(device: Any) -> str:
    """``cpu`` / ``cuda:0``: the spelling stored in run settings and baseline manifests."""
    import torch

    d = torch.device(device)
    return f"cuda:{d.index if d.index is not None else 0}" if d.type == "cuda" else d.type


def model_device(model: Any) -> Any:
    """The device a model takes its inputs on (its first parameter's; accelerate moves outputs back there)."""
    import torch

    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


def synchronize(device: Any = None) -> None:
    """Wait for the device's queued work (CUDA); a no-op on the CPU and when CUDA is absent."""
    import torch

    if device is None or torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return
    torch.cuda.synchronize(torch.device(device))
