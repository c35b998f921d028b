"""A diverged or near-tie row's cache rebuilt from a verification pass: adopting the pass's quantized blocks
(``QuantKVLayer.row_state`` -> ``adopt``, since stop 41) against quantizing the row's exact K/V again (before),
side by side, on K/V of SmolLM2-135M's shape (30 layers, 3 KV heads, head_dim 64; no model forward needed).

Each row's state is taken at a length inside its last block, as a near-tie step would; both rebuilt caches are
compared bit for bit.

    .venv/bin/python -m benchmarks.verify.row_rebuild --kv kv8g32 --tokens 512,2048 --rows 1,8
"""
from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig

from evalsuite.backends.inprocess.ties import fill_rows
from evalsuite.kvcache import make_cache, track_mask
from evalsuite.kvcache.layer import RowState
from evalsuite.variants.spec import parse_variant

SHAPE = dict(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30,
             intermediate_size=1536, vocab_size=49152)


def pass_cache(cfg, config, rows: int, tokens: int, dtype: torch.dtype):
    """A keep_exact cache holding ``rows`` rows of ``tokens`` random tokens plus a 40-token answer, and the
    full-precision K/V written into it (per layer)."""
    cache = make_cache(cfg, config, keep_exact=True)
    gen = torch.Generator().manual_seed(0)
    total = tokens + 40
    track_mask(cache, torch.ones(rows, total, dtype=torch.long))
    exact = []
    for i in range(config.num_hidden_layers):
        k, v = (torch.randn(rows, 3, total, 64, generator=gen).to(dtype) for _ in range(2))
        cache.update(k, v, i)
        exact.append((k, v))
    return cache, exact


def states(cache, exact, rows: int, tokens: int, adopt: bool) -> list[tuple[RowState, ...]]:
    """Each row's state at ``tokens``: the pass's (adopted blocks), or its exact K/V (quantized again: before)."""
    if adopt:
        return [tuple(layer.row_state(r, tokens) for layer in cache.layers) for r in range(rows)]
    return [tuple(RowState(k[r, :, :tokens], v[r, :, :tokens]) for k, v in exact) for r in range(rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kv", default="kv8g32")
    ap.add_argument("--tokens", default="512,2048")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg, config = parse_variant(args.kv).kv, LlamaConfig(**SHAPE)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    print("| kv | dtype | rows | tokens | re-quantized | adopted | speed-up | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for rows in map(int, args.rows.split(",")):
        for tokens in map(int, args.tokens.split(",")):
            src, exact = pass_cache(cfg, config, rows, tokens, dtype)
            at = tokens + 20  # inside the answer, as a near-tie step's rebuild
            best = {True: float("inf"), False: float("inf")}
            built = {}
            for _ in range(args.repeat):
                for adopt in (False, True):
                    t0 = time.perf_counter()
                    built[adopt], _ = fill_rows(states(src, exact, rows, at, adopt), make_cache(cfg, config), config)
                    best[adopt] = min(best[adopt], time.perf_counter() - t0)
            same = all(torch.equal(a._kbuf.view(), b._kbuf.view()) and torch.equal(a._vbuf.view(), b._vbuf.view())
                       for a, b in zip(built[False].layers, built[True].layers))
            print(f"| {args.kv} | {args.dtype} | {rows} | {at} | {best[False] * 1e3:.1f} ms | "
                  f"{best[True] * 1e3:.1f} ms | {best[False] / best[True]:.1f}x | {same} |")


if __name__ == "__main__":
    main()
