"""What deciding costs, read from a report dict: the samples and seconds of budget an undecided check still needs
(``samples_to_decide``, ``seconds_to_decide``), and what a PASS of an undecided variant would take (``pass_needs``:
every open per-task check decided, so the slowest one per task, over all its tasks). The prices are
``core.costs``', the module the scheduler prices its draws with.

The seconds are estimates at the run's measured seconds per pair (``seconds_per_pair``) plus the baseline's share
past what a stored baseline answers (``baseline_cost``); the samples are the checks' ``more_needed``, which assume
the observed effect stays where it is (``evalsuite.stats.sequential``). For a variant heading to a FAIL
(``fail_needs``: open checks whose observed value is already beyond the threshold) the report says that first and
what a PASS needs only when nothing heads to a FAIL (``fail_text``).
"""
from __future__ import annotations

from typing import Any

from evalsuite.core.costs import decision_seconds, task_samples
from evalsuite.core.decision import DEFAULT_CAP
from evalsuite.gate.types import POOLED, heads_to_fail
from evalsuite.stats.types import ALL
Row = dict[str, Any]  #: a row of the report dict (a check, a stats row, a card): the report modules' one alias


def stat_row(r: Row, variant: str, task: str, slice_: str = ALL) -> Row | None:
    """The stats row of (variant, task, slice); None when the report has none."""
    return next((s for s in r["stats"] if (s["variant"], s["task"], s["slice"]) == (variant, task, slice_)), None)


def check_n(r: Row, c: Row) -> int | None:
    """The paired samples behind a check: its own ``n``, else (old runs) its stats row's; None if unknown."""
    if c.get("n"):
        return int(c["n"])
    row = stat_row(r, c["variant"], c["task"], c["slice"])
    return int(row["n"]) if row else None


def samples_to_decide(r: Row, check: Row) -> int | None:
    """About how many more samples would decide an undecided check: its ``more_needed`` pairs, scaled to the
    task's samples for a slice check (``core.costs.task_samples``: a slice with 16 of the task's 48 pairs needs
    three samples per pair); for the pooled check, the pairs of its cheapest task alone (``pooled_route``), else
    over all pooled tasks. None when decided or unknown."""
    more = check.get("more_needed")
    route = pooled_route(r, check)
    if route is not None:
        return route[1]
    if not more or check["task"] == POOLED or check["slice"] == ALL:
        return more or None
    row = stat_row(r, check["variant"], check["task"])
    return task_samples(more, check_n(r, check) or 0, int(row["n"]) if row else 0)


def seconds_to_decide(r: Row, check: Row) -> float | None:
    """About how many seconds the samples an undecided check still needs (``samples_to_decide``) would take: the
    variant's measured seconds per pair on the task plus the baseline's share (``task_seconds``); over the pooled
    tasks, their mean. None unknown."""
    cost, more = r.get("seconds_per_pair") or {}, samples_to_decide(r, check)
    if not more or not cost:
        return None
    route = pooled_route(r, check)
    if route is not None:
        tasks = [route[0]]
    else:
        tasks = [t for t, _ in check.get("pools") or []] if check["task"] == POOLED else [check["task"]]
    per = [task_seconds(r, check["variant"], t, more) for t in tasks if f"{check['variant']}/{t}" in cost]
    return sum(per) / len(per) if per else None


def pooled_route(r: Row, check: Row) -> tuple[str, int] | None:
    """For an open pooled check with per-task needs (``needs_from``: the pairs of one task alone that would decide
    it, as the run's scheduler draws them), the (task, pairs) that take the fewest seconds at this run's costs
    (fewest pairs where a task's cost is unknown); None for any other check, or a run that recorded none."""
    if check["task"] != POOLED or not check.get("needs_from"):
        return None
    cost, inf = r.get("seconds_per_pair") or {}, float("inf")
    priced = [(task_seconds(r, check["variant"], t, int(n)) if f"{check['variant']}/{t}" in cost else inf, int(n), t)
              for t, n in check["needs_from"]]
    _, n, task = min(priced)
    return task, n


def task_seconds(r: Row, variant: str, task: str, more: int) -> float:
    """Seconds ``more`` samples of ``task`` take ``variant`` and the baseline (``core.costs.decision_seconds``, as
    the scheduler prices them): the variant's pairs at its measured seconds per pair; the baseline's only past the
    samples a stored baseline answers, at its seconds per sample (``baseline_cost``: a warm run whose baseline
    generated nothing still prices them); a report without ``baseline_cost``: at the baseline's measured seconds
    per pair."""
    cost, plan = r.get("seconds_per_pair") or {}, (r.get("baseline_cost") or {}).get(task)
    own = cost[f"{variant}/{task}"]
    if plan is None:
        return decision_seconds(more, own, cost.get(f"{r['baseline']}/{task}", 0.0))
    return decision_seconds(more, own, float(plan["seconds"]), int(plan["drawn"]), int(plan["held"]))


