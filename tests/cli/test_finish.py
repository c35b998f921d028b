"""cli.finish: the verdict table printed after a run."""
from __future__ import annotations

from types import SimpleNamespace

from evalsuite.cli.finish import verdict_rows
from evalsuite.stats.types import PairedStats


def _stat(variant: str, task: str, n: int) -> PairedStats:
    return PairedStats(variant, task, "all", n, 0.5 if n else 0.0, 0.25 if n else 0.0, -0.25 if n else 0.0,
                       -0.5 if n else -1.0, -0.05 if n else 1.0, True, 4 if n else 0, 0, 0.5, 0.9)


def test_a_task_no_pair_reached_prints_no_delta():
    """A variant that FAILed before a task was drawn for it: the row says so instead of Δ +0.000 [-1, +1]."""
    gated = SimpleNamespace(gate=SimpleNamespace(checks=[SimpleNamespace(variant="q", task="a", verdict="FAIL"),
                                                         SimpleNamespace(variant="q", task="b",
                                                                         verdict="INCONCLUSIVE")]),
                            stats=[_stat("q", "a", 16), _stat("q", "b", 0)])
    header, rows = verdict_rows(gated)
    got = {r[1]: dict(zip(header[1:], r[1:])) for r in rows}
    assert got["a"]["Δ [95% CI]"] == "-0.250 [-0.500,-0.050]" and got["a"]["verdict"] == "FAIL"
    assert got["b"]["Δ [95% CI]"] == "no paired samples" and got["b"]["n"] == "0" and got["b"]["base"] == "-"
    assert got["b"]["verdict"] == "INCONCLUSIVE"


def test_the_last_lines_say_what_a_pass_of_an_undecided_variant_needs():
    """Under an INCONCLUSIVE variant's line: what a PASS would take (``report.deciding.pass_text``); nothing under a
    decided one."""
    from evalsuite.cli.finish import decision_lines

    gated = SimpleNamespace(gate=SimpleNamespace(variant_verdicts={"q": "FAIL", "kv": "INCONCLUSIVE"}, overall="FAIL",
                                                 exit_code=1),
                            stats=[_stat("q", "a", 16), _stat("kv", "a", 48)])
    lines = decision_lines(gated, {"q": "", "kv": "a PASS needs every open check decided: the slowest, a max_drop"})
    assert lines[0].startswith("q ") and "FAIL  (a n=16)" in lines[0] and lines[1].startswith("kv ")
    assert lines[2].strip() == "a PASS needs every open check decided: the slowest, a max_drop"
    assert lines[3] == "may ship: none; may not ship: q (FAIL), kv (INCONCLUSIVE)" and len(lines) == 5


