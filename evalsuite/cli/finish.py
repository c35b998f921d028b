"""Shared end of `run` and `gate`: print the verdict table, write the report, return the gate's exit code."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from evalsuite.cli.common import reports_root, table
from evalsuite.gate.policy import Policy
from evalsuite.gate.store_gate import GatedRun, gate_store
from evalsuite.gate.types import worst
from evalsuite.store.sqlite import Store


def verdict_rows(gated: GatedRun) -> tuple[list[str], list[list[str]]]:
    """One row per variant × task (slice 'all'): Δ with CI, flips, KLD, verdict."""
    per_task: dict[tuple[str, str], list[str]] = {}
    for c in gated.gate.checks:
        per_task.setdefault((c.variant, c.task), []).append(c.verdict)
    verdicts = {key: worst(vs) for key, vs in per_task.items()}
    rows = []
    for s in gated.stats:
        if s.slice != "all":
            continue
        flips = f"{s.flips_right_to_wrong}↓ {s.flips_wrong_to_right}↑" if s.binary else "-"
        kld = f"{s.kld_mean:.3f}" if s.kld_mean is not None else "-"
        paired = s.n > 0  # else only the baseline answered: no means, no Δ
        rows.append([s.variant, s.task, str(s.n), f"{s.baseline_mean:.3f}" if paired else "-",
                     f"{s.variant_mean:.3f}" if paired else "-",
                     f"{s.delta:+.3f} [{s.ci_low:+.3f},{s.ci_high:+.3f}]" if paired else "no paired samples",
                     flips, kld,
                     verdicts.get((s.variant, s.task), "-")])
    return ["variant", "task", "n", "base", "variant", "Δ [95% CI]", "flips", "KLD", "verdict"], rows


def gate_and_report(store: Store, policy: Policy | Path | None, echo: Callable[[str], None] = print,
                    report: bool = True, max_reasons: int = 12, tenants: list[Any] | None = None) -> int:
    """Gate the stored run under ``policy`` (parsed, or a file or None: the shipped one), print verdicts and the
    worst reasons, write the report; return the exit code. With
    ``tenants`` (else those the run stored), the decision per tenant follows the verdicts and joins the report."""
    tenants = tenants if tenants is not None else stored_tenants(store)
    gated = gate_store(store, policy, also=[t.policy for t in tenants])
    header, rows = verdict_rows(gated)
    echo("\n" + table(rows, header))
    bad = [c for c in gated.gate.checks if c.verdict != "PASS"]
    bad.sort(key=lambda c: c.verdict != "FAIL")
    for c in bad[:max_reasons]:
        echo(f"  {c.verdict:<12} {c.variant}: {c.reason}")
    if len(bad) > max_reasons:
        echo(f"  ... {len(bad) - max_reasons} more (see the report)")
    if gated.noise:
        nf = [s for s in gated.noise if s.slice == "all"]
        flips = sum(s.flips_right_to_wrong + s.flips_wrong_to_right for s in nf)
        kmax = max((s.kld_mean or 0.0 for s in nf), default=0.0)
        echo(f"noise floor (baseline rerun at another batch size): {flips} flips, max mean KLD {kmax:.4f}")
    state = store.state()
    if state.rounds:
        drawn = ", ".join(f"{t} {n}" for t, n in sorted(state.drawn.items()))
        cpu = state.machine or {}
        speed = (f"; CPU: {cpu.get('speed_class') or '?'} class, {float(cpu['gflops']):.0f} GFLOP/s"
                 if cpu.get("gflops") is not None else "")
        echo(f"sequential: {state.rounds} look(s), samples drawn per task: {drawn}; stopped: "
             f"{state.stop_reason or 'interrupted'}{speed}")
    from evalsuite.report.build import report_model, write_report
    from evalsuite.report.deciding import fail_text, pass_text
    from evalsuite.report.digest import variant_cards

    from evalsuite.cli.tenants_cmd import report_section

    section = report_section(store, tenants, gated, echo)
    model = report_model(store, gated, tenants=section).to_dict()
    if report:
        path = write_report(store, gated, reports_root(), model)
        echo(f"report: {path / 'index.html'}")
    cards = variant_cards(model)
    for line in decision_lines(gated, {c["variant"]: pass_text(c["to_pass"]) for c in cards},
                               {c["variant"]: fail_text(c["to_fail"]) for c in cards}):
        echo(line)
    return gated.gate.exit_code


def decision_lines(gated: GatedRun, to_pass: dict[str, str] | None = None,
                   to_fail: dict[str, str] | None = None) -> list[str]:
    """The last lines: each variant's verdict with its pairs per task and, under an INCONCLUSIVE one, where it
    heads: to a FAIL (``to_fail``, variant -> ``report.deciding.fail_text``) or, when nothing heads there, what a
    PASS would take (``to_pass``, variant -> ``report.deciding.pass_text``); which may ship, the exit code."""
    n = {(s.variant, s.task): s.n for s in gated.stats if s.slice == "all"}
    lines, ship, hold = [], [], []
    for v, verdict in gated.gate.variant_verdicts.items():
        per_task = ", ".join(f"{t} n={k}" for (name, t), k in n.items() if name == v)
        lines.append(f"{v:<24} {verdict}" + (f"  ({per_task})" if per_task else ""))
        under = (to_fail or {}).get(v) or (to_pass or {}).get(v)
        if under:
            lines.append(f"{'':<24} {under}")
        (ship if verdict == "PASS" else hold).append(v if verdict == "PASS" else f"{v} ({verdict})")
    lines.append(f"may ship: {', '.join(ship) or 'none'}; may not ship: {', '.join(hold) or 'none'}")
    lines.append(f"overall: {gated.gate.overall} (exit {gated.gate.exit_code})")
    return lines


def stored_tenants(store: Store) -> list[Any]:
    """The tenants a run was run with (``evalsuite run --tenants``), else none."""
    state = store.state()
    if not state.tenants:
        return []
    from evalsuite.tenants.spec import from_stored

    return from_stored(state.tenants)
