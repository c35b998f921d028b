"""What the first screen needs, derived from a report dict by pure functions: which slice rows some policy
check looked at (gated), which rows hide behind the toggle (n below the policy's ``min_samples``, or one
sample per slice such as code entry points), the decision per (variant, task) and one card per variant."""
from __future__ import annotations

from typing import Any

from evalsuite.cpu.machine import machine_text
from evalsuite.gate.means import KLD_SCREEN
from evalsuite.gate.types import worst
from evalsuite.report.deciding import (ALL, POOLED, Row, check_n, fail_needs, pass_needs, samples_to_decide,
                                       seconds_to_decide, stat_row, stopped_drawing)


def guarantee_text(r: Row) -> str | None:
    """The false-FAIL guarantee in force, one sentence ('False FAIL ≤ 5% per variant (family-wise over 11
    checks, ...).'); one clause per variant where they differ; None for a report without it."""
    by = r.get("guarantee") or {}
    texts = list(dict.fromkeys(by.values()))
    if not texts:
        return None
    text = texts[0] if len(texts) == 1 else "; ".join(f"{v}: {t}" for v, t in by.items())
    return text[0].upper() + text[1:] + "."


def gated(r: Row) -> set[tuple[str, str, str]]:
    """(variant, task, slice) of every row some policy check looked at."""
    return {(c["variant"], c["task"], c["slice"]) for c in r["checks"]}


def min_samples(r: Row, task: str) -> int:
    """The policy's ``min_samples`` for ``task`` (task override, else default); without a policy in the
    report, the threshold of a ``min_samples`` check of that task; 0 when nothing says."""
    pol = r.get("policy") or {}
    for value in (((pol.get("tasks") or {}).get(task) or {}).get("min_samples"),
                  (pol.get("defaults") or {}).get("min_samples")):
        if isinstance(value, (int, float)):
            return int(value)
    found = [c["threshold"] for c in r["checks"] if c["task"] == task and c["check"] == "min_samples"]
    return int(max(found)) if found else 0


def slice_key(name: str) -> str:
    """``context_len`` of ``context_len=2048`` (the whole name for other shapes)."""
    return name.split("=", 1)[0] if "=" in name else name


def per_item_keys(stats: list[Row]) -> set[tuple[str, str, str]]:
    """(variant, task, key) whose every slice level holds at most one sample (ids, entry points)."""
    most: dict[tuple[str, str, str], int] = {}
    for s in stats:
        if s["slice"] != ALL:
            k = (s["variant"], s["task"], slice_key(s["slice"]))
            most[k] = max(most.get(k, 0), int(s["n"]))
    return {k for k, n in most.items() if n <= 1}


def hidden_reason(s: Row, r: Row, checked: set[tuple[str, str, str]],
                  per_item: set[tuple[str, str, str]]) -> str | None:
    """Why a stats row goes behind the toggle ("per-item" / "n<min_samples"); None to show it. The ``all``
    row and every gated row are always shown."""
    if s["slice"] == ALL or (s["variant"], s["task"], s["slice"]) in checked:
        return None
    if (s["variant"], s["task"], slice_key(s["slice"])) in per_item:
        return "per-item"
    return "n<min_samples" if s["n"] < min_samples(r, s["task"]) else None


def split_rows(r: Row, stats: list[Row]) -> tuple[list[Row], list[Row]]:
    """``stats`` (order kept) split into the rows shown and the rows behind the toggle."""
    checked, per_item = gated(r), per_item_keys(r["stats"])
    shown, hidden = [], []
    for s in stats:
        (hidden if hidden_reason(s, r, checked, per_item) else shown).append(s)
    return shown, hidden


def gated_rows(r: Row, stats: list[Row]) -> list[Row]:
    """The rows of ``stats`` some policy check looked at (what the forest plot shows)."""
    checked = gated(r)
    return [s for s in stats if (s["variant"], s["task"], s["slice"]) in checked]


