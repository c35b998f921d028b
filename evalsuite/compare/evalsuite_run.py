"""An evalsuite run folder -> ``LogRun``s: its baseline (as the compared baseline) or each of its variants.

A row's score is metric ``score``; the task's secondary metrics (``SampleResult.metrics``) can be chosen instead
with ``--metric``. KLD rows come along; they are valid only against the baseline of the same run folder.
"""
from __future__ import annotations

from pathlib import Path

from evalsuite.compare.source import EVALSUITE, LogRun, LogSample
from evalsuite.store.records import NOISE_SUFFIX, SampleResult
from evalsuite.store.sqlite import Store, require_finished
from evalsuite.errors import EvalsuiteError

SCORE = "score"


def is_evalsuite_run(path: Path) -> bool:
    return (path / Store.FILENAME).is_file()


def read_evalsuite(path: Path, name: str | None, baseline: bool) -> list[LogRun]:
    """The run's baseline (``baseline``), else each of its variants (``name`` renames a run's only variant)."""
    store = Store.open(path)
    try:
        require_finished(store)
        state = store.state()
        wanted = [state.baseline] if baseline else [v for v in state.variant_order or store.variants_present()
                                                    if v != state.baseline and not v.endswith(NOISE_SUFFIX)]
        if not wanted:
            raise EvalsuiteError(f"{path}: the run holds no variant besides its baseline {state.baseline!r}")
        if name is not None and len(wanted) > 1:
            raise EvalsuiteError(f"{path} holds {len(wanted)} variants ({', '.join(wanted)}): NAME=PATH renames a "
                                 "run's only variant")
        origin = str(path.resolve())
        infos = store.variant_infos()
        runs = []
        for v in wanted:
            rows = store.samples(v)
            run = LogRun(name or v, EVALSUITE, path, state.model_name or v, [_sample(r) for r in rows],
                         dict(state.task_versions), origin=origin, kld=[] if baseline else store.kld(v),
                         info=infos.get(v))
            for r in rows:
                run.metric_order.setdefault(r.task, [SCORE, *sorted(r.metrics)])
                run.field_names.update(r.metadata)
            runs.append(run)
        return runs
    finally:
        store.close()


def _sample(r: SampleResult) -> LogSample:
    values = {SCORE: (r.score, r.output), **{k: (v, r.output) for k, v in r.metrics.items()}}
    return LogSample(r.task, r.sample_id, r.prompt, r.prompt_hash, "", values, dict(r.metadata))
