"""A stored served baseline is keyed by everything that changes its answers (``run.baselines.RUN_KEYS``): change one
field and the store misses, with one line naming it. vLLM: a stand-in interpreter answers the version probe and the
baseline's server log holds the engine's start-up line (what vLLM 0.32 logs); no server is started. Endpoints: a
small HTTP server answers /v1/models and /version."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from evalsuite.core.config import RunConfig
from evalsuite.store.sqlite import Store
from evalsuite.run.baselines import BaselineSource, RUN_KEYS, run_key, save_baseline
from evalsuite.backends.served.endpoint_backend import EndpointBackend
from evalsuite.backends.served.vllm.backend import VllmBackend
from evalsuite.backends.served.vllm.pool import EngineOptions, ServerPool
from tests.conftest import prepared
from tests.backends.served.test_vllm_sizing import _model

LIBS = {"torch": "2.13.0+cpu", "transformers": "5.19.0"}


def engine_line(dtype: str = "bfloat16", max_len: int = 2048, kv: str = "auto", tp: int = 1) -> str:
    """The line vLLM 0.32's engine logs at start-up (``v1/engine/core.py``, ``VllmConfig.__str__``), abridged."""
    return (f"(EngineCore pid=1) INFO 12-07 10:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with "
            f"config: model='/m', speculative_config=None, tokenizer='/m', skip_tokenizer_init=False, "
            f"tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.{dtype}, "
            f"max_seq_len={max_len}, download_dir=None, load_format=auto, tensor_parallel_size={tp}, "
            f"pipeline_parallel_size=1, quantization=None, quantization_config=None, enforce_eager=False, "
            f"kv_cache_dtype={kv}, device_config=cpu, seed=0, served_model_name=evalsuite, "
            f"enable_prefix_caching=True\n")


def vllm_settings(tmp: Path, version: str = "0.32.0", device: str = "cpu", libs: dict[str, str] = LIBS,
                  options: EngineOptions = EngineOptions(), log: str | None = None) -> dict[str, Any]:
    """``VllmBackend.settings`` once the baseline's server is up: ``version``/``libs`` from a stand-in interpreter,
    the server built by the backend's own pool (its sizing, ``options``) and ``log`` as what it logged."""
    tmp.mkdir(parents=True, exist_ok=True)
    python = tmp / "python"
    python.write_text(f"#!/bin/sh\necho 'some import chatter'\necho 'libraries {json.dumps(libs)}'\n"
                      f"echo {version} {device}\n")
    python.chmod(0o755)
    backend = VllmBackend(_model(tmp.parent / "llama", "llama3-8b.json"), workdir=tmp, python=str(python),
                          options=options)
    (base,) = backend.variants([])
    backend._pool = ServerPool(str(python), tmp, backend.memory_plan(), options)  # not started: its log stands in
    server = backend._pool.servers[base.name] = backend._pool.server(base)
    if log is not None:
        server.log_path.parent.mkdir(parents=True, exist_ok=True)
        server.log_path.write_text("INFO starting\n" + log)
    return backend.settings()