def task_decision(r: Row, variant: str, task: str) -> Row | None:
    """The (variant, task) decision: worst verdict over its checks, the deciding checks, the ``all`` row's Δ,
    the n behind it and, when INCONCLUSIVE, about how many more samples of the task would decide it."""
    checks = [c for c in r["checks"] if c["variant"] == variant and c["task"] == task]
    stat = stat_row(r, variant, task)
    unpaired = stat is not None and not stat.get("n")  # the baseline's answers only: its Δ [-1, +1] says nothing
    stat = None if unpaired else stat
    if not checks and stat is None:
        return None
    verdict = worst([c["verdict"] for c in checks], None)
    deciding = [c for c in checks if c["verdict"] == verdict]
    ns = [n for c in deciding if (n := check_n(r, c)) is not None]
    more = [m for c in deciding if (m := samples_to_decide(r, c)) is not None]
    n = min(ns) if ns else 0 if unpaired else (stat or {}).get("n")
    return {"verdict": verdict, "stat": stat, "checks": deciding, "n": n,
            "more_needed": max(more) if more and verdict == "INCONCLUSIVE" else None,
            "slices": list(dict.fromkeys(c["slice"] for c in deciding if c["slice"] != ALL))}


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, None when either is missing or the base is 0."""
    return None if value is None or not base else value / base


def _saving(v: Row, base: Row | None, key: str) -> Row:
    value, ref = v.get(key), (base or {}).get(key)
    saved = None if value is None or ref is None else ref - value
    return {"value": value, "saved": saved, "ratio": ratio(value, ref)}


def lead_reasons(checks: list[Row], verdict: str | None, limit: int = 2) -> list[Row]:
    """What a card says first. FAIL: the failed checks (per-task before the pooled one). INCONCLUSIVE: the
    largest observed drop (the most negative Δ of an undecided ``max_drop``), then the check nearest to a decision
    (fewest ``more_needed``), then the other undecided checks, nearest first. Each carries ``lead``: why it is
    there ("largest drop", "nearest to a decision"; empty for a FAIL)."""
    fails = sorted((c for c in checks if c["verdict"] == "FAIL"), key=lambda c: c["task"] == "*")
    inc = [c for c in checks if c["verdict"] == "INCONCLUSIVE"]
    drops = [c for c in inc if c["check"] == "max_drop"]
    biggest = min(drops, key=lambda c: c["observed"]) if drops else None
    near = sorted(inc, key=lambda c: (c.get("more_needed") is None, c.get("more_needed") or 0))
    lead = [{**c, "lead": ""} for c in fails]
    if verdict != "FAIL" and biggest is not None and biggest["observed"] < 0:
        lead.append({**biggest, "lead": "largest drop"})
    for i, c in enumerate(near):
        if all(c is not x and not _same(c, x) for x in lead):
            lead.append({**c, "lead": "nearest to a decision" if i == 0 and c.get("more_needed") else ""})
    return lead[:limit]


def _same(a: Row, b: Row) -> bool:
    return all(a.get(k) == b.get(k) for k in ("task", "slice", "check"))


def variant_cards(r: Row, max_reasons: int = 2) -> list[Row]:
    """One card per gated variant (baseline excluded): verdict, the reasons that decided it (``lead_reasons``),
    bytes saved vs the baseline and speed relative to it; when INCONCLUSIVE, what a PASS needs (``to_pass``) and
    the open checks heading to a FAIL, nearest first (``to_fail``, ``deciding.fail_needs``)."""
    base = next((v for v in r["variants"] if v["variant"] == r["baseline"]), None)
    screen = kld_screen(r)
    cards = []
    for v in r["variants"]:
        if v["variant"] == r["baseline"]:
            continue
        mine = [c for c in r["checks"] if c["variant"] == v["variant"]]
        verdict = v.get("verdict") or worst([c["verdict"] for c in mine], None)
        reasons = [{**c, "samples": samples_to_decide(r, c), "seconds": seconds_to_decide(r, c)}
                   for c in lead_reasons(mine, verdict, max_reasons)]
        cards.append({
            "variant": v["variant"], "verdict": verdict, "reasons": reasons, "kld": screen.get(v["variant"]),
            "to_pass": pass_needs(r, mine) if verdict == "INCONCLUSIVE" else None,
            "to_fail": fail_needs(r, mine) if verdict == "INCONCLUSIVE" else [],
            "stopped": stopped_drawing(r, v["variant"]) if verdict == "INCONCLUSIVE" else [],
            "checks": len(mine), "contexts": context_range(r, v["variant"]),
            "passed": sum(c["verdict"] == "PASS" for c in mine),
            "weights": _saving(v, base, "weight_bytes"), "kv": _saving(v, base, "kv_bytes_per_token"),
            "ttft": _saving(v, base, "ttft_s"), "itl": _saving(v, base, "itl_s")})
    return cards


def kld_screen(r: Row) -> dict[str, Row]:
    """variant -> its KLD screen: the highest mean KLD per answer token over its tasks' ``all`` rows (``kld``), that
    task and its top-1 agreement, its rank among the variants with KLD (1: the lowest; ``of``: how many), and
    whether a ``max_kld`` check gates it (``gated``; the shipped policy does not: KLD is then a screen)."""
    high: dict[str, Row] = {}
    for s in r["stats"]:
        if s["slice"] == ALL and s.get("kld_mean") is not None and s["variant"] != r["baseline"]:
            if s["variant"] not in high or s["kld_mean"] > high[s["variant"]]["kld"]:
                high[s["variant"]] = {"kld": s["kld_mean"], "task": s["task"], "top1": s.get("top1_agreement")}
    order = sorted(high, key=lambda v: high[v]["kld"])
    gated_by = {c["variant"] for c in r["checks"] if c["check"] == "max_kld"}
    return {v: {**x, "rank": order.index(v) + 1, "of": len(order), "gated": v in gated_by} for v, x in high.items()}


def kld_text(k: Row | None) -> str:
    """``KLD (a screen, not a verdict): up to 0.281/token (json, top-1 86%), the lowest of 3 variants``
    (``kld_screen``), flagged above ``gate.means.KLD_SCREEN`` where no ``max_kld`` gates it; "" for None."""
    if not k:
        return ""
    top1 = f", top-1 {k['top1']:.0%}" if k.get("top1") is not None else ""
    n, i = k["of"], k["rank"]
    rank = ("" if n < 2 else f", the lowest of {n} variants" if i == 1 else
            f", the highest of {n} variants" if i == n else f", {i} of {n} from the lowest")
    what = "gated by max_kld" if k["gated"] else "a screen, not a verdict"
    flag = f"; above the screen's {KLD_SCREEN:g}: read its answers" if k["kld"] > KLD_SCREEN and not k["gated"] else ""
    return f"KLD ({what}): up to {k['kld']:.3f}/token ({k['task']}{top1}){rank}{flag}"


def context_range(r: Row, variant: str) -> tuple[int, int] | None:
    """The shortest and longest ``context_len`` among the variant's paired samples (needle), None without any:
    the prompt lengths a KV-cache verdict covers."""
    lens = [int(float(s["slice"].split("=", 1)[1])) for s in r["stats"] if s["variant"] == variant and s["n"]
            and s["slice"].startswith("context_len=") and s["slice"].split("=", 1)[1].replace(".", "").isdigit()]
    return (min(lens), max(lens)) if lens else None


def task_names(r: Row, pooled: bool = False) -> list[str]:
    """Tasks with stats or checks, in first-seen order; the pooled check's ``*`` only with ``pooled`` (grids)."""
    names = dict.fromkeys([s["task"] for s in r["stats"]] + [c["task"] for c in r["checks"]])
    return [t for t in names if pooled or t != POOLED]


