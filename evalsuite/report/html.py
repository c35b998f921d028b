"""Self-contained ``index.html`` from a report dict: first the decision (a card per variant, a variants × tasks
grid), then the verdict table (sparse slices behind a toggle), secondary metrics, memory/speed, checks, forest
plot of the gated rows, needle heatmaps and a flipped-sample browser. Plots are data URIs, CSS and script are
inline, a Content-Security-Policy forbids any network load, and every piece of report text is escaped."""
from __future__ import annotations

from typing import Any

from evalsuite.report import plots
from evalsuite.report.digest import (gated_rows, guarantee_text, machine_line, metric_names, metric_rows, split_rows,
                                     task_names, verification_lines)
from evalsuite.report.html_common import (count, delta_cell, e, fmt_metric, fmt_signed_metric, img, table,
                                          verdict_cell, wbr)
from evalsuite.report.html_decision import cards_section, grid_section
from evalsuite.report.model import (cell_verdict, check_report, fmt_bytes, fmt_ms, fmt_num, sorted_stats, stat_label,
                                    stat_mean)
from evalsuite.report.templates import CSP, CSS, PAGE, SCRIPT
from evalsuite.report.tenants import tenants_html

MAX_FLIPS = 1000


def _header(r: dict[str, Any]) -> str:
    m = r["model"]
    tasks = ", ".join(f"{e(k)} <code>v{e(v)}</code>" for k, v in sorted(r["tasks"].items())) or "—"
    guarantee = f'<p class="meta">{e(g)}</p>' if (g := guarantee_text(r)) else ""
    machine = f'<br><span class="machine">{e(x)}</span>' if (x := machine_line(r)) else ""
    return (f"<h1>evalsuite report: {e(m.get('name', '?'))}</h1>"
            f'<p><span class="badge v v-{e(r["overall"])}">{e(r["overall"])}</span> '
            f'&nbsp;exit code {e(r["exit_code"])}</p>{guarantee}'
            f'<p class="meta">run <code>{e(r["run_id"])}</code> · {e(r["created"])} · fingerprint '
            f'<code>{e(m.get("fingerprint", "?"))}</code> · dtype {e(m.get("dtype", "?"))} · baseline '
            f'<code>{e(r["baseline"])}</code><br>tasks: {tasks}{machine}</p>')


def _stats_row(r: dict[str, Any], s: dict[str, Any]) -> str:
    kld = "—" if s.get("kld_mean") is None else f"{s['kld_mean']:.4f} / {fmt_num(s.get('kld_p99'), 4)}"
    cls = "" if s["slice"] == "all" else ' class="slice"'
    return (f'<tr{cls}><td class="l first">{wbr(s["variant"])}</td><td class="l">{e(s["task"])}</td>'
            f'<td class="l">{wbr(s["slice"])}</td><td>{s["n"]}</td><td>{stat_mean(s, "baseline_mean")}</td>'
            f'<td>{stat_mean(s, "variant_mean")}</td>{delta_cell(s)}'
            f'<td>{s.get("flips_right_to_wrong", 0)} / {s.get("flips_wrong_to_right", 0)}</td>'
            f'<td>{fmt_num(s.get("agreement"), 2)}</td><td>{kld}</td><td>{fmt_num(s.get("top1_agreement"), 3)}</td>'
            f'{verdict_cell(cell_verdict(r["checks"], s["variant"], s["task"], s["slice"]))}</tr>')


_STATS_HEAD = ["variant", "task", "slice", "n", "baseline", "variant", "Δ [95% CI]", "flips R→W / W→R",
               "same text", "KLD mean / p99", "top-1 agree", "verdict"]


