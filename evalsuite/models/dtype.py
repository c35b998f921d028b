"""``--dtype auto``: measure which compute dtype multiplies faster on this machine at the model's shapes.

bf16 is not always the faster choice on a CPU: with AMX / AVX512-BF16 it runs ~2x fp32, without them PyTorch
emulates it and it can be ~5x slower. So the choice is measured (a few ms of matmuls shaped like the model's
decode and prefill: ``[m, hidden] @ [hidden, intermediate]`` and the same through ``lm_head``), never assumed.
The function has no side effects: it returns the choice and the GFLOP/s it saw; wiring it into the CLI is the
caller's business.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

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
    return [(hidden, inter), (inter, hidden), (hidden, int(cfg.vocab_size))]


def _gflops(dtype: torch.dtype, shapes: Sequence[tuple[int, int]], rows: Sequence[int], repeats: int) -> float:
    """Best-of-``repeats`` GFLOP/s of the matmuls ``[m, k] @ [k, n]`` for every m in ``rows``, (k, n) in shapes."""
    gen = torch.Generator().manual_seed(0)
    mats = [(torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype))
            for m in rows for k, n in shapes]
    flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in mats)
    for a, b in mats:  # warm-up: first calls pick kernels / allocate
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a, b in mats:
            a @ b
        best = min(best, time.perf_counter() - t0)
    return flops / max(best, 1e-9) / 1e9


def choose_compute_dtype(config: Any = None, shapes: Sequence[tuple[int, int]] | None = None,
                         rows: Sequence[int] = (16, 256), repeats: int = 3,
                         candidates: Sequence[torch.dtype] = (torch.bfloat16, torch.float32)) -> DtypeChoice:
    """Time each candidate on the model's shapes (``config``, else ``shapes``; SmolLM2-135M's by default) at
    decode-sized (16 rows) and prefill-sized (256 rows) inputs; return the fastest and every measurement."""
    if shapes is None:
        shapes = model_shapes(config) if config is not None else [(576, 1536), (1536, 576), (576, 49152)]
    with torch.no_grad():
        seen = {NAMES.get(d, str(d)): _gflops(d, shapes, rows, repeats) for d in candidates}
    return DtypeChoice(dtype=max(seen, key=seen.__getitem__), gflops=seen)
