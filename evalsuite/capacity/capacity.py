"""Capacity and bandwidth plan: weights × KV precisions against a GPU memory budget.

Per (weights, KV) combination: the KV pool left after weights and the runtime reserve, the most retained tokens
and concurrent requests at a context, the context at which the cache equals the weights, the token count past
which KV savings (vs bf16 KV) exceed weight savings (vs bf16 weights), and the bandwidth-bound decode speedup
vs bf16/bf16 (a decode step reads every weight once and every retained K/V once: weights + batch × KV(context)).
Where activation bits matter, the compute side: a step's matmuls do 2·B FLOPs per weight read, an arithmetic
intensity of 16·B / b_w FLOP per weight byte (b_w the weight bits per parameter, metadata included); weight-only
quantization dequantizes to bf16 before the matmul (the bf16 compute roof), while W8A8 / FP8 activations run on
8-bit tensor cores, doubling the compute roof (``compute_roof`` = 2).
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.config import KVConfig
from evalsuite.capacity.bytes import full_precision_tokens, kv_bytes_for_context, kv_bytes_per_token, weight_breakdown
from evalsuite.capacity.shape import ModelShape, count_params
from evalsuite.variants.spec import WeightSpec

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
_SIZE_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?(?:e\d+)?)\s*(?P<unit>[a-z]*)\s*$", re.IGNORECASE)
GIB = 2**30


def parse_size(text: str) -> int:
    """``80GiB``, ``141GB``, ``96G`` (binary), ``1.5e9`` -> bytes."""
    m = _SIZE_RE.match(str(text))
    unit = m["unit"].lower() if m else ""
    if not m or unit not in _UNITS:
        raise EvalsuiteError(f"bad size {text!r}: use e.g. 80GiB, 141GB, 96G (=GiB) or a byte count")
    return int(float(m["num"]) * _UNITS[unit])


def fmt_bytes(n: float | None) -> str:
    """Bytes as GiB / MiB / KiB / B (``parse_size`` reads the binary units back)."""
    if n is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:,.0f} B"


def parse_reserve(text: str, gpu_mem: int) -> int:
    """``10%`` of the GPU memory, or an absolute size (``4GiB``); must leave something."""
    s = str(text).strip()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise EvalsuiteError(f"bad reserve {text!r}: use e.g. 10% or 4GiB") from None
        if not 0 <= pct < 100:
            raise EvalsuiteError(f"bad reserve {text!r}: a percentage must be in [0, 100)")
        return int(gpu_mem * pct / 100)
    value = parse_size(s)
    if value >= gpu_mem:
        raise EvalsuiteError(f"reserve {text} leaves nothing of the {gpu_mem / GIB:.1f} GiB GPU memory")
    return value


@dataclass(frozen=True)
class Combo:
    """One (weights, KV) combination's plan."""

    weights: str
    kv: str
    weight_bytes: int
    kv_bytes_per_token: float
    kv_bytes_per_request: float  # one sequence at the planned context, worst-case full-precision tail included
    kv_pool_bytes: int  # GPU memory - reserve - weights (negative: the weights do not fit)
    max_tokens: int  # retained tokens the pool holds (steady-state bytes per token)
    max_requests: int  # concurrent sequences at the planned context
    kv_equals_weights_tokens: float  # retained tokens at which the cache is as large as the weights
    kv_equals_weights_context: float  # the same as a per-request context at the planned batch
    crossover_tokens: float | None  # tokens past which KV savings exceed weight savings (None: never)
    step_bytes: float  # bytes read per decode step at the planned batch and context
    decode_speedup: float  # vs bf16 weights + bf16 KV at the same batch and context
    activation_bits: int = 16  # what the matmuls read: 8 for w8a8 / wf8af8, else the compute dtype
    arithmetic_intensity: float = 0.0  # FLOP per weight byte of a decode step at the planned batch: 16·B / b_w
    compute_roof: float = 1.0  # peak matmul FLOP/s vs bf16: 2 with 8-bit activations (int8 / FP8 tensor cores)

    @property
    def fits(self) -> bool:
        return self.kv_pool_bytes > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


