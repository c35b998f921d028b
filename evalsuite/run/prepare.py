"""Resolve tasks and variants of a RunConfig into concrete samples and specs (same samples for everyone)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError
from evalsuite.core.config import BASELINE, RunConfig
from evalsuite.tasks.base import GenSettings, Sample, Task, TaskContext
from evalsuite.tasks.registry import Registry
from evalsuite.variants.spec import VariantSpec, parse_variant, variant_from_dict


@dataclass
class PreparedTask:
    """A task with its resolved parameters, generation settings and (limited) samples."""

    task: Task
    params: dict[str, Any]
    gen: GenSettings
    samples: list[Sample]
    seed: int = 0
    #: where each parameter's value came from: "--param", "--task-config FILE", "task file FILE" or "default"
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def version(self) -> str:
        return str(self.task.version)

    def draw(self, k: int) -> int:
        """Append the next ``k`` samples of the task's stream (sequential rounds); returns how many came
        (fewer when a finite stream ends)."""
        from evalsuite.tasks.stream import take

        more = take(self.task, self.params, self.seed, k, start=len(self.samples))
        _check_ids(self.name, self.samples + more)
        self.samples.extend(more)
        return len(more)


def spread_limit(samples: list[Sample], limit: int | None) -> list[Sample]:
    """At most ``limit`` samples, evenly spaced over the task's order (so a limited needle run still covers
    its grid of kinds x lengths x depths instead of only the first cells). Deterministic."""
    if limit is None or limit >= len(samples):
        return samples
    step = len(samples) / limit
    return [samples[int(i * step)] for i in range(limit)]


def _check_ids(name: str, samples: list[Sample]) -> None:
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise EvalsuiteError(f"task {name!r} produced duplicate sample ids")


def task_file(name: str, config: RunConfig) -> tuple[Path | None, str]:
    """(``<name>.yaml`` in the run's task parameter folder when it exists, how the folder was named): the folder of
    ``config.task_config`` (``--task-config``), else ``$EVALSUITE_TASK_CONFIG`` or ``./tasks``
    (``tasks.params.tasks_dir``). A named folder that does not exist is a one-line error."""
    from evalsuite.tasks.params import tasks_dir

    if config.task_config is not None:
        folder, how = Path(config.task_config), "--task-config"
        if not folder.is_dir():
            raise EvalsuiteError(f"task parameter folder not found: {folder} (--task-config)")
    else:
        folder, how = tasks_dir(), "task file"
    path = folder / f"{name}.yaml" if folder is not None else None
    return (path.resolve() if path is not None and path.is_file() else None), how


def resolve_params(name: str, task: Task, config: RunConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """Task ``name``'s parameters (its defaults, then its task file, then ``--param``) and where each value came
    from."""
    from evalsuite.tasks.params import load_task_params

    path, how = task_file(name, config)
    from_file = load_task_params(name, path, task) if path is not None else {}
    given = config.task_params.get(name, {})
    params = task.params({**from_file, **given})
    return params, {k: "--param" if k in given else f"{how} {path}" if k in from_file else "default"
                    for k in params}


def prepare_tasks(config: RunConfig, registry: Registry, context: TaskContext | None = None,
                  drawn: dict[str, int] | None = None) -> list[PreparedTask]:
    """Instantiate tasks, merge task-file params and ``--param`` overrides (``resolve_params``), make samples from
    the run's seed. ``context`` (the model's token counter and window, when known) is handed to every task before
    it makes samples.

    Sequential runs (``config.max_samples``) start from the first ``config.round_size`` items of each task's
    stream, or from ``drawn[task]`` items when resuming; fixed runs take the task's set (``--limit`` spread)."""
    if not config.tasks:
        raise EvalsuiteError("no tasks given")
    prepared = []
    for name in config.tasks:
        task = registry.get(name)
        if context is not None:
            task.context = context
        params, sources = resolve_params(name, task, config)
        if config.max_samples is not None or config.budget_s is not None:
            from evalsuite.tasks.stream import take

            first = (drawn or {}).get(name) or min(config.round_size, config.max_samples or config.round_size)
            samples = take(task, params, config.seed, first)
        else:
            samples = spread_limit(task.samples(params, config.seed), config.limit)
        _check_ids(name, samples)
        if not samples:
            raise EvalsuiteError(f"task {name!r} produced no samples with these parameters")
        prepared.append(PreparedTask(task, params, task.gen_settings(params), samples, config.seed, sources))
    return prepared


def prepare_variants(requested: list[Any]) -> list[VariantSpec]:
    """Baseline first (added if missing), then the variants in the order given (spec strings or YAML dicts)."""
    specs = [variant_from_dict(v) if isinstance(v, dict) else parse_variant(v) for v in requested]
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise EvalsuiteError(f"variant listed twice: {', '.join(dup)}")
    base = [s for s in specs if s.is_baseline and s.label is None]
    rest = [s for s in specs if s not in base[:1]]  # a *named* no-op variant is compared like any other
    return (base[:1] or [parse_variant(BASELINE)]) + rest