def _verdict_table(r: dict[str, Any]) -> str:
    """Every ``all`` and gated row; the rest of the slices with too few samples behind a <details> toggle."""
    shown, hidden = split_rows(r, sorted_stats(r))
    if not shown and not hidden:
        return '<h2 id="verdicts">Quality vs baseline</h2><p class="note">No paired statistics in this run.</p>'
    body = table(_STATS_HEAD, [_stats_row(r, s) for s in shown], left=3)
    if hidden:
        body += (f'<details class="more-slices" id="hidden-slices"><summary>{len(hidden)} more slice rows '
                 "(n below the policy's min_samples, or one sample per slice)</summary>"
                 + table(_STATS_HEAD, [_stats_row(r, s) for s in hidden], left=3) + "</details>")
    return '<h2 id="verdicts">Quality vs baseline</h2>' + body + _kld_method_note(r) + _verification_note(r)


def _verification_note(r: dict[str, Any]) -> str:
    """How each variant's answers were obtained (docs/verification.md)."""
    lines = verification_lines(r)
    if not lines:
        return ""
    return ('<p class="note" id="verification">Answers verified against the baseline\'s, not regenerated, where '
            'the variant\'s own greedy choice agrees at every token:</p><ul class="note">'
            + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")


def _kld_method_note(r: dict[str, Any]) -> str:
    """How KLD was measured: the run's method, and per variant the methods its rows record (served variants)."""
    km = r.get("kld_method") or {}
    rows = {v: c for v, c in (km.get("rows") or {}).items() if any(c)}
    per = "".join(f"<li>{e(v)}: " + ", ".join(f"{e(m or 'as above')} ({n} rows)" for m, n in sorted(c.items()))
                  + "</li>" for v, c in sorted(rows.items()))
    if not km.get("run") and not per:
        return ""
    return (f'<p class="note" id="kld-method">KLD method: {e(km.get("run") or "—")}</p>'
            + (f'<ul class="note">{per}</ul>' if per else ""))


def _metric_cell(m: dict[str, Any] | None, n: int) -> str:
    if not m:
        return "<td>—</td>"
    d = m.get("delta")
    cls = "" if not d else ("neg" if d < 0 else "pos")
    extra = f' <span class="note">n={m["n"]:.0f}</span>' if m.get("n") not in (None, n) else ""
    return (f'<td>{fmt_metric(m.get("baseline"))} → {fmt_metric(m.get("variant"))} '
            f'<span class="{cls}">({fmt_signed_metric(d)})</span>{extra}</td>')


def _metrics_section(r: dict[str, Any]) -> str:
    """Per task: the means of its secondary numeric metrics, baseline → variant (Δ), slice ``all``."""
    parts = []
    for task in task_names(r):
        rows = metric_rows(r, task)
        if not rows:
            continue
        names = metric_names(rows)
        body = [f'<tr><td class="l">{wbr(s["variant"])}</td><td>{s["n"]}</td>'
                + "".join(_metric_cell(s["metrics"].get(m), s["n"]) for m in names) + "</tr>" for s in rows]
        parts.append(f"<h3>{e(task)}</h3>" + table(["variant", "n", *names], body))
    if not parts:
        return ""
    return ('<h2 id="metrics">Secondary metrics (means, baseline → variant)</h2>' + "".join(parts)
            + '<p class="note">Means over the paired samples where both sides report the metric (booleans as 0/1); '
              "n shown where fewer samples report it.</p>")


def _artifact_note(v: dict[str, Any]) -> str:
    """An artifact variant's file and content fingerprint under its name (nothing for built variants)."""
    if not v.get("fingerprint"):
        return ""
    src = (v.get("spec") or {}).get("artifact") or v.get("source") or ""
    return f'<br><small title="{e(src)}">{e(src.rsplit("/", 1)[-1])} · {e(v["fingerprint"])}</small>'


def _memory_table(r: dict[str, Any]) -> str:
    base = next((v for v in r["variants"] if v["variant"] == r["baseline"]), None)
    rows = []
    for v in r["variants"]:
        ratio = (f"{v['weight_bytes'] / base['weight_bytes']:.2f}×" if base and base["weight_bytes"] else "—")
        verdict = "baseline" if v["variant"] == r["baseline"] else v.get("verdict")
        rows.append(
            f'<tr><td class="l">{wbr(v["variant"])}{_artifact_note(v)}</td>{verdict_cell(v.get("verdict"), verdict)}'
            f'<td>{fmt_bytes(v["weight_bytes"])}</td><td>{fmt_bytes(v.get("weight_formula_bytes"))}</td>'
            f'<td>{ratio}</td><td>{count(v.get("kv_bytes_per_token"))}</td>'
            f'<td>{count(v.get("kv_formula_bytes_per_token"))}</td>'
            f'<td>{fmt_ms(v.get("ttft_s"))}</td><td>{fmt_ms(v.get("itl_s"))}</td></tr>')
    head = ["variant", "verdict", "weights (measured)", "weights (formula)", "vs baseline", "KV B/token",
            "KV B/token (formula)", "TTFT (median)", "ITL (median)"]
    probe = next((v["speed_probe"] for v in r["variants"] if v.get("speed_probe")), None)
    how = (f' TTFT / ITL: a fixed probe, the same {probe["rows"]} prompts of {probe["prompt_tokens"]} tokens in one '
           f'batch, {probe["new_tokens"]} greedy tokens each, per variant.' if probe else
           ' TTFT / ITL: medians over the quality run\'s batches.')
    unpacked = [v["variant"] for v in r["variants"] if v.get("kernels") == "dequantized"]
    kernels = (f' {e(", ".join(unpacked))}: quantized weights ran unpacked once into the compute dtype (the same '
               'values as the packed form, faster here), so their speed is not the packed kernels\'; '
               '<code>--weight-kernels quanto</code> measures those.') if unpacked else ""
    return "<h2 id=\"memory\">Memory and speed</h2>" + table(head, rows) + (
        '<p class="note">Speed measured on the run machine; it is not a proxy for quality and differs on GPUs.'
        f'{how}{kernels}</p>')


def _checks_table(r: dict[str, Any]) -> str:
    order = {"FAIL": 0, "INCONCLUSIVE": 1, "PASS": 2}
    rows = []
    for c in sorted(r["checks"], key=lambda c: order.get(c["verdict"], 3)):
        ci = c.get("ci")
        rows.append(
            f'<tr><td class="l">{wbr(c["variant"])}</td><td class="l">{e(c["task"])}</td>'
            f'<td class="l">{wbr(c["slice"])}</td><td class="l">{e(c["check"])}</td><td>{c["threshold"]:g}</td>'
            f'<td>{fmt_num(c["observed"], 4)}</td>'
            f'<td>{"—" if not ci else e(f"[{ci[0]:+.3f}, {ci[1]:+.3f}]")}</td>'
            f'{verdict_cell(c["verdict"])}<td class="l reason">{e(c["reason"])}</td></tr>')
    head = ["variant", "task", "slice", "check", "threshold", "observed", "CI", "verdict", "reason"]
    return "<h2 id=\"checks\">Gate checks</h2>" + (table(head, rows, left=4) if rows else
                                                    '<p class="note">No checks.</p>')


def _forest_section(r: dict[str, Any]) -> str:
    stats = [s for s in gated_rows(r, sorted_stats(r)) if s.get("n")]  # a row no pair reached has no Δ to plot
    if not stats:
        return ""
    rows = [{"label": stat_label(s), "delta": s["delta"], "lo": s["ci_low"], "hi": s["ci_high"],
             "verdict": cell_verdict(r["checks"], s["variant"], s["task"], s["slice"])} for s in stats]
    tol = sorted({-float(c["threshold"]) for c in r["checks"] if c["check"] == "max_drop"})
    return ("<h2 id=\"forest\">Δ ± 95% CI (gated rows)</h2>"
            + img(plots.forest_plot(rows, tol), "forest plot of deltas")
            + '<p class="note">Rows some policy check looked at, with pairs. Dashed red lines: the tolerated drops '
              "(max_drop checks).</p>")


def _needle_section(r: dict[str, Any]) -> str:
    grids = r["needle_grid"]
    if not grids:
        return ""
    base = grids.get(r["baseline"])
    imgs = [img(plots.needle_heatmap(g, name, None if name == r["baseline"] else base), f"needle heatmap {name}")
            for name, g in grids.items()]
    return "<h2 id=\"needle\">Needle retrieval (depth × context length)</h2><div class=\"grid\">" + \
        "".join(imgs) + "</div>"


def _flip_card(f: dict[str, Any]) -> str:
    direction = "rw" if f["baseline_score"] > f["variant_score"] else "wr"
    label = "right → wrong" if direction == "rw" else "wrong → right"
    return (f'<div class="flip" data-variant="{e(f["variant"])}" data-task="{e(f["task"])}" '
            f'data-dir="{direction}"><header><b>{e(f["variant"])}</b><b>{e(f["task"])}</b>'
            f'sample <code>{e(f["sample_id"])}</code> · <span class="dir-{direction}">{label}</span> · score '
            f'{fmt_num(f["baseline_score"], 2)} → {fmt_num(f["variant_score"], 2)}</header>'
            f'<details><summary>prompt</summary><pre>{e(f["prompt"])}</pre></details><div class="pair">'
            f'<div><h4>baseline ({fmt_num(f["baseline_score"], 2)})</h4><pre>{e(f["baseline_output"])}</pre></div>'
            f'<div><h4>variant ({fmt_num(f["variant_score"], 2)})</h4><pre>{e(f["variant_output"])}</pre></div>'
            f"</div></div>")


def _options(values: list[str], all_label: str) -> str:
    return f'<option value="">{all_label}</option>' + "".join(
        f'<option value="{e(v)}">{e(v)}</option>' for v in values)


def _flips_section(r: dict[str, Any]) -> str:
    flips = r["flips"]
    if not flips:
        return '<h2 id="flips">Flipped samples</h2><p class="note">No flipped samples.</p>'
    shown = flips[:MAX_FLIPS]
    note = (f'<p class="note">First {MAX_FLIPS} of {len(flips)} flips shown.</p>' if len(flips) > MAX_FLIPS else "")
    variants = _options(sorted({f["variant"] for f in shown}), "all")
    controls = (
        '<div class="controls">'
        f'<label>variant <select id="f-variant">{variants}</select></label>'
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
    rows = [f'<tr><td class="l">{e(stat_label(s))}</td><td>{s["n"]}</td>{delta_cell(s)}'
            f'<td>{s["flips_right_to_wrong"]} / {s["flips_wrong_to_right"]}</td>'
            f'<td>{fmt_num(s.get("agreement"), 2)}</td></tr>' for s in noise]
    return ('<h2 id="noise">Noise floor (baseline against itself)</h2>'
            + table(["comparison", "n", "Δ [95% CI]", "flips R→W / W→R", "same text"], rows))


def _notes_section(r: dict[str, Any]) -> str:
    """The run's notes as they are (a compared run: where its samples came from, how they were paired)."""
    notes = r.get("notes") or []
    if not notes:
        return ""
    return ('<h2 id="notes">Where the samples came from</h2><ul class="note">'
            + "".join(f"<li>{e(x)}</li>" for x in notes) + "</ul>")


def render_html(report: dict[str, Any]) -> str:
    """The whole page as one string (no external resources)."""
    r = check_report(report)
    body = "".join([_header(r), cards_section(r), grid_section(r), tenants_html(r), _verdict_table(r),
                    _notes_section(r),
                    _metrics_section(r), _memory_table(r), _checks_table(r), _forest_section(r),
                    _needle_section(r), _noise_section(r), _flips_section(r),
                    f'<p class="note">report schema v{e(r["schema_version"])} · generated by evalsuite</p>'])
    title = f"evalsuite: {r['model'].get('name', '?')} {r['overall']}"
    return PAGE.substitute(csp=CSP, title=e(title), css=CSS, body=body, script=SCRIPT)
