"""Sizes read from a transformers model config (a config object or a ``config.json`` mapping): the one place that
derives an attention head's size, for the KV cache's bytes (``kvcache``), the loaded model's facts and its
batch-invariance probe (``models``) and the capacity planner's shapes (``plan``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def head_dim(cfg: Any) -> int:
    """One attention head's size: the config's ``head_dim`` where it sets one (not null, not 0), else
    ``hidden_size // num_attention_heads``."""
    get = cfg.get if isinstance(cfg, Mapping) else (lambda key: getattr(cfg, key, None))
    return int(get("head_dim") or (get("hidden_size") or 0) // get("num_attention_heads"))
