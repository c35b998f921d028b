"""``evalsuite tenants RUN --tenants T``: per-tenant precision fallback."""
from __future__ import annotations

import json
from pathlib import Path

import click

from evalsuite.cli.common import runs_root, table
from evalsuite.report.model import fmt_bytes


@click.command()
@click.argument("run")
@click.option("--tenants", "tenants_path", required=True, type=click.Path(path_type=Path),
              help="tenants.yaml: per tenant a policy and a cost objective.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tenants(run: str, tenants_path: Path, as_json: bool) -> int:
    """For each tenant, the cheapest variant of RUN that passes the tenant's policy, else the baseline,
    with the reason each cheaper variant was rejected."""
    from evalsuite.gate.tenants import load_tenants, tenants_run
    from evalsuite.core.store import Store, require_finished, resolve_run_dir

    spec = load_tenants(tenants_path)
    store = Store.open(resolve_run_dir(run, runs_root()))
    require_finished(store)
    state = store.state()
    baseline = state.baseline
    variants = [v for v in state.variant_order or store.variants_present() if v != baseline]
    infos = store.variant_infos()
    _, decisions = tenants_run(store.samples(baseline), {v: store.samples(v) for v in variants},
                               {v: store.kld(v) for v in variants}, infos, spec, baseline_name=baseline)
    if as_json:
        click.echo(json.dumps([d.to_dict() for d in decisions], indent=2))
        return 0
    rows = [[d.tenant, d.chosen + (" (fallback)" if d.fallback else ""), d.cost,
             fmt_bytes(infos[d.chosen].weight_bytes) if d.chosen in infos else "-"] for d in decisions]
    click.echo(table(rows, ["tenant", "variant", "cost objective", "weight bytes"]))
    for d in decisions:
        for r in d.rejected:
            why = "; ".join(r.reasons) or "-"
            click.echo(f"  {d.tenant}: rejected {r.variant} ({r.verdict or 'not eligible'}): {why}")
    return 0