def miss(tmp: Path, stored: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Store a baseline run with settings ``stored``, then ask for it with ``now``: the reason it is not reused
    (None: reused)."""
    task = prepared(n=4)[0]
    store = Store.create(tmp / "run", RunConfig(tasks=["copy"], batch_size=4).to_dict())
    store.update_state(fingerprint="fp", model_name="m", dtype="bfloat16", settings=stored)
    root = save_baseline(tmp / "baselines", store, [task], 1234, "bf16").parent
    logs: list[str] = []
    source = BaselineSource(root, "fp", 1234, 4, log=logs.append)
    used = source.import_into(Store.create(tmp / "again", RunConfig().to_dict()), task, "bf16", now)
    assert used == (not logs) and len(logs) <= 1 and "\n" not in "".join(logs)
    return logs[0].removeprefix("stored baseline not reused: ") if logs else None


def test_what_vllm_records(tmp_path: Path) -> None:
    """The libraries are vLLM's interpreter's; dtype, context, KV-cache dtype and parallelism are what the engine
    logged; without that line, what the server was given."""
    got = vllm_settings(tmp_path / "a", log=engine_line("float16", 4096, "fp8_e4m3"))
    assert got["vllm_version"] == "0.32.0" and got["vllm_libraries"] == {**LIBS, "vllm": "0.32.0"}
    assert (got["compute_dtype"], got["max_model_len"], got["kv_cache_dtype"], got["tensor_parallel_size"]) == \
        ("float16", 4096, "fp8_e4m3", 1)
    flags = vllm_settings(tmp_path / "b", options=EngineOptions.parse(None, ["--kv-cache-dtype fp8 --dtype half"]))
    assert (flags["compute_dtype"], flags["kv_cache_dtype"]) == ("half", "fp8")
    assert flags["max_model_len"] == 8192 and "--max-model-len" in flags["server_flags"]
    assert set(run_key(4, got)) >= {"vllm_version", "vllm_libraries", "compute_dtype", "max_model_len",
                                    "kv_cache_dtype", "tensor_parallel_size", "server_flags", "device"}


@pytest.mark.parametrize("field, change", [
    ("vllm_version", {"version": "0.33.0"}),
    ("vllm_libraries", {"libs": {**LIBS, "torch": "2.14.0+cpu"}}),
    ("compute_dtype", {"log": engine_line(dtype="float16")}),
    ("max_model_len", {"log": engine_line(max_len=4096)}),
    ("kv_cache_dtype", {"log": engine_line(kv="fp8_e4m3")}),
    ("tensor_parallel_size", {"options": EngineOptions(2), "log": engine_line(tp=2)}),
    ("server_flags", {"options": EngineOptions.parse(None, ["--enforce-eager"])}),
])
def test_each_vllm_field_misses_the_store_naming_it(tmp_path: Path, field: str, change: dict[str, Any]) -> None:
    stored = vllm_settings(tmp_path / "stored", log=engine_line())
    assert miss(tmp_path / "same", stored, vllm_settings(tmp_path / "same-now", log=engine_line())) is None
    now = vllm_settings(tmp_path / "now", **{"log": engine_line(), **change})
    reason = miss(tmp_path / "changed", stored, now)
    assert reason is not None and reason.startswith(f"{field} differs (stored "), reason


def test_memory_only_flags_do_not_miss(tmp_path: Path) -> None:
    """The GPU share follows the GPU's free memory at start-up: not part of the key."""
    stored = vllm_settings(tmp_path / "a", log=engine_line())
    now = vllm_settings(tmp_path / "b", log=engine_line(),
                        options=EngineOptions.parse(None, ["--gpu-memory-utilization 0.5 --enable-sleep-mode"]))
    assert miss(tmp_path / "m", stored, now) is None


def test_a_served_baseline_stored_before_its_keys_is_not_reused(tmp_path: Path) -> None:
    """Old manifests: the vLLM and endpoint keys have no default (no one recorded the server), so such a
    baseline misses, saying which field was not recorded."""
    now = vllm_settings(tmp_path / "a", log=engine_line())
    old = {"backend": "vllm", "compute_dtype": "bfloat16", "device": "cpu"}  # what run_key kept before
    assert miss(tmp_path / "m", old, now) == ("vllm_version not recorded (a baseline stored before evalsuite keyed "
                                              "it; now '0.32.0')")
    for key in ("vllm_version", "vllm_libraries", "server_flags", "endpoint_url", "endpoint_server"):
        assert key in RUN_KEYS


class _Server(BaseHTTPRequestHandler):
    """/v1/models (with a ``created`` that changes every call) and /version of an OpenAI-compatible server."""

    model, version, calls = "m", "0.32.0", 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).calls += 1
        body = {"/v1/models": {"object": "list", "data": [{"id": self.model, "created": type(self).calls,
                                                           "max_model_len": 2048}]},
                "/version": {"version": self.version}}.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(json.dumps(body or {}).encode())

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(model: str = "m", version: str = "0.32.0") -> str:
        handler = type("H", (_Server,), {"model": model, "version": version})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"openai:http://127.0.0.1:{srv.server_port}/v1#base"

    yield start
    for srv in servers:
        srv.shutdown()


def endpoint_settings(tmp: Path, model: str) -> dict[str, Any]:
    backend = EndpointBackend(model, tmp)
    backend.load()
    return backend.settings()


def test_what_an_endpoint_records(tmp_path: Path, serve: Any) -> None:
    url = serve(model="org/m", version="0.31.1")
    got = endpoint_settings(tmp_path, url)
    assert got["endpoint_url"] == url.split(":", 1)[1].split("#")[0] and got["endpoint_model"] == "org/m"
    assert got["endpoint_server"]["/version"] == {"version": "0.31.1"}
    assert "created" not in json.dumps(got["endpoint_server"])  # it changes at every call
    assert miss(tmp_path / "m", got, endpoint_settings(tmp_path, url)) is None  # asked again: the same


@pytest.mark.parametrize("field, other", [("endpoint_url", {}), ("endpoint_model", {"model": "org/other"}),
                                          ("endpoint_server", {"version": "0.33.0"})])
def test_each_endpoint_field_misses_the_store_naming_it(tmp_path: Path, serve: Any, field: str,
                                                        other: dict[str, str]) -> None:
    stored = endpoint_settings(tmp_path, serve(model="org/m"))
    now = endpoint_settings(tmp_path, serve(**{"model": "org/m", **other}))
    if field != "endpoint_url":  # the same URL, its server changed (a redeploy)
        now["endpoint_url"] = stored["endpoint_url"]
    reason = miss(tmp_path / "m", stored, now)
    assert reason is not None and reason.startswith(f"{field} differs (stored "), reason
