"""``--dtype auto``: measure which compute dtype multiplies faster on this machine at the model's shapes.

bf16 is not always the faster choice on a CPU: with AMX / AVX512-BF16 it runs ~2x fp32, without them PyTorch
emulates it and it can be ~5x slower. So the choice is measured (a few ms of matmuls shaped like the model's
decode and prefill: ``[m, hidden] @ [hidden, intermediate]`` and the same through ``lm_head``), never assumed.
The function has no side effects: it returns the choice and the GFLOP/s it saw; wiring it into the CLI is the
caller's business. It is only asked on the CPU: on CUDA ``--dtype auto`` is bf16 without measuring
(``evalsuite.models.loader.load_model``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F

NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}


@dataclass(frozen=True)
class DtypeChoice:
    """The faster dtype's name (``load_model``'s spelling) and the measured GFLOP/s per candidate."""

    dtype: str
    gflops: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        seen = ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in self.gflops.items())
        return f"auto dtype: {self.dtype} ({seen})"


def model_shapes(config: Any) -> list[tuple[int, int]]:
    """(in, out) of the matmuls a decode step spends its time in: MLP up/down and the vocabulary head."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    hidden = int(cfg.hidden_size)
    inter = int(getattr(cfg, "intermediate_size", 4 * hidden))
    return [(hidden, inter), (inter, hidden), (hidden, min(int(cfg.vocab_size), 8192))]  # a slice of the head


def _gflops(dtype: torch.dtype, shapes: Sequence[tuple[int, int]], rows: Sequence[int], budget_s: float) -> float:
    """GFLOP/s of ``F.linear`` ([m, k] x weight [n, k], as a model's layers call it; a plain ``a @ b`` takes another,
    sometimes far slower, bf16 path) over every m in ``rows`` and (k, n) in ``shapes``, within ``budget_s``: a
    slow dtype is timed on the matmuls it finished, so a 20x slower candidate cannot stall the choice."""
    gen = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(m, k, generator=gen).to(dtype), torch.randn(n, k, generator=gen).to(dtype))
             for m in rows for k, n in shapes]
    F.linear(pairs[0][0][:1], pairs[0][1][:8])  # warm-up: first call picks kernels
    flops, spent = 0, 0.0
    while spent < budget_s:
        for x, w in pairs:
            t0 = time.perf_counter()
            F.linear(x, w)
            spent += time.perf_counter() - t0
            flops += 2 * x.shape[0] * x.shape[1] * w.shape[0]
            if spent >= budget_s:
                break
    return flops / max(spent, 1e-9) / 1e9


def choose_compute_dtype(config: Any = None, shapes: Sequence[tuple[int, int]] | None = None,
                         rows: Sequence[int] = (16, 256), budget_s: float = 0.15,
                         candidates: Sequence[torch.dtype] = (torch.bfloat16, torch.float32)) -> DtypeChoice:
    """Time each candidate (``budget_s`` each) on the model's shapes (``config``, else ``shapes``; SmolLM2-135M's by
    default) at decode-sized (16 rows) and prefill-sized (256 rows) inputs; return the fastest and the GFLOP/s."""
    if shapes is None:
        shapes = model_shapes(config) if config is not None else [(576, 1536), (1536, 576), (576, 8192)]
    with torch.no_grad():
        seen = {NAMES.get(d, str(d)): _gflops(d, shapes, rows, budget_s) for d in candidates}
    return DtypeChoice(dtype=max(seen, key=seen.__getitem__), gflops=seen)
