"""``evalsuite smoke``: load a model, build each variant, answer one fixed prompt, print bytes and answers."""
from __future__ import annotations

import click

from evalsuite.cli.common import check_device, model_options, quiet_libraries, table
from evalsuite.capacity.capacity import fmt_bytes

SMOKE_PROMPT = "What is the capital of France? Answer in one short sentence."


@click.command()
@model_options
@click.option("--variants", "-v", default="bf16,w8,w4g64", show_default=True,
              help="Comma-separated variant specs (see `evalsuite variants describe --help`).")
@click.option("--max-new-tokens", default=24, show_default=True, type=click.IntRange(min=1),
              help="Tokens each variant generates for the fixed prompt (greedy).")
def smoke(model: str, dtype: str, device: str | None, variants: str, max_new_tokens: int) -> int:
    """Load MODEL, build each variant, greedy-answer one fixed prompt; print a table of
    variant, measured weight bytes, formula bytes, fingerprint and the answer. An artifact
    (ckpt:PATH, a folder or .gguf) shows its own tensor bytes and a hash of its files."""
    from evalsuite.models import load_model
    from evalsuite.backends.inprocess.generate import generate_batch
    from evalsuite.run.prompts import render_prompt
    from evalsuite.tasks.base import GenSettings, Sample
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant_list

    specs = parse_variant_list(variants)  # bad specs fail before the model loads
    device = check_device(device)
    quiet_libraries()
    base = load_model(model, dtype, device)
    if "dtype_choice" in base.meta:
        click.echo(base.meta["dtype_choice"])
    click.echo(f"model {base.name} ({base.dtype} on {base.meta['device']}, fingerprint {base.fingerprint}, "
               f"{base.meta['n_params'] / 1e6:.1f}M params)")
    prompt = render_prompt(Sample(id="smoke", target=None, messages=({"role": "user", "content": SMOKE_PROMPT},)),
                           base.tokenizer)
    rows = []
    for spec in specs:
        variant = build_variant(base, spec)
        gen = generate_batch(variant.model, variant.tokenizer, [prompt], GenSettings(max_new_tokens=max_new_tokens),
                             variant.make_cache)[0]
        w = variant.weights
        fp = variant.fingerprint or (base.fingerprint if spec.is_baseline else "-")
        rows.append([spec.name, fmt_bytes(w.measured), fmt_bytes(w.formula),
                     f"{(w.measured / w.formula - 1) * 100:+.2f}%", fp, gen.text.replace("\n", " ")[:80]])
    click.echo(table(rows, ["variant", "weight bytes", "formula", "diff", "fingerprint", "answer"]))
    return 0
