"""How big a sequential run's next draw of a task is, and each task's cap: pure functions of the open checks'
needs (``evalsuite.run.schedule`` chooses the draws, ``evalsuite.run.rounds`` runs them)."""
from __future__ import annotations

from evalsuite.core.decision import DEFAULT_CAP
from evalsuite.run.prepare import PreparedTask

GROWTH = 2  #: each draw of a task is at most this many times its previous one (16, +32, +64, ... at 16)


def task_cap(task: PreparedTask, max_samples: int | None) -> int:
    """A task's safety cap: ``max_samples`` if given, else its stream's size, or ``DEFAULT_CAP`` when endless."""
    if max_samples is not None:
        return max_samples
    size = task.task.stream_size(task.params, task.seed)
    return size if size is not None else DEFAULT_CAP


def whole_batches(k: int, batch: int) -> int:
    """``k`` samples, at least one, rounded up to whole decode batches of ``batch``."""
    return -(-max(k, 1) // max(batch, 1)) * max(batch, 1)


def draw_size(want: int, last: int, batch: int, room: int) -> int:
    """The next draw of a task: what its open checks ask for, at least one decode batch, at most ``GROWTH``
    times its last draw, rounded up to whole batches, within ``room``."""
    return max(0, min(whole_batches(min(max(want, batch), GROWTH * max(last, 1)), batch), room))
