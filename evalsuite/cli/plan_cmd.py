"""``evalsuite plan``: capacity and bandwidth planner from a model's config.json."""
from __future__ import annotations

import json

import click

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.config import KVConfig
from evalsuite.capacity import load_config, make_plan, parse_reserve, parse_size, shape_from_config
from evalsuite.capacity.render import render_text
from evalsuite.variants.spec import WeightSpec, parse_variant

_UNQUANTIZED = ("bf16", "base", "fp16", "none")


def parse_weight_list(text: str) -> list[WeightSpec]:
    """``bf16,w8,w4g128,wf8`` -> weight specs (a KV part is an error here)."""
    out: list[WeightSpec] = []
    for item in _items(text, "--weights"):
        spec = parse_variant(item)
        if spec.kv is not None:
            raise EvalsuiteError(f"--weights {item!r} has a KV part; give KV precisions with --kv")
        out.append(spec.weights)
    return out


def parse_kv_list(text: str) -> list[KVConfig | None]:
    """``bf16,kv8,kv4g32,kvf8e4`` -> KV configs (``None`` = unquantized cache)."""
    out: list[KVConfig | None] = []
    for item in _items(text, "--kv"):
        if item.lower() in _UNQUANTIZED:
            out.append(None)
            continue
        spec = parse_variant(item)
        if spec.kv is None or spec.weights.fmt != "none":
            raise EvalsuiteError(f"--kv {item!r} is not a KV precision (e.g. bf16, kv8, kv4g32, kvf8e4)")
        out.append(spec.kv)
    return out


def _items(text: str, opt: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise EvalsuiteError(f"{opt} is empty")
    dup = sorted({t for t in items if items.count(t) > 1})
    if dup:
        raise EvalsuiteError(f"{opt} lists {', '.join(dup)} twice")
    return items


@click.command("plan")
@click.argument("config", type=click.Path(dir_okay=True))
@click.option("--weights", default="bf16,w8,w4g128,wf8", show_default=True, help="Weight precisions.")
@click.option("--kv", "kv", default="bf16,kv8,kv4g32,kvf8e4", show_default=True, help="KV-cache precisions.")
@click.option("--gpu-mem", default="80GiB", show_default=True, help="GPU memory, e.g. 80GiB, 141GB.")
@click.option("--reserve", default="10%", show_default=True, help="Runtime reserve: a percentage or a size.")
@click.option("--context", type=int, default=None, help="Tokens per request [default: max_position_embeddings "
              "or 4096].")
@click.option("--batch", type=int, default=1, show_default=True, help="Concurrent requests for the speedup.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def plan(config: str, weights: str, kv: str, gpu_mem: str, reserve: str, context: int | None, batch: int,
         as_json: bool) -> None:
    """Memory capacity and bandwidth-bound decode speed of weights × KV precisions, from CONFIG (config.json
    or its folder): max retained tokens and concurrent requests in --gpu-mem after --reserve, the context where
    the cache equals the weights, the KV-vs-weight savings crossover, decode speedups vs bf16/bf16."""
    shape = shape_from_config(load_config(config))
    mem = parse_size(gpu_mem)
    ctx = context if context is not None else (shape.max_position or 4096)
    result = make_plan(shape, parse_weight_list(weights), parse_kv_list(kv), mem, parse_reserve(reserve, mem),
                       ctx, batch)
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else render_text(result))
