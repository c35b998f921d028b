"""The generated index.html in a real headless Chromium (Debian's ``chromium`` package), driven over the
DevTools protocol on ``--remote-debugging-pipe`` (no extra dependency): no console errors or exceptions, no
request leaves file:/data:, every embedded plot decodes, the flip browser filters, the sparse-slice toggle opens,
and the first screen (1280×800) holds one verdict card per variant.
Install: ``apt-get update && apt-get install -y chromium``."""
from __future__ import annotations

import base64
import fcntl
import importlib.util
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evalsuite.report.html import render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe", "--window-size=1280,2000"]
TIMEOUT_S = 60.0


class Pipe:
    """A minimal CDP client: JSON messages separated by NUL on fds 3 (to the browser) and 4 (from it)."""

    def __init__(self, user_dir: Path):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def child_fds() -> None:  # in the child: the pipe ends become fds 3 and 4 (moved high first)
            high_r, high_w = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        # close_fds=False: subprocess would close 3 and 4 after preexec_fn; other fds are close-on-exec anyway
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={user_dir}", "about:blank"],
                                     preexec_fn=child_fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id, self.events = b"", 0, []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_r], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe: " + self.proc.stderr.read().decode(errors="replace"))
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read_message(deadline))
        return next(e for e in self.events if e.get("method") == method)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)


