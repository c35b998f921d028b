"""Task parameter overrides from ``<task config dir>/<name>.yaml``: plain data (a mapping), validated by the task
itself. Which folder: ``evalsuite.paths.task_config_dir`` (``--task-config DIR``, else ``./tasks``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.paths import task_config_dir
from evalsuite.tasks.base import Task


def tasks_dir() -> Path | None:
    """The folder holding per-task parameter files: ``--task-config DIR`` (``$EVALSUITE_TASK_CONFIG``), else
    ``./tasks`` when it exists, else None (``evalsuite.paths.task_config_dir``). A folder named explicitly that
    does not exist is a one-line error."""
    folder = task_config_dir()
    if folder is not None and not folder.is_dir():
        raise EvalsuiteError(f"task parameter folder not found: {folder} (--task-config / $EVALSUITE_TASK_CONFIG)")
    return folder


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise EvalsuiteError(f"task parameters {path}: invalid YAML{where}: {problem}") from None
    except OSError as exc:
        raise EvalsuiteError(f"task parameters {path}: cannot read: {exc.strerror or exc}") from None


def load_task_params(task_name: str, path: Path | None = None, task: Task | None = None) -> dict[str, Any]:
    """Parameter overrides for ``task_name`` (not merged with the defaults).

    ``path`` defaults to ``<task_name>.yaml`` in ``tasks_dir()``; a missing default file (or no folder) means no
    overrides: the task's own defaults, which ship with it. A missing explicit ``path`` is an error. The file must
    hold a mapping (or nothing); keys the task does not know are an error (checked with ``Task.params``). ``task``
    skips the registry lookup.
    """
    if path is None:
        folder = tasks_dir()
        path = folder / f"{task_name}.yaml" if folder is not None else None
        if path is None or not path.is_file():
            return {}
    elif not Path(path).is_file():
        raise EvalsuiteError(f"task parameters file not found: {path}")
    data = _read_yaml(Path(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EvalsuiteError(f"task parameters {path}: expected a mapping of parameter: value, "
                             f"got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise EvalsuiteError(f"task parameters {path}: keys must be strings; got {bad[0]!r}")
    if task is None:
        from evalsuite.tasks.registry import default_registry

        task = default_registry().get(task_name)
    try:
        task.params(data)  # raises on unknown keys
    except EvalsuiteError as exc:
        raise EvalsuiteError(f"task parameters {path}: {exc}") from None
    return dict(data)
