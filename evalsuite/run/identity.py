"""A run's task identity: every task's version and resolved parameters, with where each value came from
(``--param``, ``--task-config``, a task file, or the task's default: ``run.prepare.resolve_params``).

Task parameter files are read at every invocation, so a run continued (``--resume``, an ``--accumulate``
continuation) after one was edited, or from another working folder, would mix two configurations in one run. The
run records what it started with (``RunState.task_versions``, ``task_params``, ``task_sources``), and a continuation
whose tasks resolve otherwise is refused before the model loads, in one line naming the task and the parameter.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from evalsuite.store.state import RunState
from evalsuite.store.sqlite import Store
from evalsuite.errors import StoreMismatch
from evalsuite.run.prepare import PreparedTask

_ABSENT = object()


def _plain(value: Any) -> Any:
    """``value`` as the store keeps it (JSON: tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def task_mismatch(state: RunState, tasks: Sequence[PreparedTask]) -> str | None:
    """Why ``tasks`` cannot continue the run of ``state`` (None if they can): a task's version, or one of its
    parameters, differs from what the run recorded; names the task and the parameter, with both values and where
    each came from."""
    for task in tasks:
        version = state.task_versions.get(task.name)
        if version is not None and version != task.version:
            return f"task {task.name!r} version changed ({version} stored, {task.version} now)"
        stored = state.task_params.get(task.name)
        if stored is None:
            continue
        now, was = _plain(task.params), state.task_sources.get(task.name, {})
        for name in sorted(set(stored) | set(now)):
            old, new = stored.get(name, _ABSENT), now.get(name, _ABSENT)
            if old != new:
                return (f"task {task.name!r} parameter {name!r} changed since the run started: "
                        f"{_said(old, was.get(name, 'source not recorded'))} then, "
                        f"{_said(new, task.sources.get(name, 'default'))} now; run from the same folder with "
                        f"the same task files (or --task-config), or start a new run")
    return None


def _said(value: Any, source: str) -> str:
    return "absent" if value is _ABSENT else f"{value!r} ({source})"


def check_tasks(store: Store, tasks: Sequence[PreparedTask]) -> None:
    """Refuse (``StoreMismatch``, exit 2) to continue the run in ``store`` with ``tasks`` that resolve otherwise."""
    reason = task_mismatch(store.state(), tasks)
    if reason is not None:
        raise StoreMismatch(reason)


def record_tasks(store: Store, tasks: Sequence[PreparedTask]) -> None:
    """Store what the run's tasks are (a task already recorded keeps where its values first came from)."""
    state = store.state()
    store.update_state(task_versions={**state.task_versions, **{t.name: t.version for t in tasks}},
                       task_params={**state.task_params, **{t.name: _plain(t.params) for t in tasks}},
                       task_sources={**{t.name: dict(t.sources) for t in tasks}, **state.task_sources},
                       gen_settings={**state.gen_settings, **{t.name: t.gen.to_dict() for t in tasks}})
