"""``evalsuite tenants RUN``: per tenant, the variant of RUN that serves its workload best under its policy."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import click

from evalsuite.cli.common import runs_root, table
from evalsuite.errors import EvalsuiteError

if TYPE_CHECKING:
    from evalsuite.store.state import RunState
    from evalsuite.tenants.decide import TenantDecision


def model_config(state: "RunState", path: Path | None) -> dict[str, Any]:
    """The config.json the planner sizes the run's model from: ``path`` (a file or its folder), else what the run
    recorded, else the run's model's own folder (the embedded model's converted one)."""
    from evalsuite.capacity.shape import load_config

    if path is not None:
        return load_config(path)
    if state.model_config:
        return dict(state.model_config)
    model = (state.config or {}).get("model")
    try:
        from evalsuite.models.loader import resolve_source

        source = resolve_source(str(model)) if model else None
        return load_config(source) if isinstance(source, Path) else {}
    except EvalsuiteError:
        return {}


def require_config(state: "RunState", path: Path | None, run: str) -> dict[str, Any]:
    """``model_config``, or a one-line error saying how to give it."""
    config = model_config(state, path)
    if not config:
        raise EvalsuiteError(f"run {run}: cannot find its model's config.json to size it; give --model-config "
                             f"PATH (a config.json or the model folder)")
    return config


def print_decisions(section: Mapping[str, Any], echo: Any = click.echo) -> None:
    """The table and its lines, as ``evalsuite tenants`` and ``run --tenants`` print them."""
    from evalsuite.report.tenants import tenants_text

    for line in tenants_text(section, table):
        echo(line)


def tenant_section(store: Any, tenants: list[Any], config_path: Path | None, run: str,
                   gated: Any = None) -> tuple[list["TenantDecision"], dict[str, Any]]:
    """The decisions on a stored run and the report's tenants section."""
    from evalsuite.tenants.run import decide_store

    return decide_store(store, tenants, require_config(store.state(), config_path, run), gated)


def report_section(store: Any, tenants: list[Any], gated: Any, echo: Any = None) -> dict[str, Any] | None:
    """The tenants section of a run's report (printed when ``echo``); None, said in one line, when the run's model
    cannot be sized (the gate and the report go on without it)."""
    if not tenants:
        return None
    try:
        section = tenant_section(store, tenants, None, store.path.parent.name, gated)[1]
    except EvalsuiteError as exc:
        (echo or click.echo)(f"tenants: not decided: {exc}")
        return None
    if echo is not None:
        print_decisions(section, echo)
    return section


@click.command()
@click.argument("run")
@click.option("--tenants", "tenants_path", type=click.Path(path_type=Path),
              help="tenants.yaml: per tenant a workload, its runtime, objective and policy (docs/tenants.md). "
                   "[default: the tenants RUN was run with]")
@click.option("--model-config", type=click.Path(path_type=Path),
              help="The model's config.json (or its folder), when RUN did not record it.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the same decisions).")
def tenants(run: str, tenants_path: Path | None, model_config: Path | None, as_json: bool) -> int:
    """For each tenant: of RUN's variants, those its runtime serves, that fit its GPUs at its context and
    concurrency, and that pass its policy, the best by its objective (else the baseline if it fits), with one line
    per variant it does not get.

    Exit codes: 0 every tenant has a decided variant (a fitting baseline counts), 1 a tenant is left with nothing
    or with only INCONCLUSIVE evidence under on_inconclusive: fail, 2 bad input (a bad tenants file: before the
    run is read).
    """
    from evalsuite.store.sqlite import Store, require_finished, resolve_run_dir
    from evalsuite.tenants.spec import from_stored, load_tenants

    spec = load_tenants(tenants_path) if tenants_path is not None else None
    store = Store.open(resolve_run_dir(run, runs_root()))
    require_finished(store)
    state = store.state()
    if spec is None:
        if not state.tenants:
            raise EvalsuiteError(f"run {run} was not run with --tenants: give --tenants FILE")
        spec = from_stored(state.tenants)
    _, section = tenant_section(store, spec, model_config, run)
    if as_json:
        click.echo(json.dumps(section, indent=2))
    else:
        print_decisions(section)
    return int(section["exit_code"])
