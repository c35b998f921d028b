"""The ``evalsuite run`` hook for ``--engine vllm`` (kept here so the CLI's edit stays small): the vLLM-only
options (``vllm_options``) and the backend they configure (``engine_backend``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click

from evalsuite.errors import EvalsuiteError

ENGINES = ("inprocess", "vllm")


def vllm_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--tensor-parallel-size`` and ``--vllm-arg`` (passed to the command as ``tensor_parallel_size`` and
    ``vllm_args``)."""
    fn = click.option("--vllm-arg", "vllm_args", multiple=True, metavar="ARGS",
                      help="Engine arguments for every vLLM server, as on vLLM's command line (repeat, or quote "
                           "several: --vllm-arg '--max-num-seqs 64'); evalsuite's own sizing flags "
                           "(--max-model-len, --gpu-memory-utilization, --max-num-batched-tokens) given here "
                           "replace the computed ones.")(fn)
    return click.option("--tensor-parallel-size", "tensor_parallel_size", type=click.IntRange(min=1), default=None,
                        help="GPUs each vLLM server spans (tensor parallelism). [default: 1; with --resume: the "
                             "run's]")(fn)


def stored_engine(run_dir: Path) -> dict[str, Any]:
    """What a served run recorded in ``<run>/served.json`` (empty for other runs)."""
    path = Path(run_dir) / "served.json"
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return {}


def engine_backend(config: Any, run_dir: Path, engine: str | None, vllm_python: str | None,
                   resume: bool, tensor_parallel_size: int | None = None, vllm_args: tuple[str, ...] = ()
                   ) -> Any | None:
    """A ``VllmBackend`` when the run uses vLLM (asked, or a resumed served run), else None (the usual backends).
    A resumed run keeps its engine and its engine options; ``--vllm-python`` and the vLLM options given again
    override the stored ones."""
    stored = stored_engine(run_dir) if resume else {}
    chosen = engine or stored.get("engine") or "inprocess"
    if resume and stored.get("engine", "inprocess") != chosen:
        raise EvalsuiteError(f"run {Path(run_dir).name} ran on engine {stored.get('engine', 'inprocess')!r}; "
                             f"resume it without --engine {chosen}")
    if chosen != "vllm":
        if tensor_parallel_size is not None or vllm_args:
            raise EvalsuiteError("--tensor-parallel-size and --vllm-arg are for --engine vllm")
        return None
    from evalsuite.variants.grammar import spec_kind

    if spec_kind(config.model) == "openai":
        raise EvalsuiteError("--engine vllm starts its own servers: give --model a model (default, or a folder), "
                             "not an openai: URL")
    from evalsuite.backends.served.vllm.backend import VllmBackend
    from evalsuite.backends.served.vllm.pool import EngineOptions

    old = stored.get("options", {})
    options = EngineOptions.parse(tensor_parallel_size or old.get("tensor_parallel_size"),
                                  vllm_args or tuple(old.get("args", ())))
    return VllmBackend(config.model, workdir=run_dir, seed=config.seed, python=vllm_python or stored.get("python"),
                       kld_enabled=config.kld, options=options, log=click.echo)
