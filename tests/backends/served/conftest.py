"""Served-engine tests. Tests marked ``vllm`` run real vLLM servers (the embedded model); tests marked ``llmc`` make
llm-compressor artifacts in ``.venv-llmc``. ``make test`` builds both venvs and runs them (``EVALSUITE_VLLM_TESTS=1``);
``-m vllm`` / ``-m llmc`` (``make test-vllm``) select them too. A bare ``pytest`` deselects them (not skips), so a
checkout without the side venvs still runs the rest. When selected they never skip for want of set-up: a missing
venv or a server that does not start fails the tests, with the one line that says why (the fp8-KV KLD test skips
on a CPU vLLM cannot run an FP8 KV cache on: ``variant_text``). Each server starts once per test session.

Tests using ``llama_servers`` (real llama.cpp servers, marked ``server`` by tests/suite_checks.py) run wherever
llama-cpp-python[server] is installed (``make server-deps``; ``make test`` installs it) and share one set of servers
per session."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.llama_server import llama_cpp_missing, llama_server

SIDE_MARKS = ("vllm", "llmc")
#: how long a session's server may take to get healthy (CPU start-up is 1-5 min under load)
STARTUP_S = float(os.environ.get("EVALSUITE_VLLM_TEST_STARTUP_S", "900"))
#: engine flags of the session's servers: eager. vLLM 0.32's CPU warm-up traces the model with torch.compile
#: (inductor off) for 50-75 s a server, and its AOT cache fails to load on the next start ("'function' object has
#: no attribute ..."), so every start paid it; eager starts in ~37 s against ~81-109 s (AVX-512 EPYC, one server
#: alone) with the same kernels. These tests prove evalsuite's serving (pairing, KLD over HTTP, a killed server),
#: not vLLM's compiler; a user's servers keep vLLM's default.
TEST_SIZING = ("--enforce-eager",)


def _wanted(config: pytest.Config) -> bool:
    expr = config.getoption("-m") or ""
    return any(m in expr for m in SIDE_MARKS) or os.environ.get("EVALSUITE_VLLM_TESTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted(config):
        return
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in SIDE_MARKS) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def base_folder() -> str:
    from evalsuite.models.embedded import converted_folder, embedded_gguf

    return str(converted_folder(embedded_gguf()))


@pytest.fixture(scope="session")
def llama_servers() -> Iterator[dict[str, str]]:
    """Base URLs of llama.cpp servers serving the embedded GGUF with an f16, a q8_0 and a q4_0 KV cache, started
    once per session and shared by every test that needs one (skipped where llama-cpp-python is not installed)."""
    reason = llama_cpp_missing()
    if reason:
        pytest.skip(reason)
    from evalsuite.models.embedded import embedded_gguf

    gguf = embedded_gguf()
    with llama_server(gguf, "f16") as f16, llama_server(gguf, "q8_0") as q8, llama_server(gguf, "q4_0") as q4:
        yield {"f16": f16, "q8_0": q8, "q4_0": q4}


@pytest.fixture(scope="session")
def vllm_python_path() -> str:
    """vLLM's interpreter; a missing one fails (not skips) with the line naming ``make vllm``."""
    from evalsuite.errors import EvalsuiteError
    from evalsuite.backends.served.vllm.server import vllm_python, vllm_version

    try:
        python = vllm_python()
        vllm_version(python)
    except EvalsuiteError as exc:
        pytest.fail(str(exc), pytrace=False)
    return python


def variant_text(python: str) -> str:
    """The session's variant server: vLLM's FP8 KV cache (``vkvf8``) where its backend runs one (a GPU, or a CPU
    with AVX-512 or AMX), else the baseline's model in eager mode (the run and resume tests need a second server;
    ``test_vllm_cpu_refusal`` checks that ``vkvf8`` is refused in one line there)."""
    from evalsuite.cpu.onednn import cpu_flags
    from evalsuite.backends.served.vllm.backend import fp8_kv_runs
    from evalsuite.backends.served.vllm.server import vllm_version

    return "vkvf8" if vllm_version(python)[1] != "cpu" or fp8_kv_runs(cpu_flags()) else 'vllm:"--enforce-eager"#eager'


@pytest.fixture(scope="session")
def vllm_servers(base_folder: str, vllm_python_path: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The baseline (bf16) and a variant (``variant_text``: fp8 KV where it runs), started once for the whole
    session (side by side). A server that exits or is not healthy within ``STARTUP_S`` fails every test using it
    with its log's root-cause line (cached by pytest: no second attempt). Tests may replace a server in
    ``servers``; whatever is there is stopped at the end."""
    from evalsuite.errors import EvalsuiteError
    from evalsuite.backends.served.vllm.server import VllmServer
    from evalsuite.backends.served.vllm.specs import parse_served

    logs = tmp_path_factory.mktemp("vllm-logs")
    specs = {s.name: s for s in (parse_served("bf16", base_folder),
                                 parse_served(variant_text(vllm_python_path), base_folder))}
    variant = next(n for n in specs if n != "bf16")
    servers = {n: VllmServer(vllm_python_path, s.model, s.flags, Path(logs) / f"{n}.log", name=n,
                             sizing=TEST_SIZING)
               for n, s in specs.items()}
    try:
        for s in servers.values():
            s.spawn()
        try:
            for s in servers.values():
                s.ready(STARTUP_S)
        except EvalsuiteError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield {"specs": specs, "servers": servers, "python": vllm_python_path, "logs": Path(logs),
               "variant": variant}
    finally:
        for s in servers.values():
            s.terminate()
        for s in servers.values():
            s.stop()
