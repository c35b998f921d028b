"""Bridge to lm-evaluation-harness (lm-eval 0.4.x), in both directions.

- ``EvalsuiteLM`` (``evalsuite.lmeval.model``): an lm-eval model running an evalsuite model + variant, KV cache
  included. lm-eval 0.4.13 discovers third-party models only through its in-process registry (no entry points):
  call ``register()`` before ``simple_evaluate(model="evalsuite", ...)``, pass an ``EvalsuiteLM`` instance, or use
  the wrapper CLI ``python -m evalsuite.lmeval run --model evalsuite ...`` (same arguments as ``lm_eval``).
- ``LmEvalTask`` (``evalsuite.lmeval.adapter``): lm-eval generate_until tasks as evalsuite tasks (the task Registry
  resolves ``lm_eval:<name>`` once ``register_tasks()`` has run: the command line runs it at its start), so
  ``evalsuite run --lm-eval-task NAME`` stores, compares and gates them like built-in tasks.
- ``export_task`` (``evalsuite.lmeval.export``): an evalsuite task written out as an lm-eval task folder, scored
  by evalsuite's own ``Task.score`` (``evalsuite export-lm-eval``).

Nothing here imports lm-eval or torch at import time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalsuite.tasks.base import Task

MODEL_NAME = "evalsuite"
MODEL_REF = "evalsuite.lmeval.model:EvalsuiteLM"


def register() -> None:
    """Make lm-eval resolve ``--model evalsuite`` (idempotent; lm-eval's own models stay available)."""
    import lm_eval.models  # noqa: F401  (lm-eval fills its model registry only when it is empty)
    from lm_eval.api.registry import model_registry

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target=MODEL_REF)


__all__ = ["MODEL_NAME", "MODEL_REF", "register"]
PREFIX = "lm_eval:"  #: task names ``lm_eval:<name>``: lm-eval's task <name>


def register_tasks() -> None:
    """Make every task registry made from now on (``tasks.registry.default_registry``) resolve ``lm_eval:<name>`` to
    lm-eval's task <name> (``adapter.LmEvalTask``, imported when first resolved)."""
    from evalsuite.tasks.registry import register_resolver

    register_resolver(PREFIX, _lm_eval_task)


def _lm_eval_task(name: str) -> "Task":
    from evalsuite.lmeval.adapter import LmEvalTask

    return LmEvalTask(name)
