"""The report's first screen: one card per variant (verdict, the reasons that decided it, bytes saved, speed)
and a variants × tasks grid of Δ [95% CI] coloured by verdict with the n behind each decision."""
from __future__ import annotations

from typing import Any

from evalsuite.report.deciding import Row, fail_text, pass_text, stopped_text, to_decide
from evalsuite.report.digest import POOLED, kld_text, pooled_text, task_decision, task_names, variant_cards
from evalsuite.report.html_common import delta_class, e, vclass
from evalsuite.report.model import fmt_bytes, fmt_delta, fmt_ms


def _pct(ratio: float | None) -> str:
    """``-59%`` / ``+3%`` / ``same`` for a value/baseline ratio."""
    if ratio is None:
        return ""
    pct = (ratio - 1.0) * 100
    return "same as baseline" if abs(pct) < 0.5 else f"{pct:+.0f}% vs baseline"


def _bytes_line(label: str, item: Row, fmt: Any, unit: str = "") -> str:
    if item["value"] is None:
        return f"<dt>{e(label)}</dt><dd>—</dd>"
    saved = item["saved"]
    save = (f' <span class="save">saves {e(fmt(saved))}{e(unit)}</span>' if saved and saved > 0 else "")
    return (f"<dt>{e(label)}</dt><dd><b>{e(fmt(item['value']))}{e(unit)}</b> "
            f'<span class="rel">{e(_pct(item["ratio"]))}</span>{save}</dd>')


def _speed(label: str, item: Row) -> str:
    r = item["ratio"]
    cls = "" if r is None else ("slow" if r > 1.05 else "fast" if r < 0.95 else "")
    rel = "" if r is None else f'<span class="rel {cls}">{r:.2f}× baseline</span>'
    return f"<dt>{e(label)}</dt><dd><b>{e(fmt_ms(item['value']))}</b> {rel}</dd>"


def _reasons(card: Row) -> str:
    if not card["reasons"]:
        text = (f"all {card['checks']} checks passed" if card["checks"] else "no policy check covered it")
        return f'<ul class="reasons"><li class="r-PASS">{e(text)}</li></ul>'
    items = []
    for c in card["reasons"]:
        tail = f' <span class="more">{e(to_decide(c))}</span>' if to_decide(c) else ""
        lead = f' <span class="lead">({e(c["lead"])})</span>' if c.get("lead") else ""
        items.append(f'<li class="r-{e(c["verdict"])}"><b>{e(c["verdict"])}</b>{lead} {e(c["reason"])}{tail}</li>')
    return '<ul class="reasons">' + "".join(items) + "</ul>"


def _to_fail(card: Row) -> str:
    """For an INCONCLUSIVE card with checks heading to a FAIL (``deciding.fail_needs``): the nearest, said first."""
    text = fail_text(card.get("to_fail"))
    return f'<div class="counts to-fail"><b>{e(text[0].upper() + text[1:])}</b></div>' if text else ""


def _to_decide(card: Row) -> str:
    """For an INCONCLUSIVE card: what a PASS would take (``deciding.pass_needs``) when nothing heads to a FAIL, and
    why its tasks stopped drawing (``deciding.stopped_drawing``)."""
    text = "" if card.get("to_fail") else pass_text(card.get("to_pass"))
    out = f'<div class="counts to-pass">{e(text[0].upper() + text[1:])}</div>' if text else ""
    if card.get("stopped"):
        out += f'<div class="counts stopped">{e(stopped_text(card["stopped"]))}</div>'
    return out


def _kld(card: Row) -> str:
    """The card's KLD line (``digest.kld_text``): a screen under the shipped policy, ranked among the variants."""
    text = kld_text(card.get("kld"))
    return f'<div class="counts kld">{e(text)}</div>' if text else ""


def covers_note(card: Row) -> str:
    """For a variant with a smaller KV cache: the context lengths its verdict covers."""
    span, kv = card.get("contexts"), card["kv"]
    if not span or not kv["saved"] or kv["saved"] <= 0:
        return ""
    return f'<div class="counts">KV verdict covers contexts of {span[0]:,}–{span[1]:,} tokens</div>'


