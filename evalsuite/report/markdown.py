"""``summary.md`` from a report dict: the overall verdict, the decision per variant, a variants × tasks grid,
the verdict table (sparse slices left out), secondary metrics, memory/speed and the top reasons."""
from __future__ import annotations

from typing import Any

from evalsuite.report.deciding import fail_text, pass_text, stopped_text, to_decide
from evalsuite.report.digest import (POOLED, guarantee_text, kld_text, machine_line, metric_names, metric_rows,
                                     pooled_text, split_rows, task_decision, task_names, variant_cards,
                                     verification_lines)
from evalsuite.report.tenants import tenants_markdown
from evalsuite.report.model import (cell_verdict, check_report, fmt_bytes, fmt_delta, fmt_ms, fmt_num,
                                    ordered_reasons, sorted_stats, stat_delta, stat_mean)


def _cell(x: Any) -> str:
    """Table-safe text: pipes escaped, newlines flattened."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _pct(ratio: float | None) -> str:
    if ratio is None:
        return ""
    return " (same)" if abs(ratio - 1) < 0.005 else f" ({(ratio - 1) * 100:+.0f}%)"


def _decision_lines(r: dict[str, Any]) -> list[str]:
    """One bullet per variant: verdict, bytes and speed vs the baseline, where an undecided one heads to a FAIL (said
    first), the reasons that decided it, and what a PASS needs when nothing heads to a FAIL."""
    out = []
    for c in variant_cards(r):
        w, kv, ttft, itl = c["weights"], c["kv"], c["ttft"], c["itl"]
        speed = ", ".join(f"{name} {x['ratio']:.2f}×" for name, x in (("TTFT", ttft), ("ITL", itl)) if x["ratio"])
        facts = [f"weights {fmt_bytes(w['value'])}{_pct(w['ratio'])}",
                 ("KV —" if kv["value"] is None else f"KV {kv['value']:,.0f} B/token{_pct(kv['ratio'])}")]
        facts += [speed] if speed else []
        reasons = "; ".join(_cell(x["reason"]) + (f" ({to_decide(x)})" if to_decide(x) else "") for x in c["reasons"])
        to_fail = fail_text(c.get("to_fail"))
        to_pass = "" if to_fail else pass_text(c["to_pass"])
        out.append(f"- **{c['verdict'] or '—'}** `{c['variant']}` — {' · '.join(facts)}"
                   + (f" — **{_cell(to_fail[0].upper() + to_fail[1:])}**" if to_fail else "")
                   + (f" — {reasons}" if reasons else f" — {c['passed']} of {c['checks']} checks pass")
                   + (f". To decide it: {to_pass}" if to_pass else "")
                   + (f". {stopped_text(c['stopped'])}" if c["stopped"] else "")
                   + (f". {kld_text(c['kld'])}" if c.get("kld") else ""))
    return out or ["- no variants besides the baseline"]


def _grid_text(d: dict[str, Any] | None) -> str:
    """``-0.170 [-0.300, -0.050] FAIL n=30`` (+ ``≈+60`` samples to decide) for one grid cell."""
    if d is None:
        return "—"
    s = d["stat"]
    delta = fmt_delta(s["delta"], s["ci_low"], s["ci_high"]) if s else "no paired samples"
    if d["checks"] and d["checks"][0]["task"] == POOLED:
        delta = pooled_text(d)
    n_all = s["n"] if s else None
    n_slice = "?" if d["n"] is None else d["n"]  # None: a run from before checks stored their n
    where = f" in {', '.join(d['slices'])} (n={n_slice})" if d["slices"] and d["verdict"] != "PASS" else ""
    more = f" ≈+{d['more_needed']} to decide" if d["more_needed"] else ""
    return f"{delta} n={n_all or n_slice} {d['verdict'] or ''}{where}{more}"


def _grid(r: dict[str, Any]) -> list[str]:
    """Variants × tasks: Δ [CI] of slice all, the task verdict, n and samples still needed."""
    tasks = task_names(r, pooled=True)
    variants = [x["variant"] for x in r["variants"] if x["variant"] != r["baseline"]]
    rows = [[v, *(_grid_text(task_decision(r, v, t)) for t in tasks)] for v in variants]
    head = ["pooled (all tasks)" if t == POOLED else t for t in tasks]
    return _table(["variant", *head], rows) if tasks and rows else []


def _metric_tables(r: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for task in task_names(r):
        rows = metric_rows(r, task)
        names = metric_names(rows)
        cells = [[s["variant"], s["n"]] + [("—" if (m := s["metrics"].get(name)) is None else
                                            f"{m['baseline']:.3f} → {m['variant']:.3f} ({m['delta']:+.3f})")
                                           for name in names] for s in rows]
        out += ([f"### {_cell(task)}", ""] + _table(["variant", "n", *names], cells) + [""]) if rows else []
    return (["## Secondary metrics (baseline → variant)", ""] + out) if out else []


def _verdict_rows(r: dict[str, Any], stats: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for s in stats:
        kld = fmt_num(s.get("kld_mean"), 4)
        verdict = cell_verdict(r["checks"], s["variant"], s["task"], s["slice"]) or "—"
        rows.append([s["variant"], s["task"], s["slice"], s["n"], stat_mean(s, "baseline_mean"),
                     stat_mean(s, "variant_mean"), stat_delta(s),
                     f"{s.get('flips_right_to_wrong', 0)}/{s.get('flips_wrong_to_right', 0)}", kld, verdict])
    return rows


def _memory_rows(r: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for v in r["variants"]:
        kv = v.get("kv_bytes_per_token")
        verdict = "baseline" if v["variant"] == r["baseline"] else (v.get("verdict") or "—")
        rows.append([v["variant"], verdict, fmt_bytes(v["weight_bytes"]), "—" if kv is None else f"{kv:,.0f}",
                     fmt_ms(v.get("ttft_s")), fmt_ms(v.get("itl_s"))])
    return rows


def _kld_method_lines(r: dict[str, Any]) -> list[str]:
    """How KLD was measured: the run's method, and per variant the method of its rows when they say."""
    km = r.get("kld_method") or {}
    rows = {v: c for v, c in (km.get("rows") or {}).items() if any(c)}
    out = ["", f"KLD method: {_cell(km['run'])}"] if km.get("run") else []
    out += [f"- {_cell(v)}: " + ", ".join(f"{m or 'as above'} ({n} rows)" for m, n in sorted(c.items()))
            for v, c in sorted(rows.items())]
    return out


