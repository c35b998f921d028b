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
    from evalsuite.cli.finish import stored_tenants
    from evalsuite.cli.tenants_cmd import report_section
    from evalsuite.report.build import report_model, write_report
    from evalsuite.store.sqlite import Store, require_finished, resolve_run_dir

    parsed = load_policy(policy)
    run_dir = resolve_run_dir(run, runs_root())
    set_run_dir(run_dir)
    store = Store.open(run_dir)
    require_finished(store)
    tenants = stored_tenants(store)
    gated = gate_store(store, parsed, also=[t.policy for t in tenants])
    section = report_section(store, tenants, gated)
    path = write_report(store, gated, out or reports_root(), report_model(store, gated, tenants=section).to_dict())
    click.echo(f"report: {path / 'index.html'}")
    return 0
