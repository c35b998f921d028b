"""Prepacked bf16 Linear weights (``evalsuite.models.packed``) against plain ``F.linear``, side by side in one run.

Prints, for the embedded model's Linear shapes, microseconds per call at decode's and prefill's row counts (the
weight stays in cache here: a lower bound on a call inside a model), whether each rows' output depends on the
call's row count (packed and plain), and a whole decode step of the embedded model (batch and context as given,
a DynamicCache growing in place) with the same model packed and unpacked, alternating.

    .venv/bin/python -m benchmarks.cpu.packed_linear
    .venv/bin/python -m benchmarks.cpu.packed_linear --rounds 5 --contexts 300,2000
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch

import evalsuite  # noqa: F401  (MKL mode, as in a run)
from evalsuite.models import packed
from evalsuite.models.invariance import linear_shapes
from evalsuite.cpu.onednn import cpu_flags


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def varies_with_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[int]:
    """Row counts at which the first rows differ from the same rows computed one at a time."""
    alone = torch.cat([fn(x[i:i + 1]) for i in range(8)])
    return [m for m in (2, 16, 32, 33, 64, 299, 300, 600) if not torch.equal(fn(x[:m])[:8], alone[:m])]


def linear_table(shapes: tuple[tuple[int, int], ...]) -> None:
    print("| in x out | rows | F.linear us | packed us | speed-up |\n|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for i, o in shapes:
        w = (torch.randn(o, i, generator=g) * 0.05).to(torch.bfloat16)
        plain, pack = packed.linear_fn(w, False), packed.linear_fn(w, True)
        for m in (1, 16, 300, 2048):
            x = torch.randn(m, i, generator=g).to(torch.bfloat16)
            n = 20 if m >= 300 else 100
            a, b = per_call_us(lambda: plain(x), n), per_call_us(lambda: pack(x), n)
            print(f"| {i}x{o} | {m} | {a:.0f} | {b:.0f} | {a / b:.2f}x |")
        x = torch.randn(600, i, generator=g).to(torch.bfloat16)
        print(f"|  | rows varying with the row count | plain {varies_with_rows(plain, x) or 'none'} | "
              f"packed {varies_with_rows(pack, x) or 'none'} | |")


@torch.no_grad()
def step_ms(model: Any, batch: int, context: int, steps: int = 12) -> float:
    """Median ms of a decode step after a ``context``-token prefill of ``batch`` rows."""
    from transformers import DynamicCache

    from evalsuite.backends.inprocess.growcache import grow_cache

    ids = torch.randint(100, 1000, (batch, context), generator=torch.Generator().manual_seed(1))
    cache = DynamicCache()
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    cache = grow_cache(cache)
    tok, pos = out.logits[:, -1].argmax(-1, keepdim=True), torch.full((batch, 1), context)
    mask = torch.ones(batch, context + 1, dtype=torch.long)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = model(input_ids=tok, past_key_values=cache, use_cache=True, attention_mask=mask, position_ids=pos)
        times.append((time.perf_counter() - start) * 1e3)
        tok, pos = out.logits[:, -1].argmax(-1, keepdim=True), pos + 1
        mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)
    return statistics.median(times)


def step_table(args: argparse.Namespace, model: Any) -> None:
    print(f"\nattention {model.config._attn_implementation}; decode step, median ms (rounds alternate)")
    print("| batch | context | plain | packed | speed-up |\n|---|---|---|---|---|")
    for batch in (int(b) for b in args.batches.split(",")):
        for context in (int(c) for c in args.contexts.split(",")):
            res: dict[str, list[float]] = {"plain": [], "packed": []}
            for _ in range(args.rounds):
                packed.unpack_linears(model)
                res["plain"].append(step_ms(model, batch, context))
                packed.pack_linears(model)
                res["packed"].append(step_ms(model, batch, context))
            a, b = statistics.median(res["plain"]), statistics.median(res["packed"])
            print(f"| {batch} | {context} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--contexts", default="300,2000")
    args = ap.parse_args()
    if not packed.supported():
        raise SystemExit("this CPU/torch runs no oneDNN bf16 matmuls (or EVALSUITE_PACK=0): nothing to compare")
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU flags {' '.join(flags)}\n")
    from evalsuite.models import load_model

    model = load_model("default", "bfloat16").model
    linear_table(linear_shapes(model))
    step_table(args, model)


if __name__ == "__main__":
    main()
