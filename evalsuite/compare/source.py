"""What a log reader hands over: one ``LogSample`` per logged generation of a document, grouped in a ``LogRun``
per model and log. Readers (``lmeval_log``, ``inspect_log``, ``evalsuite_run``) keep the values as the tool logged
them; choosing the score, folding repeats and pairing come after (``scoring``, ``pairing``)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsuite.store.records import KLDResult, VariantInfo

LMEVAL, INSPECT, EVALSUITE = "lm-eval", "inspect_ai", "evalsuite"


@dataclass(slots=True)
class LogSample:
    """One logged generation of one document (a repeat or epoch is a sample of its own, same id)."""

    task: str
    sample_id: str
    prompt: str  # the rendered prompt as the model got it (first request; messages before the first answer)
    prompt_hash: str  # ``digest`` of the rendered prompt: what pairing compares first
    request_hash: str  # ``digest`` of the rest of the request: generation settings, continuations, target
    #: metric key -> (value as logged, the output that value scores); lm-eval keys are ``metric,filter``
    values: dict[str, tuple[Any, str]]
    fields: dict[str, Any] = field(default_factory=dict)  # the document's fields (where --slice-key looks)


@dataclass
class LogRun:
    """The samples of one model in one log (file or folder), as read."""

    name: str  # the variant name in the compared run (the log's model name unless NAME=PATH)
    fmt: str  # LMEVAL | INSPECT | EVALSUITE
    path: Path
    model: str  # the model as the log names it
    samples: list[LogSample]
    task_versions: dict[str, str] = field(default_factory=dict)
    #: task -> metric keys in the log's own order (the first is the default score)
    metric_order: dict[str, list[str]] = field(default_factory=dict)
    #: task -> how the tool itself folded repeated generations into one value per document (a report note)
    folded: dict[str, str] = field(default_factory=dict)
    field_names: set[str] = field(default_factory=set)  # document fields seen (for a --slice-key error)
    kld: list[KLDResult] = field(default_factory=list)  # evalsuite runs: KLD rows against ``origin``'s baseline
    origin: str = ""  # evalsuite runs: the run folder the rows (and their KLD) come from
    info: VariantInfo | None = None  # evalsuite runs: the variant's bytes and speed as that run measured them
    notes: list[str] = field(default_factory=list)  # what the reader chose (e.g. which of several runs)


def digest(obj: Any) -> str:
    """A short stable hash of a JSON-able value (keys sorted; what is not JSON is hashed as its ``str``)."""
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def split_named(arg: str) -> tuple[str | None, Path]:
    """``NAME=PATH`` -> (NAME, PATH); a bare path (or an existing path holding ``=``) -> (None, PATH)."""
    name, eq, rest = arg.partition("=")
    if not eq or Path(arg).exists() or not name or "/" in name:
        return None, Path(arg)
    return name, Path(rest)
