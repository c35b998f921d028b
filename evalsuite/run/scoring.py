"""One place that turns a sample's generation(s) into a stored SampleResult (every backend calls it)."""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import SampleResult


def row_seed(seed: int, sample_id: str, repeat: int) -> int:
    """The sampling seed of one generation: fixed by (run seed, sample, repetition), independent of batching."""
    digest = hashlib.sha256(f"{seed}:{sample_id}:{repeat}".encode()).digest()
    return int.from_bytes(digest[:6], "little")


def score_sample(task: PreparedTask, index: int, gens: Sequence[Any], name: str, prompt: str) -> SampleResult:
    """Score the ``n`` generations of sample ``index`` (one: ``Task.score``; several: ``Task.score_many``, e.g.
    pass@k) and record it. ``gens`` are Generation-like objects (``text``, ``n_tokens``, ``ttft_s``, ``itl_s``)."""
    sample = task.samples[index]
    texts = [g.text for g in gens]
    sc = task.task.score(sample, texts[0]) if len(texts) == 1 else task.task.score_many(sample, texts)
    meta = {k: v for k, v in sample.metadata.items() if isinstance(v, (str, int, float, bool))}
    first = gens[0]
    return SampleResult(variant=name, task=task.name, task_version=task.version, sample_id=sample.id,
                        prompt_hash=sample.content_hash(), output=texts[0], score=float(sc.value),
                        extracted=sc.extracted, reason=sc.reason, metadata=meta, prompt=prompt,
                        n_tokens=first.n_tokens, ttft_s=first.ttft_s, itl_s=first.itl_s,
                        metrics=_jsonable_metrics(sc.metrics), outputs=tuple(texts) if len(texts) > 1 else (),
                        token_ids=tuple(getattr(first, "ids", ())) if len(texts) == 1 else (),
                        stop=getattr(first, "stop", "") if len(texts) == 1 else "",
                        decode=getattr(first, "decode", "") or "generated")


def _jsonable_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Numbers, bools, None and short strings are kept; anything else is stored as its string form."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if value is None or isinstance(value, (bool, int, float)):
            out[str(key)] = value
        else:
            out[str(key)] = str(value)[:200]
    return out
