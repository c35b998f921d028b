"""How big a sequential run's next draw of a task is, and who runs it: pure functions of the measured costs and
the open checks' needs (``evalsuite.run.rounds`` applies them round by round)."""
from __future__ import annotations

from typing import Sequence

from evalsuite.run.prepare import PreparedTask

GROWTH = 2  #: each draw of a task is at most this many times its previous one (16, +32, +64, ... at 16)
DEFAULT_CAP = 1000  #: the safety cap per task of an endless stream when --max-samples is not given


def task_cap(task: PreparedTask, max_samples: int | None) -> int:
    """A task's safety cap: ``max_samples`` if given, else its stream's size, or ``DEFAULT_CAP`` when endless."""
    if max_samples is not None:
        return max_samples
    size = task.task.stream_size(task.params, task.seed)
    return size if size is not None else DEFAULT_CAP


def joining(order: Sequence[str], wants: dict[str, int], seconds: dict[str, float], base_s: float, left: float,
            k: int) -> tuple[list[str], int]:
    """Who runs a task's next draw of ``k`` samples with ``left`` seconds of budget, and how many samples that
    affords. Everyone, when the budget covers ``k`` for all; else the first variant of ``order`` and each next one
    whose joining still leaves every joined variant its need (a draw too short for a variant's need buys it
    nothing it can decide on in this budget). Returns (joined variants, samples afforded)."""
    def afford(names: Sequence[str]) -> int:
        per_sample = base_s + sum(seconds[v] for v in names)
        return int(left // per_sample) if per_sample > 0 else k

    if afford(order) >= k:
        return list(order), afford(order)
    chosen = [order[0]]
    for v in order[1:]:
        if afford(chosen + [v]) >= max(wants[u] for u in chosen + [v]):
            chosen.append(v)
    return chosen, afford(chosen)


def whole_batches(k: int, batch: int) -> int:
    """``k`` samples, at least one, rounded up to whole decode batches of ``batch``."""
    return -(-max(k, 1) // max(batch, 1)) * max(batch, 1)


def draw_size(want: int, last: int, batch: int, room: int) -> int:
    """The next draw of a task: what its open checks ask for, at least one decode batch, at most ``GROWTH``
    times its last draw, rounded up to whole batches, within ``room``."""
    return max(0, min(whole_batches(min(max(want, batch), GROWTH * max(last, 1)), batch), room))
