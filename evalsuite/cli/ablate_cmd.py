"""``evalsuite ablate``: sweep group sizes and bits on the same samples with one shared baseline."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import (check_device, model_options, quiet_libraries, reports_root, runs_root,
                                  task_config_option)
from evalsuite.core.config import RunConfig


@click.command()
@model_options
@task_config_option
@click.option("--sweep", "sweeps", multiple=True, required=True, metavar="PATTERN",
              help="Variant pattern with braces, e.g. 'w4g{32,64,128,256}' or 'kv4g{32,64,128}'; quote it, or the "
                   "shell expands the braces. Repeatable.")
@click.option("--tasks", "-t", default="needle,reasoning", show_default=True, help="Comma-separated tasks.")
@click.option("--limit", type=click.IntRange(min=1),
              help="At most N samples per task (spread evenly, as `run --limit`).")
@click.option("--seed", default=1234, show_default=True, help="Sample-generation seed.")
@click.option("--param", "params", multiple=True, metavar="TASK.NAME=VALUE",
              help="Override a task parameter (a YAML value), as `run --param`. Repeatable.")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Rows decoded together (answers do not depend on it on batch-invariant kernels).")
@click.option("--sensitivity", "sensitivity_file", type=click.Path(path_type=Path, dir_okay=False),
              help="results.json of `evalsuite sensitivity`: resolves keep=topN in sweeps, e.g. "
                   "'w4g64[keep=top{0,2,4,8}]' (the N most sensitive weight units of that ranking).")
@click.option("--run-id", help="Run folder name (default ablate-YYYYmmdd-HHMMSS).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def ablate(model: str, dtype: str, device: str | None, task_config: str | None, sweeps: tuple[str, ...], tasks: str,
           limit: int | None,
           seed: int, params: tuple[str, ...], batch_size: int, sensitivity_file: Path | None, run_id: str | None,
           quiet: bool) -> int:
    """Run every swept variant and the baseline on identical samples; write a table and plots of each task's
    score (95% CI) and KLD against bytes (weight bytes, or KV bytes per token for KV-only variants), with the
    Pareto front marked, under <reports folder>/<run>/."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.cli.common import set_run_dir
    from evalsuite.cli.run_cmd import parse_params
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.ablation import ablation_points, expand_sweep, write_ablation
    from evalsuite.run.pipeline import execute, new_run_id
    from evalsuite.variants.spec import parse_variant_list

    device = check_device(device)  # before anything loads
    variants = ["bf16"] + [v for pattern in sweeps for v in expand_sweep(pattern)]
    if sensitivity_file is not None:
        from evalsuite.sensitivity.report import load_ranking, resolve_top

        ranking = load_ranking(sensitivity_file)
        variants = [resolve_top(v, ranking) for v in variants]
    from evalsuite.variants.mixed import check_patterns

    for spec in parse_variant_list(",".join(variants)):  # keep=topN without --sensitivity fails here, not later
        check_patterns(p for _, pats in spec.weights.overrides for p in pats)
    config = RunConfig(model=model, dtype=dtype, device=device, variants=variants,
                       tasks=[t.strip() for t in tasks.split(",")], task_params=parse_params(params),
                       task_config=task_config, seed=seed, limit=limit, batch_size=batch_size)
    quiet_libraries()
    run_dir = runs_root() / (run_id or new_run_id().replace("run-", "ablate-"))
    set_run_dir(run_dir)
    store = execute(config, run_dir, resume=False, backend=make_backend(config, run_dir), progress=not quiet,
                    log=click.echo)
    points = ablation_points(gate_store(store), store.variant_infos())
    files = write_ablation(points, reports_root() / run_dir.name)
    click.echo((reports_root() / run_dir.name / "ablation.md").read_text())
    for f in files:
        click.echo(f"wrote {f}")
    return 0
