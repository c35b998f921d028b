"""Run orchestration used by the CLI: create or resume a run, execute it, summarise scores."""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from evalsuite.errors import EvalsuiteError
from evalsuite.run.config import RunConfig
from evalsuite.run.store import Store


def new_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S")


def execute(config: RunConfig, run_dir: Path, resume: bool, progress: bool = True,
            log: Callable[[str], None] = print, baselines: Path | None = None,
            strict_baseline: bool = False, ray_address: str | None = None) -> Store:
    """Load the model once, prepare identical samples, run baseline then variants into the run's store."""
    if config.model.startswith("openai:"):  # an OpenAI-compatible server (evalsuite.scale.endpoint)
        from evalsuite.scale.endpoint_run import execute_endpoint

        return execute_endpoint(config, run_dir, resume, progress=progress, log=log)
    from evalsuite.models import load_model, offline
    from evalsuite.run.prepare import prepare_tasks, prepare_variants
    from evalsuite.run.runner import Runner
    from evalsuite.tasks.registry import default_registry

    offline()
    if ray_address is not None:  # (variant x task x shard) units on Ray; this process still writes the store
        from evalsuite.scale.ray_driver import execute_ray

        return execute_ray(config, run_dir, resume, address=ray_address, progress=progress, log=log,
                           baselines=baselines, strict_baseline=strict_baseline)
    specs = prepare_variants(config)  # bad specs fail before anything loads or is written
    tasks = prepare_tasks(config, default_registry())
    base = load_model(config.model, config.dtype)
    store = Store.open(run_dir) if resume else Store.create(run_dir, config.to_dict())
    source = None
    if baselines is not None:
        from evalsuite.run.baselines import BaselineSource

        source = BaselineSource(baselines, base.fingerprint, config.seed, strict=strict_baseline, log=log)
    runner = Runner(config, base, tasks, store, progress=progress, log=log, baseline_source=source)
    runner.run(specs)
    store.set_meta({"finished": time.time()})
    return store


def resume_config(run_dir: Path) -> RunConfig:
    """The stored config of a run (so a resumed run continues exactly what was asked)."""
    store = Store.open(run_dir)
    try:
        return RunConfig.from_dict(store.config)
    finally:
        store.close()


def score_table(store: Store) -> tuple[list[str], list[list[str]]]:
    """Mean score per variant × task (n in brackets)."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in store.samples():
        sums[(r.variant, r.task)].append(r.score)
    tasks = sorted({t for _, t in sums})
    variants = list(dict.fromkeys(v for v, _ in sums))
    order = store.meta().get("variant_order", [])
    variants.sort(key=lambda v: (order.index(v) if v in order else len(order), v))
    rows = []
    for v in variants:
        cells = [f"{sum(s) / len(s):.3f} (n={len(s)})" if (s := sums.get((v, t))) else "-" for t in tasks]
        rows.append([v] + cells)
    return ["variant"] + tasks, rows


def require_finished(store: Store) -> None:
    if "finished" not in store.meta():
        raise EvalsuiteError(f"run {store.path.parent.name} did not finish; continue it with "
                             f"`evalsuite run --resume {store.path.parent.name}`")
