"""``evalsuite gate RUN``: re-gate stored samples against a policy, no model."""
from __future__ import annotations

from pathlib import Path

import click

from evalsuite.cli.common import runs_root, set_run_dir


@click.command()
@click.argument("run")
@click.option("--policy", type=click.Path(path_type=Path), help="Policy YAML (default: the shipped policy).")
@click.option("--no-report", is_flag=True, help="Only print verdicts; do not rewrite the report.")
def gate(run: str, policy: Path | None, no_report: bool) -> int:
    """Re-gate the stored samples of RUN (a run id under the runs folder, or a run folder) in seconds.

    Exit codes: 0 pass, 1 fail (or inconclusive under on_inconclusive: fail), 2 bad input, 3 internal error,
    130 interrupted (Ctrl-C).
    """
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.gate.policy import load_policy
    from evalsuite.store.sqlite import Store, require_finished, resolve_run_dir

    parsed = load_policy(policy)  # refused with the key path before the store is read
    run_dir = resolve_run_dir(run, runs_root())
    set_run_dir(run_dir)
    store = Store.open(run_dir)
    require_finished(store)
    return gate_and_report(store, parsed, echo=click.echo, report=not no_report)
