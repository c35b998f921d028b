"""``evalsuite sensitivity``: which layers (or modules, or KV layers) a quantized variant is most sensitive to,
and (``--fix``) the cheapest keep-set that brings its measured KLD under the policy's ``max_kld``."""
from __future__ import annotations

import time
from pathlib import Path

import click

from evalsuite.cli.common import check_device, model_options, quiet_libraries, runs_root, task_config_option
from evalsuite.paths import RUNS_HELP
from evalsuite.errors import EvalsuiteError
from evalsuite.core.config import DEFAULT_TASKS


@click.command()
@model_options
@task_config_option
@click.option("--variant", "variant", required=True, help="Variant spec, e.g. w4g128, kv4g32, w4g64+kv2g32.")
@click.option("--tasks", "-t", default=",".join(DEFAULT_TASKS), show_default=True,
              help="Comma-separated tasks whose samples make the slice.")
@click.option("--limit", default=3, show_default=True, type=click.IntRange(min=1), help="Samples per task.")
@click.option("--seed", default=1234, show_default=True, help="Sample-generation seed.")
@click.option("--param", "params", multiple=True, metavar="TASK.NAME=VALUE",
              help="Override a task parameter (a YAML value), as `run --param`. Repeatable.")
@click.option("--max-new-tokens", default=48, show_default=True, type=click.IntRange(min=1),
              help="Cap on each baseline answer (teacher-forced tokens).")
@click.option("--batch-size", default=4, show_default=True, type=click.IntRange(min=1),
              help="Samples per teacher-forced pass.")
@click.option("--unit", "unit_kind", default="layer", show_default=True, type=click.Choice(["layer", "module"]),
              help="Quantize one decoder layer's Linear modules at a time, or one module (q/k/v/o/gate/up/down).")
@click.option("--fix", is_flag=True, help="Propose a keep-set bringing the measured KLD under the target, and gate.")
@click.option("--target", help="KLD target for --fix: a number, or N% of the variant's measured KLD "
              "(default: the policy's max_kld, else 0.5, the KLD screen's level).")
@click.option("--max-keep", default=0.15, show_default=True, type=click.FloatRange(0, 1),
              help="--fix keeps at most this fraction of the quantized Linear parameters.")
@click.option("--policy", type=click.Path(path_type=Path), help="Gate policy YAML (default: the shipped one).")
@click.option("--gate/--no-gate", default=True, show_default=True, help="--fix: gate before/after (subprocess).")
@click.option("--gate-limit", type=click.IntRange(min=1), help="Samples per task when gating [default: --limit].")
@click.option("--out", type=click.Path(path_type=Path),
              help=f"Output folder [default: <runs folder>/sensitivity-<time>; <runs folder>: {RUNS_HELP}].")