def to_decide(check: Row) -> str:
    """``≈+N samples to decide, ~M min of budget at this run's seconds per pair`` for an undecided card reason
    (``samples_to_decide``; a slice check adds how many of them land in the slice; without the budget part when
    the seconds are unknown); "" for a decided one."""
    samples = check.get("samples", check.get("more_needed"))
    if not samples:
        return ""
    budget = (f", {fmt_duration(check['seconds'])} of budget at this run's seconds per pair"
              if check.get("seconds") else "")
    share = f" (~{check['more_needed']} of them in the slice)" if samples != check.get("more_needed") else ""
    return f"≈+{samples} samples to decide{share}{budget}"


def fmt_duration(seconds: float) -> str:
    """``~40 s``, ``~12 min``, ``~3.2 h``."""
    if seconds < 90:
        return f"~{seconds:.0f} s"
    return f"~{seconds / 60:.0f} min" if seconds < 5400 else f"~{seconds / 3600:.1f} h"


#: why a (variant, task) stopped drawing that says nothing a card needs: it was decided, or its variant FAILed
SETTLED = ("decided", "variant FAILed")


def stopped_drawing(r: Row, variant: str) -> list[str]:
    """``task: why`` for each task an undecided variant stopped drawing on while a check was open (out of reach of
    the budget or the stream, budget spent, waiting on another variant), from a sequential run's ``stopped``."""
    why = (r.get("stopped") or {}).get(variant) or {}
    return [f"{task}: {text}" for task, text in sorted(why.items()) if not text.startswith(SETTLED)]


def stopped_text(stopped: list[str]) -> str:
    """``Stopped drawing: code: out of reach: …; json: …`` (``stopped_drawing``); "" for none."""
    return f"Stopped drawing: {'; '.join(stopped)}" if stopped else ""


def check_name(c: Row) -> str:
    """``needle[context_len>=2048] max_drop``: a check's task, slice (unless all) and kind."""
    return c["task"] + (f"[{c['slice']}]" if c["slice"] != ALL else "") + f" {c['check']}"


def pass_needs(r: Row, checks: list[Row]) -> Row | None:
    """What a PASS of a variant that is still INCONCLUSIVE would take: a PASS needs every open per-task check
    decided (the pooled check never PASSes on its own), so per task the samples of its slowest open check
    (``samples_to_decide``), and the seconds of them all at this run's costs (``task_seconds``; None when a task's
    cost was not measured). Returns ``{"check", "samples", "tasks", "seconds", "back"}``: the slowest check (by
    its seconds, or by its samples when some cost is unknown; None when only checks in ``back`` are open), with
    ``samples`` None when an open check has no estimate (``more_needed`` None: more samples may not decide it);
    ``back``, the open checks whose observed value is already past their threshold (``heads_to_fail``): a PASS
    needs it back inside, which no pair count estimates. None when a check FAILed or none is open."""
    open_ = [c for c in checks if c["verdict"] == "INCONCLUSIVE" and c["task"] != POOLED]
    if not open_ or any(c["verdict"] == "FAIL" for c in checks):
        return None
    past = [heads_to_fail(c["check"], c["observed"], c["threshold"]) for c in open_]
    back = [c for c, p in zip(open_, past) if p]
    need: Row = {"check": None, "samples": None, "tasks": 0, "seconds": None, "back": back}
    slowest: dict[str, tuple[int, Row]] = {}
    for c in (c for c, p in zip(open_, past) if not p):
        more = samples_to_decide(r, c)
        if more is None:
            return {**need, "check": c}
        if more > slowest.get(c["task"], (0, c))[0]:
            slowest[c["task"]] = (more, c)
    if not slowest:
        return need
    cost = r.get("seconds_per_pair") or {}
    seconds = {t: task_seconds(r, c["variant"], t, more) for t, (more, c) in slowest.items()
               if f"{c['variant']}/{t}" in cost}
    timed = len(seconds) == len(slowest)  # the slowest by seconds where every task's cost is known
    more, check = max(slowest.values(), key=lambda x: seconds[x[1]["task"]] if timed else x[0])
    return {**need, "check": check, "samples": more, "tasks": len(slowest),
            "seconds": sum(seconds.values()) if timed else None}


def pass_text(need: Row | None) -> str:
    """``a PASS needs every open check decided: the slowest, json max_drop, ≈+8133 samples; ~3.1 h of budget over
    4 tasks at this run's seconds per pair; and needle max_drop, now past its threshold, back inside it``
    (``pass_needs``); "" for None."""
    if need is None:
        return ""
    parts, c = [], need["check"]
    if c is not None and need["samples"] is None:
        parts.append(f"{check_name(c)} has no estimate of the pairs that would decide it")
    elif c is not None:
        tasks = f"{need['tasks']} task" + ("s" if need["tasks"] != 1 else "")
        budget = (f"; {fmt_duration(need['seconds'])} of budget over {tasks} at this run's seconds per pair"
                  if need["seconds"] else "")
        parts.append(f"the slowest, {check_name(c)}, ≈+{need['samples']} samples{budget}")
    if need["back"]:
        tail = ", now past its threshold, back inside it" if len(need["back"]) == 1 else (
            ", now past their thresholds, back inside")
        parts.append(", ".join(check_name(x) for x in need["back"]) + tail)
    return "a PASS needs every open check decided: " + "; and ".join(parts)