def pooled_text(d: Row) -> str:
    """A pooled grid cell: the pair-weighted mean margin Δ + max_drop and its anytime upper bound."""
    c = d["checks"][0] if d["checks"] else {}
    upper = (c.get("ci") or [None, None])[1]
    return (f"margin {c.get('observed', 0.0):+.3f}" + (f", CS upper {upper:+.3f}" if upper is not None else "")
            if c else "—")


def metric_rows(r: Row, task: str) -> list[Row]:
    """The ``all`` rows of ``task`` that carry secondary metrics, in report order."""
    return [s for s in r["stats"] if s["task"] == task and s["slice"] == ALL and s.get("metrics")]


def metric_names(rows: list[Row]) -> list[str]:
    """Metric names over ``rows``, sorted."""
    return sorted({m for s in rows for m in s["metrics"]})


def machine_line(r: Row) -> str:
    """``CPU: <model>, 2 cores, avx2 fma, 38 GFLOP/s fp32 (slow class); seconds per pair: code 1.2 s, json 0.3–0.5 s``
    (``cpu.machine.machine_text``; per task the range over its variants, the baseline's included): why n differs
    between machines. Either part alone when the other is unknown; "" for neither."""
    per: dict[str, list[float]] = {}
    for key, s in (r.get("seconds_per_pair") or {}).items():
        per.setdefault(key.rsplit("/", 1)[-1], []).append(float(s))
    def secs(x: float) -> str:
        return f"{x:.2f}" if x < 10 else f"{x:.0f}"

    cost = ", ".join(f"{t} {secs(min(v))}" + (f"–{secs(max(v))}" if secs(max(v)) != secs(min(v)) else "") + " s"
                     for t, v in sorted(per.items()))
    parts = [p for p in (machine_text(r.get("machine")), f"seconds per pair: {cost}" if cost else "") if p]
    return "; ".join(parts)


def verification_lines(r: dict[str, Any]) -> list[str]:
    """One plain-text line per variant on how its answers were obtained (verified against the baseline's, decoded
    after a divergence, regenerated), with the near-tie share and the audit's agreement."""
    out = []
    for v, c in sorted((r.get("verification") or {}).items()):
        n = sum(c.get(k, 0) for k in ("verified", "diverged", "regenerated", "generated")) or 1
        line = (f"{v}: {c.get('verified', 0)}/{n} verified ({c.get('verified', 0) / n:.0%}), "
                f"{c.get('diverged', 0)} decoded after a divergence, {c.get('regenerated', 0)} regenerated")
        if c.get("positions"):
            line += (f"; near-ties {c.get('near_ties', 0)} of {c['positions']} positions checked, "
                     f"{c.get('stepped', 0)} decided by a decode step")
        if c.get("audited"):
            line += f"; audit: {c.get('audit_same', 0)}/{c['audited']} regenerated answers identical"
        out.append(line)
    return out
