"""``evalsuite variants describe SPEC``."""
from __future__ import annotations

import json

import click


@click.group()
def variants() -> None:
    """Inspect variant specs: WEIGHTS[+KV], e.g. bf16, w8, w4g64, wf8, kv4g32, w4g64+kv2g32r128.

    \b
    Weights: bf16 | w8 | w4[gN] (default g128) | w2[gN] | wf8   (optimum-quanto; lm_head kept unquantized)
    Artifact: ckpt:PATH[+KV][#NAME]  (a model folder or .gguf file; name defaults to the stem)
    KV:      kv8 | kv4 | kv2 | kvf8e4 | kvf8e5, options gN (group), rN (residual tokens),
             kt (keys per-token; default per-channel), pq (quantized prefill; default exact)
             kvhf4 | kvhf2 [gN][rN]: transformers' QuantizedCache (quanto backend)
    """


@variants.command()
@click.argument("spec")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def describe(spec: str, as_json: bool) -> int:
    """Parse SPEC and print what it means."""
    from evalsuite.variants.spec import parse_variant

    v = parse_variant(spec)
    if as_json:
        click.echo(json.dumps(v.to_dict(), indent=2))
        return 0
    w = v.weights
    click.echo(f"variant   {v.name}")
    if v.artifact is not None:
        from evalsuite.variants.artifact import artifact_bytes

        ab = artifact_bytes(v.artifact)
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(ab.types.items()))
        click.echo(f"weights   artifact {v.artifact}: {ab.total:,} tensor bytes ({kinds})")
    elif w.fmt == "none":
        click.echo("weights   unquantized (baseline dtype)")
    else:
        kind = "float8 (e4m3)" if w.fmt == "float8" else f"int{w.bits}" + (f", group {w.group}" if w.group else
                                                                           ", per output channel")
        click.echo(f"weights   {kind}, ~{w.bytes_per_param:g} B/param + metadata; excluded: "
                   f"{', '.join(w.exclude) or 'none'}")
    if v.kv is None:
        click.echo("kv cache  unquantized (DynamicCache)")
    else:
        k = v.kv
        fmt = f"int{k.bits}" if k.fmt == "int" else k.fmt
        backend = "transformers QuantizedCache (quanto)" if k.backend == "hf" else "evalsuite cache"
        extra = "" if k.backend == "hf" else f", keys per-{k.key_axis}, values per-token, prefill {k.prefill}"
        click.echo(f"kv cache  {backend}: {fmt}, group {k.group or 'whole axis'}, residual {k.residual}{extra}")
    return 0
