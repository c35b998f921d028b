"""``evalsuite report RUN``: rebuild the report from the store, no model."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import reports_root, runs_root, set_run_dir
from evalsuite.paths import REPORTS_HELP


@click.command()
@click.argument("run")
@click.option("--policy", type=click.Path(path_type=Path), help="Policy YAML used for the verdicts.")
@click.option("--out", type=click.Path(path_type=Path), help=f"Reports folder [default: {REPORTS_HELP}].")
def report(run: str, policy: Path | None, out: Path | None) -> int:
    """Rebuild index.html, summary.md, results.json and junit.xml of RUN under <reports folder>/<run>/."""
    from evalsuite.gate.policy import load_policy
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.build import write_report
    from evalsuite.core.store import Store, require_finished, resolve_run_dir

    load_policy(policy)
    run_dir = resolve_run_dir(run, runs_root())
    set_run_dir(run_dir)
    store = Store.open(run_dir)
    require_finished(store)
    path = write_report(store, gate_store(store, policy), out or reports_root())
    click.echo(f"report: {path / 'index.html'}")
    return 0
