"""``evalsuite baseline``: store a pinned baseline keyed by the model's content fingerprint."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import (baselines_root, check_device, model_options, quiet_libraries, runs_root,
                                  task_config_option)
from evalsuite.paths import BASELINES_HELP
from evalsuite.core.config import DEFAULT_TASKS, RunConfig


@click.command()
@model_options
@task_config_option
@click.option("--tasks", "-t", default=",".join(DEFAULT_TASKS), show_default=True,
              help="Comma-separated tasks whose samples the baseline answers.")
@click.option("--limit", type=click.IntRange(min=1),
              help="At most N samples per task (spread evenly, as `run --limit`).")
@click.option("--seed", default=1234, show_default=True,
              help="Sample-generation seed: a later `run` reuses the baseline only with the same seed.")
@click.option("--param", "params", multiple=True, metavar="TASK.NAME=VALUE",
              help="Override a task parameter (a YAML value), as `run --param`. Repeatable.")
@click.option("--out", type=click.Path(path_type=Path),
              help=f"Baselines folder [default: {BASELINES_HELP}]. The command's run folder goes under the "
                   "runs folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def baseline(model: str, dtype: str, device: str | None, task_config: str | None, tasks: str, limit: int | None,
             seed: int, params: tuple[str, ...], out: Path | None, quiet: bool) -> int:
    """Run the baseline only and store its per-sample results with a manifest (model content fingerprint,
    task versions, parameters, generation settings, library versions) under baselines/<fingerprint>/.
    `evalsuite run` reuses a matching stored baseline and refuses (with the reason) one that does not match."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.cli.common import set_run_dir
    from evalsuite.cli.run_cmd import parse_params
    from evalsuite.run.baselines import save_baseline
    from evalsuite.run.pipeline import execute, new_run_id
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    device = check_device(device)  # before anything loads
    config = RunConfig(model=model, dtype=dtype, device=device, variants=["bf16"],
                       tasks=[t.strip() for t in tasks.split(",")], task_params=parse_params(params),
                       task_config=task_config, seed=seed, limit=limit, kld=False)
    quiet_libraries()
    run_dir = runs_root() / f"baseline-{new_run_id()}"
    set_run_dir(run_dir)
    backend = make_backend(config, run_dir)
    store = execute(config, run_dir, resume=False, backend=backend, progress=not quiet, log=click.echo)
    tasks_ = prepare_tasks(config, default_registry(), backend.task_context())
    folder = save_baseline(out or baselines_root(), store, tasks_, seed, "bf16")
    click.echo(f"baseline stored: {folder}")
    return 0