def leans_fail(c: Row) -> bool:
    """Whether an open check's observed value is already beyond its threshold: a per-task check by
    ``gate.types.heads_to_fail``; the pooled check when its observed mean margin (Δ + max_drop over its tasks) is
    below 0, the limit its bound FAILs at (``gate.pooled``: observed is that margin)."""
    if c["task"] == POOLED:
        return float(c["observed"]) < 0.0
    return heads_to_fail(c["check"], float(c["observed"]), float(c["threshold"]))


def fail_bound(c: Row) -> tuple[float | None, str, float]:
    """The bound of a check's interval (``ci``) on its FAIL side, the comparison a FAIL needs and its limit:
    ``max_drop`` and the pooled check FAIL when the upper bound is ``< -max_drop`` (pooled: ``< 0``),
    ``max_flip_rate`` and ``max_kld`` when the lower bound is above the threshold, ``min_score`` when the upper bound
    is below it. The bound is None for a check without ``ci``."""
    ci, t = c.get("ci"), float(c["threshold"])
    if c["check"] in ("max_flip_rate", "max_kld"):
        return (float(ci[0]) if ci else None), ">", t
    if c["check"] == "min_score":
        return (float(ci[1]) if ci else None), "<", t
    return (float(ci[1]) if ci else None), "<", (0.0 if c["task"] == POOLED else -t)


#: samples beyond which an extrapolated FAIL is not called a heading: more than an endless stream's default cap,
#: extrapolated from a few pairs (a near-lossless KV variant's json at 1↓ 0↑ in 16 pairs "needed ~5,406 more");
#: such a check is among those a PASS needs back inside (``pass_needs``' ``back``)
FAR = DEFAULT_CAP


def fail_needs(r: Row, checks: list[Row]) -> list[Row]:
    """The open checks of an undecided variant that head to a FAIL (``leans_fail``) within ``FAR`` samples, nearest
    first: fewest seconds to decide (``seconds_to_decide``), else fewest samples (``samples_to_decide``); unknown
    ones last. Each is ``{"check", "task", "slice", "route", "pools", "bound", "op", "limit", "threshold",
    "samples", "seconds"}`` (``route``: the pooled check's cheapest task, ``pooled_route``)."""
    out = []
    for c in checks:
        if c["verdict"] != "INCONCLUSIVE" or not leans_fail(c):
            continue
        samples = samples_to_decide(r, c)
        if (samples or 0) > FAR:
            continue
        bound, op, limit = fail_bound(c)
        route = pooled_route(r, c)
        out.append({"check": c["check"], "task": c["task"], "slice": c["slice"], "route": route[0] if route else None,
                    "pools": [t for t, _ in c.get("pools") or []], "bound": bound, "op": op, "limit": limit,
                    "threshold": c["threshold"], "samples": samples, "seconds": seconds_to_decide(r, c)})
    inf = float("inf")
    return sorted(out, key=lambda x: (inf if x["seconds"] is None else x["seconds"],
                                      inf if x["samples"] is None else x["samples"]))


def fail_name(x: Row) -> str:
    """``pooled_max_drop over reasoning,json`` for the pooled check, else ``check_name``."""
    return f"{x['check']} over {','.join(x['pools'])}" if x["task"] == POOLED and x["pools"] else check_name(x)


def fail_text(heading: list[Row] | None) -> str:
    """``heading to FAIL: pooled_max_drop over reasoning,json: bound +0.013 (needs < 0), ~8 more pairs of reasoning
    (~15 s)`` for the nearest check of ``fail_needs`` (a slice check counts the task's samples; the pooled check
    the pairs of the task it is cheapest to draw them from), then the others' names; "" for none."""
    if not heading:
        return ""
    x = heading[0]
    parts = [] if x["bound"] is None else [f"bound {x['bound']:+.3f} (needs {x['op']} {x['limit']:g})"]
    unit = f"pairs of {x['route']}" if x.get("route") else "pairs" if x["slice"] == ALL else f"samples of {x['task']}"
    if x["samples"]:
        secs = f" ({fmt_duration(x['seconds'])})" if x["seconds"] else ""
        parts.append(f"~{x['samples']} more {unit}{secs}")
    else:
        parts.append("no estimate of the pairs that would decide it")
    more = f"; also heading there: {', '.join(fail_name(y) for y in heading[1:])}" if heading[1:] else ""
    return f"heading to FAIL: {fail_name(x)}: {', '.join(parts)}{more}"