def _card(card: Row) -> str:
    verdict = card["verdict"]
    counts = f'{card["passed"]} of {card["checks"]} checks pass' if card["checks"] else ""
    return (f'<div class="card {vclass(verdict)}" data-variant="{e(card["variant"])}">'
            f'<div class="card-head"><span class="name">{e(card["variant"])}</span>'
            f'<span class="verdict">{e(verdict or "—")}</span></div>'
            f'<div class="counts">{e(counts)}</div>{_to_fail(card)}{covers_note(card)}{_reasons(card)}'
            f'{_to_decide(card)}{_kld(card)}'
            '<dl class="gains">'
            f'{_bytes_line("weights", card["weights"], fmt_bytes)}'
            f'{_bytes_line("KV cache", card["kv"], lambda x: f"{x:,.0f}", " B/token")}'
            f'{_speed("TTFT", card["ttft"])}{_speed("ITL", card["itl"])}</dl></div>')


def _baseline_line(r: Row) -> str:
    base = next((v for v in r["variants"] if v["variant"] == r["baseline"]), None)
    if base is None:
        return ""
    kv = base.get("kv_bytes_per_token")
    return (f'<p class="meta">Compared with baseline <code>{e(r["baseline"])}</code>: weights '
            f'{e(fmt_bytes(base.get("weight_bytes")))} · KV cache {"—" if kv is None else f"{kv:,.0f}"} B/token · '
            f'TTFT {e(fmt_ms(base.get("ttft_s")))} · ITL {e(fmt_ms(base.get("itl_s")))}</p>')


def cards_section(r: Row) -> str:
    """Which variant may ship: one card per variant."""
    cards = variant_cards(r)
    if not cards:
        return '<section id="decision"><p class="note">No variants besides the baseline.</p></section>'
    return ('<section id="decision"><h2 class="first">Which variant may ship</h2>' + _baseline_line(r)
            + '<div class="cards">' + "".join(_card(c) for c in cards) + "</div></section>")


def decision_note(d: Row) -> str:
    """``n=30`` (the Δ's samples), where a slice decided it with that slice's n, and the samples still needed."""
    n_all, info = (d["stat"] or {}).get("n"), (d["stat"] or {}).get("n_informative")
    parts = [f"n={n_all}" + (f" ({info} with a side right)" if info is not None else "")] if n_all else []
    if d["slices"] and d["verdict"] != "PASS":
        parts.append(f"{d['verdict']} in {', '.join(d['slices'])}" + (f" (n={d['n']})" if d["n"] else ""))
    elif d["n"] and d["n"] != n_all:
        parts.append(f"decided on n={d['n']}")
    if d["verdict"] == "INCONCLUSIVE":
        parts.append(f"≈+{d['more_needed']} to decide" if d["more_needed"] else "undecided")
    return " · ".join(parts)


def _grid_cell(r: Row, variant: str, task: str) -> str:
    d = task_decision(r, variant, task)
    if d is None:
        return '<td class="cell v-none">—</td>'
    s = d["stat"]
    point, _, ci = fmt_delta(s["delta"], s["ci_low"], s["ci_high"]).partition(" ") if s else ("", "", "")
    delta = (f'<div class="d {delta_class(s)}"><span>{e(point)}</span> <span>{e(ci)}</span></div>'
             if s else '<div class="d">no paired samples</div>')
    if task == POOLED:
        delta = f'<div class="d">{e(pooled_text(d))}</div>'

    return (f'<td class="cell {vclass(d["verdict"])}" data-variant="{e(variant)}" data-task="{e(task)}">'
            f'{delta}<div class="n">{e(decision_note(d))}</div></td>')


def grid_section(r: Row) -> str:
    """Variants × tasks: Δ [95% CI] of slice ``all``, cell coloured by the task's verdict (worst over its
    gated slices), with the n behind the decision and, when undecided, about how many more samples it needs."""
    tasks = task_names(r, pooled=True)
    variants = [v["variant"] for v in r["variants"] if v["variant"] != r["baseline"]]
    if not tasks or not variants:
        return ""
    head = '<th class="l">variant</th>' + "".join(f"<th>{e('pooled (all tasks)' if t == POOLED else t)}</th>"
                                                  for t in tasks)
    rows = "".join(f'<tr><th class="l">{e(v)}</th>' + "".join(_grid_cell(r, v, t) for t in tasks) + "</tr>"
                   for v in variants)
    return ('<section id="grid"><h3>Δ vs baseline per task (95% CI, slice all; colour: the task\'s verdict)</h3>'
            f'<table class="dgrid"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>')
