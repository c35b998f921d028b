"""A workload on GPUs: how many a (weights, KV) footprint needs to serve its concurrency at its context (no torch).

A replica is k of the workload's GPUs that hold the weights once and split them and the KV cache between them
(tensor parallel); its KV pool is ``k × (GPU memory − reserve) − weights``. A replica must hold one request at the
workload's longest context; it serves ``capacity.requests_in(pool, KV of one request at the typical context)``
requests at once, and the concurrency takes ``ceil(concurrency / that)`` replicas. Of the replica sizes from the
smallest that fits up to the workload's GPU count, the one needing the fewest GPUs in all is taken (the smaller on a
tie). KV per request is the planner's worst case (``capacity.bytes``: up to a residual block still in bf16).
Decode speed-up: the bandwidth-bound step of the whole concurrency at the typical context (``capacity.step_bytes``),
bf16's over this footprint's, as ``evalsuite plan --context C --batch N`` computes it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from evalsuite.kvcache.config import KVConfig
from evalsuite.capacity.bytes import kv_bytes_for_context, weight_breakdown
from evalsuite.capacity.capacity import fmt_bytes, requests_in, step_bytes
from evalsuite.capacity.shape import ModelShape
from evalsuite.variants.forms import WeightSpec


@dataclass(frozen=True)
class Workload:
    """What a tenant asks of its GPUs: prompts of ``context`` tokens (up to ``max_context``), ``concurrency`` at
    once, on up to ``gpus`` GPUs of ``gpu_mem`` bytes with ``reserve`` bytes of each kept for the runtime."""

    context: int
    max_context: int
    concurrency: int
    gpu_mem: int
    gpus: int = 1
    reserve: int = 0

    @property
    def per_gpu(self) -> int:
        """Bytes of one GPU left for weights and KV."""
        return self.gpu_mem - self.reserve

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Footprint:
    """A variant's bytes under a workload: its weights, and the KV of one request at the typical and longest
    context."""

    weight_bytes: float
    kv_request: float
    kv_request_max: float


def footprint(shape: ModelShape, weights: WeightSpec | None, kv: KVConfig | None, work: Workload, *,
              weight_bytes: float | None = None, kv_per_token: float | None = None) -> Footprint:
    """The planner's bytes of (``weights``, ``kv``) on ``shape``; ``weight_bytes`` (measured) replaces the weight
    formula, and ``kv_per_token`` stands for a cache the planner does not model (a served one: no residual)."""
    wb = weight_bytes if weight_bytes is not None else weight_breakdown(shape, weights or WeightSpec()).total
    if kv_per_token is not None:
        return Footprint(wb, kv_per_token * work.context, kv_per_token * work.max_context)
    return Footprint(wb, kv_bytes_for_context(shape, kv, work.context),
                     kv_bytes_for_context(shape, kv, work.max_context))


@dataclass(frozen=True)
class Serving:
    """How a footprint serves a workload."""

    replica_gpus: int  # GPUs of one replica (the smallest that holds the weights and one longest request)
    replica_requests: int  # requests at the typical context one replica holds
    gpus_needed: int  # GPUs the whole concurrency takes
    step_bytes: float  # bytes one decode step of the whole concurrency reads

    @property
    def requests_per_gpu(self) -> float:
        return self.replica_requests / self.replica_gpus

    def fits(self, work: Workload) -> bool:
        return self.gpus_needed <= work.gpus

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "requests_per_gpu": self.requests_per_gpu}


def smallest_replica(work: Workload, fp: Footprint) -> int:
    """GPUs whose memory less the reserve holds the weights and one request at the longest context."""
    return max(1, math.ceil((fp.weight_bytes + fp.kv_request_max) / work.per_gpu))


def serve(work: Workload, fp: Footprint) -> Serving:
    """The replica size needing the fewest GPUs for the concurrency (from the smallest that fits to the workload's
    GPU count), its requests, and the GPUs in all."""
    low = smallest_replica(work, fp)
    best: tuple[int, int, int] | None = None
    for k in range(low, max(low, work.gpus) + 1):
        per = requests_in(k * work.per_gpu - fp.weight_bytes, fp.kv_request)
        total = k * math.ceil(work.concurrency / per)
        if best is None or total < best[2]:
            best = (k, per, total)
    assert best is not None
    return Serving(best[0], best[1], best[2], step_bytes(fp.weight_bytes, work.concurrency, fp.kv_request))


def speedup(serving: Serving, base: Serving) -> float:
    """Bandwidth-bound decode speed-up over ``base`` (bf16) at the workload's concurrency and typical context."""
    return base.step_bytes / serving.step_bytes


def gpus(n: int) -> str:
    """``1 GPU`` / ``3 GPUs``."""
    return f"{n} GPU" + ("s" if n != 1 else "")


def shortfall(work: Workload, fp: Footprint, serving: Serving) -> str:
    """Why ``serving`` does not fit ``work``, one line."""
    if serving.replica_gpus > work.gpus:
        return (f"weights {fmt_bytes(fp.weight_bytes)} + one {work.max_context:,}-token request "
                f"{fmt_bytes(fp.kv_request_max)} need {gpus(serving.replica_gpus)} of {fmt_bytes(work.per_gpu)} "
                f"usable; has {work.gpus}")
    return (f"{work.concurrency} requests at {work.context:,} tokens need {gpus(serving.gpus_needed)} "
            f"({serving.requests_per_gpu:.1f} per GPU); has {work.gpus}")
