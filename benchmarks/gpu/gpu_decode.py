"""Decode speed and memory on a random model of Llama-3-8B's shape, against ``evalsuite plan``'s bandwidth bound.

For each context: one prefill (bf16 weights, DynamicCache, random token ids); its K/V are written into each
cache through ``cache.update`` (what an exact prefill stores), then each (weights, cache) row decodes greedily from
the same token. Rows: bf16 + DynamicCache (the reference), W4 (``w4g128``, optimum-quanto's modules as deployed)
+ DynamicCache, bf16 + evalsuite's KV cache at 8 and 4 bits, and W4 + kv4. Step time is the median of the timed
steps (two warm-up steps first; the device is synchronized every step). Memory: the cache's held bytes
(``cache_nbytes``: packed payload + scales + residual) and, on CUDA, the peak allocated during the row over what
was allocated before it (cache, its dequantized shadow, activations). The measured speed-up is the reference step
time over the row's; the predicted one is ``evalsuite.capacity.make_plan``'s ``decode_speedup`` for the same shape,
batch and context (a step reads every weight once and every retained K/V once).

evalsuite's cache decodes through a dequantized shadow in the compute dtype, so attention reads as many bytes as a
DynamicCache: it cannot show the plan's KV bandwidth gain. When ``make_cache`` offers ``keep_dequantized=False``
(re-dequantize every block at every step) that path is timed too; it is not a fused low-bit kernel either.
Weights are random (std 0.02): speed does not depend on their values. The W4 rows reuse the bf16 prefill's K/V.

    python -m benchmarks.gpu.gpu_decode                      # Llama-3-8B shape, CUDA, contexts 4096,32768
    python -m benchmarks.gpu.gpu_decode --tiny --device cpu  # a small shape and short contexts (tests)
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: Llama-3-8B's config.json fields the model and the planner need (no weights are downloaded)
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
             "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
             "max_position_embeddings": 8192}
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 2048,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "max_position_embeddings": 1024}
#: (label, weight spec, KV spec or None = DynamicCache, packed-read): the first row is the reference
ROWS = [("bf16 + DynamicCache", "bf16", None, False), ("W4 + DynamicCache", "w4g128", None, False),
        ("bf16 + kv8", "bf16", "kv8", False), ("bf16 + kv4", "bf16", "kv4g32", False),
        ("W4 + kv4", "w4g128", "kv4g32", False)]
PACKED_NOTE = ("evalsuite's KV cache has no packed decode path: attention reads a dequantized shadow in the compute "
               "dtype, as many bytes as a DynamicCache, so no KV bandwidth gain can show")


@dataclass
class Result:
    label: str
    weights: str
    kv: str | None
    ctx: int
    step_s: float
    cache_bytes: int
    peak_bytes: int | None
    predicted: float | None = None
    error: str | None = None  # why the row could not run (e.g. a W4 kernel missing on this machine)


def build_model(cfg_dict: dict[str, Any], device: torch.device, dtype: torch.dtype, ctx_max: int) -> Any:
    """A LlamaForCausalLM of this shape, created on ``device`` in ``dtype`` without the init pass, then filled
    in place (normal std 0.02, norms 1): seconds, not minutes, for 8B parameters on a GPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    try:  # transformers 5
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4
        from transformers.modeling_utils import no_init_weights

    fields = {k: v for k, v in cfg_dict.items() if k != "model_type"}
    fields["max_position_embeddings"] = max(fields["max_position_embeddings"], ctx_max)
    cfg = LlamaConfig(**fields)
    cfg._attn_implementation = "sdpa"
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device, no_init_weights():
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0) if p.dim() == 1 else p.normal_(0.0, 0.02, generator=gen)
    return model.eval()