def _problems(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, uncaught exceptions, error log entries (CSP violations included)."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"{d.get('text')} {d.get('exception', {}).get('description', '')}"[:300])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(json.dumps(p.get("args"))[:300])
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append(p["entry"].get("text", "")[:300])
    return out


def load_page(html_path: Path, user_dir: Path, script: list[str],
              height: int = 2000) -> tuple[list[Any], list[str], list[str], bytes]:
    """Open the page in a 1280×``height`` viewport; return the values of ``script`` expressions, problems, request
    URLs and a screenshot of the viewport (taken after the scripts ran)."""
    pipe = Pipe(user_dir)
    try:
        target = next(t for t in pipe.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        sid = pipe.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            pipe.call(f"{domain}.enable", sid)
        pipe.call("Emulation.setDeviceMetricsOverride", sid, width=1280, height=height, deviceScaleFactor=1,
                  mobile=False)
        pipe.call("Page.navigate", sid, url=html_path.as_uri())
        pipe.wait_event("Page.loadEventFired")
        values = [pipe.call("Runtime.evaluate", sid, expression=s, returnByValue=True)["result"].get("value")
                  for s in script]
        shot = base64.b64decode(pipe.call("Page.captureScreenshot", sid, format="png")["data"])
        urls = [e["params"]["request"]["url"] for e in pipe.events if e.get("method") == "Network.requestWillBeSent"]
        return values, _problems(pipe.events), urls, shot
    finally:
        pipe.close()


def crafted_report() -> dict[str, Any]:
    """The report crafted in test_report_render.py (loaded by path: tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("_report_render", Path(__file__).with_name("test_report_render.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.crafted_report()


@pytest.mark.slow
def test_report_page_loads_clean_and_filters(tmp_path):
    page = tmp_path / "index.html"
    page.write_text(render_html(crafted_report()), encoding="utf-8")
    script = [
        "document.getElementById('f-count').textContent",
        "Array.from(document.images).every(i => i.complete && i.naturalWidth > 100)",
        "document.images.length",
        "(() => { const s = document.getElementById('f-variant'); s.value = 'w8';"
        " s.dispatchEvent(new Event('change')); return document.getElementById('f-count').textContent; })()",
        "(() => { const q = document.getElementById('f-text'); document.getElementById('f-variant').value = '';"
        " q.value = 'pwn'; q.dispatchEvent(new Event('input'));"
        " return document.querySelectorAll('.flip:not(.hidden)').length; })()",
        "document.querySelectorAll('script').length",
    ]
    values, problems, urls, shot = load_page(page, tmp_path / "profile", script)
    assert problems == []
    assert values[0] == "showing 3 of 3"
    assert values[1] is True and values[2] == 3  # forest plot + two needle heatmaps decoded
    assert values[3] == "showing 1 of 3"
    assert values[4] == 1  # only the flip whose text holds the (escaped, inert) <script> mentions 'pwn'
    assert values[5] == 1  # the escaped model text did not become a script element
    assert urls and all(u.startswith(("file:", "data:")) for u in urls), urls
    assert shot.startswith(b"\x89PNG\r\n\x1a\n") and len(shot) > 10_000
    (tmp_path / "screenshot.png").write_bytes(shot)


CARDS_JS = """JSON.stringify(Array.from(document.querySelectorAll('.card')).map(c => {
  const b = c.getBoundingClientRect();
  return {variant: c.getAttribute('data-variant'), top: b.top, bottom: b.bottom, left: b.left, right: b.right,
          verdict: c.querySelector('.verdict').textContent, cls: c.className,
          reasons: c.querySelectorAll('.reasons li').length};
}))"""
TOGGLE_JS = """(() => {
  const d = document.getElementById('hidden-slices'), row = d.querySelector('tbody tr');
  const before = row.checkVisibility();
  d.querySelector('summary').click();
  return [before, row.checkVisibility(), d.open];
})()"""


def _png_size(png: bytes) -> tuple[int, int]:
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.mark.slow
def test_first_screen_leads_with_the_decision(tmp_path):
    """At 1280×800, without scrolling: one card per variant, fully visible, with its verdict and reasons, and the
    variants × tasks grid starts on screen. The screenshot goes to $REPORT_SCREENSHOT when set."""
    report = crafted_report()
    page = tmp_path / "index.html"
    page.write_text(render_html(report), encoding="utf-8")
    script = [CARDS_JS, "document.getElementById('grid').getBoundingClientRect().top", "window.innerHeight",
              "document.scrollingElement.scrollTop", TOGGLE_JS]
    values, problems, _, shot = load_page(page, tmp_path / "profile", script, height=800)
    assert problems == []
    cards, grid_top, inner_h, scroll = json.loads(values[0]), values[1], values[2], values[3]
    assert inner_h == 800 and scroll == 0
    verdicts = {v["variant"]: v["verdict"] for v in report["variants"] if v["variant"] != report["baseline"]}
    assert [c["variant"] for c in cards] == list(verdicts)  # one card per variant, baseline excluded
    for c in cards:
        assert 0 <= c["top"] and c["bottom"] <= 800 and c["right"] <= 1280, c  # the whole card on the first screen
        assert c["verdict"] == verdicts[c["variant"]] and f"v-{c['verdict']}" in c["cls"].split()
        assert c["reasons"] >= 1
    assert grid_top < 800
    assert values[4] == [False, True, True]  # the sparse slice rows are hidden until the toggle opens
    assert shot.startswith(b"\x89PNG\r\n\x1a\n") and _png_size(shot) == (1280, 800)
    (tmp_path / "first-screen.png").write_bytes(shot)
    if os.environ.get("REPORT_SCREENSHOT"):
        Path(os.environ["REPORT_SCREENSHOT"]).write_bytes(shot)


def test_detector_sees_errors_and_blocked_requests(tmp_path):
    """Control: a page with a thrown error and a network image is reported, so a clean result means something."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
                    "content=\"default-src 'none'; script-src 'unsafe-inline'\"></head><body>"
                    "<img src=\"https://example.invalid/x.png\"><script>undefinedFunction();</script>"
                    "</body></html>", encoding="utf-8")
    _, problems, urls, _ = load_page(page, tmp_path / "profile", [])
    assert any("undefinedFunction" in p for p in problems), problems
    assert any("Content Security Policy" in p for p in problems), problems
    assert "https://example.invalid/x.png" in urls


NAME_BADGE_JS = """JSON.stringify(Array.from(document.querySelectorAll('.card')).map(c => {
  const n = c.querySelector('.name').getBoundingClientRect(), v = c.querySelector('.verdict').getBoundingClientRect();
  return {variant: c.getAttribute('data-variant'), name_right: n.right, badge_left: v.left, badge_right: v.right,
          card_right: c.getBoundingClientRect().right};
}))"""


@pytest.mark.slow
def test_a_long_variant_name_does_not_run_into_its_badge(tmp_path):
    """w4g64+kv4g32r128 (and longer) beside its verdict badge: the name wraps, the badge stays whole and apart."""
    report = crafted_report()
    long_name = "w4g64+kv4g32r128+padding-to-make-it-longer"
    old = report["variants"][-1]["variant"]
    rename = (lambda row: {**row, "variant": long_name} if row.get("variant") == old else row)
    report = {**report, "variants": [rename(v) for v in report["variants"]],
              "checks": [rename(c) for c in report["checks"]], "stats": [rename(s) for s in report["stats"]]}
    page = tmp_path / "index.html"
    page.write_text(render_html(report), encoding="utf-8")
    values, problems, _, shot = load_page(page, tmp_path / "profile", [NAME_BADGE_JS], height=800)
    assert problems == []
    for c in json.loads(values[0]):
        assert c["name_right"] <= c["badge_left"] and c["badge_right"] <= c["card_right"], c
    (tmp_path / "long-name.png").write_bytes(shot)
    if os.environ.get("REPORT_SCREENSHOT_LONG"):
        Path(os.environ["REPORT_SCREENSHOT_LONG"]).write_bytes(shot)


OVERFLOW_JS = """JSON.stringify(Array.from(document.querySelectorAll('.card')).flatMap(c => {
  const right = c.getBoundingClientRect().right;
  return Array.from(c.querySelectorAll('*')).filter(x => x.getBoundingClientRect().right > right + 1)
    .map(x => x.className + ': ' + x.textContent.slice(0, 60));
}))"""


def test_a_card_holds_its_text(tmp_path):
    """An INCONCLUSIVE reason's "≈+N samples to decide, ~M min of budget ..." tail wraps inside its card instead
    of running past its edge (it did while the tail never wrapped)."""
    report = crafted_report()
    report["seconds_per_pair"] = {f"{c['variant']}/{c['task']}": 12.5 for c in report["checks"]}
    page = tmp_path / "index.html"
    page.write_text(render_html(report), encoding="utf-8")
    values, problems, _, shot = load_page(page, tmp_path / "profile", [OVERFLOW_JS], height=800)
    assert problems == []
    assert json.loads(values[0]) == []
    (tmp_path / "cards.png").write_bytes(shot)


def tenants_section() -> dict[str, Any]:
    """Three tenants decided on Qwen2.5-7B's shape (tests/tenants/test_decide.py's): one gets w4g128 with notes,
    one the baseline (undecided: w4g128 is INCONCLUSIVE under on_inconclusive: fail), one nothing."""
    from evalsuite.gate.types import GateResult
    from evalsuite.tenants.decide import decide_tenant, exit_code
    from tests.tenants.test_decide import GIB, facts, tenant

    gate = GateResult(variant_verdicts={"w4g128": "INCONCLUSIVE", "kv4g32r128": "PASS", "w2g64": "FAIL"})
    f = facts("w4g128", "kv4g32r128", "w2g64")
    decisions = [decide_tenant(tenant(32768, 4, runtime="vllm", policy={"defaults": {"on_inconclusive": "pass"}}),
                               gate, f),
                 decide_tenant(tenant(32768, 8, "gpus", runtime="llama.cpp"), gate, f),
                 decide_tenant(tenant(32768, 1, gpu_mem=16 * GIB, runtime="vllm"), gate, f)]
    decisions = [type(d)(**{**d.__dict__, "tenant": name}) for d, name in zip(decisions, ("chat", "docs", "tiny"))]
    return {"exit_code": exit_code(decisions), "model": "qwen2, 7.62B params",
            "decisions": [d.to_dict() for d in decisions]}


def wide_report() -> dict[str, Any]:
    """The crafted report with the widths a real run has: a long combined variant, five tasks and a pooled column,
    long selector slices, undecided cells with long notes, and a tenants section."""
    report = crafted_report()
    long_name = "w4g64+kv4g32r128[l0-1=8;l29=16]"
    old = report["variants"][-1]["variant"]
    rename = (lambda row: {**row, "variant": long_name} if row.get("variant") == old else row)
    extra_checks, extra_stats = [], []
    for task in ("reasoning", "code", "safety", "*"):
        for v in ("w8", "w4g128", long_name):
            extra_checks.append({"variant": v, "task": task, "slice": "context_len>=2048,kind=harmful",
                                 "check": "max_drop", "threshold": 0.05, "observed": -0.031, "verdict": "INCONCLUSIVE",
                                 "reason": "x", "ci": [-0.3, 0.2], "n": 112, "more_needed": 1234, "pools": [],
                                 "needs_from": [], "alpha": 0.05})
            if task != "*":
                base = dict(report["stats"][0])
                extra_stats.append({**base, "variant": v, "task": task, "slice": "all", "n": 112,
                                    "n_informative": 40})
                extra_stats.append({**base, "variant": v, "task": task, "slice": "context_len>=2048,kind=harmful",
                                    "n": 112})
    return {**report, "variants": [rename(v) for v in report["variants"]],
            "checks": [rename(c) for c in report["checks"]] + extra_checks,
            "stats": [rename(s) for s in report["stats"]] + extra_stats, "tenants": tenants_section()}


WIDTH_JS = """JSON.stringify({scroll: document.scrollingElement.scrollWidth, inner: window.innerWidth,
  rows: Array.from(document.querySelectorAll('#tenants ~ table tr.tenant, tr.tenant')).length,
  tenants: Array.from(document.querySelectorAll('tr.tenant')).map(r => [r.getAttribute('data-tenant'),
    r.children[2].textContent, r.getBoundingClientRect().right]),
  lines: document.querySelectorAll('ul.tenant-lines li').length,
  over: Array.from(document.querySelectorAll('table')).filter(t => t.getBoundingClientRect().right > 1300)
    .map(t => t.className || (t.closest('[id]') || {}).id)})"""


@pytest.mark.slow
def test_the_report_fits_1300_px_and_shows_its_tenants(tmp_path, monkeypatch):
    """At 1300 px wide no table runs past the window (the Δ grid and the quality table's verdict column did), and
    the tenants section holds a row per tenant and their lines. Screenshot of it: $REPORT_SCREENSHOT_TENANTS."""
    report = wide_report()
    page = tmp_path / "index.html"
    page.write_text(render_html(report), encoding="utf-8")
    monkeypatch.setattr(Pipe, "call", _width(Pipe.call, 1300))
    values, problems, _, shot = load_page(page, tmp_path / "profile", [
        WIDTH_JS, "document.getElementById('tenants').scrollIntoView(), window.scrollY"], height=900)
    assert problems == []
    got = json.loads(values[0])
    assert got["inner"] == 1300 and got["over"] == [] and got["scroll"] <= 1300, got
    assert [t[:2] for t in got["tenants"]] == [["chat", "w4g128"], ["docs", "bf16 (baseline, undecided)"],
                                               ["tiny", "nothing serves it"]]
    lines = sum(len(d["notes"]) + len(d["rejected"]) + bool(d["why_none"]) for d in report["tenants"]["decisions"])
    assert got["lines"] == lines > 0 and values[1] > 0
    assert _png_size(shot) == (1300, 900)
    (tmp_path / "tenants.png").write_bytes(shot)
    if os.environ.get("REPORT_SCREENSHOT_TENANTS"):
        Path(os.environ["REPORT_SCREENSHOT_TENANTS"]).write_bytes(shot)


def _width(call: Any, width: int) -> Any:
    """``Pipe.call`` with the emulated viewport ``width`` px wide."""
    def wrapped(self: Pipe, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        if method == "Emulation.setDeviceMetricsOverride":
            params["width"] = width
        return call(self, method, session, **params)
    return wrapped
