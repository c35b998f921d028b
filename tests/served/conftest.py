"""Served-engine tests. Tests marked ``vllm`` run real vLLM servers (the embedded model) and are selected only with
``-m vllm`` (``make test-vllm``) or ``EVALSUITE_VLLM_TESTS=1``; otherwise they are deselected (not skipped), so the
default suite does not pay the servers' start-up. Each server starts once per test session."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: needs real vLLM servers (make test-vllm)")


def _wanted(config: pytest.Config) -> bool:
    return "vllm" in (config.getoption("-m") or "") or os.environ.get("EVALSUITE_VLLM_TESTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _wanted(config):
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("vllm") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def base_folder() -> str:
    from evalsuite.models.embedded import converted_folder, embedded_gguf

    return str(converted_folder(embedded_gguf()))


@pytest.fixture(scope="session")
def vllm_servers(base_folder: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The baseline (bf16) and the fp8-KV server, started once for the whole session (in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    from evalsuite.served.vllm.server import VllmServer, vllm_python
    from evalsuite.served.vllm.specs import parse_served

    python = vllm_python()
    logs = tmp_path_factory.mktemp("vllm-logs")
    specs = {s.name: s for s in (parse_served("bf16", base_folder), parse_served("vkvf8", base_folder))}
    servers = {n: VllmServer(python, s.model, s.flags, Path(logs) / f"{n}.log", name=n) for n, s in specs.items()}
    try:
        with ThreadPoolExecutor(len(servers)) as ex:
            list(ex.map(lambda s: s.start(1200), servers.values()))
        yield {"specs": specs, "servers": servers, "python": python}
    finally:
        for s in servers.values():
            s.stop()
