"""What a vLLM baseline's answers depend on beside the model's bytes: the settings ``VllmBackend.settings`` records,
which key a stored baseline (``run.baselines.RUN_KEYS``) and a run.

* vLLM's version and the libraries of *its* interpreter (``server.vllm_libraries``: vLLM pins its own torch and
  transformers, so this process's versions say nothing about it);
* what the baseline's server really ran with, as its engine logged it at start-up ("Initializing a V1 LLM engine
  (vX) with config: ... dtype=torch.bfloat16, max_seq_len=..., kv_cache_dtype=auto, ..."): the compute dtype, the
  context (``--max-model-len``), the KV-cache dtype, tensor parallelism. Where the log has no such line (another
  vLLM's format, a server not started yet) the values come from the flags it was given;
* every flag of the baseline's server that can change its answers (``server_flags``: evalsuite's own, the sizing,
  the user's ``--vllm-arg``s). Left out: what only says where to listen (``OWN_FLAGS``) and what only sizes memory
  (``MEMORY_FLAGS``: the GPU share follows the GPU's free memory at start-up, and sleep mode only moves weights).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from evalsuite.backends.served.vllm.pool import OWN_FLAGS, EngineOptions, drop_flag
from evalsuite.backends.served.vllm.server import ENGINE_FLAGS, VllmServer
from evalsuite.backends.served.vllm.specs import ServedVariant, flag_values

#: flags that size memory and nothing else (``bare``: without a value)
MEMORY_FLAGS = ("--gpu-memory-utilization",)
MEMORY_BARE_FLAGS = ("--enable-sleep-mode",)
_CONFIG_LINE = "with config: "
_LOGGED = {"compute_dtype": "dtype", "max_model_len": "max_seq_len", "kv_cache_dtype": "kv_cache_dtype",
           "tensor_parallel_size": "tensor_parallel_size"}


def engine_logged(log: Path) -> dict[str, str]:
    """The engine settings a vLLM server logged at start-up (``_LOGGED``'s values; empty without the line)."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return {}
    line = next((ln for ln in text.splitlines() if _CONFIG_LINE in ln), "")
    out = {}
    for name in _LOGGED.values():
        found = re.search(rf"(?:^|[\s,]){name}=([^,\s]+)", line.split(_CONFIG_LINE, 1)[-1])
        if found:
            out[name] = found.group(1).removeprefix("torch.")
    return out


def output_flags(flags: Sequence[str]) -> list[str]:
    """A server's flags less those that cannot change its answers (``OWN_FLAGS``, ``MEMORY_FLAGS``)."""
    kept = tuple(f for f in flags if f not in MEMORY_BARE_FLAGS)
    for flag in (*OWN_FLAGS, *MEMORY_FLAGS):
        kept = drop_flag(kept, flag)
    return list(kept)


def _last(flags: Sequence[str], name: str, default: str) -> str:
    found = flag_values(flags, name)
    return found[-1] if found else default


def baseline_settings(spec: ServedVariant, server: VllmServer | None, options: EngineOptions) -> dict[str, Any]:
    """The output-changing settings of the baseline's server ``server`` (None before it starts: its flags as far
    as known, without the sizing)."""
    flags = [*ENGINE_FLAGS, *server.sizing, *server.flags] if server is not None else \
        [*ENGINE_FLAGS, *options.args, *spec.flags]
    logged = engine_logged(server.log_path) if server is not None else {}
    given = {"compute_dtype": _last(flags, "--dtype", "auto"), "max_model_len": _last(flags, "--max-model-len", ""),
             "kv_cache_dtype": _last(flags, "--kv-cache-dtype", "auto"),
             "tensor_parallel_size": str(options.tensor_parallel_size)}
    out: dict[str, Any] = {key: logged.get(name, given[key]) for key, name in _LOGGED.items()}
    for key in ("max_model_len", "tensor_parallel_size"):
        out[key] = int(out[key]) if str(out[key]).isdigit() else out[key]
    return {**out, "server_flags": output_flags(flags)}