def sensitivity(model: str, dtype: str, device: str | None, task_config: str | None, variant: str, tasks: str,
                limit: int, seed: int,
                params: tuple[str, ...], max_new_tokens: int, batch_size: int, unit_kind: str, fix: bool,
                target: str | None, max_keep: float, policy: Path | None, gate: bool, gate_limit: int | None,
                out: Path | None) -> int:
    """Quantize ONE unit at a time (a decoder layer's Linear modules, one module with --unit module, or one
    layer's KV cache) and measure the teacher-forced KLD from the baseline on a small slice of each task's
    samples; print the ranking, write results.json and sensitivity.png. docs/sensitivity.md explains it."""
    from evalsuite.cli.run_cmd import parse_params
    from evalsuite.models import load_model
    from evalsuite.sensitivity.data import load_slice
    from evalsuite.sensitivity.measure import Measurer, run_units
    from evalsuite.sensitivity.report import plot, ranked_table, write_results
    from evalsuite.variants.spec import parse_variant

    spec = parse_variant(variant)
    if spec.is_baseline:
        raise EvalsuiteError("--variant is the baseline: nothing is quantized")
    if spec.artifact is not None or spec.weights.activations != "none":
        raise EvalsuiteError(f"--variant {spec.name}: sensitivity quantizes one unit at a time, which an artifact "
                             "or quantized activations cannot do; give a weight / KV spec such as w4g128")
    if policy is not None and not policy.is_file():
        raise EvalsuiteError(f"policy file not found: {policy}")
    device = check_device(device)
    task_list = [t.strip() for t in tasks.split(",") if t.strip()]
    out = out or runs_root() / time.strftime("sensitivity-%Y%m%d-%H%M%S")
    quiet_libraries()
    t0 = time.perf_counter()
    loaded = load_model(model, dtype=dtype, device=device)
    data = load_slice(loaded, task_list, limit, seed, parse_params(params), max_new_tokens, batch_size,
                      task_config)
    click.echo(f"slice: {data.samples} samples of {', '.join(task_list)}; {data.prompt_tokens} prompt and "
               f"{data.answer_tokens} answer tokens (baseline answers generated once)")
    measurer = Measurer(loaded.model, data.batches)
    sens, _, qunits = run_units(measurer, spec, unit_kind, log=click.echo)
    click.echo(f"\n{spec.name}: whole-variant KLD {sens.variant_kld.kld:.4f} (top-1 {sens.variant_kld.top1:.3f})")
    click.echo(ranked_table(sens, top=15))
    fix_out = None
    if fix:
        fix_out = _fix(loaded, measurer, spec, sens, qunits, target, max_keep, policy, gate,
                       dict(tasks=task_list, limit=gate_limit or limit, seed=seed, params=params, model=model,
                            dtype=dtype, device=device, out=out, task_config=task_config))
    meta = {"variant": spec.name, "model": model, "dtype": dtype, "device": loaded.meta["device"], "unit": unit_kind,
            "tasks": task_list, "limit": limit, "seed": seed, "params": list(params), "max_new_tokens": max_new_tokens,
            "samples": data.samples, "answer_tokens": data.answer_tokens,
            "wall_seconds": time.perf_counter() - t0}
    files = [write_results(out, meta, sens, fix_out), plot(out, sens, spec.name)]
    click.echo(f"\nwall time {meta['wall_seconds']:.0f} s (units {sens.seconds:.0f} s)")
    for f in files:
        click.echo(f"wrote {f}")
    return 0


def _fix(loaded, measurer, spec, sens, qunits, target, max_keep, policy, gate, gate_args) -> dict:
    """Greedy keep-set, bytes before/after, and (``gate``) verdicts before/after."""
    from evalsuite.gate.means import KLD_SCREEN
    from evalsuite.gate.policy import load_policy
    from evalsuite.sensitivity.fix import gate_variants, greedy_fix
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    if target is None:
        target = load_policy(policy).thresholds("needle").max_kld
        target = KLD_SCREEN if target is None else target
    elif str(target).endswith("%"):
        target = float(target[:-1]) / 100 * sens.variant_kld.kld
    else:
        try:
            target = float(target)
        except ValueError:
            raise EvalsuiteError(f"--target {target!r}: expected a number or a percentage") from None
    click.echo(f"\n--fix: target KLD < {target}")
    res = greedy_fix(measurer, spec, sens, qunits, target, max_keep, log=click.echo)
    for attr, name in (("bytes_before", res.original), ("bytes_after", res.proposed)):
        w = build_variant(loaded, parse_variant(name)).weights
        setattr(res, attr, {"measured": w.measured, "formula": w.formula})
    if gate and res.keep + res.kv_keep:
        click.echo(f"gating {res.original} and {res.proposed} (evalsuite run, {gate_args['limit']} per task) ...")
        res.verdicts, run_dir = gate_variants([res.original, res.proposed], policy=policy, **gate_args)
        res.gate_run = str(run_dir)
    d = res.to_dict()
    click.echo(f"proposed {res.proposed}: KLD {res.before.kld:.4f} -> {res.after.kld:.4f} "
               f"({'reached' if res.reached else 'NOT reached'}), linear params kept {res.kept_fraction:.1%}, "
               f"extra bytes {d['extra_bytes']:,}; verdicts {res.verdicts or 'not gated'}")
    return d
