"""An explicit task registry: built-in tasks plus plugins from the ``evalsuite.tasks`` entry-point group."""
from __future__ import annotations

import difflib
from importlib import import_module
from importlib.metadata import entry_points
from typing import Callable

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import Task

ENTRY_POINT_GROUP = "evalsuite.tasks"

#: Built-in tasks: name -> "module:attribute" of a Task subclass (imported lazily).
BUILTIN_TASKS: dict[str, str] = {
    "needle": "evalsuite.tasks.needle:NeedleTask",
    "reasoning": "evalsuite.tasks.reasoning:ReasoningTask",
    "code": "evalsuite.tasks.code:CodeTask",
    "json": "evalsuite.tasks.json_task:JsonTask",
    "safety": "evalsuite.tasks.safety:SafetyTask",
}

#: Task-name prefixes resolved on demand, each registered by the package that implements it, from above this layer
#: (``register_resolver``): the command line registers ``lm_eval:`` (``evalsuite.lmeval.register_tasks``:
#: ``lm_eval:<name>`` is lm-eval's task <name>). "prefix" -> a factory taking the rest of the name.
_RESOLVERS: dict[str, Callable[[str], Task]] = {}


def register_resolver(prefix: str, factory: Callable[[str], Task]) -> None:
    """Resolve task names that start with ``prefix`` with ``factory(rest of the name)`` in every registry
    ``default_registry`` makes from now on (registering a prefix again replaces its factory)."""
    _RESOLVERS[prefix] = factory


def _load_ref(ref: str) -> Callable[[], Task]:
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)


class Registry:
    """Maps task names to factories. Nothing is registered at import time: call ``default_registry()``."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[[], Task]] = {}
        self._origin: dict[str, str] = {}
        self.resolvers: dict[str, Callable[[str], Task]] = {}  #: prefix -> factory of the rest (``lm_eval:``)

    def register(self, name: str, factory: Callable[[], Task], origin: str = "user") -> None:
        if name in self._factories:
            raise EvalsuiteError(f"task {name!r} registered twice ({self._origin[name]} and {origin})")
        self._factories[name] = factory
        self._origin[name] = origin

    def names(self) -> list[str]:
        return sorted(self._factories)

    def origin(self, name: str) -> str:
        return self._origin[name]

    def get(self, name: str) -> Task:
        """Instantiate a task (a registered name, or a resolver prefix such as ``lm_eval:``); an unknown name
        gets the nearest valid names."""
        prefix = next((p for p in self.resolvers if name.startswith(p)), None)
        if prefix is not None and name not in self._factories:
            rest = name[len(prefix):].strip()
            if not rest:
                raise EvalsuiteError(f"task {name!r}: name the task after {prefix!r}")
            return self.resolvers[prefix](rest)
        if name not in self._factories:
            near = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise EvalsuiteError(f"unknown task {name!r}{hint} (known: {', '.join(self.names())})")
        task = self._factories[name]()
        if not isinstance(task, Task):
            raise EvalsuiteError(f"task plugin {name!r} did not produce a Task (got {type(task).__name__})")
        return task


def default_registry(plugins: bool = True) -> Registry:
    """Built-in tasks, the registered prefixes (``register_resolver``), plus entry-point plugins when ``plugins`` is
    true."""
    reg = Registry()
    reg.resolvers.update(_RESOLVERS)
    for name, ref in BUILTIN_TASKS.items():
        reg.register(name, lambda ref=ref: _load_ref(ref)(), origin="builtin")
    if plugins:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            reg.register(ep.name, lambda ep=ep: ep.load()(), origin=f"plugin {ep.value}")
    return reg