def cache_kw(model: Any) -> str:
    """The forward's cache argument: ``cache`` in newer transformers, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill(model: Any, ctx: int, batch: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """One forward over ``ctx`` random tokens per row (last logits only): per-layer K/V and the next token."""
    from transformers import DynamicCache

    device = model.device
    ids = torch.randint(0, model.config.vocab_size, (batch, ctx), device=device,
                        generator=torch.Generator(device=device).manual_seed(ctx))
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(ids, use_cache=True, logits_to_keep=1, **{cache_kw(model): cache})
    kvs = [(layer.keys, layer.values) for layer in cache.layers]
    return kvs, out.logits[:, -1:].argmax(-1)


def new_cache(model: Any, kv: str | None, packed: bool) -> Any:
    from transformers import DynamicCache

    from evalsuite.kvcache import make_cache
    from evalsuite.variants.spec import parse_variant

    if kv is None:
        return DynamicCache(config=model.config)
    cfg = parse_variant(kv).kv
    return make_cache(cfg, model.config, keep_dequantized=False) if packed else make_cache(cfg, model.config)


def decode(model: Any, cache: Any, kvs: list, first: torch.Tensor, steps: int) -> tuple[float, int, int | None]:
    """Fill ``cache`` with the prefill's K/V, decode ``steps`` (+2 warm-up) greedy tokens.

    Returns (median step seconds, cache bytes after the fill, peak bytes over the start on CUDA or None)."""
    from evalsuite.kvcache import cache_nbytes

    device = first.device
    cuda = device.type == "cuda"
    if cuda:
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
    start_bytes = torch.cuda.memory_allocated(device) if cuda else 0
    times, kw = [], cache_kw(model)
    with torch.no_grad():
        for i, (k, v) in enumerate(kvs):
            cache.update(k.clone(), v.clone(), i)
        held = cache_nbytes(cache)
        nxt = first
        for _ in range(steps + 2):
            sync(device)
            t0 = time.perf_counter()
            out = model(nxt, use_cache=True, **{kw: cache})
            nxt = out.logits[:, -1:].argmax(-1)
            sync(device)
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) - start_bytes if cuda else None
    return statistics.median(times[2:]), held, peak


def has_packed_path() -> bool:
    """Whether ``make_cache`` can decode without the dequantized shadow (``keep_dequantized=False``)."""
    from evalsuite.kvcache import make_cache

    return "keep_dequantized" in inspect.signature(make_cache).parameters


def predictions(cfg_dict: dict[str, Any], rows: list[tuple], ctx: int, batch: int) -> dict[tuple[str, str], float]:
    """``evalsuite plan``'s bandwidth-bound decode speed-up per (weights, kv) for this shape, batch and context."""
    from evalsuite.capacity import make_plan, shape_from_config
    from evalsuite.capacity.capacity import kv_name
    from evalsuite.variants.spec import parse_variant

    weights = {w: parse_variant(w).weights for _, w, _, _ in rows}
    kvs = {kv: None if kv is None else parse_variant(kv).kv for _, _, kv, _ in rows}
    plan = make_plan(shape_from_config(cfg_dict), list(weights.values()), list(kvs.values()), gpu_mem=2**40,
                     reserve=0, context=ctx, batch=batch)
    by_name = {(c.weights, c.kv): c.decode_speedup for c in plan.combos}
    return {(w, "bf16" if kv is None else kv): by_name[(weights[w].name, kv_name(kvs[kv]))]
            for _, w, kv, _ in rows}


