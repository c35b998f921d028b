"""Start/stop a real llama.cpp server (llama-cpp-python's ``llama_cpp.server``) on loopback for endpoint tests."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import requests

GGML_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


def llama_cpp_missing() -> str | None:
    """A skip reason when the server cannot run here, else None."""
    for mod in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} not installed (make server-deps installs llama-cpp-python[server])"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: Path, port: int, kv: str = "f16", n_ctx: int = 4096, threads: int = 1,
                   logits_all: bool = True) -> list[str]:
    """The llama_cpp.server command line for one KV-cache type (quantized V needs flash attention; logprobs need
    ``logits_all``, which costs speed)."""
    t = str(GGML_TYPES[kv])
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(n_ctx), "--type_k", t, "--type_v", t,
            "--flash_attn", "true", "--logits_all", str(logits_all).lower(), "--n_threads", str(threads),
            "--n_threads_batch", str(threads), "--verbose", "false"]


@contextlib.contextmanager
def llama_server(model: Path, kv: str = "f16", startup_s: float = 120.0, **kw) -> Iterator[str]:
    """Yield the server's base URL (``http://127.0.0.1:P/v1``); the process is always killed afterwards."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix=f"llama-{kv}-", suffix=".log", delete=False)
    proc = subprocess.Popen(server_command(model, port, kv, **kw), stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama server ({kv}) exited {proc.returncode}: "
                                   f"{Path(log.name).read_text()[-800:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/models", timeout=2).ok:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama server ({kv}) not up after {startup_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()
        os.unlink(log.name)
