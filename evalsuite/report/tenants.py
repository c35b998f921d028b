"""The tenants section, from a report's ``tenants`` dict (``tenants.run.decide_store``): a row per tenant (its
variant, verdict, requests per GPU and GPUs at its context, decode speed-up over bf16, runtime), then per tenant
why nothing serves it, its notes and one line per variant it does not get. Plain text (``evalsuite tenants``),
Markdown and HTML share the rows."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from evalsuite.report.html_common import e, table, verdict_cell
from evalsuite.report.model import fmt_bytes

HEAD = ["tenant", "runtime", "variant", "verdict", "req/GPU", "GPUs", "decode vs bf16", "workload"]
STATUS = {"baseline": " (baseline)", "undecided": " (baseline, undecided)"}


def _speed(d: Mapping[str, Any]) -> str:
    if d["decode_speedup"] is None:
        return "—"
    return "1.00× (bf16)" if d["speed_source"] == "baseline" else f"{d['decode_speedup']:.2f}× {d['speed_source']}"


def _workload(w: Mapping[str, Any]) -> str:
    ctx = f"{w['context']:,}" + (f"–{w['max_context']:,}" if w["max_context"] != w["context"] else "")
    gpu = f"{w['gpus']} × {fmt_bytes(w['gpu_mem'])}" + (f" {w['gpu']}" if w.get("gpu") else "")
    return f"{w['concurrency']} × {ctx} tokens, {gpu}"


def tenant_rows(decisions: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row of ``HEAD`` per tenant."""
    out = []
    for d in decisions:
        variant = (d["variant"] or "nothing serves it") + STATUS.get(d["status"], "")
        out.append([d["tenant"], d["runtime"], variant, d["verdict"] or "—",
                    "—" if d["requests_per_gpu"] is None else f"{d['requests_per_gpu']:.1f}",
                    "—" if d["gpus_needed"] is None else f"{d['gpus_needed']} of {d['workload']['gpus']}",
                    _speed(d), _workload(d["workload"])])
    return out


def tenant_lines(d: Mapping[str, Any]) -> list[str]:
    """Why nothing serves the tenant, its notes, then each variant it does not get (one line each)."""
    out = [d["why_none"]] if d["why_none"] else []
    out += [f"note: {n}" for n in d["notes"]]
    return out + [f"not {r['variant']} ({r['stage']}): {r['why']}" for r in d["rejected"]]


def tenants_text(section: Mapping[str, Any], table_fn: Any) -> list[str]:
    """``evalsuite tenants``' output: the table (``table_fn(rows, head)``), the lines, the exit code."""
    out = [f"tenants (model: {section['model']}):", table_fn(tenant_rows(section["decisions"]), HEAD)]
    out += [f"  {d['tenant']}: {line}" for d in section["decisions"] for line in tenant_lines(d)]
    return out + [f"tenants: exit {section['exit_code']}"]


def tenants_markdown(r: Mapping[str, Any], cell: Any, md_table: Any) -> list[str]:
    """The Markdown section (``cell`` escapes text, ``md_table(head, rows)`` builds a table); empty without
    tenants."""
    t = r.get("tenants")
    if not t:
        return []
    out = ["## Tenants", "", f"Exit {t['exit_code']} · model: {cell(t['model'])}", ""]
    out += md_table(HEAD, tenant_rows(t["decisions"]))
    for d in t["decisions"]:
        lines = tenant_lines(d)
        out += (["", f"**{cell(d['tenant'])}**", ""] + [f"- {cell(x)}" for x in lines]) if lines else []
    return out + [""]


def tenants_html(r: Mapping[str, Any]) -> str:
    """The HTML section; empty without tenants."""
    t = r.get("tenants")
    if not t:
        return ""
    rows = []
    for d, row in zip(t["decisions"], tenant_rows(t["decisions"])):
        cells = [f'<td class="l">{e(x)}</td>' for x in row[:3]]
        verdict = d["verdict"] if d["verdict"] in ("PASS", "INCONCLUSIVE", "FAIL") else None
        cells.append(verdict_cell(verdict, row[3]))
        cells += [f"<td>{e(x)}</td>" for x in row[4:7]] + [f'<td class="l wrap">{e(row[7])}</td>']
        rows.append(f'<tr class="tenant t-{e(d["status"])}" data-tenant="{e(d["tenant"])}">{"".join(cells)}</tr>')
    details = "".join(
        f'<h3>{e(d["tenant"])}</h3><ul class="reasons tenant-lines">'
        + "".join(f"<li>{e(x)}</li>" for x in tenant_lines(d)) + "</ul>" for d in t["decisions"] if tenant_lines(d))
    return (f'<h2 id="tenants">Tenants</h2><p class="meta">exit {e(t["exit_code"])} · model: {e(t["model"])}</p>'
            + table(HEAD, rows, left=3) + details)