def measure(args: argparse.Namespace, cfg_dict: dict[str, Any], rows: list[tuple]) -> list[Result]:
    """Every row at every context; the W4 model is built once from the bf16 one (a quantized copy)."""
    from evalsuite.variants.spec import parse_variant
    from evalsuite.variants.weights import quantize_weights

    device = torch.device(args.device)
    contexts = [int(c) for c in args.contexts.split(",")]
    t0 = time.perf_counter()
    models = {"bf16": build_model(cfg_dict, device, torch.bfloat16, max(contexts) + args.decode_tokens + 8)}
    print(f"model built on {device} in {time.perf_counter() - t0:.1f} s", flush=True)
    errors: dict[str, str] = {}
    for w in dict.fromkeys(w for _, w, _, _ in rows if w != "bf16"):
        t0 = time.perf_counter()
        try:
            models[w] = quantize_weights(models["bf16"], parse_variant(w).weights)
        except Exception as exc:  # noqa: BLE001 - a kernel missing on this machine: report it, keep the bf16 rows
            errors[w] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
        print(f"{w} quantized (optimum-quanto) in {time.perf_counter() - t0:.1f} s {errors.get(w, '')}", flush=True)
    results = []
    for ctx in contexts:
        kvs, first = prefill(models["bf16"], ctx, args.batch)
        pred = predictions(cfg_dict, rows, ctx, args.batch)
        for label, w, kv, packed in rows:
            res = Result(label, w, kv, ctx, float("nan"), 0, None, pred[(w, "bf16" if kv is None else kv)],
                         errors.get(w))
            if res.error is None:
                try:
                    res.step_s, res.cache_bytes, res.peak_bytes = decode(
                        models[w], new_cache(models[w], kv, packed), kvs, first, args.decode_tokens)
                except Exception as exc:  # noqa: BLE001 - keep the other rows
                    res.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
            results.append(res)
            print(f"  {label} @ {ctx}: " + (res.error or f"{1e3 * res.step_s:.2f} ms/step"), flush=True)
        del kvs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def render(results: list[Result], args: argparse.Namespace, shape_name: str, packed: bool) -> str:
    """The markdown table (one row per (row, context)) and its notes."""
    ref = {r.ctx: r.step_s for r in results if r.label == ROWS[0][0]}
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    lines = [f"## decode on a random {shape_name} ({args.device}, {where}), batch {args.batch}, "
             f"{args.decode_tokens} timed steps",
             "", "| row | ctx | ms/step | tok/s | speed-up measured | speed-up plan | cache MiB | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        plan = f"{r.predicted:.2f}x" if r.predicted is not None else "-"
        if r.error is not None:
            lines.append(f"| {r.label} | {r.ctx} | failed: {r.error} | - | - | {plan} | - | - |")
            continue
        peak = f"{r.peak_bytes / 2**20:.0f}" if r.peak_bytes is not None else "-"
        lines.append(f"| {r.label} | {r.ctx} | {1e3 * r.step_s:.2f} | {args.batch / r.step_s:.1f} | "
                     f"{ref[r.ctx] / r.step_s:.2f}x | {plan} | {r.cache_bytes / 2**20:.2f} | {peak} |")
    lines += ["", "speed-up: bf16 + DynamicCache step time over the row's at the same context; plan: "
              "`evalsuite.capacity.make_plan(...).decode_speedup` (bandwidth bound: weights + batch x KV(context)). "
              "cache MiB: bytes the cache holds (packed + scales + residual; not the dequantized shadow); "
              "peak MiB: CUDA peak over the allocation before the row (shadow and activations included). "
              "transformers' DynamicCache appends by `torch.cat` (the whole cache is copied every step), "
              "evalsuite's cache writes into a preallocated buffer: at long contexts that difference, not "
              "quantization, can make a kv row faster than the reference."]
    if not packed:
        lines.append(f"note: {PACKED_NOTE}.")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="a small shape and short contexts (CPU tests)")
    ap.add_argument("--contexts", help="comma-separated contexts [4096,32768; --tiny: 64,160]")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--decode-tokens", type=int, help="timed decode steps [32; --tiny: 3]")
    ap.add_argument("--device", help="cuda or cpu [cuda when available]")
    ap.add_argument("--out", type=Path, help="also write the table here [$OUT/gpu_decode.md when $OUT is set]")
    args = ap.parse_args(argv)
    args.contexts = args.contexts or ("64,160" if args.tiny else "4096,32768")
    args.decode_tokens = args.decode_tokens or (3 if args.tiny else 32)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.out is None and os.environ.get("OUT"):
        args.out = Path(os.environ["OUT"]) / "gpu_decode.md"
    return args


def main(argv: list[str] | None = None) -> str:
    """Measure, print and (``--out``) write the table; returns it."""
    args = parse_args(argv)
    packed = has_packed_path()
    rows = ROWS + ([("bf16 + kv4 (packed, no shadow)", "bf16", "kv4g32", True)] if packed else [])
    if not packed:
        print(f"note: {PACKED_NOTE}", flush=True)
    cfg_dict, name = (TINY, "tiny Llama") if args.tiny else (LLAMA3_8B, "Llama-3-8B shape")
    table = render(measure(args, cfg_dict, rows), args, name, packed)
    print("\n" + table, flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")
    return table


if __name__ == "__main__":
    raise SystemExit(1 if "| failed: " in main() else 0)
