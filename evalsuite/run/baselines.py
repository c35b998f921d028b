"""Stored baselines: per-sample baseline results with a manifest, keyed by the model's content fingerprint.

A baseline keyed by model *name* silently returns stale results when the checkpoint changes; here the folder is
``baselines/<fingerprint>/`` and every task entry records its version, parameters, generation settings, seed,
sample hashes, library versions and the decoder's output format (``DECODE_FORMAT``). A baseline that does not match
is refused, with the reason. A stored baseline may hold fewer samples than a run draws: the ones it has are
imported, the rest generated; ``grow`` stores them back (stored answers kept, new ones added), so a second
sequential run regenerates no stored answer. The baseline's side of KLD (its teacher-forced logits) is not stored:
each run recomputes it in its KLD or verification pass, on top of the baseline's prompt K/V, which a growing
source keeps on disk beside the answers (``prompt_folder``, ``backends.inprocess.spill``) so that pass does not prefill
the stored prompts again.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evalsuite.errors import StoreMismatch
from evalsuite.run.prepare import PreparedTask
from evalsuite.core.costs import StoredBaseline, measured_rate
from evalsuite.store.records import DECODE_FORMAT, SampleResult
from evalsuite.store.sqlite import Store
from evalsuite.models.embedded import package_version

MANIFEST = "manifest.json"


def library_versions() -> dict[str, str]:
    return {pkg: package_version(pkg) for pkg in LIBRARIES}


#: run settings that change outputs (from ``Backend.settings``), one a line: adding one is adding its line (and,
#: where a baseline stored before it existed is known to have run with one value, that value in ``RUN_DEFAULTS``;
#: without one, such a baseline is not reused: ``mismatch_reason`` says the field was not recorded). A backend keys
#: those it sets; a manifest's others are not compared (an in-process run has no vLLM version)
RUN_KEYS = (
    "batch_size",  # batch composition changes padding and numerics, unless the kernels are batch-invariant
    "max_batch_tokens",
    "compute_dtype",  # vLLM: the dtype its engine logged, not the one asked for
    "backend",
    "device",
    "attention",
    "batch_invariant",
    "onednn_isa",
    "mkl_cbwr",
    "cpu_class",  # the CPU's vendor and the kernels' instruction sets (evalsuite.cpu.cpuclass); none: not reused
    "linear",
    "vllm_version",  # --engine vllm (served.vllm.identity)
    "vllm_libraries",  # torch / transformers / vllm of vLLM's interpreter
    "tensor_parallel_size",
    "max_model_len",
    "kv_cache_dtype",
    "server_flags",  # every flag of the baseline's server that can change its answers, --vllm-arg included
    "endpoint_url",  # openai: endpoints (served.endpoint.EndpointClient.server_facts)
    "endpoint_model",
    "endpoint_server",  # what the server says about itself (/v1/models, /version, /props, /info)
)
#: what a manifest written before a key existed stored implicitly (every baseline before --device ran on the CPU,
#: before ``evalsuite.models.attention`` with transformers' SDPA, before ``evalsuite.cpu.onednn`` at oneDNN's own level,
#: before ``evalsuite.cpu.mkl`` in MKL's default mode, before ``evalsuite.models.packed`` with plain Linear calls). The
#: vLLM and endpoint keys have none: a served baseline stored before them ran on a server no one recorded
RUN_DEFAULTS = {"device": "cpu", "attention": "sdpa", "batch_invariant": False, "onednn_isa": "default",
                "mkl_cbwr": "default", "linear": "plain"}
#: keys that do not change outputs when the kernels are batch-invariant (``models.invariance``)
BATCHING_KEYS = ("batch_size", "max_batch_tokens")
LIBRARIES = ("torch", "transformers", "optimum-quanto", "evalsuite")


def task_key(task: PreparedTask, seed: int) -> dict[str, Any]:
    """Everything about a task that must match for its stored baseline to be reused."""
    return {"version": task.version, "params": task.params, "gen_settings": task.gen.to_dict(), "seed": seed,
            "sample_hashes": {s.id: s.content_hash() for s in task.samples}}


def run_key(batch_size: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The run settings a stored baseline was generated with (see ``RUN_KEYS``, in its order, as JSON stores them);
    with batch-invariant kernels the batching is not one of them (a baseline stored at one batch size serves every
    other)."""
    given = {"batch_size": batch_size, **settings}
    key = {k: json.loads(json.dumps(given[k])) for k in RUN_KEYS if k in given}
    return {k: v for k, v in key.items() if not (key.get("batch_invariant") and k in BATCHING_KEYS)}


