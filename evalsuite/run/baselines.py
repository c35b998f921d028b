"""Stored baselines: per-sample baseline results with a manifest, keyed by the model's content fingerprint.

A baseline keyed by model *name* silently returns stale results when the checkpoint changes; here the folder is
``baselines/<fingerprint>/`` and every task entry records its version, parameters, generation settings, seed,
sample hashes and library versions. A baseline that does not match is refused, with the reason.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evalsuite.errors import StoreMismatch
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.records import SampleResult
from evalsuite.run.store import Store

MANIFEST = "manifest.json"


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in LIBRARIES:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


#: run settings that change outputs (batch composition changes padding and numerics; dtype changes everything)
RUN_KEYS = ("batch_size", "max_batch_tokens", "compute_dtype", "backend", "device")
#: what a manifest written before a key existed stored implicitly (every baseline before --device ran on the CPU)
RUN_DEFAULTS = {"device": "cpu"}
LIBRARIES = ("torch", "transformers", "optimum-quanto", "evalsuite")


def task_key(task: PreparedTask, seed: int) -> dict[str, Any]:
    """Everything about a task that must match for its stored baseline to be reused."""
    return {"version": task.version, "params": task.params, "gen_settings": task.gen.to_dict(), "seed": seed,
            "sample_hashes": {s.id: s.content_hash() for s in task.samples}}


def run_key(batch_size: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The run settings a stored baseline was generated with (see ``RUN_KEYS``)."""
    return {k: v for k, v in {"batch_size": batch_size, **settings}.items() if k in RUN_KEYS}


def save_baseline(root: Path, store: Store, tasks: list[PreparedTask], seed: int, baseline: str) -> Path:
    """Write ``root/<fingerprint>/`` from a finished run's baseline samples (tasks replaced one by one)."""
    meta = store.meta()
    folder = Path(root) / meta["fingerprint"]
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder) or {"model": meta["model_name"], "fingerprint": meta["fingerprint"],
                                          "dtype": meta["dtype"], "tasks": {}}
    for task in tasks:
        rows = [r.to_dict() for r in store.samples(baseline, task.name)]
        tmp = folder / f".{task.name}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(folder / f"{task.name}.jsonl")
        manifest["tasks"][task.name] = {**task_key(task, seed), "n": len(rows), "created": time.time()}
    manifest["libraries"] = library_versions()
    manifest["run"] = run_key(store.config.get("batch_size", 0), meta.get("settings", {}))
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(folder / MANIFEST)
    return folder


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def mismatch_reason(manifest: dict[str, Any], task: PreparedTask, seed: int,
                    run: dict[str, Any] | None = None) -> str | None:
    """Why a stored baseline cannot stand in for this task (None if it can); names the field that differs."""
    entry = manifest.get("tasks", {}).get(task.name)
    if entry is None:
        return f"no stored baseline for task {task.name!r}"
    want = task_key(task, seed)
    for key in ("version", "params", "gen_settings", "seed"):
        if entry.get(key) != want[key]:
            return f"task {task.name!r} {key} differs (stored {entry.get(key)!r}, now {want[key]!r})"
    missing = [sid for sid, h in want["sample_hashes"].items() if entry["sample_hashes"].get(sid) != h]
    if missing:
        return f"task {task.name!r}: {len(missing)} samples missing or changed (e.g. {missing[0]})"
    stored_run = manifest.get("run", {})
    for key, value in (run or {}).items():
        stored = stored_run.get(key, RUN_DEFAULTS.get(key))
        if stored != value:
            return f"{key} differs (stored {stored!r}, now {value!r})"
    libs, now = manifest.get("libraries", {}), library_versions()
    for pkg in LIBRARIES:
        if libs.get(pkg) != now[pkg]:
            return f"{pkg} version differs (stored {libs.get(pkg)}, now {now[pkg]})"
    return None


@dataclass
class BaselineSource:
    """Looks up ``root/<fingerprint>/``; ``strict`` turns a mismatch into an error instead of a recompute."""

    root: Path
    fingerprint: str
    seed: int
    batch_size: int
    strict: bool = False
    log: Callable[[str], None] = print

    def import_into(self, store: Store, task: PreparedTask, name: str, settings: dict[str, Any]) -> bool:
        """Copy the stored baseline samples of ``task`` into the run store; False when none is usable.
        ``settings`` are the backend's output-changing settings (``Backend.settings``)."""
        folder = Path(self.root) / self.fingerprint
        manifest = _read_manifest(folder)
        run = run_key(self.batch_size, settings)
        reason = (f"no stored baseline for model fingerprint {self.fingerprint} under {self.root}"
                  if manifest is None else mismatch_reason(manifest, task, self.seed, run))
        if reason is not None:
            if self.strict:
                raise StoreMismatch(f"stored baseline refused: {reason}")
            if manifest is not None:
                self.log(f"stored baseline not reused: {reason}")
            return False
        done = store.done_ids(name, task.name)
        wanted = {s.id for s in task.samples}
        rows = [SampleResult(**{**json.loads(line), "variant": name})
                for line in (folder / f"{task.name}.jsonl").read_text().splitlines() if line]
        store.put_samples(r for r in rows if r.sample_id in wanted and r.sample_id not in done)
        return True
