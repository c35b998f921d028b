"""Endpoint backend: spec parsing, retries, approximate KLD, server-down error (real llama.cpp servers:
test_llama_live.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.endpoint import EndpointClient, EndpointSpec, parse_endpoint, parse_logprobs
from evalsuite.backends.served.endpoint_kld import position_kl, topk_kld
from tests.llama_server import free_port


def test_parse_endpoint_names_and_errors():
    s = parse_endpoint("openai:http://127.0.0.1:8081/v1/#f16")
    assert (s.url, s.name) == ("http://127.0.0.1:8081/v1", "f16")
    assert parse_endpoint("openai:http://h:9/v1").name == "h:9"
    for bad in ("openai:ftp://h/v1#x", "openai:#x", "http://h:1/v1#x", "openai:http://h:1/v1#a,b"):
        with pytest.raises(EvalsuiteError):
            parse_endpoint(bad)


def test_topk_kld_zero_for_identical_and_stops_at_divergence():
    top = (("a", -0.1), ("b", -2.5), ("c", -4.0))
    other = (("b", -0.2), ("a", -1.9), ("d", -3.0))
    same = [("a", -0.1, top)] * 3
    kls, agree, n = topk_kld(same, same)
    assert n == 3 and agree == 3 and max(kls) < 1e-12
    diverged = [("a", -0.1, top), ("b", -0.2, other), ("a", -0.1, top)]
    kls, agree, n = topk_kld(same, diverged)
    assert n == 2 and agree == 1 and kls[1] > 0.5  # position 2 compared (shared context), position 3 not
    assert position_kl(top, other) > position_kl(top, top[:2] + (("c", -3.0),))


def test_parse_logprobs_chat_and_completion_forms():
    chat = {"content": [{"token": "x", "logprob": -0.5, "top_logprobs": [{"token": "x", "logprob": -0.5}]}]}
    comp = {"tokens": ["x"], "token_logprobs": [-0.5], "top_logprobs": [{"x": -0.5, "y": -1.0}]}
    assert parse_logprobs(chat) == (("x", -0.5, (("x", -0.5),)),)
    assert parse_logprobs(comp) == (("x", -0.5, (("x", -0.5), ("y", -1.0))),)


class _Flaky(BaseHTTPRequestHandler):
    fail_first = 2
    calls = 0

    def do_POST(self):  # noqa: N802
        type(self).calls += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).calls <= self.fail_first:
            self.send_response(503)
            self.end_headers()
            return
        body = json.dumps({"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 1}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("fail_first,ok", [(2, True), (99, False)])
def test_transient_errors_are_retried_then_fail_with_one_line(fail_first, ok):
    handler = type("H", (_Flaky,), {"fail_first": fail_first, "calls": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    client = EndpointClient(EndpointSpec(f"http://127.0.0.1:{srv.server_port}/v1", "x"), retries=3, backoff_s=0.01)
    try:
        if ok:
            assert client.post("/chat/completions", {})["choices"][0]["message"]["content"] == "hi"
            assert handler.calls == 3
        else:
            with pytest.raises(EvalsuiteError, match="after 4 tries: HTTP 503"):
                client.post("/chat/completions", {})
            assert handler.calls == 4
    finally:
        srv.shutdown()


@pytest.mark.slow
def test_server_down_is_one_line_exit_2(tmp_path):
    url = f"openai:http://127.0.0.1:{free_port()}/v1#gone"
    exe = str(Path(sys.executable).with_name("evalsuite"))
    p = subprocess.run([exe, "run", "--model", url, "--variants", "bf16",
                        "--tasks", "json", "--limit", "1", "--out", str(tmp_path), "-q"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "unreachable" in lines[0], p.stderr
    assert not any(tmp_path.iterdir())  # nothing written
