"""What a served variant needs, read from its folder without loading it: weights as the server holds them, KV cache
bytes per token (``kvcache.bytes``, the one formula), its context window and vocabulary (``config.json``)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.bytes import kv_bytes_per_token as kv_formula
from evalsuite.kvcache.bytes import model_dims
from evalsuite.backends.served.vllm.specs import ServedVariant, flag_values

#: rope types whose ``factor`` vLLM does not multiply into ``max_position_embeddings`` (they are already scaled)
_PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling", "default")
_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
                "max_seq_length", "seq_len")


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
    if variant.artifact:
        from evalsuite.variants.artifact import folder_bytes

        total = folder_bytes(folder).total
        return total, total
    fp8 = "--quantization" in variant.flags and "fp8" in variant.flags
    total = 0
    for name, n, _ in _numels(folder):
        linear = name.endswith(".weight") and "proj" in name
        total += n * (1 if fp8 and linear else 2)
    return total, total


def read_config(folder: str | Path) -> dict[str, Any]:
    """A model folder's ``config.json`` (its text config for a multimodal one); a one-line error when unreadable."""
    path = Path(folder) / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EvalsuiteError(f"cannot read {path}: {exc}") from None
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def kv_bytes_per_token(variant: ServedVariant) -> float | None:
    """K and V of every layer for one token, as the server holds them: 1 byte per value with an FP8 KV cache
    (``--kv-cache-dtype fp8*``; its per-tensor scales are negligible), else 2 (bf16). None when the folder's
    ``config.json`` cannot say."""
    try:
        dims = model_dims(read_config(variant.model))
    except EvalsuiteError:
        return None
    fp8 = any(d.lower().startswith("fp8") for d in flag_values(variant.flags, "--kv-cache-dtype"))
    return kv_formula(None, dims, 1 if fp8 else 2)


def _rope_factor(cfg: dict[str, Any]) -> float:
    """The factor vLLM multiplies the window by (linear / dynamic RoPE scaling; YaRN-like types are pre-scaled)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        return 1.0
    kind = rope.get("rope_type") or rope.get("type") or "default"
    return 1.0 if kind in _PRESCALED_ROPE else float(rope.get("factor") or 1.0)


def model_window(folder: str | Path) -> int | None:
    """The longest sequence (prompt + answer) the model at ``folder`` supports, as vLLM derives it: the config's
    position limit (times a linear / dynamic RoPE factor), capped by the tokenizer's ``model_max_length``; None
    when the config names no limit."""
    cfg = read_config(folder)
    window = next((int(cfg[k]) for k in _WINDOW_KEYS if isinstance(cfg.get(k), (int, float))), None)
    if window is None:
        return None
    window = int(window * _rope_factor(cfg))
    try:
        tok = json.loads((Path(folder) / "tokenizer_config.json").read_text())
        limit = tok.get("model_max_length")
        if isinstance(limit, (int, float)) and limit < 1e9:  # transformers' "no limit" is 1e30
            window = min(window, int(limit))
    except (OSError, ValueError):
        pass
    return window


@dataclass(frozen=True)
class ServerNeed:
    """What one server must hold: its weights, its KV cache per token, and the model's window and vocabulary."""

    name: str
    weight_bytes: int
    kv_bytes_per_token: float
    window: int | None
    vocab: int


def server_need(variant: ServedVariant) -> ServerNeed:
    """``ServerNeed`` of a served variant, read from its folder (one line when the folder cannot say)."""
    kv = kv_bytes_per_token(variant)
    if kv is None:
        raise EvalsuiteError(f"variant {variant.name!r}: cannot size its KV cache from {variant.model}/config.json")
    vocab = int(read_config(variant.model).get("vocab_size") or 0)
    return ServerNeed(variant.name, served_weight_bytes(variant)[0], kv, model_window(variant.model), vocab)
