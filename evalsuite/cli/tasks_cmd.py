"""``evalsuite tasks``: list registered tasks."""
from __future__ import annotations

import click

from evalsuite.cli.common import table


@click.command()
def tasks() -> int:
    """List the registered tasks (built-in and `evalsuite.tasks` entry-point plugins)."""
    from evalsuite.tasks.registry import default_registry

    reg = default_registry()
    rows = []
    for name in reg.names():
        try:
            t = reg.get(name)
            rows.append([name, str(t.version), reg.origin(name), t.description or ""])
        except Exception as exc:  # a broken plugin must not hide the others
            rows.append([name, "?", reg.origin(name), f"failed to load: {exc}"])
    click.echo(table(rows, ["task", "version", "origin", "description"]))
    return 0
