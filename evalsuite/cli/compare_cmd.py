"""``evalsuite compare BASELINE VARIANT...``: gate per-sample logs produced elsewhere (lm-eval, inspect_ai, evalsuite
runs), no model (docs/compare.md)."""
from __future__ import annotations

import time
from pathlib import Path

import click

from evalsuite.cli.common import runs_root, set_run_dir
from evalsuite.paths import RUNS_HELP


@click.command()
@click.argument("baseline")
@click.argument("variants", nargs=-1, required=True)
@click.option("--policy", type=click.Path(path_type=Path), help="Gate policy YAML (default: the shipped policy).")
@click.option("--out", type=click.Path(path_type=Path), help=f"Runs folder [default: {RUNS_HELP}].")
@click.option("--run-id", help="Name of the run folder (default compare-YYYYmmdd-HHMMSS).")
@click.option("--metric", "metrics", multiple=True, metavar="TASK=NAME",
              help="The metric a task is scored by (default: the log's first one); NAME alone: every task. "
                   "lm-eval keys may name the filter: exact_match,flexible-extract. Repeatable.")
@click.option("--slice-key", "slice_keys", multiple=True, metavar="KEY",
              help="A document field (lm-eval doc, inspect_ai sample metadata) to slice by, e.g. a context length. "
                   "Repeatable.")
@click.option("--no-report", is_flag=True, help="Only print verdicts; do not write the report.")
def compare(baseline: str, variants: tuple[str, ...], policy: Path | None, out: Path | None, run_id: str | None,
            metrics: tuple[str, ...], slice_keys: tuple[str, ...], no_report: bool) -> int:
    """Pair the per-sample logs of VARIANT(s) with BASELINE's and gate them, as `evalsuite run` gates its own.

    Each argument is [NAME=]PATH: lm-eval --log_samples output (a folder, results_*.json or samples_*.jsonl), an
    inspect_ai log (.eval / .json, or a folder of them) or an evalsuite run folder. NAME overrides the model name
    the log gives. Samples pair by task and document id, only when their prompts are identical.

    Exit codes: 0 pass, 1 fail (or inconclusive under on_inconclusive: fail), 2 bad input, 3 internal error.
    """
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.compare.build import compare_logs
    from evalsuite.compare.scoring import parse_metrics
    from evalsuite.store.bulk import gc_paused
    from evalsuite.store.sqlite import Store
    from evalsuite.gate.policy import load_policy

    parsed = load_policy(policy)  # refused with the key path before any log is read
    keys = [k.strip() for item in slice_keys for k in item.split(",") if k.strip()]
    run_dir = (out or runs_root()) / (run_id or time.strftime("compare-%Y%m%d-%H%M%S"))
    with gc_paused():  # every row of the run is held at once (acyclic records): no collector passes over them
        done = compare_logs(baseline, list(variants), run_dir, parse_metrics(metrics), keys)
        set_run_dir(run_dir)
        click.echo(f"compared run {run_dir.name}: stored in {run_dir / Store.FILENAME}")
        for line in done.notes:
            click.echo(f"  {line}")
        store = Store.open(run_dir)
        try:
            return gate_and_report(store, parsed, echo=click.echo, report=not no_report)
        finally:
            store.close()
