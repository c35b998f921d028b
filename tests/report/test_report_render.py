"""Report rendering: a crafted report (several variants, a FAIL, an INCONCLUSIVE, a needle grid, flips with
HTML-special text) through the HTML, Markdown and JUnit renderers and the plots."""
from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.report import plots
from evalsuite.report.html import render_html
from evalsuite.report.junit import render_junit
from evalsuite.report.markdown import render_markdown
from evalsuite.report.model import SCHEMA_VERSION, Flip, ReportModel, check_report, needle_grid
from evalsuite.store.records import SampleResult, VariantInfo
from evalsuite.gate.types import CheckResult, GateResult
from evalsuite.stats.types import PairedStats

EVIL = '<script>alert("pwn")</script> & \'q\' <img src="https://evil.example/x.png">'
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _needle_samples() -> list[SampleResult]:
    out = []
    for variant, fail_long in (("bf16", False), ("w4g128", True)):
        for n in (1024, 2048, 4096):
            for d in (0.0, 0.5, 1.0):
                for rep in range(2):
                    score = 0.0 if (fail_long and n == 4096 and rep == 0) else 1.0
                    out.append(SampleResult(variant, "needle", "1", f"n{n}-d{d}-{rep}", "h", "out", score,
                                            metadata={"context_len": n, "depth": d}))
    return out


def _stat(variant: str, task: str, delta: float, lo: float, hi: float, slice_: str = "all",
          rw: int = 0, wr: int = 0, n: int = 30, metrics: dict | None = None) -> PairedStats:
    return PairedStats(variant, task, slice_, n, 0.8, 0.8 + delta, delta, lo, hi, True, rw, wr, 0.5, 0.9,
                       kld_mean=0.012, kld_p99=0.2, kld_max=0.9, top1_agreement=0.97, metrics=metrics or {})


def _json_metrics(field_accuracy: float, valid: float) -> dict:
    return {"field_accuracy": {"baseline": 0.9, "variant": field_accuracy, "delta": field_accuracy - 0.9, "n": 30.0},
            "valid": {"baseline": 1.0, "variant": valid, "delta": valid - 1.0, "n": 28.0}}


def crafted_report() -> dict:
    """Baseline bf16; w8 passes, w4g128 fails needle@4096, w4g128+kv4g32 is inconclusive on gsm (≈+60 samples to
    decide). json carries secondary metrics; w8 has a sparse gsm slice (n=4 < min_samples 10) and per-item json
    slices (one sample each), neither gated."""
    checks = [
        CheckResult("w8", "gsm", "all", "max_drop", 0.05, 0.0, "PASS", "Δ CI low -0.03 >= -0.05", (-0.03, 0.03), 30),
        CheckResult("w8", "needle", "all", "max_drop", 0.05, 0.0, "PASS", "no drop", (0.0, 0.0), 30),
        CheckResult("w8", "json", "all", "max_drop", 0.05, 0.0, "PASS", "json: no drop", (-0.02, 0.02), 30),
        CheckResult("w4g128", "needle", "context_len=4096", "max_drop", 0.05, -0.5, "FAIL",
                    "needle context_len=4096: Δ -0.50 CI [-0.83, -0.17] < -0.05 & <worse>", (-0.83, -0.17), 10),
        CheckResult("w4g128", "gsm", "all", "max_flip_rate", 0.2, 0.1, "PASS", "flip rate 0.10 <= 0.20", None, 30),
        CheckResult("w4g128", "json", "all", "max_drop", 0.05, -0.01, "PASS", "json: small drop", (-0.04, 0.02), 30),
        CheckResult("w4g128+kv4g32", "gsm", "all", "max_drop", 0.05, -0.02, "INCONCLUSIVE",
                    "CI [-0.12, 0.08] straddles -0.05: need more samples", (-0.12, 0.08), 30, 60),
        CheckResult("w4g128+kv4g32", "json", "all", "max_drop", 0.05, -0.02, "PASS", "json: within", (-0.04, 0.0),
                    30),
    ]
    gate = GateResult(checks, {"w8": "PASS", "w4g128": "FAIL", "w4g128+kv4g32": "INCONCLUSIVE"}, "FAIL", 1)
    stats = [_stat("w8", "gsm", 0.0, -0.03, 0.03, rw=1, wr=1), _stat("w8", "needle", 0.0, 0.0, 0.0),
             _stat("w8", "gsm", 0.0, -0.2, 0.2, "steps=2", n=4),
             _stat("w8", "json", 0.0, -0.02, 0.02, metrics=_json_metrics(0.9, 1.0)),
             _stat("w8", "json", 0.0, 0.0, 0.0, "schema=s1", n=1), _stat("w8", "json", 0.0, 0.0, 0.0, "schema=s2", n=1),
             _stat("w4g128", "needle", -0.17, -0.3, -0.05, rw=3), _stat("w4g128", "gsm", -0.03, -0.1, 0.03, rw=2),
             _stat("w4g128", "needle", -0.5, -0.83, -0.17, "context_len=4096", rw=3, n=10),
             _stat("w4g128", "json", -0.01, -0.04, 0.02, metrics=_json_metrics(0.85, 0.95)),
             _stat("w4g128+kv4g32", "gsm", -0.02, -0.12, 0.08, rw=3, wr=2),
             _stat("w4g128+kv4g32", "json", -0.02, -0.04, 0.0, metrics=_json_metrics(0.8, 1.0))]
    variants = [VariantInfo("bf16", {"name": "bf16"}, 269_060_000, 269_030_016, 30720.0, 30720.0, 0.05, 0.06),
                VariantInfo("w8", {"name": "w8"}, 162_000_000, 161_900_000, 30720.0, 30720.0, 0.07, 0.08),
                VariantInfo("w4g128", {"name": "w4g128"}, 110_000_000, 109_000_000, 30720.0, 30720.0, 0.09, 0.1),
                VariantInfo("w4g128+kv4g32", {"name": "w4g128+kv4g32"}, 110_000_000, 109_000_000, 9600.0,
                            9600.0, 0.1, 0.12)]
    flips = [Flip("w4g128", "needle", "n4096-d0.5-0", "Find the passkey. " + EVIL, "The passkey is 4242.",
                  EVIL + " answer: 13", 1.0, 0.0),
             Flip("w4g128+kv4g32", "gsm", "gsm-7", "Tom has 3 < 5 apples & ...", "#### 8", "#### 9", 1.0, 0.0),
             Flip("w8", "gsm", "gsm-9", "2 + 2 =", "5", "4", 0.0, 1.0)]
    model = ReportModel(run_id="run-<1>", created="2025-01-02T03:04:05Z",
                        model={"name": "SmolLM2 <135M>", "fingerprint": "abc123", "dtype": "bfloat16"},
                        baseline="bf16", gate=gate, variants=variants, stats=stats,
                        needle_grid=needle_grid(_needle_samples()), flips=flips,
                        tasks={"needle": "1", "gsm": "2", "json": "1"},
                        noise_floor=[_stat("bf16", "gsm", 0.0, -0.02, 0.02)],
                        policy={"source": "<test>", "on_inconclusive": "fail",
                                "defaults": {"max_drop": 0.05, "min_samples": 10}, "tasks": {}})
    return model.to_dict()


