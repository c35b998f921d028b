"""The ``evalsuite run`` hook for ``--engine vllm`` (kept here so the CLI's edit stays one call)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError

ENGINES = ("inprocess", "vllm")


def stored_engine(run_dir: Path) -> dict[str, Any]:
    """What a served run recorded in ``<run>/served.json`` (empty for other runs)."""
    path = Path(run_dir) / "served.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return {}


def engine_backend(config: Any, run_dir: Path, engine: str | None, vllm_python: str | None,
                   resume: bool) -> Any | None:
    """A ``VllmBackend`` when the run uses vLLM (asked, or a resumed served run), else None (the usual backends).
    A resumed run keeps its engine; ``--vllm-python`` overrides the stored interpreter."""
    stored = stored_engine(run_dir) if resume else {}
    chosen = engine or stored.get("engine") or "inprocess"
    if resume and stored.get("engine", "inprocess") != chosen:
        raise EvalsuiteError(f"run {Path(run_dir).name} ran on engine {stored.get('engine', 'inprocess')!r}; "
                             f"resume it without --engine {chosen}")
    if chosen != "vllm":
        return None
    from evalsuite.variants.grammar import spec_kind  # not at import: evalsuite.variants loads torch

    if spec_kind(config.model) == "openai":
        raise EvalsuiteError("--engine vllm starts its own servers: give --model a model (default, or a folder), "
                             "not an openai: URL")
    from evalsuite.served.vllm.backend import VllmBackend

    return VllmBackend(config.model, workdir=run_dir, seed=config.seed, python=vllm_python or stored.get("python"),
                       kld_enabled=config.kld)
