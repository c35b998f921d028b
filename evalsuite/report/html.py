"""Self-contained ``index.html`` from a report dict: verdict table, memory/speed, checks, forest plot, needle
heatmaps and a flipped-sample browser. Plots are data URIs, CSS and script are inline, a Content-Security-Policy
forbids any network load, and every piece of report text goes through ``html.escape``."""
from __future__ import annotations

from html import escape
from typing import Any

from evalsuite.report import plots
from evalsuite.report.model import (cell_verdict, check_report, fmt_bytes, fmt_delta, fmt_ms, fmt_num,
                                    sorted_stats, stat_label)
from evalsuite.report.templates import CSP, CSS, PAGE, SCRIPT

MAX_FLIPS = 1000


def _e(x: Any) -> str:
    return escape(str(x), quote=True)


def _verdict(v: str | None, text: str | None = None) -> str:
    cls = f"v-{v}" if v in ("PASS", "FAIL", "INCONCLUSIVE") else "v-none"
    return f'<td class="v {cls}">{_e(text or v or "—")}</td>'


def _table(head: list[str], rows: list[str], left: int = 1) -> str:
    """Header cells: the first ``left`` and a final ``reason`` left-aligned, the rest right-aligned."""
    ths = "".join(f'<th class="l">{_e(h)}</th>' if i < left or h == "reason" else f"<th>{_e(h)}</th>"
                  for i, h in enumerate(head))
    return f"<table><thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _count(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _img(png: bytes, alt: str) -> str:
    return f'<img class="plot" alt="{_e(alt)}" src="{plots.data_uri(png)}">'


def _header(r: dict[str, Any]) -> str:
    m = r["model"]
    tasks = ", ".join(f"{_e(k)} <code>v{_e(v)}</code>" for k, v in sorted(r["tasks"].items())) or "—"
    return (f"<h1>evalsuite report: {_e(m.get('name', '?'))}</h1>"
            f'<p><span class="badge v v-{_e(r["overall"])}">{_e(r["overall"])}</span> '
            f'&nbsp;exit code {_e(r["exit_code"])}</p>'
            f'<p class="meta">run <code>{_e(r["run_id"])}</code> · {_e(r["created"])} · fingerprint '
            f'<code>{_e(m.get("fingerprint", "?"))}</code> · dtype {_e(m.get("dtype", "?"))} · baseline '
            f'<code>{_e(r["baseline"])}</code><br>tasks: {tasks}</p>')


def _delta_cell(s: dict[str, Any]) -> str:
    cls = "neg" if s["ci_high"] < 0 else ("pos" if s["ci_low"] > 0 else "")
    return f'<td class="{cls}">{_e(fmt_delta(s["delta"], s["ci_low"], s["ci_high"]))}</td>'


def _verdict_table(r: dict[str, Any]) -> str:
    rows = []
    for s in sorted_stats(r):
        kld = "—" if s.get("kld_mean") is None else f"{s['kld_mean']:.4f} / {fmt_num(s.get('kld_p99'), 4)}"
        cls = "" if s["slice"] == "all" else ' class="slice"'
        rows.append(
            f'<tr{cls}><td class="l first">{_e(s["variant"])}</td><td class="l">{_e(s["task"])}</td>'
            f'<td class="l">{_e(s["slice"])}</td><td>{s["n"]}</td><td>{fmt_num(s["baseline_mean"])}</td>'
            f'<td>{fmt_num(s["variant_mean"])}</td>{_delta_cell(s)}'
            f'<td>{s["flips_right_to_wrong"]} / {s["flips_wrong_to_right"]}</td>'
            f'<td>{fmt_num(s.get("agreement"), 2)}</td><td>{kld}</td><td>{fmt_num(s.get("top1_agreement"), 3)}</td>'
            f'{_verdict(cell_verdict(r["checks"], s["variant"], s["task"], s["slice"]))}</tr>')
    head = ["variant", "task", "slice", "n", "baseline", "variant", "Δ [95% CI]", "flips R→W / W→R",
            "same text", "KLD mean / p99", "top-1 agree", "verdict"]
    body = _table(head, rows, left=3) if rows else '<p class="note">No paired statistics in this run.</p>'
    return "<h2 id=\"verdicts\">Quality vs baseline</h2>" + body