@pytest.fixture(scope="module")
def report() -> dict:
    return crafted_report()


@pytest.fixture(scope="module")
def page(report) -> str:
    return render_html(report)


def test_report_model_shape_and_needle_grid(report):
    assert report["schema_version"] == SCHEMA_VERSION == 2 and report["overall"] == "FAIL"
    assert report["policy"]["defaults"]["min_samples"] == 10
    kv_gsm = next(c for c in report["checks"] if c["variant"] == "w4g128+kv4g32" and c["task"] == "gsm")
    assert kv_gsm["n"] == 30 and kv_gsm["more_needed"] == 60
    json_w4 = next(s for s in report["stats"] if s["variant"] == "w4g128" and s["task"] == "json")
    assert json_w4["metrics"]["field_accuracy"] == {"baseline": 0.9, "variant": 0.85, "delta": pytest.approx(-0.05),
                                                    "n": 30.0}
    assert [v["verdict"] for v in report["variants"]] == [None, "PASS", "FAIL", "INCONCLUSIVE"]
    grid = report["needle_grid"]["w4g128"]
    assert grid["context_len"] == [1024, 2048, 4096] and grid["depth"] == [0.0, 0.5, 1.0]
    assert [row[2] for row in grid["score"]] == [0.5, 0.5, 0.5] and grid["score"][0][:2] == [1.0, 1.0]
    with pytest.raises(EvalsuiteError, match="schema_version"):
        check_report({**report, "schema_version": 99})
    with pytest.raises(EvalsuiteError, match="missing"):
        render_html({"schema_version": 1})


