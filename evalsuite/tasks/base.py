"""The task plugin API: a Task makes Samples deterministically from (params, seed) and scores outputs."""
from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class GenSettings:
    """Generation settings for a task (greedy unless ``temperature`` > 0)."""

    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    n: int = 1  # samples per prompt (pass@k tasks)
    #: a named rule that ends a row once its score can no longer change (``tasks.stop_rules``; "" = none)
    stop_rule: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored (a stored baseline's key); ``stop_rule`` only where one is set."""
        out: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "stop": list(self.stop),
                               "temperature": self.temperature, "n": self.n}
        return {**out, "stop_rule": self.stop_rule} if self.stop_rule else out


@dataclass(frozen=True)
class Sample:
    """One evaluation item. Exactly one of ``messages`` (chat) or ``prompt`` (raw completion) is set.

    ``metadata`` holds JSON-able values; its scalar entries are slices (e.g. context_len, depth).
    ``target`` is whatever ``Task.score`` needs (JSON-able).
    """

    id: str
    target: Any
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError(f"sample {self.id}: set exactly one of messages or prompt")

    def content_hash(self) -> str:
        """Hash of what the model sees and what it is scored against (detects changed samples)."""
        blob = json.dumps([self.messages, self.prompt, self.target], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Score:
    """A scored output: ``value`` in [0, 1] (1/0 for binary tasks), the extracted answer and a reason.

    ``metrics`` are named secondary numbers beside the score (JSON field accuracy, needle prompt tokens, a
    refusal flag ...): they are stored with the sample, shown in the report and can be gated (``metric:``).
    """

    value: float
    extracted: str | None = None
    reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)  # numbers (gateable), bools, short strings


@dataclass(frozen=True)
class TaskContext:
    """What a task may know about the model it runs on, to size prompts in that model's own tokens.

    ``count_tokens(sample)`` is the length of the sample's prompt as the model will see it (chat template
    included); ``max_positions()`` the model's context window. Either is None when unknown (e.g. a served
    model). Both are callables so that nothing is loaded unless a task asks. ``stop_rules``: the engine applies a
    task's stop rule (``GenSettings.stop_rule``: evalsuite's in-process decoder); served engines take stop strings
    only, and a task leaves its rule out there.
    """

    count_tokens: Callable[[Sample], int] | None = None
    max_positions: Callable[[], int | None] | None = None
    model_name: str = "the model"
    stop_rules: bool = False


class Task(ABC):
    """Base class for task plugins. Subclasses set ``name``, ``version``, ``default_params``.

    Before ``samples`` or ``stream`` is called the runner sets ``context`` (a TaskContext) when it knows the
    model.

    Stream contract: ``stream(params, seed)`` yields samples on demand for runs that draw in rounds. It is
    deterministic for (params, seed) (the same items, in the same order, for the baseline and every variant),
    possibly infinite, and never repeats a sample id; its order is stratified, so that any prefix covers the
    task's slices evenly. ``samples(params, seed)`` is the task's default set (for built-in tasks: the stream's
    first items). The default ``stream`` iterates ``samples`` (finite), so a task that only defines ``samples``
    works unchanged. ``stream_size(params)`` is the stream's length, or None when unbounded or unknown.
    """

    name: str = ""
    version: str = "1"
    description: str = ""
    binary: bool = True  # scores are 0/1 (enables flips / McNemar)
    default_params: dict[str, Any] = {}
    context: TaskContext = TaskContext()

    def params(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """Defaults merged with overrides; unknown keys are an error."""
        merged = dict(self.default_params)
        for key, value in (overrides or {}).items():
            if key not in merged:
                from evalsuite.errors import EvalsuiteError

                raise EvalsuiteError(
                    f"task {self.name!r}: unknown parameter {key!r}; known: {', '.join(sorted(merged))}")
            merged[key] = value
        return merged

    @abstractmethod
    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        """Deterministic samples for (params, seed)."""

    def stream(self, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
        """Samples on demand from position ``start`` (see the class docstring). Default: ``samples``' items."""
        yield from islice(self.samples(params, seed), start, None)

    def stream_size(self, params: dict[str, Any], seed: int = 0) -> int | None:
        """How many items ``stream`` yields: None when unbounded, or unknown (a plugin that overrides
        ``stream`` but not this method). Default: the length of ``samples``."""
        if type(self).stream is not Task.stream:
            return None
        return len(self.samples(params, seed))

    @abstractmethod
    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        """How to generate answers for this task."""

    @abstractmethod
    def score(self, sample: Sample, output: str) -> Score:
        """Score one generated output."""

    def score_many(self, sample: Sample, outputs: list[str]) -> Score:
        """Combine n>1 outputs (default: mean of per-output scores; code overrides with pass@k)."""
        scores = [self.score(sample, o) for o in outputs]
        return Score(value=sum(s.value for s in scores) / len(scores), extracted=scores[0].extracted,
                     reason=scores[0].reason)
