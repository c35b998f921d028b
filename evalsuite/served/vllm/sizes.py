"""Bytes of a served variant: weights as the server holds them, KV cache per token (from ``config.json``)."""
from __future__ import annotations

import json
from pathlib import Path

from evalsuite.served.vllm.specs import ServedVariant

_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "I32": 4, "I64": 8}


def _numels(folder: Path) -> list[tuple[str, int, str]]:
    """(tensor name, elements, dtype) of every tensor in the folder's safetensors files."""
    from evalsuite.variants.artifact import safetensors_header

    out = []
    for f in sorted(folder.glob("*.safetensors")):
        for name, t in safetensors_header(f).items():
            if name != "__metadata__":
                n = 1
                for d in t["shape"]:
                    n *= d
                out.append((name, n, t["dtype"]))
    return out


def served_weight_bytes(variant: ServedVariant) -> tuple[int, int]:
    """(bytes, formula bytes). ``ckpt:``: the artifact's own tensor bytes; otherwise the folder's parameters at
    bf16, with ``--quantization fp8`` counting one byte per Linear weight element (embeddings, norms and the
    head stay bf16)."""
    folder = Path(variant.model)
    tensors = _numels(folder)
    if variant.artifact:
        from evalsuite.variants.artifact import folder_bytes

        total = folder_bytes(folder).total
        return total, total
    fp8 = "--quantization" in variant.flags and "fp8" in variant.flags
    total = 0
    for name, n, _ in tensors:
        linear = name.endswith(".weight") and "proj" in name
        total += n * (1 if fp8 and linear else 2)
    return total, total


def kv_bytes_per_token(variant: ServedVariant) -> float | None:
    """K and V of every layer for one token: layers x 2 x kv_heads x head_dim x (1 byte fp8, else 2)."""
    try:
        cfg = json.loads((Path(variant.model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    heads = cfg.get("num_key_value_heads") or cfg.get("num_attention_heads")
    layers = cfg.get("num_hidden_layers")
    head_dim = cfg.get("head_dim") or (cfg.get("hidden_size", 0) // max(1, cfg.get("num_attention_heads", 1)))
    if not heads or not layers or not head_dim:
        return None
    fp8 = "fp8" in " ".join(variant.flags) and "--kv-cache-dtype" in variant.flags
    return float(layers * 2 * heads * head_dim * (1 if fp8 else 2))