def test_html_verdicts_escaping_and_no_network(page, report):
    assert page.startswith("<!DOCTYPE html>")
    for verdict in ("PASS", "FAIL", "INCONCLUSIVE"):
        assert f'class="v v-{verdict}"' in page
    assert 'class="badge v v-FAIL">FAIL<' in page
    # no resource reference to the network (model text mentioning a URL is escaped, not a tag)
    assert not re.search(r"""(?:src|href|action|data)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;pwn&quot;)&lt;/script&gt;" in page
    assert "&lt;img src=&quot;https://evil.example/x.png&quot;&gt;" in page
    assert "SmolLM2 &lt;135M&gt;" in page and "run-&lt;1&gt;" in page
    assert page.count("<script>") == 1  # only the inline flip-browser script
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # one flip card per flip, with data attributes for the filter
    assert page.count('class="flip"') == len(report["flips"])
    assert 'data-dir="rw"' in page and 'data-dir="wr"' in page
    assert "&lt;worse&gt;" in page  # a check reason escaped


def test_html_embeds_valid_pngs(page, report):
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    # forest plot + one heatmap per needle-grid variant
    assert len(uris) == 1 + len(report["needle_grid"])
    assert all(base64.b64decode(u).startswith(PNG_MAGIC) for u in uris)


def test_html_memory_table_values(page):
    assert "256.60 MiB" in page  # bf16 weights 269,060,000 B = 256.5956 MiB
    assert "0.41×" in page  # w4g128 vs baseline 110e6 / 269.06e6
    assert "9,600" in page and "100.0 ms" in page  # kv4 bytes/token, w4g128 ITL


def test_junit_one_case_per_check(report):
    xml = render_junit(report)
    root = ET.fromstring(xml)
    cases = root.findall(".//testcase")
    assert len(cases) == len(report["checks"])
    assert len(root.findall(".//testcase/failure")) == 1 == int(root.get("failures"))
    assert len(root.findall(".//testcase/skipped")) == 1 == int(root.get("skipped"))
    fail = root.find(".//testcase/failure/..")
    assert fail.get("classname") == "evalsuite.gate.w4g128" and "context_len=4096" in fail.get("name")
    assert "<worse>" in root.find(".//failure").get("message")  # round-trips through XML escaping
    assert {s.get("name") for s in root.findall("testsuite")} == {
        "evalsuite.gate.w8", "evalsuite.gate.w4g128", "evalsuite.gate.w4g128+kv4g32"}
    assert "verdict=FAIL n=10" in root.find(".//failure").text
    assert "more_needed=60" in root.find(".//skipped/../system-out").text
    failing = next(c for c in report["checks"] if c["verdict"] == "FAIL")
    odd = {**report, "checks": [{**failing, "reason": "bell\x07 and nul\x00 dropped"}]}
    assert ET.fromstring(render_junit(odd)).find(".//failure").get("message") == "bell and nul dropped"


def test_markdown_tables_and_reasons(report):
    md = render_markdown(report)
    assert md.startswith("# evalsuite: SmolLM2 <135M> — **FAIL** (exit 1)")
    verdicts = md.split("## Verdicts", 1)[1].split("##", 1)[0]
    rows = [line for line in verdicts.splitlines() if line.startswith("| w")]
    assert len(rows) == len(report["stats"]) - 3  # the sparse gsm slice and the two per-item json slices left out
    assert "| w4g128 | needle | context_len=4096 | 10 | 0.800 | 0.300 | -0.500 [-0.830, -0.170] | 3/0 |" in md
    assert "3 more slice rows" in verdicts and "steps=2" not in md and "schema=s1" not in md
    assert "| w4g128+kv4g32 | INCONCLUSIVE | 104.90 MiB | 9,600 |" in md
    reasons = md.split("## Top reasons", 1)[1].strip().splitlines()
    assert reasons[0].startswith("- **FAIL** w4g128 · needle · context_len=4096")
    assert reasons[1].startswith("- **INCONCLUSIVE** w4g128+kv4g32 · gsm")


def test_markdown_leads_with_decision_grid_and_metrics(report):
    md = render_markdown(report)
    decision = md.split("## Decision", 1)[1].split("## Verdicts", 1)[0]
    bullets = [line for line in decision.splitlines() if line.startswith("- ")]
    assert [b.split("`")[1] for b in bullets] == ["w8", "w4g128", "w4g128+kv4g32"]
    assert bullets[1].startswith("- **FAIL** `w4g128` — weights 104.90 MiB (-59%) · KV 30,720 B/token (same)")
    assert "≈+60 samples to decide" in bullets[2] and "KV 9,600 B/token (-69%)" in bullets[2]
    assert "| w4g128 | -0.030 [-0.100, +0.030] n=30 PASS | -0.170 [-0.300, -0.050] n=30 FAIL in context_len=4096 " \
           "(n=10) |" in decision
    assert "n=30 INCONCLUSIVE ≈+60 to decide" in decision
    metrics = md.split("## Secondary metrics", 1)[1].split("## Memory", 1)[0]
    assert "| variant | n | field_accuracy | valid |" in metrics
    assert "| w4g128 | 30 | 0.900 → 0.850 (-0.050) | 1.000 → 0.950 (-0.050) |" in metrics


def test_plots_are_pngs_and_pareto_front():
    pts = [{"name": "bf16", "bytes": 100, "score": 0.80, "lo": 0.75, "hi": 0.85},
           {"name": "w8", "bytes": 55, "score": 0.80, "lo": 0.75, "hi": 0.85},
           {"name": "w4g64", "bytes": 32, "score": 0.74, "lo": 0.68, "hi": 0.80},
           {"name": "w4g128", "bytes": 30, "score": 0.70, "lo": 0.64, "hi": 0.76},
           {"name": "w4g32", "bytes": 35, "score": 0.72, "lo": 0.66, "hi": 0.78}]
    assert plots.pareto_front(pts) == ["w8", "w4g64", "w4g128"]
    kld = [{"name": "a", "bytes": 10, "score": 0.5}, {"name": "b", "bytes": 20, "score": 0.1},
           {"name": "c", "bytes": 30, "score": 0.2}]
    assert plots.pareto_front(kld, higher_is_better=False) == ["a", "b"]
    for png in (plots.quality_vs_bytes(pts, "weight bytes", "needle score"), plots.kld_vs_bytes(kld),
                plots.forest_plot([{"label": "x", "delta": -0.1, "lo": -0.2, "hi": 0.0, "verdict": "FAIL"}], [-0.05]),
                plots.needle_heatmap(crafted_report()["needle_grid"]["w4g128"], "w4g128",
                                     crafted_report()["needle_grid"]["bf16"])):
        assert png.startswith(PNG_MAGIC) and len(png) > 1000
    assert plots.data_uri(b"abc") == "data:image/png;base64,YWJj"


def test_empty_sections_render(report):
    bare = {**report, "stats": [], "checks": [], "flips": [], "needle_grid": {}, "noise_floor": None}
    page = render_html(bare)
    assert "No flipped samples" in page and "No paired statistics" in page and "data:image/png" not in page
    assert ET.fromstring(render_junit(bare)).get("tests") == "0"
    assert "every check passed" in render_markdown(bare)


def _between(page: str, start: str, end: str) -> str:
    i = page.index(start)
    return page[i:page.index(end, i)]


def test_html_first_screen_cards(page, report):
    """The decision comes first: one card per variant, coloured by verdict, FAIL/INCONCLUSIVE reasons, savings."""
    assert page.index('id="decision"') < page.index('id="grid"') < page.index('id="verdicts"')
    cards = re.findall(r'<div class="card (v-\w+)" data-variant="([^"]+)"', page)
    assert cards == [("v-PASS", "w8"), ("v-FAIL", "w4g128"), ("v-INCONCLUSIVE", "w4g128+kv4g32")]
    w4 = _between(page, 'data-variant="w4g128">', '</dl></div>')
    assert '<li class="r-FAIL"><b>FAIL</b> needle context_len=4096' in w4 and "&lt;worse&gt;" in w4
    assert "2 of 3 checks pass" in w4 and "saves 151.69 MiB" in w4 and "-59% vs baseline" in w4
    assert "1.80× baseline" in w4 and "same as baseline" in w4  # TTFT 90 ms vs 50 ms; KV unchanged
    kv = _between(page, 'data-variant="w4g128+kv4g32">', '</dl></div>')
    assert "r-INCONCLUSIVE" in kv and "≈+60 samples to decide" in kv and "saves 21,120 B/token" in kv
    assert "all 3 checks passed" in _between(page, 'data-variant="w8">', '</dl></div>')
    assert "Compared with baseline <code>bf16</code>: weights 256.60 MiB" in page


def test_card_reasons_fail_before_inconclusive(report):
    from evalsuite.report.digest import variant_cards
    extra = {**report["checks"][6], "variant": "w4g128", "reason": "undecided"}
    cards = variant_cards({**report, "checks": [extra] + report["checks"]})
    w4 = next(c for c in cards if c["variant"] == "w4g128")
    assert [c["verdict"] for c in w4["reasons"]] == ["FAIL", "INCONCLUSIVE"]


def test_html_grid_n_and_more_needed(page):
    grid = _between(page, 'id="grid"', "</section>")
    found = re.findall(r'<td class="cell (v-\w+)" data-variant="([^"]+)" data-task="([^"]+)"', grid)
    cells = {(v, t): c for c, v, t in found}
    assert cells[("w8", "gsm")] == "v-PASS" and cells[("w4g128", "needle")] == "v-FAIL"
    assert cells[("w4g128+kv4g32", "gsm")] == "v-INCONCLUSIVE" and ("w4g128+kv4g32", "needle") not in cells
    assert "n=30 · FAIL in context_len=4096 (n=10)" in grid
    assert "n=30 · ≈+60 to decide" in grid and "<span>-0.170</span> <span>[-0.300, -0.050]</span>" in grid
    assert grid.count('<td class="cell v-none">—</td>') == 1  # no needle run for w4g128+kv4g32


def test_grid_reads_old_runs_without_n(report):
    """Checks from runs before ``n``/``more_needed`` existed: n falls back to the stats row, no count to decide."""
    from evalsuite.report.digest import task_decision
    old = {**report, "checks": [{k: v for k, v in c.items() if k not in ("n", "more_needed")}
                                for c in report["checks"]]}
    old = check_report(old)
    d = task_decision(old, "w4g128+kv4g32", "gsm")
    assert d["verdict"] == "INCONCLUSIVE" and d["n"] == 30 and d["more_needed"] is None
    assert task_decision(old, "w4g128", "needle")["n"] == 10  # the slice row's n


def test_html_sparse_slices_behind_toggle(page):
    main = _between(page, 'id="verdicts"', "</table>")
    hidden = _between(page, '<details class="more-slices"', "</details>")
    assert "3 more slice rows" in hidden
    for name in ("steps=2", "schema=s1", "schema=s2"):
        assert name not in main and f'<td class="l">{name}</td>' in hidden
    assert "context_len=4096" in main  # gated rows stay visible whatever their n


def test_hidden_rows_and_forest_rows(report):
    from evalsuite.report.digest import gated_rows, split_rows
    from evalsuite.report.model import sorted_stats
    shown, hidden = split_rows(report, sorted_stats(report))
    assert sorted(s["slice"] for s in hidden) == ["schema=s1", "schema=s2", "steps=2"]
    assert len(shown) + len(hidden) == len(report["stats"])
    # min_samples 0: the n=4 slice shows; the per-item slices still hide
    lax = {**report, "policy": {"defaults": {"min_samples": 0}, "tasks": {}}}
    assert sorted(s["slice"] for s in split_rows(lax, sorted_stats(lax))[1]) == ["schema=s1", "schema=s2"]
    # no policy in the report: min_samples taken from no check, so only per-item rows hide
    assert len(split_rows({**report, "policy": None}, sorted_stats(report))[1]) == 2
    forest = {(s["variant"], s["task"], s["slice"]) for s in gated_rows(report, sorted_stats(report))}
    assert forest == {(c["variant"], c["task"], c["slice"]) for c in report["checks"]}
    assert ("w4g128", "needle", "all") not in forest  # Δ shown in the grid, but no check looked at it


def test_html_secondary_metrics(page):
    metrics = _between(page, 'id="metrics"', "</p>")
    assert "<h3>json</h3>" in metrics and "<th>field_accuracy</th><th>valid</th>" in metrics
    assert '0.900 → 0.850 <span class="neg">(-0.050)</span>' in metrics
    assert '1.000 → 0.950 <span class="neg">(-0.050)</span> <span class="note">n=28</span>' in metrics


def test_results_json_round_trip_and_v1_reports(report):
    import json
    again = json.loads(json.dumps(report, default=str))
    assert check_report(again)["stats"][3]["metrics"]["valid"]["n"] == 28.0
    v1 = {**report, "schema_version": 1, "policy": None,
          "stats": [{k: v for k, v in s.items() if k != "metrics"} for s in report["stats"]],
          "checks": [{k: v for k, v in c.items() if k not in ("n", "more_needed")} for c in report["checks"]]}
    del v1["policy"]
    page = render_html(v1)
    assert 'class="card v-FAIL"' in page and 'id="metrics"' not in page
    assert "## Decision" in render_markdown(v1) and ET.fromstring(render_junit(v1)).get("tests") == "8"


def _check(task, verdict, observed, more, check="max_drop", slice_="all"):
    return {"variant": "w4g64", "task": task, "slice": slice_, "check": check, "threshold": 0.05,
            "observed": observed, "verdict": verdict, "reason": f"{task}: ...", "more_needed": more, "n": 16}


def test_inconclusive_card_leads_with_the_largest_drop_and_the_nearest_decision():
    """The grid of issue 23: w4g64's card led with code at ~304 more pairs while needle (-0.375, ~2 more) hid."""
    from evalsuite.report.digest import lead_reasons

    checks = [_check("code", "INCONCLUSIVE", -0.104, 304), _check("json", "INCONCLUSIVE", -0.12, 40),
              _check("needle", "INCONCLUSIVE", -0.375, 2), _check("reasoning", "PASS", 0.0, None),
              _check("code", "INCONCLUSIVE", 0.1, 2700, check="max_flip_rate")]
    lead = lead_reasons(checks, "INCONCLUSIVE")
    assert [(c["task"], c["lead"]) for c in lead] == [("needle", "largest drop"), ("json", "")]
    checks[1] = _check("json", "INCONCLUSIVE", -0.12, 1)
    lead = lead_reasons(checks, "INCONCLUSIVE")
    assert [(c["task"], c["lead"]) for c in lead] == [("needle", "largest drop"), ("json", "nearest to a decision")]


def test_fail_card_leads_with_the_failed_check():
    from evalsuite.report.digest import lead_reasons

    checks = [_check("code", "INCONCLUSIVE", -0.4, 1), _check("*", "FAIL", -0.06, None, "pooled_max_drop"),
              _check("needle", "FAIL", -0.5, None)]
    lead = lead_reasons(checks, "FAIL", limit=3)
    assert [c["task"] for c in lead] == ["needle", "*", "code"]  # per-task FAIL, pooled FAIL, then the rest


def test_a_long_variant_name_cannot_run_into_its_badge():
    """The badge never shrinks or wraps and the name may break anywhere (the browser test measures it)."""
    from evalsuite.report.templates import CSS

    assert "flex: none; white-space: nowrap;" in CSS.split(".card .verdict {")[1].split("}")[0]
    assert "overflow-wrap: anywhere" in CSS.split(".card .name {")[1].split("}")[0]


def test_kv_card_states_the_context_range_and_the_grid_the_informative_pairs(report):
    from evalsuite.report.html_decision import covers_note, decision_note
    from evalsuite.report.digest import context_range

    stats = [{"variant": "kv", "task": "needle", "slice": f"context_len={c}", "n": 4} for c in (2048, 512, 1024)]
    assert context_range({"stats": stats}, "kv") == (512, 2048) and context_range({"stats": stats}, "w8") is None
    card = {"contexts": (512, 2048), "kv": {"saved": 100.0}}
    assert "KV verdict covers contexts of 512–2,048 tokens" in covers_note(card)
    assert covers_note({**card, "kv": {"saved": 0}}) == ""  # a weight-only variant: no KV claim
    d = {"stat": {"n": 52, "n_informative": 0}, "verdict": "PASS", "slices": [], "n": 52}
    assert decision_note(d) == "n=52 (0 with a side right)"  # HumanEval for the 135M model: pairs, no information


def test_the_pooled_check_gets_its_own_grid_column(report):
    from evalsuite.report.html_decision import grid_section
    from evalsuite.report.markdown import render_markdown

    pool = {"variant": "w4g128", "task": "*", "slice": "all", "check": "pooled_max_drop", "threshold": 0.0,
            "observed": -0.062, "verdict": "FAIL", "reason": "pooled over 3 tasks: ...", "ci": [-1.0, -0.011],
            "n": 90, "more_needed": None, "pools": [["gsm", 30], ["json", 30], ["needle", 30]]}
    r = {**report, "checks": report["checks"] + [pool]}
    grid = grid_section(r)
    assert "<th>pooled (all tasks)</th>" in grid and "margin -0.062, CS upper -0.011" in grid
    assert "<th>*</th>" not in grid and "| pooled (all tasks) |" in render_markdown(r)


def test_an_undecided_check_says_how_much_budget_would_decide_it(report):
    """With the run's measured seconds per pair, a card turns "≈+N samples" into seconds of budget: the variant's
    cost on the task plus the baseline's, times the pairs still needed."""
    from evalsuite.report.deciding import seconds_to_decide
    from evalsuite.report.digest import variant_cards

    timed = {**report, "seconds_per_pair": {"w4g128+kv4g32/gsm": 1.5, "bf16/gsm": 0.5}}
    card = next(c for c in variant_cards(timed) if c["variant"] == "w4g128+kv4g32")
    gsm = next(c for c in card["reasons"] if c["task"] == "gsm")
    assert gsm["more_needed"] == 60 and gsm["seconds"] == pytest.approx(120.0)  # 60 x (1.5 + 0.5)
    assert "≈+60 samples to decide, ~2 min of budget at this run's seconds per pair" in render_markdown(timed)
    assert "of budget" in render_html(timed)
    assert "of budget" not in render_markdown(report)  # a run without measured costs says only the pairs
    pooled = {"variant": "v", "task": "*", "more_needed": 10, "pools": [["a", 5], ["b", 5]]}
    assert seconds_to_decide({"baseline": "bf16", "seconds_per_pair": {"v/a": 1.0, "v/b": 3.0}}, pooled) == 20.0


def test_a_warm_runs_card_prices_the_baseline_samples_past_the_stored_ones():
    """A warm run whose stored baseline answered every drawn sample measured no baseline cost; the samples a check
    still needs past the stored ones make the baseline generate, at what its manifest recorded. The card counts
    them, and none of the stored ones."""
    from evalsuite.report.deciding import seconds_to_decide

    check = {"variant": "kv", "task": "needle", "slice": "all", "check": "max_drop", "n": 48, "more_needed": 20}
    r = {"baseline": "bf16", "checks": [check], "seconds_per_pair": {"kv/needle": 1.0}}
    assert seconds_to_decide(r, check) == pytest.approx(20.0)  # without baseline_cost: the variant's only
    past = {**r, "baseline_cost": {"needle": {"drawn": 48, "held": 48, "seconds": 4.0}}}
    assert seconds_to_decide(past, check) == pytest.approx(20 * 1.0 + 20 * 4.0)
    within = {**r, "baseline_cost": {"needle": {"drawn": 48, "held": 60, "seconds": 4.0}}}
    assert seconds_to_decide(within, check) == pytest.approx(20 * 1.0 + 8 * 4.0)  # 12 of the 20 are stored


def test_the_report_takes_the_baseline_cost_from_the_runs_state():
    """``report.build.baseline_cost``: the stored baseline's prefix and recorded rate, or the rate measured in the
    run from MIN_MEASURED samples on; nothing for a run without rounds."""
    from evalsuite.store.state import RunState
    from evalsuite.report.build import baseline_cost

    assert baseline_cost(RunState()) is None
    warm = RunState(drawn={"needle": 48}, baseline_stored={"needle": [48, 4.8]})
    assert baseline_cost(warm) == {"needle": {"drawn": 48, "held": 48, "seconds": 4.8}}
    measured = RunState(drawn={"needle": 64}, baseline_stored={"needle": [48, 4.8]},
                        round_costs={"bf16/needle": [48.0, 16]})
    assert baseline_cost(measured)["needle"]["seconds"] == pytest.approx(3.0)
    cold = RunState(drawn={"json": 16}, round_costs={"bf16/json": [8.0, 16]})
    assert baseline_cost(cold) == {"json": {"drawn": 16, "held": 0, "seconds": 0.5}}


def test_a_slice_check_counts_the_task_samples_its_pairs_take():
    """A slice check's ``more_needed`` counts pairs in the slice; with 16 of the task's 48 pairs in it, each pair
    takes about three samples of the task, and the budget those samples take is what the card states."""
    from evalsuite.report.deciding import samples_to_decide, seconds_to_decide, to_decide
    from evalsuite.report.digest import task_decision

    check = {"variant": "kv", "task": "needle", "slice": "context_len>=2048", "check": "max_drop", "n": 16,
             "more_needed": 22, "verdict": "INCONCLUSIVE", "observed": 0.0, "threshold": 0.1}
    whole = {**check, "slice": "all", "n": 48, "more_needed": 5}
    r = {"baseline": "bf16", "checks": [check, whole], "seconds_per_pair": {"kv/needle": 1.5, "bf16/needle": 0.5},
         "stats": [{"variant": "kv", "task": "needle", "slice": "all", "n": 48, "delta": 0.0},
                   {"variant": "kv", "task": "needle", "slice": "context_len>=2048", "n": 16, "delta": 0.0}]}
    assert samples_to_decide(r, check) == 66 and seconds_to_decide(r, check) == pytest.approx(132.0)
    assert samples_to_decide(r, whole) == 5  # a task-wide check: its pairs are the task's samples
    assert task_decision(r, "kv", "needle")["more_needed"] == 66  # the grid cell: the slowest deciding check
    assert to_decide({**check, "samples": 66, "seconds": 132.0}) == (
        "≈+66 samples to decide (~22 of them in the slice), ~2 min of budget at this run's seconds per pair")


def test_an_undecided_card_says_what_a_pass_needs(report):
    """A PASS needs every open per-task check: per task its slowest, the slowest of all by the seconds its samples
    take (needle's 60 cost more than json's 300 here), the seconds summed over the tasks; the Markdown and HTML
    cards say it. A check already past its threshold must come back (no pair count estimates that); no line when
    a check FAILed; a check with no estimate is named."""
    from evalsuite.report.deciding import pass_needs, pass_text

    def check(task, more, observed=-0.02, slice_="all", kind="max_drop", verdict="INCONCLUSIVE", n=48):
        return {"variant": "kv", "task": task, "slice": slice_, "check": kind, "threshold": 0.05, "n": n,
                "observed": observed, "verdict": verdict, "more_needed": more, "reason": f"{task}: ..."}

    checks = [check("json", 300), check("json", 20, 0.0, kind="max_flip_rate"), check("needle", 10),
              check("needle", 20, slice_="context_len>=2048", n=16), check("reasoning", None, verdict="PASS"),
              {**check("*", 500), "check": "pooled_max_drop", "observed": 0.04, "pools": [["json", 48]]}]
    r = {"baseline": "bf16", "checks": checks, "variants": [{"variant": "bf16"}, {"variant": "kv"}],
         "seconds_per_pair": {"kv/json": 0.5, "kv/needle": 2.0, "bf16/json": 0.1, "bf16/needle": 3.0},
         "stats": [{"variant": "kv", "task": t, "slice": "all", "n": 48, "delta": -0.02} for t in ("json", "needle")]
         + [{"variant": "kv", "task": "needle", "slice": "context_len>=2048", "n": 16, "delta": -0.02}]}
    need = pass_needs(r, checks)
    # needle: the slice's 20 pairs take 60 task samples (16 of 48 pairs in it), 60 x 5 s; json: 300 x 0.6 s
    assert need["check"]["task"] == "needle" and need["samples"] == 60 and need["tasks"] == 2
    assert need["seconds"] == pytest.approx(60 * 5.0 + 300 * 0.6)
    text = pass_text(need)
    assert text == ("a PASS needs every open check decided: the slowest, needle[context_len>=2048] max_drop, "
                    "≈+60 samples; ~8 min of budget over 2 tasks at this run's seconds per pair")
    assert pass_needs({**r, "seconds_per_pair": None}, checks)["check"]["task"] == "json"  # untimed: by samples
    mine = [{**c, "variant": "w4g128+kv4g32"} for c in checks]  # the crafted report's INCONCLUSIVE variant
    shown = {**report, "checks": [c for c in report["checks"] if c["variant"] != "w4g128+kv4g32"] + mine}
    assert "To decide it: a PASS needs every open check decided: the slowest, " in render_markdown(shown)
    assert "A PASS needs every open check decided: the slowest, " in render_html(shown)
    assert "a PASS needs" not in render_markdown(report).split("w4g128+kv4g32`")[0]  # not on the decided cards
    why = {"json": "out of reach: ~300 more pairs, more than the cap of 192 leaves (48 drawn)",
           "reasoning": "decided (INCONCLUSIVE)", "gsm": "budget spent"}
    shown["stopped"] = {"w4g128+kv4g32": why, "w4g128": {"json": "variant FAILed"}}
    said = "Stopped drawing: gsm: budget spent; json: out of reach: ~300 more pairs, more than the cap of 192 leaves"
    assert said in render_markdown(shown) and said in render_html(shown)
    assert "reasoning: decided" not in render_markdown(shown) and "variant FAILed" not in render_markdown(shown)
    heading = pass_needs(r, checks + [check("code", 5, -0.08)])  # code's drop is past max_drop 0.05
    assert heading["check"] is need["check"] and heading["back"][0]["task"] == "code"
    assert pass_text(heading) == text + "; and code max_drop, now past its threshold, back inside it"
    only = pass_needs(r, [check("code", 5, -0.08), check("json", 3, 0.3, kind="max_flip_rate")])
    assert pass_text(only) == ("a PASS needs every open check decided: code max_drop, json max_flip_rate, "
                               "now past their thresholds, back inside")
    assert pass_needs(r, checks + [check("code", None, verdict="FAIL")]) is None
    assert "json max_drop has no estimate" in pass_text(pass_needs(r, [check("json", None)] + checks))


def test_a_task_with_no_pairs_shows_no_delta_and_n_0(report):
    """A variant that FAILed before a task's pairs (only the baseline answered it): its cell says "no paired
    samples" and n=0, never the empty Δ +0.000 [-1.000, +1.000] or an unknown n."""
    from evalsuite.report.digest import task_decision
    from evalsuite.report.html_decision import grid_section
    from evalsuite.report.markdown import _grid_text

    cut = {**report, "stats": [{**s, "n": 0, "delta": 0.0, "ci_low": -1.0, "ci_high": 1.0}
                               if (s["variant"], s["task"]) == ("w4g128+kv4g32", "gsm") else s
                               for s in report["stats"]],
           "checks": [{k: v for k, v in c.items() if k != "n"} if c["variant"] == "w4g128+kv4g32" else c
                      for c in report["checks"]]}
    d = task_decision(cut, "w4g128+kv4g32", "gsm")
    assert d["stat"] is None and d["n"] == 0 and d["verdict"] == "INCONCLUSIVE"
    text = _grid_text(d)
    assert text.startswith("no paired samples n=0 INCONCLUSIVE") and "?" not in text and "-1.000" not in text
    cell = _between(grid_section(cut), 'data-variant="w4g128+kv4g32" data-task="gsm"', "</td>")
    assert "no paired samples" in cell and "-1.000" not in cell
    assert task_decision(report, "w4g128+kv4g32", "gsm")["stat"]["n"] == 30  # the paired run is unchanged
    assert "| w4g128+kv4g32 | gsm | all | 0 | — | — | no paired samples |" in render_markdown(cut)
    row = _between(render_html(cut), '<td class="l first">w4g128+<wbr>kv4g32</td><td class="l">gsm</td>', "</tr>")
    assert "<td>0</td><td>—</td><td>—</td><td class=\"\">no paired samples</td>" in row


def test_the_forest_plot_leaves_out_rows_no_pair_reached(report, monkeypatch):
    from evalsuite.report import html

    plotted = []
    monkeypatch.setattr(html.plots, "forest_plot", lambda rows, tol=(): plotted.append(rows) or PNG_MAGIC)
    html.render_html(report)
    labels = {r["label"] for r in plotted[-1]}
    cut = {**report, "stats": [{**s, "n": 0} if (s["variant"], s["task"]) == ("w4g128+kv4g32", "gsm") else s
                               for s in report["stats"]]}
    html.render_html(cut)
    gone = labels - {r["label"] for r in plotted[-1]}
    assert gone and all("w4g128+kv4g32" in g and "gsm" in g for g in gone)


def test_the_report_states_the_false_fail_guarantee_in_force(report):
    """results.json, summary.md and index.html say which guarantee a FAIL carries (GateResult.guarantee)."""
    from evalsuite.gate.policy import load_policy
    from evalsuite.gate.verdict import gate_run

    recs = [SampleResult(v, t, "1", f"{t}-{i}", "h", "", float(i % 2)) for v in ("bf16", "q")
            for t in ("code", "json") for i in range(20)]
    gate = gate_run([r for r in recs if r.variant == "bf16"], {"q": [r for r in recs if r.variant == "q"]}, {},
                    load_policy())[1]
    model = ReportModel("r", "2025-01-02T03:04:05Z", {"name": "m"}, "bf16", gate).to_dict()
    line = "False FAIL ≤ 5% per variant (family-wise over 5 checks, the pooled check at 2.5%)."
    assert model["guarantee"] == {"q": line[0].lower() + line[1:-1]}
    assert line in render_markdown(model) and line in render_html(model)
    assert report["guarantee"] is None and "False FAIL" not in render_markdown(report)  # an older report: no line


def test_cards_rank_kld_as_a_screen(report):
    """Under the shipped policy KLD is a screen: each card states its variant's highest mean KLD per answer token
    (task, top-1 agreement), its rank among the variants and, above 0.5, a flag; with a max_kld check it says so."""
    scale = {"w8": 0.01, "w4g128": 0.7, "w4g128+kv4g32": 0.3}
    stats = [{**s, "kld_mean": scale[s["variant"]] * (2 if s["task"] == "json" else 1)} for s in report["stats"]]
    r = {**report, "stats": stats}
    md, page = render_markdown(r), render_html(r)
    assert "KLD (a screen, not a verdict): up to 0.020/token (json, top-1 97%), the lowest of 3 variants" in md
    assert "up to 0.600/token (json, top-1 97%), 2 of 3 from the lowest" in md
    assert "up to 1.400/token (json, top-1 97%), the highest of 3 variants; above the screen's 0.5" in md
    w4 = _between(page, 'data-variant="w4g128">', '</dl></div>')
    assert '<div class="counts kld">KLD (a screen, not a verdict): up to 1.400/token' in w4
    gated = {**report["checks"][0], "check": "max_kld", "threshold": 0.5}
    assert "KLD (gated by max_kld): up to 0.020/token" in render_markdown({**r, "checks": [gated] + r["checks"]})
