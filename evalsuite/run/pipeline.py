"""Run orchestration used by the CLI: create or resume a run, execute it, summarise scores."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from evalsuite.core.config import RunConfig
from evalsuite.core.decision import Decide
from evalsuite.run.backend import Backend
from evalsuite.run.runner import Runner
from evalsuite.core.store import Store
from evalsuite.tasks.registry import Registry


def new_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S")


def process_started() -> float:
    """``time.monotonic()`` at this process's start (Linux: /proc; elsewhere: now), so a ``--budget`` counts the
    interpreter's start, the imports and the model's load too."""
    import os

    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        age = float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    return time.monotonic() - max(0.0, age)


def execute(config: RunConfig, run_dir: Path, resume: bool, backend: Backend, progress: bool = True,
            log: Callable[[str], None] = print, baselines: Path | None = None,
            strict_baseline: bool = False, registry: Registry | None = None, decide: Decide | None = None,
            grow_baseline: bool = False, started: float | None = None, shipped: Path | None = None) -> Store:
    """Prepare identical samples, load the model once, run baseline then variants into the run's store.

    Everything that can be refused (variant specs, task names and parameters) is checked before the model
    loads or anything is written. ``backend`` is chosen by the caller (``evalsuite.cli.backends``). With
    ``config.max_samples`` or ``config.budget_s`` the run goes in sequential rounds (``evalsuite.run.rounds``) that
    ask ``decide`` what is still open (the CLI passes ``evalsuite.gate.decide.store_decider(policy)``); a resumed
    one continues from the samples it had drawn (its wall-clock budget starts afresh). ``grow_baseline``: the
    baseline's answers are stored back under ``baselines`` (stored ones kept, new ones added). ``started``: when the
    budget's clock started (``time.monotonic()``; the CLI passes ``process_started()``; default: now). ``shipped``:
    a read-only shipped baselines folder that seeds the growing one under ``baselines`` (``run.shipped``)."""
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.run.rounds import Rounds
    from evalsuite.tasks.registry import default_registry

    variants = backend.variants(config.variants)
    drawn = _drawn(run_dir) if resume else None
    tasks = prepare_tasks(config, registry or default_registry(), backend.task_context(), drawn)
    if resume:  # tasks that resolve otherwise than when the run started: refused before anything loads
        _check_tasks(run_dir, tasks)
    fit = getattr(backend, "fit_tasks", None)  # optional: a backend that sizes itself to the tasks before loading
    if fit is not None:
        fit(tasks)
    rounds = None
    if config.max_samples is not None or config.budget_s is not None:  # sequential: the budget ends it
        if decide is None and len(variants) > 1:
            raise ValueError("a sequential run of variants needs a decision function (decide=)")
        rounds = Rounds(max_samples=config.max_samples, round_size=config.round_size, budget_s=config.budget_s,
                        decide=decide, log=log, batch_size=config.batch_size,
                        started=time.monotonic() if started is None else started)
    try:
        identity = backend.load()
        store = Store.open(run_dir) if resume else Store.create(run_dir, config.to_dict())
        source = None
        if baselines is not None:
            from evalsuite.run.baselines import BaselineSource

            source = BaselineSource(baselines, identity.fingerprint, config.seed, config.batch_size,
                                    strict=strict_baseline, log=log, grow=grow_baseline)
            if shipped is not None:
                from evalsuite.run.shipped import seed

                seed(shipped, baselines, identity.fingerprint, tasks, config.seed, config.batch_size,
                     backend.settings(), log=log)
            folder = source.prompt_folder(backend.settings()) if hasattr(backend, "spill_prompts") else None
            if folder is not None and (source.grow or folder.is_dir()):  # its prompt K/V beside its answers
                backend.spill_prompts(folder, writable=source.grow)  # a strictly reused one is only read
        from evalsuite.core.machine import machine_info

        store.update_state(machine=machine_info())  # why n differs between machines: the report says how fast
        runner = Runner(config, backend, tasks, store, progress=progress, log=log, baseline_source=source)
        runner.run(variants, rounds)
        if source is not None and source.grow:  # store the baseline's answers, the stored ones and the new
            source.save(store, runner.tasks, variants[0].name)
    finally:
        backend.close()
    store.update_state(finished=time.time())
    return store


def resume_config(run_dir: Path) -> RunConfig:
    """The stored config of a run (so a resumed run continues exactly what was asked)."""
    store = Store.open(run_dir)
    try:
        return RunConfig.from_dict(store.config)
    finally:
        store.close()


def _check_tasks(run_dir: Path, tasks: list) -> None:
    """``run.identity.check_tasks`` on the stored run in ``run_dir``."""
    from evalsuite.run.identity import check_tasks

    store = Store.open(run_dir)
    try:
        check_tasks(store, tasks)
    finally:
        store.close()


def _drawn(run_dir: Path) -> dict[str, int]:
    """How many samples of each task a sequential run had drawn (empty for a fixed run)."""
    store = Store.open(run_dir)
    try:
        return dict(store.state().drawn)
    finally:
        store.close()
