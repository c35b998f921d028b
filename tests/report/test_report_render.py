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
from evalsuite.run.records import SampleResult, VariantInfo
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
    assert report["schema_version"] == SCHEMA_VERSION and report["overall"] == "FAIL"
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
    odd = {**report, "checks": [{**report["checks"][2], "reason": "bell\x07 and nul\x00 dropped"}]}
    assert ET.fromstring(render_junit(odd)).find(".//failure").get("message") == "bell and nul dropped"


def test_markdown_tables_and_reasons(report):
    md = render_markdown(report)
    assert md.startswith("# evalsuite: SmolLM2 <135M> — **FAIL** (exit 1)")
    rows = [line for line in md.splitlines() if line.startswith("| w")]
    assert len(rows) == len(report["stats"]) + 3  # verdict rows + memory rows of the 3 variants
    assert "| w4g128 | needle | context_len=4096 | 30 | 0.800 | 0.300 | -0.500 [-0.830, -0.170] | 3/0 |" in md
    assert "| w4g128+kv4g32 | INCONCLUSIVE | 104.90 MiB | 9,600 |" in md
    reasons = md.split("## Top reasons", 1)[1].strip().splitlines()
    assert reasons[0].startswith("- **FAIL** w4g128 · needle · context_len=4096")
    assert reasons[1].startswith("- **INCONCLUSIVE** w4g128+kv4g32 · gsm")


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
