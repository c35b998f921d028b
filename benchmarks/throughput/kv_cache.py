"""KV caches side by side on the embedded model: decode tokens/s and bytes held at several context lengths.

    .venv/bin/python -m benchmarks.throughput.kv_cache --contexts 1024,4096 --decode-tokens 16
    .venv/bin/python -m benchmarks.throughput.kv_cache --contexts 1024 --dtype float32 --caches dynamic,kv4,hf4
    .venv/bin/python -m benchmarks.throughput.kv_cache --device cuda --contexts 4096,16384

One prefill of exactly ``ctx`` tokens (a multiple of the flush block) per context; its per-layer K/V are written
into each cache through ``cache.update`` (exactly what an exact-mode prefill stores: no residual is left, so the
measured bytes compare with the asymptotic formula), then each cache decodes greedily from the same token. Decode
speed is the median step time (robust to a shared machine's spikes; the first two steps are warm-up). Bytes are
measured again after decoding, where a residual exists, against ``kv_bytes_for_length`` (formula with residual).
With fewer decode tokens than the residual (128), no flush happens during decode: neither this cache's per-block
flush nor quanto's whole-cache re-quantization is in the timed steps (use --decode-tokens 256 to include them).
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from transformers import DynamicCache

from evalsuite.kvcache import KVConfig, cache_nbytes, kv_bytes_for_length, kv_bytes_per_token, make_cache
from evalsuite.models import load_model, offline
from evalsuite.models.device import synchronize

CACHES: dict[str, KVConfig | None] = {
    "dynamic": None,
    "hf4": KVConfig(backend="hf", bits=4, group=64, residual=128),
    "hf2": KVConfig(backend="hf", bits=2, group=64, residual=128),
    "kv8": KVConfig(bits=8),
    "kv4": KVConfig(bits=4),
    "kv2": KVConfig(bits=2),
    "kvf8e4": KVConfig(fmt="fp8e4"),
    "kvf8e5": KVConfig(fmt="fp8e5"),
}
TEXT = ("The committee met on a grey Tuesday to review the quarterly figures, the new warehouse lease, and a long "
        "list of complaints about the coffee machine on the third floor. ")


@dataclass
class Row:
    cache: str
    ctx: int
    fill_s: float
    step_s: float
    bytes_prefill: int
    formula_prefill: float
    bytes_end: int
    formula_end: float | None


def _prompt(tok: Any, ctx: int) -> torch.Tensor:
    ids = tok(TEXT * (ctx // 20 + 1), return_tensors="pt").input_ids[:, :ctx]
    assert ids.shape[1] == ctx
    return ids


def _prefill(model: Any, ids: torch.Tensor) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, float]:
    """One prefill with a DynamicCache: per-layer K/V, the first greedy token, seconds."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        synchronize(ids.device)
        t0 = time.perf_counter()
        out = model(ids, cache=cache, use_cache=True)
        synchronize(ids.device)
        seconds = time.perf_counter() - t0
    return [(layer.keys, layer.values) for layer in cache.layers], out.logits[:, -1:].argmax(-1), seconds


def _run(model: Any, cache: Any, kvs: list, first: torch.Tensor, n_decode: int) -> tuple[float, int, float]:
    """Fill ``cache`` with the prompt's K/V (what an exact prefill stores), then decode greedily.

    Returns (fill seconds, bytes after the fill, median decode step seconds).
    """
    with torch.no_grad():
        synchronize(first.device)
        t0 = time.perf_counter()
        for i, (k, v) in enumerate(kvs):
            cache.update(k.clone(), v.clone(), i)
        synchronize(first.device)
        fill = time.perf_counter() - t0
        fill_bytes = cache_nbytes(cache)
        nxt, steps = first, []
        for _ in range(n_decode + 2):
            t0 = time.perf_counter()
            out = model(nxt, cache=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            synchronize(nxt.device)
            steps.append(time.perf_counter() - t0)
    return fill, fill_bytes, statistics.median(steps[2:])


def measure(model: Any, tok: Any, names: list[str], contexts: list[int], n_decode: int, dtype_bytes: int
            ) -> list[Row]:
    rows = []
    for ctx in contexts:
        kvs, first, seconds = _prefill(model, _prompt(tok, ctx).to(model.device))
        print(f"  prefill {ctx} tokens: {seconds:.1f} s", flush=True)
        for name in names:
            cfg = CACHES[name]
            cache = DynamicCache(config=model.config) if cfg is None else make_cache(cfg, model.config)
            fill, pbytes, step = _run(model, cache, kvs, first, n_decode)
            end = ctx + n_decode + 2
            exact_end = None if cfg is not None and cfg.backend == "hf" else kv_bytes_for_length(
                cfg, model.config, end, dtype_bytes=dtype_bytes)
            rows.append(Row(name, ctx, fill, step, pbytes,
                            kv_bytes_per_token(cfg, model.config, dtype_bytes) * ctx, cache_nbytes(cache),
                            exact_end))
            print(f"  done {name} @ {ctx}: {1 / step:.1f} tok/s", flush=True)
    return rows


def report(rows: list[Row]) -> None:
    """Print the table: speed vs DynamicCache, bytes vs formula."""
    dyn = {r.ctx: r.step_s for r in rows if r.cache == "dynamic"}
    print(f"\n{'cache':8} {'ctx':>6} {'fill s':>7} {'decode tok/s':>12} {'time/dyn':>8} {'MB filled':>10} "
          f"{'formula MB':>10} {'diff %':>7} {'MB end':>8} {'exact MB':>8} {'diff %':>7}")
    for r in rows:
        ratio = f"{r.step_s / dyn[r.ctx]:.2f}x" if r.ctx in dyn else "-"
        diff = 100 * (r.bytes_prefill - r.formula_prefill) / r.formula_prefill
        end_f = f"{r.formula_end / 1e6:8.2f}" if r.formula_end else f"{'-':>8}"
        end_d = f"{100 * (r.bytes_end - r.formula_end) / r.formula_end:+7.2f}" if r.formula_end else f"{'-':>7}"
        print(f"{r.cache:8} {r.ctx:6d} {r.fill_s:7.3f} {1 / r.step_s:12.1f} {ratio:>8} "
              f"{r.bytes_prefill / 1e6:10.2f} {r.formula_prefill / 1e6:10.2f} {diff:+7.2f} "
              f"{r.bytes_end / 1e6:8.2f} {end_f} {end_d}")
    print("\nformula MB = kv_bytes_per_token x ctx (asymptotic, no residual; hf = estimate with a scale + shift "
          "per group); exact MB = kv_bytes_for_length at the end (quantized part + residual).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="1024,4096,8192", help="comma-separated context lengths")
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--caches", default=",".join(CACHES), help=f"subset of {','.join(CACHES)}")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n for n in args.caches.split(",") if n]
    unknown = set(names) - set(CACHES)
    if unknown:
        ap.error(f"unknown caches {sorted(unknown)}")
    offline()
    loaded = load_model("default", dtype=args.dtype, device=args.device)
    dtype_bytes = next(loaded.model.parameters()).element_size()
    contexts = [int(c) for c in args.contexts.split(",")]
    print(f"model {loaded.name} ({args.dtype} on {loaded.meta['device']}), torch threads {torch.get_num_threads()}, contexts {contexts}, "
          f"{args.decode_tokens} decode tokens")
    report(measure(loaded.model, loaded.tokenizer, names, contexts, args.decode_tokens, dtype_bytes))


if __name__ == "__main__":
    main()
