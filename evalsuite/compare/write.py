"""The compared logs as an evalsuite run folder: the same store ``evalsuite run`` writes (``store.sqlite``), so that
``evalsuite gate``, ``report`` and ``tenants`` read it. Written into a temporary folder and renamed into place: a
refused or failed comparison leaves no run folder behind."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsuite.compare.scoring import ScoredRun
from evalsuite.compare.source import digest
from evalsuite.core.config import RunConfig
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo, is_right
from evalsuite.store.sqlite import Store
from evalsuite.errors import EvalsuiteError

NO_KLD = "not measured: the logs hold no per-token log-probabilities (max_kld is skipped)"


def write_run(run_dir: Path, base: ScoredRun, variants: Sequence[ScoredRun], notes: list[str],
              details: dict[str, Any]) -> Path:
    """Store every side's documents, the run's state and ``notes`` (the report shows them) in ``run_dir``."""
    if run_dir.exists():
        raise EvalsuiteError(f"{run_dir} exists already: choose another --run-id (or remove it)")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=run_dir.parent, prefix=f".{run_dir.name}-"))
    try:
        store = Store.create(tmp, config(base, variants).to_dict())
        try:
            _fill(store, base, variants, notes, details)
        finally:
            store.close()
        tmp.rename(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run_dir


def config(base: ScoredRun, variants: Sequence[ScoredRun]) -> RunConfig:
    """The run's config: the sides by name and every task any side has (a task a variant lacks is then
    INCONCLUSIVE for it, never left out)."""
    tasks = list(dict.fromkeys(t for s in (base, *variants) for t in s.docs))
    return RunConfig(model=f"compare:{base.run.model}", variants=[s.run.name for s in (base, *variants)],
                     tasks=tasks, kld=any(s.run.kld for s in variants), verify=False, reuse_identical=False)


def _fill(store: Store, base: ScoredRun, variants: Sequence[ScoredRun], notes: list[str],
          details: dict[str, Any]) -> None:
    versions = {t: v for s in (base, *variants) for t, v in s.run.task_versions.items() if t in s.docs}
    kld = {s.run.name: _kld(s) for s in variants if s.run.kld and s.run.origin == base.run.origin}
    store.update_state(model_name=f"{base.run.model} ({base.run.fmt} log)", fingerprint=fingerprint(base),
                       dtype="as logged", task_versions=versions, baseline=base.run.name,
                       variant_order=[s.run.name for s in (base, *variants)],
                       kld_method="as the evalsuite run measured it" if kld else NO_KLD)
    shown = flipped(base, variants)
    for side in (base, *variants):
        store.put_samples(rows(side, versions, shown if side is base else set()))
        store.put_variant(info(side))
    for rows_kld in kld.values():
        store.put_kld(rows_kld)
    store.set_meta({"compare": details})
    store.update_state(notes=notes, finished=time.time())


def rows(side: ScoredRun, versions: dict[str, str], prompts: set[tuple[str, str]]) -> list[SampleResult]:
    """One SampleResult per document; the prompt text only on the documents in ``prompts``."""
    name = side.run.name
    return [SampleResult(name, task, versions.get(task, ""), d.sample_id, d.prompt_hash, d.output, d.score,
                         metadata=d.metadata, prompt=d.prompt if (task, d.sample_id) in prompts else "",
                         metrics=d.metrics)
            for task, docs in side.docs.items() for d in docs.values()]


def flipped(base: ScoredRun, variants: Sequence[ScoredRun]) -> set[tuple[str, str]]:
    """(task, id) of the baseline's documents some variant flips (``store.records.is_right``): the only prompts the
    report shows (its flipped-sample browser); the logs keep every prompt, the store does not repeat them all."""
    out = set()
    for task, docs in base.docs.items():
        for v in variants:
            other = v.docs.get(task, {})
            out.update((task, sid) for sid, d in docs.items()
                       if sid in other and is_right(d.score) != is_right(other[sid].score))
    return out


def _kld(side: ScoredRun) -> list[KLDResult]:
    docs = {(t, sid) for t, d in side.docs.items() for sid in d}
    return [dataclasses.replace(k, variant=side.run.name) for k in side.run.kld if (k.task, k.sample_id) in docs]


def fingerprint(base: ScoredRun) -> str:
    """A hash of the baseline's compared content (tasks, ids, prompts, scores): what the run was compared to."""
    return digest([(t, d.sample_id, d.prompt_hash, d.score) for t, docs in base.docs.items() for d in docs.values()])


def info(side: ScoredRun) -> VariantInfo:
    """An evalsuite run's own VariantInfo of the side (renamed); for a log, where it came from: its bytes and speed
    are unknown (the logs hold none)."""
    run = side.run
    if run.info is not None:
        return dataclasses.replace(run.info, variant=run.name)
    return VariantInfo(run.name, {"format": run.fmt, "log": str(run.path), "model": run.model},
                       weight_bytes=None, weight_formula_bytes=None, source=str(run.path))  # type: ignore[arg-type]
