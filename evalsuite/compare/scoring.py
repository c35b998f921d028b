"""Which logged metric is each task's score, whether it can be gated, and one score per document.

A metric whose values are all 0 or 1 (``exact_match``, ``acc``, ``pass@1``, inspect's C / I) is binary: flips
and McNemar apply. One whose values lie in [0, 1] (F1, ROUGE, inspect's partial credit) is continuous. Any other
metric (perplexity, BLEU on 0-100, a list) cannot be gated: one line naming it and how to choose another.
Repeated generations of a document (inspect epochs, a document logged twice) are averaged into one score. Only the
chosen metric is stored for a log (another one is gated by comparing again with ``--metric``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalsuite.compare.evalsuite_run import SCORE
from evalsuite.compare.source import EVALSUITE, LogRun, LogSample, digest
from evalsuite.errors import EvalsuiteError

ALL_TASKS = ""  #: a ``--metric NAME`` without ``TASK=``: every task


@dataclass(frozen=True)
class MetricChoice:
    """The metric key a task is scored by, and how its values are gated."""

    task: str
    key: str
    binary: bool
    asked: bool  # chosen with --metric (else the log's first metric of the task)
    others: tuple[str, ...] = ()  # the task's other metric keys (for the report)


@dataclass(slots=True)
class Scored:
    """One document of one side: its score (repeats averaged) and what pairing compares."""

    sample_id: str
    prompt: str
    prompt_hash: str
    request_hash: str
    output: str
    score: float
    metadata: dict[str, Any]
    repeats: int = 1
    metrics: dict[str, Any] = field(default_factory=dict)  # an evalsuite run's secondary metrics (first sample)


@dataclass
class ScoredRun:
    """A log's documents, scored: task -> sample id -> ``Scored`` (the log's order)."""

    run: LogRun
    docs: dict[str, dict[str, Scored]] = field(default_factory=dict)
    unscored: dict[str, list[str]] = field(default_factory=dict)  # task -> ids without a value of the metric
    repeats: dict[str, int] = field(default_factory=dict)  # task -> most generations averaged into one document


def parse_metrics(items: Sequence[str]) -> dict[str, str]:
    """``--metric TASK=NAME`` (or ``NAME`` for every task) -> {task (ALL_TASKS for every task): name}."""
    out: dict[str, str] = {}
    for item in items:
        task, eq, name = item.partition("=") if "=" in item else ("", "", item)
        if not name.strip() or (eq and not task.strip()):
            raise EvalsuiteError(f"bad --metric {item!r}: expected TASK=NAME (or NAME for every task)")
        out[task.strip()] = name.strip()
    return out


def as_float(value: Any) -> float | None:
    """A logged value as a finite float (bools count as 0 / 1); None when it is not one."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def choose_metrics(runs: Sequence[LogRun], asked: Mapping[str, str]) -> dict[str, MetricChoice]:
    """The score of every task any run has: the asked metric, else the log's first one (the baseline's order)."""
    order: dict[str, list[str]] = {}
    for run in runs:
        for task, keys in run.metric_order.items():
            order.setdefault(task, keys)
    unknown = sorted(set(asked) - set(order) - {ALL_TASKS})
    if unknown:
        raise EvalsuiteError(f"--metric names task(s) no log has: {', '.join(unknown)} (tasks: {', '.join(order)})")
    out = {}
    for task, keys in order.items():
        name = asked.get(task, asked.get(ALL_TASKS))
        key = resolve(task, name, keys) if name is not None else keys[0]
        binary = _check(task, key, runs, keys, name is not None)
        out[task] = MetricChoice(task, key, binary, name is not None, tuple(k for k in keys if k != key))
    return out


def resolve(task: str, name: str, keys: Sequence[str]) -> str:
    """The metric key ``name`` means among a task's ``keys``: exact, else the one key of that metric (an lm-eval
    key is ``metric,filter``)."""
    if name in keys:
        return name
    hits = [k for k in keys if k.split(",")[0] == name]
    if len(hits) == 1:
        return hits[0]
    what = f"is logged under several filters ({', '.join(hits)}): name one" if hits else "is not logged"
    raise EvalsuiteError(f"task {task!r}: metric {name!r} {what}; its metrics: {', '.join(keys)}")


