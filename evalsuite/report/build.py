"""Build a run's report from its store: index.html, summary.md, results.json, junit.xml (written atomically)."""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from evalsuite.core.costs import RunCosts
from evalsuite.gate.store_gate import GatedRun
from evalsuite.report.html import render_html
from evalsuite.report.junit import render_junit
from evalsuite.report.markdown import render_markdown
from evalsuite.report.model import Flip, ReportModel, needle_grid
from evalsuite.store.records import SampleResult, is_right
from evalsuite.store.state import RunState
from evalsuite.store.sqlite import Store

MAX_FLIPS = 400


def _flips(base: list[SampleResult], variant: list[SampleResult]) -> list[Flip]:
    """Samples whose right/wrong status (``store.records.is_right``) differs between baseline and variant."""
    by_id = {(r.task, r.sample_id): r for r in base}
    out = []
    for v in variant:
        b = by_id.get((v.task, v.sample_id))
        if b is not None and is_right(b.score) != is_right(v.score):
            out.append(Flip(v.variant, v.task, v.sample_id, b.prompt, b.output, v.output, b.score, v.score))
    return out


def report_model(store: Store, gated: GatedRun, tenants: dict[str, Any] | None = None) -> ReportModel:
    """Gather the typed report model (see evalsuite.report.model for the schema); ``tenants``: the run's tenants
    section (``tenants.run.decide_store``), rendered as it is."""
    state = store.state()
    infos = store.variant_infos()
    names = [gated.baseline] + gated.variants
    base = store.samples(gated.baseline)
    flips: list[Flip] = []
    needle_rows = [r for r in base if r.task == "needle"]
    rows = {v: store.samples(v) for v in gated.variants}
    for v in gated.variants:
        flips += _flips(base, rows[v])
        needle_rows += [r for r in rows[v] if r.task == "needle"]
    created = state.created if state.created is not None else time.time()
    return ReportModel(
        run_id=store.path.parent.name,
        created=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(created)),
        model={"name": state.model_name, "fingerprint": state.fingerprint, "dtype": state.dtype},
        baseline=gated.baseline, gate=gated.gate, variants=[infos[n] for n in names if n in infos],
        stats=gated.stats, needle_grid=needle_grid(needle_rows), flips=flips[:MAX_FLIPS],
        tasks=dict(state.task_versions), noise_floor=gated.noise, policy=gated.policy.to_dict(),
        kld_method={"run": state.kld_method, "rows": store.kld_methods()},
        verification=verification(store, gated.variants, state, rows),
        seconds_per_pair=dict(state.seconds_per_pair) or None, baseline_cost=baseline_cost(state),
        stopped={v: dict(t) for v, t in state.stopped.items() if t} or None, notes=list(state.notes) or None,
        machine=dict(state.machine) or None, tenants=tenants)


def baseline_cost(state: RunState) -> dict[str, dict[str, float]] | None:
    """Per task of a sequential run: the samples drawn, those a stored baseline held, and the baseline's seconds
    per sample past them (``core.costs.RunCosts.base_rate``: measured in this run, else as the stored baseline
    recorded), so that the report prices the baseline's share of what a check still needs even where this run's
    baseline generated nothing. None for a run without rounds."""
    if not state.drawn:
        return None
    costs = RunCosts.from_state(state)
    return {task: {"drawn": drawn, "held": costs.held(task), "seconds": costs.base_rate(task, state.baseline)}
            for task, drawn in state.drawn.items()}


def verification(store: Store, variants: list[str], state: RunState,
                 rows: dict[str, list[SampleResult]] | None = None) -> dict[str, dict[str, int]]:
    """Per variant: how its answers were obtained (verified / diverged / regenerated / generated), the answer
    positions verification checked and flagged as near-ties, and the audit's agreement (``run.verify``). ``rows``:
    each variant's stored samples when the caller read them already."""
    out: dict[str, dict[str, int]] = {}
    for v in variants:
        paths: dict[str, int] = {}
        for r in (rows or {}).get(v) or store.samples(v):
            key = (r.decode or "generated").split("@")[0]
            paths[key] = paths.get(key, 0) + 1
        tally = (state.verify or {}).get(v, {}).values()
        audit = (state.verify_audit or {}).get(v, {}).values()
        row = {**paths, "positions": sum(t.get("positions", 0) for t in tally),
               "near_ties": sum(t.get("near_ties", 0) for t in tally),
               "stepped": sum(t.get("stepped", 0) for t in tally),
               "audited": sum(a.get("n", 0) for a in audit), "audit_same": sum(a.get("same", 0) for a in audit)}
        if paths.get("verified") or paths.get("diverged") or paths.get("regenerated"):
            out[v] = row
    return out


def write_report(store: Store, gated: GatedRun, out_root: Path, report: dict[str, Any] | None = None) -> Path:
    """Render every format into ``out_root/<run>/``; nothing half-written (temp folder, then rename). ``report``:
    the run's report dict when the caller built it already (``report_model(store, gated).to_dict()``)."""
    report = report if report is not None else report_model(store, gated).to_dict()
    target = Path(out_root) / report["run_id"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{report['run_id']}-"))
    try:
        (tmp / "results.json").write_text(json.dumps(report, indent=1, default=str))
        (tmp / "summary.md").write_text(render_markdown(report))
        (tmp / "junit.xml").write_text(render_junit(report))
        (tmp / "index.html").write_text(render_html(report))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
