"""Run orchestration used by the CLI: create or resume a run, execute it, summarise scores."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence, Union

from evalsuite.core.config import RunConfig
from evalsuite.core.costs import RunCosts
from evalsuite.core.decision import Decide
from evalsuite.run.backend import Backend, VariantRef
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.rounds import Fixed, Rounds
from evalsuite.run.runner import Runner
from evalsuite.run.schedule import Book
from evalsuite.store.sqlite import Store
from evalsuite.tasks.registry import Registry

Planner = Union[Fixed, Rounds]  #: what plans a run's draws (``run.rounds``)


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
    from evalsuite.tasks.registry import default_registry

    variants = backend.variants(config.variants)
    drawn = _drawn(run_dir) if resume else None
    tasks = prepare_tasks(config, registry or default_registry(), backend.task_context(), drawn)
    if resume:  # tasks that resolve otherwise than when the run started: refused before anything loads
        _check_tasks(run_dir, tasks)
    fit = getattr(backend, "fit_tasks", None)  # optional: a backend that sizes itself to the tasks before loading
    if fit is not None:
        fit(tasks)
    sequential = config.max_samples is not None or config.budget_s is not None  # the budget ends it
    if sequential and decide is None and len(variants) > 1:
        raise ValueError("a sequential run of variants needs a decision function (decide=)")
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
        from evalsuite.cpu.machine import machine_info

        store.update_state(machine=machine_info())  # why n differs between machines: the report says how fast
        runner = Runner(config, backend, tasks, store, progress=progress, log=log, baseline_source=source)
        planner = _planner(config, tasks, store, log, time.monotonic() if started is None else started, sequential)
        drive(runner, variants, planner, decide if sequential and len(variants) > 1 else None)
        if source is not None and source.grow:  # store the baseline's answers, the stored ones and the new
            source.save(store, runner.tasks, variants[0].name)
    finally:
        backend.close()
    store.update_state(finished=time.time())
    return store


def _planner(config: RunConfig, tasks: list[PreparedTask], store: Store, log: Callable[[str], None],
             started: float, sequential: bool) -> Planner:
    """A fixed run's plan (``run.rounds.Fixed``) or a sequential run's (``run.rounds.Rounds``, continuing from the
    looks a resumed run's meta counts)."""
    from evalsuite.run.draws import task_cap

    if not sequential:
        return Fixed()
    return Rounds(caps={t.name: task_cap(t, config.max_samples) for t in tasks}, round_size=config.round_size,
                  budget_s=config.budget_s, log=log, batch_size=config.batch_size, started=started,
                  looks=int(store.state().rounds))


def drive(runner: Runner, variants: Sequence[VariantRef], planner: Planner, decide: Decide | None) -> None:
    """The one loop of a run: ``runner.start``; while the plan draws (``planner.next`` on the gate's decision,
    ``decide`` on what is stored (None: nothing to decide), and what is stored), the runner does the draw
    (``runner.look``) and its measured seconds are counted; the plan's record goes to the run's meta after each
    draw and at the end; ``runner.end``. A fixed run is one draw of everything (``run.rounds.Fixed``)."""
    store, names = runner.store, [v.name for v in variants]
    runner.start(variants, build=planner.builds)
    source = runner.baseline_source
    held = ({t.name: source.held(t, runner.backend.settings()) for t in runner.tasks} if source is not None else {})
    costs = replace(RunCosts.from_state(store.state()), stored=held)  # what the store holds now, not at the last run
    while (chunk := planner.next(decide(store) if decide is not None else None,
                                 observe(store, runner.tasks, names, costs))) is not None:
        for name, task, seconds, pairs in runner.look(chunk, variants):
            if pairs > 0:
                costs.add(name, task, seconds, pairs)
        _record(runner, planner, costs)
    _record(runner, planner, costs)
    runner.end(variants, planner.end())


def observe(store: Store, tasks: Sequence[PreparedTask], names: Sequence[str], costs: RunCosts) -> Book:
    """What is stored, as the plan sees it (``run.schedule.Book``): per variant and task the pairs held of the
    samples drawn, per task the samples drawn, the costs (the caps and draw sizes are the plan's own)."""
    samples = {t.name: {s.id for s in t.samples} for t in tasks}
    have = {v: {t: len(store.done_ids(v, t) & ids) for t, ids in samples.items()} for v in names}
    return Book(list(names[1:] or names[:1]), [t.name for t in tasks], have,
                {t: len(ids) for t, ids in samples.items()}, {}, costs, names[0])


def _record(runner: Runner, planner: Planner, costs: RunCosts) -> None:
    """The plan's record of the run (looks, draws, why it stopped, costs) in the run's meta (a fixed run: none)."""
    record = planner.record({t.name: len(t.samples) for t in runner.tasks}, costs)
    if record:
        runner.store.update_state(**record)


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