@dataclass
class Plan:
    """Inputs and every combination's results."""

    shape: ModelShape
    gpu_mem: int
    reserve: int
    context: int
    batch: int
    weights: list[dict[str, Any]] = field(default_factory=list)
    kv: list[dict[str, Any]] = field(default_factory=list)
    combos: list[Combo] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.shape.to_dict(), "params": count_params(self.shape).to_dict(),
                "gpu_mem_bytes": self.gpu_mem, "reserve_bytes": self.reserve, "context": self.context,
                "batch": self.batch, "weights": self.weights, "kv": self.kv,
                "combos": [c.to_dict() for c in self.combos]}


def kv_name(kv: KVConfig | None) -> str:
    """``bf16`` for an unquantized cache, else the canonical spec."""
    return "bf16" if kv is None else kv.name


def requests_in(pool: float, per_request: float) -> int:
    """Concurrent sequences of ``per_request`` KV bytes a pool holds (0 for a pool the weights overran)."""
    return max(0, math.floor(pool / per_request)) if per_request else 0


def step_bytes(weight_bytes: float, batch: int, per_request: float) -> float:
    """Bytes a bandwidth-bound decode step reads: every weight once and every retained K/V of the batch."""
    return weight_bytes + batch * per_request


def _combo(shape: ModelShape, w: WeightSpec, kv: KVConfig | None, budget: int, context: int, batch: int,
           base: tuple[int, float, float]) -> Combo:
    wb = weight_breakdown(shape, w).total
    bpt = kv_bytes_per_token(shape, kv)
    per_req = kv_bytes_for_context(shape, kv, context)
    pool = budget - wb
    w_base, bpt_base, step_base = base
    w_saved, kv_saved = w_base - wb, bpt_base - bpt
    crossover = (max(w_saved, 0) / kv_saved) if kv_saved > 0 else None
    step = step_bytes(wb, batch, per_req)
    return Combo(
        weights=w.name, kv=kv_name(kv), weight_bytes=wb, kv_bytes_per_token=bpt, kv_bytes_per_request=per_req,
        kv_pool_bytes=pool, max_tokens=max(0, math.floor(pool / bpt)),
        max_requests=requests_in(pool, per_req),
        kv_equals_weights_tokens=wb / bpt, kv_equals_weights_context=wb / (bpt * batch),
        crossover_tokens=crossover, step_bytes=step, decode_speedup=step_base / step, **compute_side(shape, w, batch))


def compute_side(shape: ModelShape, w: WeightSpec, batch: int) -> dict[str, Any]:
    """Activation bits, arithmetic intensity (16·B / b_w FLOP per weight byte) and compute roof vs bf16."""
    params = count_params(shape).total
    bits_per_param = 8 * weight_breakdown(shape, w).total / params
    act8 = w.activations != "none"
    return {"activation_bits": 8 if act8 else 16, "arithmetic_intensity": 16 * batch / bits_per_param,
            "compute_roof": 2.0 if act8 else 1.0}


def make_plan(shape: ModelShape, weights: list[WeightSpec], kvs: list[KVConfig | None], gpu_mem: int,
              reserve: int, context: int, batch: int = 1) -> Plan:
    """Plan every weights × KV combination (the bf16/bf16 reference need not be among them)."""
    if context <= 0 or batch <= 0:
        raise EvalsuiteError(f"context and batch must be positive (got context={context}, batch={batch})")
    if not weights or not kvs:
        raise EvalsuiteError("give at least one weight precision and one KV precision")
    w_base = weight_breakdown(shape, WeightSpec()).total
    base_step = step_bytes(w_base, batch, kv_bytes_for_context(shape, None, context))
    base = (w_base, kv_bytes_per_token(shape, None), base_step)
    plan = Plan(shape=shape, gpu_mem=gpu_mem, reserve=reserve, context=context, batch=batch)
    plan.weights = [{"name": w.name, **weight_breakdown(shape, w).to_dict()} for w in weights]
    plan.kv = [{"name": kv_name(kv), "bytes_per_token": kv_bytes_per_token(shape, kv),
                "bytes_per_request": kv_bytes_for_context(shape, kv, context),
                "full_precision_tokens": full_precision_tokens(kv, shape.head_dim)} for kv in kvs]
    budget = gpu_mem - reserve
    plan.combos = [_combo(shape, w, kv, budget, context, batch, base) for w in weights for kv in kvs]
    return plan
