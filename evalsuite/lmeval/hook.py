"""The scoring hook of exported lm-eval tasks: lm-eval's ``process_results`` calls evalsuite's own ``Task.score``.

An exported doc carries the evalsuite Sample as JSON (``sample``); the generated ``<task>_utils.py`` next to the
YAML binds the task name, version and parameters and forwards to ``score_doc``.
"""
from __future__ import annotations

import json
import warnings
from functools import lru_cache
from typing import Any, Sequence

from evalsuite.tasks.base import Sample, Task

METRIC = "score"


@lru_cache(maxsize=None)
def _task(name: str) -> Task:
    from evalsuite.tasks.registry import default_registry

    return default_registry().get(name)


def sample_from_doc(doc: dict[str, Any]) -> Sample:
    """The evalsuite Sample stored in an exported doc."""
    d = json.loads(doc["sample"])
    messages = tuple(d["messages"]) if d.get("messages") is not None else None
    return Sample(id=d["id"], target=d["target"], messages=messages, prompt=d.get("prompt"),
                  metadata=d.get("metadata") or {})


def sample_to_json(sample: Sample) -> str:
    return json.dumps({"id": sample.id, "target": sample.target, "messages": sample.messages,
                       "prompt": sample.prompt, "metadata": sample.metadata}, default=str)


def score_doc(spec: dict[str, Any], doc: dict[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """``{"score": value}`` for one doc. ``results`` holds the filtered response: one string, or a list of
    strings when the task was exported with n > 1 generations (then ``Task.score_many``)."""
    task = _task(spec["task"])
    if str(task.version) != str(spec["version"]):
        warnings.warn(f"evalsuite task {spec['task']!r} is version {task.version}, the export was made with "
                      f"version {spec['version']}: re-export to compare like with like", stacklevel=2)
    first = results[0] if len(results) == 1 else list(results)
    outputs = list(first) if isinstance(first, (list, tuple)) else [first]
    sample = sample_from_doc(doc)
    score = task.score(sample, outputs[0]) if len(outputs) == 1 else task.score_many(sample, outputs)
    return {METRIC: float(score.value)}
