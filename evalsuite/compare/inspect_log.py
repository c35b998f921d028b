"""inspect_ai eval logs (``.eval`` or ``.json``) -> a ``LogRun``, read with inspect_ai's own reader
(``inspect_ai.log.read_eval_log``); without inspect_ai installed a log is refused in one line naming its format.

Per sample inspect logs ``id``, ``epoch`` (one sample per epoch), ``messages`` (the conversation: the prompt is
what precedes the first assistant message), ``output.completion``, ``scores`` (scorer name -> ``Score`` whose
``value`` is ``C`` / ``I`` / ``P`` / ``N``, a number, a bool or a dict of those) and ``metadata`` (the dataset's
extra fields, where ``--slice-key`` looks). A sample that errored has no scores.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsuite.compare.source import INSPECT, LogRun, LogSample, digest
from evalsuite.errors import EvalsuiteError

SUFFIXES = (".eval", ".json")


def is_inspect(path: Path) -> bool:
    """Whether ``path`` is an inspect_ai log file, or a folder of them."""
    if path.is_dir():
        return any(_is_log_file(p) for p in sorted(path.iterdir()))
    return _is_log_file(path)


def _is_log_file(path: Path) -> bool:
    if path.suffix == ".eval":
        return path.is_file()
    if path.suffix != ".json" or not path.is_file() or path.name.startswith("results_"):
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.read(4096)
    return '"eval"' in head and '"version"' in head and '"configs"' not in head


def _reader() -> Any:
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        return None
    return read_eval_log


def read_inspect(path: Path, name: str | None, keep_fields: Sequence[str] = ()) -> LogRun:
    """The inspect_ai log(s) at ``path``: one file, or a folder of one model's logs (one per task)."""
    files = [p for p in sorted(path.iterdir()) if _is_log_file(p)] if path.is_dir() else [path]
    read = _reader()
    if read is None:
        raise EvalsuiteError(f"{files[0]}: an inspect_ai log ({files[0].suffix}); reading it needs inspect_ai, "
                             "which is not installed (pip install inspect_ai)")
    logs = [(f, _read(read, f)) for f in files]
    models = sorted({log.eval.model for _, log in logs})
    if len(models) > 1:
        raise EvalsuiteError(f"{path} holds inspect_ai logs of several models ({', '.join(models)}): pass one "
                             "model's logs")
    run = LogRun(name or models[0], INSPECT, path, models[0], [])
    for file, log in logs:
        task = log.eval.task
        if task in run.task_versions:
            raise EvalsuiteError(f"{path} holds two inspect_ai logs of task {task!r}: pass one file")
        run.task_versions[task] = str(log.eval.task_version)
        samples = [_sample(s, task, keep_fields) for s in log.samples or []]
        if not samples:
            raise EvalsuiteError(f"{file}: inspect_ai log without samples (was it written with log_samples=False?)")
        run.samples += samples
        scorers = [s.name for s in (log.results.scores if log.results else [])]
        seen = [k for s in samples for k in s.values]
        run.metric_order[task] = list(dict.fromkeys([k for k in scorers if k in seen] + seen))
        run.field_names |= {k for s in log.samples for k in (s.metadata or {})}
    return run


def _read(read: Any, file: Path) -> Any:
    try:
        return read(str(file))
    except Exception as exc:  # inspect raises its own types (zip, pydantic, JSON): one line, exit 2
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise EvalsuiteError(f"{file}: inspect_ai could not read this log ({first}); read it with the inspect_ai "
                             "version that wrote it") from None


def _sample(s: Any, task: str, keep_fields: Sequence[str]) -> LogSample:
    prompt = _prompt_messages(s)
    output = s.output.completion if s.output is not None else ""
    values: dict[str, tuple[Any, str]] = {}
    for scorer, score in (s.scores or {}).items():
        for key, value in _flatten(scorer, score.value):
            values[key] = (value, output)
    metadata = s.metadata or {}
    return LogSample(task, str(s.id), "\n\n".join(f"{role}: {text}" for role, text in prompt), digest(prompt),
                     digest({"target": s.target, "choices": s.choices}), values,
                     {k: metadata[k] for k in keep_fields if k in metadata})


def _prompt_messages(s: Any) -> list[tuple[str, str]]:
    """(role, text) of the messages before the first assistant message (the sample's input when none logged)."""
    out = []
    for m in s.messages or []:
        if m.role == "assistant":
            break
        out.append((m.role, m.text))
    if out:
        return out
    if isinstance(s.input, str):
        return [("user", s.input)]
    return [(m.role, m.text) for m in s.input]


def _flatten(scorer: str, value: Any) -> list[tuple[str, Any]]:
    """A score's value as (key, value) pairs: a dict value gives ``scorer.key`` each; inspect's C / I / P / N
    become inspect's own numbers (``value_to_float``)."""
    if isinstance(value, dict):
        return [(f"{scorer}.{k}", _number(v)) for k, v in value.items()]
    return [(scorer, _number(value))]


def _number(value: Any) -> Any:
    from inspect_ai.scorer import CORRECT, INCORRECT, NOANSWER, PARTIAL, value_to_float

    if isinstance(value, str) and value in (CORRECT, INCORRECT, PARTIAL, NOANSWER):
        return value_to_float()(value)
    return value
