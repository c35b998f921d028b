"""``evalsuite gate RUN``: re-gate stored samples against a policy, no model."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import runs_root


@click.command()
@click.argument("run")
@click.option("--policy", type=click.Path(path_type=Path), help="Policy YAML (default: the shipped policy).")
@click.option("--no-report", is_flag=True, help="Only print verdicts; do not rewrite the report.")
def gate(run: str, policy: Path | None, no_report: bool) -> int:
    """Re-gate the stored samples of RUN (a run id under ./runs, or a run folder) in seconds.

    Exit codes: 0 pass, 1 fail (or inconclusive under on_inconclusive: fail), 2 bad input, 3 internal error.
    """
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.gate.policy import load_policy
    from evalsuite.run.pipeline import require_finished
    from evalsuite.run.store import Store, resolve_run_dir

    load_policy(policy)  # refused with the key path before the store is read
    store = Store.open(resolve_run_dir(run, runs_root()))
    require_finished(store)
    return gate_and_report(store, policy, echo=click.echo, report=not no_report)