def _check(task: str, key: str, runs: Sequence[LogRun], keys: Sequence[str], asked: bool) -> bool:
    """Whether ``key`` is binary on every run; refuses a metric that is not a score in [0, 1]."""
    binary = True
    for run in runs:
        values = [s.values[key][0] for s in run.samples if s.task == task and key in s.values]
        if not values and any(s.task == task for s in run.samples):
            raise EvalsuiteError(f"{run.name}: its log of task {task!r} has no metric {key} "
                                 f"(it has: {', '.join(run.metric_order.get(task, [])) or 'none'})")
        why = _why_not_gateable(values)
        if why:
            ok = [k for k in keys if k != key and not _why_not_gateable(
                [s.values[k][0] for s in run.samples if s.task == task and k in s.values])]
            hint = f"scores in [0, 1] here: {', '.join(ok)}" if ok else "no metric of this task is"
            how = "choose another" if asked else "choose one"
            raise EvalsuiteError(f"task {task!r}: metric {key} is not a score in [0, 1] ({why}); {how} with "
                                 f"--metric {task}=NAME ({hint})")
        binary = binary and all(v in (0, 1) for v in values)
    return binary


def _why_not_gateable(values: Sequence[Any]) -> str:
    numbers = [as_float(v) for v in values]
    bad = next((v for v, x in zip(values, numbers) if x is None), None)
    if bad is not None:
        return f"non-numeric values such as {str(bad)[:40]!r}"
    lo, hi = min(numbers, default=0.0), max(numbers, default=0.0)  # type: ignore[type-var]
    if lo < 0 or hi > 1:  # type: ignore[operator]
        return f"values from {lo:g} to {hi:g}"
    return ""


def score_run(run: LogRun, choices: Mapping[str, MetricChoice], slice_keys: Sequence[str]) -> ScoredRun:
    """One ``Scored`` per document: the chosen metric averaged over its samples (repeats, epochs). An evalsuite
    run's rows keep their secondary metrics; a log's other metrics are not stored (choose one with --metric)."""
    groups: dict[tuple[str, str], list[LogSample]] = {}
    for s in run.samples:
        group = groups.get((s.task, s.sample_id))
        if group is None:
            groups[s.task, s.sample_id] = [s]
        else:
            group.append(s)
    out = ScoredRun(run)
    keys = {task: c.key for task, c in choices.items()}
    plain = run.fmt != EVALSUITE and not slice_keys  # no metadata, no secondary metrics
    for (task, sid), group in groups.items():
        key = keys[task]
        scored = group if len(group) == 1 and key in group[0].values else [s for s in group if key in s.values]
        if not scored:
            out.unscored.setdefault(task, []).append(sid)
            continue
        first = scored[0]
        prompt, request = (first.prompt_hash, first.request_hash) if len(group) == 1 else _merged_hashes(group)
        if len(scored) > 1:
            out.repeats[task] = max(out.repeats.get(task, 1), len(scored))
        docs = out.docs.get(task)
        if docs is None:
            docs = out.docs[task] = {}
        docs[sid] = Scored(sid, first.prompt, prompt, request, first.values[key][1],
                           sum(float(s.values[key][0]) for s in scored) / len(scored),
                           {} if plain else metadata(run, first, slice_keys), len(scored),
                           {} if plain else _secondary(run, first, key))
    return out


def _merged_hashes(group: Sequence[LogSample]) -> tuple[str, str]:
    """The prompt and request hashes of a document's repeats: one hash when they agree, else one of the set."""
    hashes, requests = sorted({s.prompt_hash for s in group}), sorted({s.request_hash for s in group})
    return (hashes[0] if len(hashes) == 1 else digest(hashes), requests[0] if len(requests) == 1 else digest(requests))


def _secondary(run: LogRun, s: LogSample, key: str) -> dict[str, Any]:
    """An evalsuite run's row keeps its other metrics (a log's are not stored)."""
    return {k: v for k, (v, _) in s.values.items() if k not in (key, SCORE)} if run.fmt == EVALSUITE else {}


def metadata(run: LogRun, s: LogSample, slice_keys: Sequence[str]) -> dict[str, Any]:
    """A document's slices: the ``--slice-key`` fields (an evalsuite run's rows keep all their metadata)."""
    if run.fmt == EVALSUITE:
        return dict(s.fields)
    out = {}
    for key in slice_keys:
        if key in s.fields:
            value = s.fields[key]
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise EvalsuiteError(f"--slice-key {key}: task {s.task!r} document {s.sample_id} has a "
                                     f"{type(value).__name__} there; a slice needs a number or a string")
            out[key] = value
    return out
