"""Small HTML building blocks shared by the report's sections; every piece of text goes through ``escape``."""
from __future__ import annotations

import re
from html import escape
from typing import Any

from evalsuite.report import plots
from evalsuite.report.model import stat_delta

VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")


def e(x: Any) -> str:
    """HTML-escaped text (quotes included)."""
    return escape(str(x), quote=True)


def wbr(x: Any) -> str:
    """Escaped text that may wrap after ``,`` ``+`` ``;`` (variant names, selector slices): a narrow window wraps
    the name instead of scrolling the table."""
    return re.sub(r"([,+;])", r"\1<wbr>", e(x))


def vclass(v: str | None) -> str:
    """The CSS class of a verdict colour."""
    return f"v-{v}" if v in VERDICTS else "v-none"


def verdict_cell(v: str | None, text: str | None = None) -> str:
    """A table cell coloured by verdict."""
    return f'<td class="v {vclass(v)}">{e(text or v or "—")}</td>'


def table(head: list[str], rows: list[str], left: int = 1) -> str:
    """Header cells: the first ``left`` and a final ``reason`` left-aligned, the rest right-aligned."""
    ths = "".join(f'<th class="l">{e(h)}</th>' if i < left or h == "reason" else f"<th>{e(h)}</th>"
                  for i, h in enumerate(head))
    return f"<table><thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def count(x: float | None) -> str:
    """A whole number with thousands separators; an em dash for missing."""
    return "—" if x is None else f"{x:,.0f}"


def img(png: bytes, alt: str) -> str:
    """An embedded PNG (data URI)."""
    return f'<img class="plot" alt="{e(alt)}" src="{plots.data_uri(png)}">'


def delta_class(s: dict[str, Any]) -> str:
    """``neg`` when the whole interval is below 0, ``pos`` when above, else empty."""
    return "neg" if s["ci_high"] < 0 else ("pos" if s["ci_low"] > 0 else "")


def delta_cell(s: dict[str, Any]) -> str:
    """Δ [CI] of a stats row as a coloured cell."""
    return f'<td class="{delta_class(s)}">{e(stat_delta(s))}</td>'


def fmt_metric(x: float | None) -> str:
    """A secondary-metric mean: three decimals below 10, else one with separators."""
    if x is None:
        return "—"
    return f"{x:.3f}" if abs(x) < 10 else f"{x:,.1f}"


def fmt_signed_metric(x: float | None) -> str:
    """A metric difference with its sign."""
    if x is None:
        return "—"
    return f"{x:+.3f}" if abs(x) < 10 else f"{x:+,.1f}"
