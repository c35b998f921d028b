"""``summary.md`` from a report dict: the overall verdict, the verdict table, memory/speed and the top reasons."""
from __future__ import annotations

from typing import Any

from evalsuite.report.model import (cell_verdict, check_report, fmt_bytes, fmt_delta, fmt_ms, fmt_num,
                                    ordered_reasons, sorted_stats)


def _cell(x: Any) -> str:
    """Table-safe text: pipes escaped, newlines flattened."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _verdict_rows(r: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for s in sorted_stats(r):
        kld = fmt_num(s.get("kld_mean"), 4)
        verdict = cell_verdict(r["checks"], s["variant"], s["task"], s["slice"]) or "—"
        rows.append([s["variant"], s["task"], s["slice"], s["n"], fmt_num(s["baseline_mean"]),
                     fmt_num(s["variant_mean"]), fmt_delta(s["delta"], s["ci_low"], s["ci_high"]),
                     f"{s['flips_right_to_wrong']}/{s['flips_wrong_to_right']}", kld, verdict])
    return rows


def _memory_rows(r: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for v in r["variants"]:
        kv = v.get("kv_bytes_per_token")
        verdict = "baseline" if v["variant"] == r["baseline"] else (v.get("verdict") or "—")
        rows.append([v["variant"], verdict, fmt_bytes(v["weight_bytes"]), "—" if kv is None else f"{kv:,.0f}",
                     fmt_ms(v.get("ttft_s")), fmt_ms(v.get("itl_s"))])
    return rows


def render_markdown(report: dict[str, Any], max_reasons: int = 10) -> str:
    """The Markdown summary (GitHub-flavoured tables)."""
    r = check_report(report)
    m = r["model"]
    out = [f"# evalsuite: {_cell(m.get('name', '?'))} — **{r['overall']}** (exit {r['exit_code']})", "",
           f"Run `{r['run_id']}` · {r['created']} · fingerprint `{m.get('fingerprint', '?')}` · "
           f"baseline `{r['baseline']}` · tasks: "
           + (", ".join(f"{k} v{v}" for k, v in sorted(r["tasks"].items())) or "—"), "", "## Verdicts", ""]
    out += _table(["variant", "task", "slice", "n", "baseline", "variant", "Δ [95% CI]", "flips R→W/W→R",
                   "KLD mean", "verdict"], _verdict_rows(r))
    out += ["", "## Memory and speed", ""]
    out += _table(["variant", "verdict", "weights", "KV B/token", "TTFT", "ITL"], _memory_rows(r))
    reasons = ordered_reasons(r["checks"], max_reasons)
    out += ["", "## Top reasons", ""]
    out += [f"- **{c['verdict']}** {_cell(c['variant'])} · {_cell(c['task'])}"
            + ("" if c["slice"] == "all" else f" · {_cell(c['slice'])}") + f": {_cell(c['reason'])}"
            for c in reasons] or ["- every check passed"]
    return "\n".join(out) + "\n"