def save_baseline(root: Path, store: Store, tasks: list[PreparedTask], seed: int, baseline: str,
                  grow: bool = False) -> Path:
    """Write ``root/<fingerprint>/`` from a finished run's baseline samples (tasks replaced one by one).
    ``grow``: a task whose stored entry still matches keeps its stored answers, and this run's are added."""
    state = store.state()
    if state.fingerprint is None:
        raise StoreMismatch(f"run {store.path.parent.name} recorded no model fingerprint: no baseline to store")
    folder = Path(root) / state.fingerprint
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder) or {"model": state.model_name, "fingerprint": state.fingerprint,
                                          "dtype": state.dtype, "tasks": {}}
    run = run_key(state.config.get("batch_size", 0), state.settings)
    for task in tasks:
        key, rows = task_key(task, seed), {r.sample_id: r.to_dict() for r in store.samples(baseline, task.name)}
        if grow and mismatch_reason(manifest, task, seed, run, partial=True) is None:
            old = [json.loads(line) for line in (folder / f"{task.name}.jsonl").read_text().splitlines() if line]
            rows = {**{r["sample_id"]: r for r in old}, **rows}
            key["sample_hashes"] = {**manifest["tasks"][task.name]["sample_hashes"], **key["sample_hashes"]}
        tmp = folder / f".{task.name}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
        tmp.replace(folder / f"{task.name}.jsonl")
        # seconds per sample where this run generated some (else as recorded): what a later run's draws past the
        # stored samples plan with (``held``)
        seconds = measured_rate(state.round_costs.get(f"{baseline}/{task.name}")) or (
            manifest["tasks"].get(task.name, {}).get("seconds_per_sample") if grow else None)
        manifest["tasks"][task.name] = {**key, "n": len(rows), "created": time.time(),
                                        **({"seconds_per_sample": seconds} if seconds else {})}
    manifest["libraries"] = library_versions()
    manifest["run"], manifest["decode_format"] = run, DECODE_FORMAT
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(folder / MANIFEST)
    return folder


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def mismatch_reason(manifest: dict[str, Any], task: PreparedTask, seed: int,
                    run: dict[str, Any] | None = None, partial: bool = False) -> str | None:
    """Why a stored baseline cannot stand in for this task (None if it can); names the field that differs.
    ``partial``: samples it does not hold are not a mismatch (they are generated); a changed one still is."""
    entry = manifest.get("tasks", {}).get(task.name)
    if entry is None:
        return f"no stored baseline for task {task.name!r}"
    if manifest.get("decode_format") != DECODE_FORMAT:
        return f"decode format differs (stored {manifest.get('decode_format')!r}, now {DECODE_FORMAT!r})"
    want = task_key(task, seed)
    for key in ("version", "params", "gen_settings", "seed"):
        if entry.get(key) != want[key]:
            return f"task {task.name!r} {key} differs (stored {entry.get(key)!r}, now {want[key]!r})"
    stored = entry["sample_hashes"]
    missing = [sid for sid, h in want["sample_hashes"].items()
               if stored.get(sid, None if not partial else h) != h]
    if missing:
        return f"task {task.name!r}: {len(missing)} samples missing or changed (e.g. {missing[0]})"
    stored_run = manifest.get("run", {})
    for key, value in (run or {}).items():
        if key not in stored_run and key not in RUN_DEFAULTS:
            return f"{key} not recorded (a baseline stored before evalsuite keyed it; now {_brief(value)})"
        stored = stored_run.get(key, RUN_DEFAULTS.get(key))
        if stored != value:
            return f"{key} differs (stored {_brief(stored)}, now {_brief(value)})"
    libs, now = manifest.get("libraries", {}), library_versions()
    for pkg in LIBRARIES:
        if libs.get(pkg) != now[pkg]:
            return f"{pkg} version differs (stored {libs.get(pkg)}, now {now[pkg]})"
    return None


