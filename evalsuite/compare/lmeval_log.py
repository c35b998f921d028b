"""lm-evaluation-harness ``--log_samples`` output -> a ``LogRun``.

lm-eval writes, per run, ``results_<date>.json`` (versions, task configs, the model's name) and one
``samples_<task>_<date>.jsonl`` per task beside it (``EvaluationTracker``), under ``--output_path/<model>/``.
A samples line holds ``doc_id``, ``doc``, ``target``, ``arguments`` (``{"gen_args_<i>": {"arg_<j>": ...}}``, one
per request: the context, then the generation settings or the continuation), ``resps`` / ``filtered_resps``,
``filter``, ``metrics`` (the names) and each metric's value under its name. A document has one line per filter;
its metric keys here are lm-eval's own ``metric,filter``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsuite.compare.source import LMEVAL, LogRun, LogSample, digest
from evalsuite.errors import EvalsuiteError

_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
#: keys of a samples line that are not metrics (lines of lm-eval versions without a ``metrics`` list)
_NOT_METRICS = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
                "prompt_hash", "target_hash"}


def is_lmeval(path: Path) -> bool:
    """Whether ``path`` is an lm-eval results / samples file, or a folder holding them (or one level down)."""
    if path.is_file():
        return (path.name.startswith("results_") and path.suffix == ".json") or _SAMPLES.match(path.name) is not None
    return path.is_dir() and any(_run_files(d) for d in [path, *sorted(p for p in path.iterdir() if p.is_dir())])


def _run_files(folder: Path) -> list[Path]:
    return sorted([*folder.glob("results_*.json"), *folder.glob("samples_*.jsonl")])


def locate(path: Path) -> tuple[Path | None, list[Path]]:
    """(results file or None, samples files) of the one lm-eval run that ``path`` names."""
    if path.is_file() and path.suffix == ".json":
        date = path.stem[len("results_"):]
        return path, sorted(p for p in path.parent.glob("samples_*.jsonl") if _date(p) == date)
    if path.is_file():
        results = path.with_name(f"results_{_date(path)}.json")
        return (results if results.is_file() else None), [path]
    folder = path
    if not _run_files(folder):
        subs = [d for d in sorted(path.iterdir()) if d.is_dir() and _run_files(d)]
        if len(subs) > 1:
            raise EvalsuiteError(f"{path} holds lm-eval runs of several models ({', '.join(d.name for d in subs)}): "
                                 "pass one model's folder")
        folder = subs[0]
    results = sorted(folder.glob("results_*.json"))
    if len(results) > 1:
        raise EvalsuiteError(f"{folder} holds {len(results)} lm-eval runs ({', '.join(p.name for p in results)}): "
                             "pass the results_*.json of the one to compare")
    if results:
        return locate(results[0])
    dates = sorted({_date(p) for p in folder.glob("samples_*.jsonl")})
    if len(dates) > 1:
        raise EvalsuiteError(f"{folder} holds samples of {len(dates)} lm-eval runs (dates {', '.join(dates)}): "
                             "pass one samples_*.jsonl file")
    return None, sorted(folder.glob("samples_*.jsonl"))


def _date(path: Path) -> str:
    m = _SAMPLES.match(path.name)
    return m.group("date") if m else ""


def read_lmeval(path: Path, name: str | None, keep_fields: Sequence[str] = ()) -> LogRun:
    """The lm-eval run at ``path`` (a folder, a results_*.json or a samples_*.jsonl file)."""
    results_path, files = locate(path)
    if not files:
        raise EvalsuiteError(f"{path}: lm-eval results without samples_*.jsonl files; run lm-eval with --log_samples")
    results = _load_json(results_path) if results_path is not None else {}
    configs = results.get("configs") or {}
    tasks = {f: _task_of(f, configs) for f in files}
    model = str(results.get("model_name") or (results.get("config") or {}).get("model_args")
                or files[0].parent.name)
    run = LogRun(name or model, LMEVAL, path, model, [])
    if results_path is None:
        run.notes.append(f"{path}: no results_*.json beside the samples: task versions and the model name unknown")
    for file, task in tasks.items():
        samples, keys, fields = read_samples(file, task, keep_fields)
        run.samples += samples
        run.metric_order[task] = keys
        run.field_names |= fields
        run.task_versions[task] = str((results.get("versions") or {}).get(task, ""))
        repeats = int((configs.get(task) or {}).get("repeats") or 1)
        if repeats > 1:
            run.folded[task] = (f"lm-eval repeats={repeats}: one value per document, from lm-eval's filter (its log "
                                "holds no per-repeat scores)")
    missing = sorted(set(configs) - set(tasks.values()))
    if missing:
        run.notes.append(f"{run.name}: lm-eval results list {', '.join(missing)} without a samples file (not compared)")
    return run


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalsuiteError(f"{path}: not a readable lm-eval results file ({exc})") from None
    if not isinstance(data, dict):
        raise EvalsuiteError(f"{path}: not an lm-eval results file (no JSON object)")
    return data


def _task_of(file: Path, configs: dict[str, Any]) -> str:
    date = _date(file)
    for task in configs:
        if file.name == f"samples_{task}_{date}.jsonl":
            return task
    m = _SAMPLES.match(file.name)
    if m is None:
        raise EvalsuiteError(f"{file}: not an lm-eval samples file (expected samples_<task>_<date>.jsonl)")
    return m.group("task")


def read_samples(file: Path, task: str, keep_fields: Sequence[str]) -> tuple[list[LogSample], list[str], set[str]]:
    """(samples, metric keys in the log's order, document field names) of one samples_*.jsonl file. The lines of
    one document (one per filter) become one sample; a document logged again under a filter it already has is a
    repeat (a sample of its own)."""
    by_doc: dict[str, list[LogSample]] = {}
    keys: dict[str, None] = {}
    cache: dict[str, str] = {}  # repr of a request's settings -> their digest
    fields: set[str] = set()
    with open(file, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                sid = str(d["doc_id"])
            except (ValueError, KeyError, TypeError):
                raise EvalsuiteError(f"{file}:{i}: not an lm-eval sample line (JSON with doc_id)") from None
            line_sample = _sample(d, task, keep_fields, cache)
            if not line_sample.values.keys() <= keys.keys():
                keys.update(dict.fromkeys(line_sample.values))
                fields |= set(d["doc"]) if isinstance(d.get("doc"), dict) else set()
            group = by_doc.get(sid)
            if group is None:
                by_doc[sid] = [line_sample]
            else:
                _merge(group, line_sample)
    return [s for group in by_doc.values() for s in group], list(keys), fields


def _merge(group: list[LogSample], new: LogSample) -> None:
    """Add one line's metric values to the first sample of the document that lacks them, else a new repeat."""
    for i, s in enumerate(group):
        if not set(new.values) & set(s.values):
            group[i] = LogSample(s.task, s.sample_id, s.prompt, s.prompt_hash, s.request_hash,
                                 {**s.values, **new.values}, s.fields)
            return
    group.append(new)


def _sample(d: dict[str, Any], task: str, keep_fields: Sequence[str], cache: dict[str, str]) -> LogSample:
    requests = _requests(d.get("arguments"))
    contexts = [r[0] if r else "" for r in requests]
    rest = [r[1:] for r in requests]  # generation settings or continuations: mostly alike across a task's docs
    seen = repr(rest)
    if seen not in cache:
        cache[seen] = digest(rest)
    output = _output(d.get("filtered_resps"), requests)
    flt = d.get("filter") or "none"
    names = d.get("metrics") or [k for k in d if k not in _NOT_METRICS]
    values = {f"{m},{flt}": (d[m], output) for m in names if m in d}
    doc = d.get("doc")
    kept = {k: doc[k] for k in keep_fields if k in doc} if keep_fields and isinstance(doc, dict) else {}
    prompt = contexts[0] if len(contexts) == 1 and isinstance(contexts[0], str) else contexts
    return LogSample(task, str(d["doc_id"]), str(contexts[0]) if contexts else "", digest(prompt),
                     digest(f"{cache[seen]}\x00{d.get('target')}"), values, kept)


def _requests(arguments: Any) -> list[list[Any]]:
    """The requests' arguments as lists: lm-eval's sanitized ``{"gen_args_i": {"arg_j": ...}}`` or a plain list."""
    if isinstance(arguments, dict):
        return [list(a.values()) if isinstance(a, dict) else [a] for a in arguments.values()]
    if isinstance(arguments, list):
        return [list(a) if isinstance(a, (list, tuple)) else [a] for a in arguments]
    return []


def _output(filtered: Any, requests: list[list[Any]]) -> str:
    """The answer a sample's metric scored: the generated text, or for a choice among log-likelihoods the
    continuation with the highest one."""
    if not isinstance(filtered, list):
        return "" if filtered is None else str(filtered)
    if all(isinstance(x, str) for x in filtered):
        return "\n".join(filtered)
    try:
        lls = [float(x[0]) for x in filtered]
    except (TypeError, ValueError, IndexError):
        return json.dumps(filtered, default=str)
    if len(lls) > 1 and len(requests) == len(lls):
        best = max(range(len(lls)), key=lls.__getitem__)
        return str(requests[best][1]).strip() if len(requests[best]) > 1 else str(best)
    return json.dumps(filtered, default=str)