def render_markdown(report: dict[str, Any], max_reasons: int = 10) -> str:
    """The Markdown summary (GitHub-flavoured tables)."""
    r = check_report(report)
    m = r["model"]
    out = [f"# evalsuite: {_cell(m.get('name', '?'))} — **{r['overall']}** (exit {r['exit_code']})", "",
           f"Run `{r['run_id']}` · {r['created']} · fingerprint `{m.get('fingerprint', '?')}` · "
           f"baseline `{r['baseline']}` · tasks: "
           + (", ".join(f"{k} v{v}" for k, v in sorted(r["tasks"].items())) or "—"), ""]
    out += [_cell(x), ""] if (x := machine_line(r)) else []
    out += ["## Decision", ""]
    out += [_cell(g), ""] if (g := guarantee_text(r)) else []
    out += _decision_lines(r) + [""] + _grid(r) + [""]
    out += tenants_markdown(r, _cell, _table) + ["## Verdicts", ""]
    shown, hidden = split_rows(r, sorted_stats(r))
    out += _table(["variant", "task", "slice", "n", "baseline", "variant", "Δ [95% CI]", "flips R→W/W→R",
                   "KLD mean", "verdict"], _verdict_rows(r, shown))
    if hidden:
        out += ["", f"{len(hidden)} more slice rows (n below the policy's min_samples, or one sample per slice) "
                    "are in results.json and index.html."]
    out += _kld_method_lines(r)
    out += (["", "## Where the samples came from", ""] + [f"- {_cell(x)}" for x in r["notes"]]) if r["notes"] else []
    ver = verification_lines(r)
    out += ["", "Answers verified against the baseline's (docs/verification.md):"] + [f"- {_cell(x)}" for x in ver] \
        if ver else []
    out += ["", *_metric_tables(r), "## Memory and speed", ""]
    out += _table(["variant", "verdict", "weights", "KV B/token", "TTFT", "ITL"], _memory_rows(r))
    reasons = ordered_reasons(r["checks"], max_reasons)
    out += ["", "## Top reasons", ""]
    out += [f"- **{c['verdict']}** {_cell(c['variant'])} · {_cell(c['task'])}"
            + ("" if c["slice"] == "all" else f" · {_cell(c['slice'])}") + f": {_cell(c['reason'])}"
            for c in reasons] or ["- every check passed"]
    return "\n".join(out) + "\n"