def _memory_table(r: dict[str, Any]) -> str:
    base = next((v for v in r["variants"] if v["variant"] == r["baseline"]), None)
    rows = []
    for v in r["variants"]:
        ratio = (f"{v['weight_bytes'] / base['weight_bytes']:.2f}×" if base and base["weight_bytes"] else "—")
        verdict = "baseline" if v["variant"] == r["baseline"] else v.get("verdict")
        rows.append(
            f'<tr><td class="l">{_e(v["variant"])}</td>{_verdict(v.get("verdict"), verdict)}'
            f'<td>{fmt_bytes(v["weight_bytes"])}</td><td>{fmt_bytes(v.get("weight_formula_bytes"))}</td>'
            f'<td>{ratio}</td><td>{_count(v.get("kv_bytes_per_token"))}</td>'
            f'<td>{_count(v.get("kv_formula_bytes_per_token"))}</td>'
            f'<td>{fmt_ms(v.get("ttft_s"))}</td><td>{fmt_ms(v.get("itl_s"))}</td></tr>')
    head = ["variant", "verdict", "weights (measured)", "weights (formula)", "vs baseline", "KV B/token",
            "KV B/token (formula)", "TTFT (median)", "ITL (median)"]
    return "<h2 id=\"memory\">Memory and speed</h2>" + _table(head, rows) + (
        '<p class="note">Speed measured on the run machine; it is not a proxy for quality and differs on GPUs.</p>')


def _checks_table(r: dict[str, Any]) -> str:
    order = {"FAIL": 0, "INCONCLUSIVE": 1, "PASS": 2}
    rows = []
    for c in sorted(r["checks"], key=lambda c: order.get(c["verdict"], 3)):
        ci = c.get("ci")
        rows.append(
            f'<tr><td class="l">{_e(c["variant"])}</td><td class="l">{_e(c["task"])}</td>'
            f'<td class="l">{_e(c["slice"])}</td><td class="l">{_e(c["check"])}</td><td>{c["threshold"]:g}</td>'
            f'<td>{fmt_num(c["observed"], 4)}</td>'
            f'<td>{"—" if not ci else _e(f"[{ci[0]:+.3f}, {ci[1]:+.3f}]")}</td>'
            f'{_verdict(c["verdict"])}<td class="l reason">{_e(c["reason"])}</td></tr>')
    head = ["variant", "task", "slice", "check", "threshold", "observed", "CI", "verdict", "reason"]
    return "<h2 id=\"checks\">Gate checks</h2>" + (_table(head, rows, left=4) if rows else
                                                    '<p class="note">No checks.</p>')


def _forest_section(r: dict[str, Any]) -> str:
    stats = sorted_stats(r)
    if not stats:
        return ""
    rows = [{"label": stat_label(s), "delta": s["delta"], "lo": s["ci_low"], "hi": s["ci_high"],
             "verdict": cell_verdict(r["checks"], s["variant"], s["task"], s["slice"])} for s in stats]
    tol = sorted({-float(c["threshold"]) for c in r["checks"] if c["check"] == "max_drop"})
    return ("<h2 id=\"forest\">Δ ± 95% CI</h2>" + _img(plots.forest_plot(rows, tol), "forest plot of deltas")
            + '<p class="note">Dashed red lines: the tolerated drops (max_drop checks).</p>')


