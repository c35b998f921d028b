"""A decoder's shape read from a Hugging Face ``config.json`` (plain dict, no torch) and its parameter count.

Handles llama-style decoders (llama, mistral, qwen2/qwen3, gemma/gemma2, SmolLM, ...): q/k/v/o attention with
MHA, GQA or MQA (``num_key_value_heads``), a gated MLP (gate/up/down), RMSNorms, optional tied embeddings.
Mixture-of-experts configs are refused (their decode reads only the routed experts; this model does not know it).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalsuite.dims import head_dim as config_head_dim
from evalsuite.errors import EvalsuiteError

#: ``tie_word_embeddings`` when a config omits it: the model class's default (PretrainedConfig's is True).
_TIE_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "phi3": False,
                "gemma": True, "gemma2": True, "gemma3_text": True}
#: RMSNorms per decoder layer (each ``hidden`` wide); gemma2/3 add pre/post feed-forward norms.
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4}
#: model types with a per-head RMSNorm on queries and keys (``head_dim`` wide each).
_QK_NORM = {"qwen3", "gemma3_text"}
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs from a config."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: bool = False
    max_position: int | None = None
    sliding_window: int | None = None

    @property
    def attention(self) -> str:
        """``MHA`` (kv heads = heads), ``MQA`` (one kv head) or ``GQA``."""
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def layer_linears(self) -> list[tuple[str, int, int, bool]]:
        """(name, out_features, in_features, has_bias) of one decoder layer's Linear modules (HF names)."""
        q, kv, h, f = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return [("self_attn.q_proj", q, h, self.qkv_bias), ("self_attn.k_proj", kv, h, self.qkv_bias),
                ("self_attn.v_proj", kv, h, self.qkv_bias), ("self_attn.o_proj", h, q, self.o_bias),
                ("mlp.gate_proj", f, h, self.mlp_bias), ("mlp.up_proj", f, h, self.mlp_bias),
                ("mlp.down_proj", h, f, self.mlp_bias)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["attention"] = self.attention
        return d


@dataclass(frozen=True)
class ParamCount:
    """Parameters by part; ``total`` counts tied embeddings once."""

    embedding: int
    lm_head: int  # 0 when tied
    attention: int  # q/k/v/o weights and biases, all layers
    mlp: int
    norms: int

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.attention + self.mlp + self.norms

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def count_params(shape: ModelShape) -> ParamCount:
    """Count parameters from the shape (weights + biases + norms)."""
    attn = mlp = 0
    for name, out, inp, bias in shape.layer_linears():
        n = out * inp + (out if bias else 0)
        if name.startswith("mlp."):
            mlp += n
        else:
            attn += n
    per_layer_norms = shape.norms_per_layer * shape.hidden + (2 * shape.head_dim if shape.qk_norm else 0)
    emb = shape.vocab * shape.hidden
    return ParamCount(embedding=emb, lm_head=0 if shape.tied else emb, attention=attn * shape.layers,
                      mlp=mlp * shape.layers, norms=per_layer_norms * shape.layers + shape.hidden)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a ``config.json`` (or a folder holding one) into a dict; one-line EvalsuiteError otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise EvalsuiteError(f"model config not found: {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EvalsuiteError(f"model config {p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EvalsuiteError(f"model config {p} must be a JSON object, got {type(data).__name__}")
    return data


def _int(cfg: dict[str, Any], key: str, default: int | None = None, *alts: str) -> int:
    for k in (key, *alts):
        if cfg.get(k) is not None:
            val = cfg[k]
            if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
                raise EvalsuiteError(f"config field {k!r} must be a positive integer, got {val!r}")
            return val
    if default is None:
        raise EvalsuiteError(f"config has no {key!r}: need a llama/mistral/qwen2-style decoder config.json")
    return default


def shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Build a ModelShape from a config dict (a multimodal config's ``text_config`` is used when present)."""
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    moe = [k for k in _MOE_KEYS if cfg.get(k)]
    if moe:
        raise EvalsuiteError(f"mixture-of-experts configs ({moe[0]}={cfg[moe[0]]}) are not supported by the planner")
    mtype = str(cfg.get("model_type", "llama"))
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise EvalsuiteError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    if cfg.get("head_dim") is not None:
        _int(cfg, "head_dim")  # a positive integer, or a one-line error
    elif hidden % heads:
        raise EvalsuiteError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    head_dim = config_head_dim(cfg)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    return ModelShape(
        model_type=mtype, hidden=hidden, layers=_int(cfg, "num_hidden_layers"), heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=_int(cfg, "intermediate_size"), vocab=_int(cfg, "vocab_size"),
        tied=bool(cfg.get("tie_word_embeddings", _TIE_DEFAULT.get(mtype, True))),
        qkv_bias=bool(cfg.get("attention_bias", mtype == "qwen2")), o_bias=bool(cfg.get("attention_bias", False)),
        mlp_bias=bool(cfg.get("mlp_bias", False)), norms_per_layer=_NORMS_PER_LAYER.get(mtype, 2),
        qk_norm=mtype in _QK_NORM, max_position=cfg.get("max_position_embeddings"),
        sliding_window=window if isinstance(window, int) else None)
