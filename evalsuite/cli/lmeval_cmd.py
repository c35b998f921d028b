"""``evalsuite export-lm-eval TASK DIR``: write an evalsuite task as an lm-eval task folder."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import task_config_option


@click.command()
@click.argument("task")
@task_config_option
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--limit", type=click.IntRange(min=1), help="At most N samples (the first N, as `run --limit`).")
@click.option("--seed", default=1234, show_default=True, help="Sample-generation seed (as `run --seed`).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Override a task parameter.")
@click.option("--model", "-m", default="default", show_default=True,
              help="Model whose tokenizer renders chat prompts (use the model you will evaluate).")
@click.option("--device", metavar="auto|cpu|cuda|cuda:N",
              help="Written into the suggested lm-eval command (model_args device=...); checked for spelling only, "
                   "since the export may be run on another machine. [default: auto, i.e. CUDA when present]")
def export_lm_eval(task: str, task_config: str | None, out_dir: Path, limit: int | None, seed: int,
                   params: tuple[str, ...], model: str, device: str | None) -> int:
    """Write TASK (built-in or plugin) into DIR as an lm-eval task: YAML + jsonl docs + a scoring hook that calls
    evalsuite's own Task.score. Prompts are rendered exactly as `evalsuite run` renders them (chat template
    included), so run it WITHOUT --apply_chat_template, e.g.:

      python -m evalsuite.lmeval run --model evalsuite --model_args variant=kv4g32
      --include_path DIR --tasks evalsuite_TASK --log_samples --output_path out/
    """
    from evalsuite.cli.run_cmd import parse_params
    from evalsuite.lmeval.export import export_by_name
    from evalsuite.models.device import parse_device
    from evalsuite.models.loader import load_tokenizer
    from evalsuite.tasks.registry import default_registry

    device = parse_device(device) if device is not None else None  # misspelt: exit 2 before anything runs
    default_registry().get(task)  # unknown task: one-line error (with near names) before anything loads
    overrides = parse_params(tuple(f"{task}.{p}" for p in params)).get(task, {})
    out = export_by_name(task, out_dir, load_tokenizer(model), seed=seed, limit=limit, params=overrides,
                         model_name=model, task_config=task_config)
    click.echo(f"wrote lm-eval task {out.task_name} ({out.n_docs} docs) to {out.yaml_path.parent}")
    dev = f",device={device}" if device is not None else ""
    click.echo(f"  run: python -m evalsuite.lmeval run --model evalsuite --model_args model={model},variant=bf16{dev} "
               f"--include_path {out.yaml_path.parent} --tasks {out.task_name} --log_samples --output_path OUT")
    return 0