def _needle_section(r: dict[str, Any]) -> str:
    grids = r["needle_grid"]
    if not grids:
        return ""
    base = grids.get(r["baseline"])
    imgs = [_img(plots.needle_heatmap(g, name, None if name == r["baseline"] else base), f"needle heatmap {name}")
            for name, g in grids.items()]
    return "<h2 id=\"needle\">Needle retrieval (depth × context length)</h2><div class=\"grid\">" + \
        "".join(imgs) + "</div>"


def _flip_card(f: dict[str, Any]) -> str:
    direction = "rw" if f["baseline_score"] > f["variant_score"] else "wr"
    label = "right → wrong" if direction == "rw" else "wrong → right"
    return (f'<div class="flip" data-variant="{_e(f["variant"])}" data-task="{_e(f["task"])}" '
            f'data-dir="{direction}"><header><b>{_e(f["variant"])}</b><b>{_e(f["task"])}</b>'
            f'sample <code>{_e(f["sample_id"])}</code> · <span class="dir-{direction}">{label}</span> · score {fmt_num(f["baseline_score"], 2)} → '
            f'{fmt_num(f["variant_score"], 2)}</header>'
            f'<details><summary>prompt</summary><pre>{_e(f["prompt"])}</pre></details><div class="pair">'
            f'<div><h4>baseline ({fmt_num(f["baseline_score"], 2)})</h4><pre>{_e(f["baseline_output"])}</pre></div>'
            f'<div><h4>variant ({fmt_num(f["variant_score"], 2)})</h4><pre>{_e(f["variant_output"])}</pre></div>'
            f"</div></div>")


def _options(values: list[str], all_label: str) -> str:
    return f'<option value="">{all_label}</option>' + "".join(
        f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)


def _flips_section(r: dict[str, Any]) -> str:
    flips = r["flips"]
    if not flips:
        return '<h2 id="flips">Flipped samples</h2><p class="note">No flipped samples.</p>'
    shown = flips[:MAX_FLIPS]
    note = (f'<p class="note">First {MAX_FLIPS} of {len(flips)} flips shown.</p>' if len(flips) > MAX_FLIPS else "")
    controls = (
        '<div class="controls">'
        f'<label>variant <select id="f-variant">{_options(sorted({f["variant"] for f in shown}), "all")}</select></label>'
        f'<label>task <select id="f-task">{_options(sorted({f["task"] for f in shown}), "all")}</select></label>'
        '<label>direction <select id="f-dir"><option value="">both</option><option value="rw">right → wrong'
        '</option><option value="wr">wrong → right</option></select></label>'
        '<label>search <input id="f-text" type="search" placeholder="text in prompt or answers"></label>'
        '<span id="f-count" class="note"></span></div>')
    return '<h2 id="flips">Flipped samples</h2>' + note + controls + "".join(_flip_card(f) for f in shown)


def _noise_section(r: dict[str, Any]) -> str:
    noise = r.get("noise_floor")
    if not noise:
        return ""
    rows = [f'<tr><td class="l">{_e(stat_label(s))}</td><td>{s["n"]}</td>{_delta_cell(s)}'
            f'<td>{s["flips_right_to_wrong"]} / {s["flips_wrong_to_right"]}</td>'
            f'<td>{fmt_num(s.get("agreement"), 2)}</td></tr>' for s in noise]
    return ('<h2 id="noise">Noise floor (baseline against itself)</h2>'
            + _table(["comparison", "n", "Δ [95% CI]", "flips R→W / W→R", "same text"], rows))


def render_html(report: dict[str, Any]) -> str:
    """The whole page as one string (no external resources)."""
    r = check_report(report)
    body = "".join([_header(r), _verdict_table(r), _memory_table(r), _checks_table(r), _forest_section(r),
                    _needle_section(r), _noise_section(r), _flips_section(r),
                    f'<p class="note">report schema v{_e(r["schema_version"])} · generated by evalsuite</p>'])
    title = f"evalsuite: {r['model'].get('name', '?')} {r['overall']}"
    return PAGE.substitute(csp=CSP, title=_e(title), css=CSS, body=body, script=SCRIPT)
