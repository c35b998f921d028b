"""Sample streams: take a window of a task's stream, and the orders that keep any prefix stratified.

A task's stream (``Task.stream``) is a deterministic, seeded, possibly infinite sequence of samples with unique
ids; the runner draws from it in rounds (``take(task, params, seed, n, start)``), the same samples for the
baseline and every variant. Procedural tasks cycle their grid in ``balanced_grid`` order, finite ones interleave
their slices with ``round_robin``, so that every prefix covers the slices evenly.
"""
from __future__ import annotations

import inspect
from itertools import islice
from math import gcd
from typing import Any, Iterator, Sequence, TypeVar

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import Sample, Task

T = TypeVar("T")


def _skips(task: Task) -> bool:
    """Whether the task's ``stream`` takes a ``start`` argument (then skipping costs nothing)."""
    try:
        return "start" in inspect.signature(task.stream).parameters
    except (TypeError, ValueError):
        return False


def iter_stream(task: Task, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
    """The task's stream from position ``start`` on (plugins whose ``stream`` has no ``start`` are skipped
    item by item)."""
    if start < 0:
        raise EvalsuiteError(f"task {task.name!r}: stream start must be >= 0, got {start}")
    if start and _skips(task):
        return iter(task.stream(params, seed, start=start))
    return islice(task.stream(params, seed), start, None)


def take(task: Task, params: dict[str, Any], seed: int, n: int, start: int = 0) -> list[Sample]:
    """Items ``start .. start+n-1`` of the task's stream: fewer when a finite stream ends before."""
    if n < 0:
        raise EvalsuiteError(f"task {task.name!r}: cannot take {n} samples")
    return list(islice(iter_stream(task, params, seed, start), n))


def balanced_grid(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every cell of the grid ``range(sizes[0]) x range(sizes[1]) x ...`` once, as index tuples, ordered so
    that in *every* prefix each factor's levels appear equally often, give or take one.

    Built factor by factor: with ``prev`` the order over the first factors (length m) and a new factor of size
    n, item j is ``prev[j % m]`` plus level ``(j + j // lcm(m, n)) % n``: each lcm-long block pairs the old
    cells with the new levels along one diagonal, the shift moves to the next diagonal, so all m*n pairs occur,
    the new factor cycles (balanced in every prefix) and the old order repeats (balanced in every prefix).
    """
    order: list[tuple[int, ...]] = [()]
    for n in sizes:
        if n < 1:
            raise ValueError(f"grid factor sizes must be >= 1, got {list(sizes)}")
        m = len(order)
        block = m * n // gcd(m, n)
        order = [order[j % m] + ((j + j // block) % n,) for j in range(m * n)]
    return order


def round_robin(groups: Sequence[Sequence[T]]) -> list[T]:
    """One item of each group in turn (skipping exhausted groups): counts per group differ by at most one in
    every prefix until the smaller groups run out."""
    out: list[T] = []
    for k in range(max((len(g) for g in groups), default=0)):
        out.extend(g[k] for g in groups if k < len(g))
    return out