def _store(tmp_path, n: int = 40, lost: int = 5, **state):
    """A stored, gated-ready run: bf16, ``w4g64`` losing ``lost`` of the baseline's right answers on json and code
    (its drop past max_drop 0.05, n too small to FAIL it yet) and ``w8`` answering as the baseline does."""
    from evalsuite.store.records import SampleResult, VariantInfo
    from evalsuite.store.sqlite import Store

    def recs(variant: str, k: int) -> list[SampleResult]:
        return [SampleResult(variant, t, "1", f"{t}-{i}", f"h{t}{i}", "x", float(i % 2 == 0 and i // 2 >= k))
                for t in ("json", "code") for i in range(n)]

    store = Store.create(tmp_path / "run", {"tasks": ["json", "code"]})
    store.put_samples(recs("bf16", 0) + recs("w4g64", lost) + recs("w8", 0))
    for v in ("bf16", "w4g64", "w8"):
        store.put_variant(VariantInfo(v, {"name": v}, 1000, 1000))
    store.update_state(baseline="bf16", variant_order=["bf16", "w4g64", "w8"], **state)
    return store


def test_a_variant_heading_to_a_fail_says_so_instead_of_what_a_pass_needs(tmp_path):
    """w4g64's pooled margin is below 0 and its CS upper bound still above: INCONCLUSIVE, heading to a FAIL. The line
    under it names the nearest such check, its bound, the pairs and seconds to decide it (at the stored seconds
    per pair); no "PASS needs" line. w8 (lossless, undecided) keeps its "PASS needs" line."""
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.gate.store_gate import gate_store

    cost = {"w4g64/json": 0.5, "w4g64/code": 1.5, "bf16/json": 0.25, "bf16/code": 0.25, "w8/json": 0.5,
            "w8/code": 0.5}
    store = _store(tmp_path, seconds_per_pair=cost)
    gated = gate_store(store)
    assert gated.gate.variant_verdicts == {"w4g64": "INCONCLUSIVE", "w8": "INCONCLUSIVE"}
    (pool,) = [c for c in gated.gate.checks if c.variant == "w4g64" and c.task == "*"]
    assert pool.observed < 0 < pool.ci[1] and pool.more_needed  # heads to a FAIL, not there yet
    lines: list[str] = []
    assert gate_and_report(store, None, echo=lines.append, report=False) == gated.gate.exit_code
    at = next(i for i, x in enumerate(lines) if x.startswith("w4g64 ") and "INCONCLUSIVE  (" in x)
    needs = dict(pool.needs_from)  # json and code lose alike: either alone needs the same pairs
    assert set(needs) == {"json", "code"} and needs["json"] == needs["code"]
    seconds = needs["json"] * (0.5 + 0.25)  # drawn from json, the cheaper task (code: 1.5 + 0.25 a pair)
    pools = ",".join(t for t, _ in pool.pools)
    head, also = lines[at + 1].strip().split("; also heading there: ")
    assert head == (f"heading to FAIL: pooled_max_drop over {pools}: bound {pool.ci[1]:+.3f} (needs < 0), "
                    f"~{needs['json']} more pairs of json (~{seconds:.0f} s)")
    assert sorted(also.split(", ")) == ["code max_drop", "json max_drop"]  # the flip rates are not past theirs
    assert not any("PASS needs" in x for x in lines[at:at + 2])
    w8 = next(i for i, x in enumerate(lines) if x.startswith("w8 ") and "INCONCLUSIVE  (" in x)
    assert lines[w8 + 1].strip().startswith("a PASS needs every open check decided: the slowest, ")
    assert not any("heading to FAIL" in x for x in lines[w8:])


def test_the_report_cards_say_heading_to_fail_first(tmp_path):
    """results.json's card carries ``to_fail`` (nearest first, with bound, threshold, samples, seconds); the
    Markdown and HTML cards say it before the reasons and leave out what a PASS needs; without seconds per pair the
    line gives the pairs only, and a per-task check nearer than the pooled one leads."""
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.build import report_model
    from evalsuite.report.deciding import FAR, fail_text
    from evalsuite.report.digest import variant_cards
    from evalsuite.report.html import render_html
    from evalsuite.report.markdown import render_markdown

    store = _store(tmp_path)
    model = report_model(store, gate_store(store)).to_dict()
    cards = {c["variant"]: c for c in variant_cards(model)}
    heading = cards["w4g64"]["to_fail"]
    assert heading[0]["task"] == "*" and sorted(x["task"] for x in heading[1:]) == ["code", "json"]
    assert cards["w8"]["to_fail"] == []
    assert [x["samples"] for x in heading] == sorted(x["samples"] for x in heading)
    assert all(x["seconds"] is None for x in heading) and heading[1]["limit"] == -heading[1]["threshold"]
    text = fail_text(heading)
    assert "more pairs of code;" in text and " s)" not in text  # no seconds without a measured cost: fewest pairs,
    # a tie by name
    md = render_markdown(model)
    card = next(x for x in md.splitlines() if "`w4g64`" in x)
    assert "**Heading to FAIL: pooled_max_drop over code,json: bound" in card and "PASS needs" not in card
    assert card.index("Heading to FAIL") < card.index("straddles max_drop")
    assert "To decide it: a PASS needs" in next(x for x in md.splitlines() if "`w8`" in x)
    page = render_html(model)
    w4 = page.split('data-variant="w4g64"')[1].split('<dl class="gains">')[0]
    assert 'class="counts to-fail"' in w4 and "PASS needs" not in w4
    assert w4.index("to-fail") < w4.index('class="reasons"')
    # a per-task check nearer than the pooled one leads
    near = [{**c, "more_needed": 3} if c["task"] == "code" and c["check"] == "max_drop" else c
            for c in model["checks"]]
    lead = variant_cards({**model, "checks": near})[0]["to_fail"]
    assert lead[0]["task"] == "code" and fail_text(lead).startswith("heading to FAIL: code max_drop: bound ")
    # an extrapolated FAIL thousands of samples away (a 1-flip estimate) is no heading: the card says what a PASS
    # needs, that check among those to come back inside
    far = [{**c, "more_needed": FAR + 1, "needs_from": [[t, FAR + 1] for t, _ in c.get("needs_from") or []]}
           for c in model["checks"]]
    card = variant_cards({**model, "checks": far})[0]
    assert card["variant"] == "w4g64" and card["to_fail"] == [] and card["to_pass"]["back"]


def test_the_machine_shows_in_the_report_and_the_sequential_line(tmp_path):
    """A stored ``machine`` (cpu.machine.machine_info) shows in results.json, summary.md and index.html with the
    seconds per pair per task, and as the speed class on the ``sequential:`` line; a meta without it still loads,
    gates and reports, with no CPU line."""
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.build import report_model
    from evalsuite.report.html import render_html
    from evalsuite.report.markdown import render_markdown

    info = {"cpu": "Intel Xeon <test>", "flags": ["avx2", "fma"], "cores": 2, "gflops": 38.4, "speed_class": "slow"}
    cost = {"w4g64/json": 0.5, "w8/json": 0.75, "bf16/json": 0.25, "w4g64/code": 12.0}
    store = _store(tmp_path, seconds_per_pair=cost, machine=info, rounds=2, drawn={"json": 40, "code": 40},
                   stop_reason="budget spent")
    model = report_model(store, gate_store(store)).to_dict()
    assert model["machine"] == info
    line = ("CPU: Intel Xeon <test>, 2 cores, avx2 fma, 38 GFLOP/s fp32 (slow class); seconds per pair: code 12 s, "
            "json 0.25–0.75 s")
    assert line in render_markdown(model) and line.replace("<", "&lt;").replace(">", "&gt;") in render_html(model)
    lines: list[str] = []
    gate_and_report(store, None, echo=lines.append, report=False)
    (seq,) = [x for x in lines if x.startswith("sequential:")]
    assert seq.endswith("stopped: budget spent; CPU: slow class, 38 GFLOP/s")

    old = _store(tmp_path / "old", rounds=1, drawn={"json": 40}, stop_reason="decided")
    assert "machine" not in old.meta() and old.state().machine == {}
    model = report_model(old, gate_store(old)).to_dict()
    assert model["machine"] is None and "CPU:" not in render_markdown(model) and "CPU:" not in render_html(model)
    lines = []
    gate_and_report(old, None, echo=lines.append, report=False)
    assert [x for x in lines if x.startswith("sequential:")][0].endswith("stopped: decided")
