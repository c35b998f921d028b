"""Models: load the baseline (embedded default, folder, GGUF, HF id) with a content fingerprint.

The names below are loaded on first use (PEP 562), so that ``evalsuite.models.device`` and
``evalsuite.models.embedded`` import without torch."""
from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {"LoadedModel": "evalsuite.models.loader", "load_model": "evalsuite.models.loader",
         "offline": "evalsuite.models.loader", "wrap_model": "evalsuite.models.loader"}

__all__ = ["LoadedModel", "load_model", "offline", "wrap_model"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