def _brief(value: Any, most: int = 160) -> str:
    """``repr(value)``, cut to ``most`` characters (a server's flags or self-description can be long)."""
    text = repr(value)
    return text if len(text) <= most else text[:most - 3] + "..."


@dataclass
class BaselineSource:
    """Looks up ``root/<fingerprint>/``; ``strict`` turns a mismatch into an error instead of a recompute."""

    root: Path
    fingerprint: str
    seed: int
    batch_size: int
    strict: bool = False
    log: Callable[[str], None] = print
    grow: bool = False  # samples it lacks are generated and stored back (``save``)

    def import_into(self, store: Store, task: PreparedTask, name: str, settings: dict[str, Any],
                    quiet: bool = False) -> bool:
        """Copy the stored baseline samples of ``task`` into the run store; False when none is usable.
        ``settings`` are the backend's output-changing settings (``Backend.settings``). A growing source
        imports the samples it holds and leaves the rest to be generated; ``quiet`` logs no mismatch."""
        folder = Path(self.root) / self.fingerprint
        manifest, reason = self._match(task, settings)
        if reason is not None:
            if self.strict:
                raise StoreMismatch(f"stored baseline refused: {reason}")
            if manifest is not None and not quiet:
                self.log(f"stored baseline not reused: {reason}")
            return False
        done = store.done_ids(name, task.name)
        wanted = {s.id for s in task.samples}
        rows = [SampleResult(**{**json.loads(line), "variant": name})
                for line in (folder / f"{task.name}.jsonl").read_text().splitlines() if line]
        store.put_samples(r for r in rows if r.sample_id in wanted and r.sample_id not in done)
        return True

    def held(self, task: PreparedTask, settings: dict[str, Any]) -> StoredBaseline:
        """How many samples of ``task`` the stored baseline answers, and the seconds per sample they took where
        they were generated (``core.costs.StoredBaseline``); nothing when it does not match."""
        manifest, reason = self._match(task, settings)
        if manifest is None or reason is not None:
            return StoredBaseline()
        entry = manifest["tasks"][task.name]
        return StoredBaseline(int(entry.get("n", 0)), float(entry.get("seconds_per_sample") or 0.0))

    def _match(self, task: PreparedTask, settings: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """The stored manifest (None when absent) and why it cannot stand in for ``task`` (None if it can)."""
        manifest = _read_manifest(Path(self.root) / self.fingerprint)
        if manifest is None:
            return None, f"no stored baseline for model fingerprint {self.fingerprint} under {self.root}"
        run = run_key(self.batch_size, settings)
        return manifest, mismatch_reason(manifest, task, self.seed, run, partial=self.grow)

    def prompt_folder(self, settings: dict[str, Any]) -> Path:
        """Where the baseline's prompt K/V are kept beside its answers (``backends.inprocess.spill``): one folder per
        everything that changes them (the run settings of ``run_key``, library versions, the decode format)."""
        import hashlib

        key = {"run": run_key(self.batch_size, settings), "libraries": library_versions(),
               "decode_format": DECODE_FORMAT}
        digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return Path(self.root) / self.fingerprint / "prompt_kv" / digest

    def save(self, store: Store, tasks: list[PreparedTask], name: str) -> Path:
        """Store the run's baseline answers under ``root`` (grown: the stored ones kept, new ones added)."""
        return save_baseline(self.root, store, tasks, self.seed, name, grow=True)
