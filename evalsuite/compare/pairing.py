"""Exact pairing: a variant's documents pair with the baseline's by task and id, and only when their prompts are
identical. The first document whose prompt (or the rest of its request: generation settings, continuations,
target) differs refuses the variant in one line; documents on one side only are counted and named."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evalsuite.compare.scoring import Scored, ScoredRun
from evalsuite.compare.source import LogRun
from evalsuite.errors import EvalsuiteError

SHOWN = 10  #: one-side-only ids named per (variant, task) in a note; all of them are in the run's meta


@dataclass
class OneSided:
    """A task's documents present on one side only (ids in log order)."""

    baseline_only: list[str] = field(default_factory=list)
    variant_only: list[str] = field(default_factory=list)


@dataclass
class Pairing:
    """How one variant paired with the baseline: pairs and one-sided documents per task."""

    variant: str
    paired: dict[str, int] = field(default_factory=dict)
    one_sided: dict[str, OneSided] = field(default_factory=dict)

    def notes(self, baseline: str) -> list[str]:
        """One line per task with one-sided documents."""
        out = []
        for task, o in self.one_sided.items():
            parts = [f"{len(ids)} only in {who} ({ids_text(ids)})" for ids, who in
                     ((o.baseline_only, f"the baseline {baseline}"), (o.variant_only, self.variant)) if ids]
            out.append(f"{self.variant} · {task}: {'; '.join(parts)}: left out of the paired statistics "
                       f"({self.paired.get(task, 0)} pairs)")
        return out


def ids_text(ids: Sequence[str], shown: int = SHOWN) -> str:
    """``doc 3, doc 7, ... and 12 more``."""
    head = ", ".join(f"doc {i}" for i in ids[:shown])
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def check_formats(runs: Sequence[LogRun]) -> None:
    """Refuse logs of different tools: their prompt hashes and task names cannot pair."""
    base = runs[0]
    for r in runs[1:]:
        if r.fmt != base.fmt:
            raise EvalsuiteError(f"the baseline is an {base.fmt} log but {r.name} ({r.path}) an {r.fmt} one: compare "
                                 "logs written by one tool")


def pair(base: ScoredRun, var: ScoredRun) -> Pairing:
    """Pair ``var`` with ``base``; raise on the first document whose prompt or request differs, or a task whose
    version differs."""
    name = var.run.name
    out = Pairing(name)
    for task in list(base.docs) + [t for t in var.docs if t not in base.docs]:
        b_docs, v_docs = base.docs.get(task, {}), var.docs.get(task, {})
        bv, vv = base.run.task_versions.get(task, ""), var.run.task_versions.get(task, "")
        if b_docs and v_docs and bv != vv:
            raise EvalsuiteError(f"{name}: task {task!r} is version {vv or '?'} in its log but {bv or '?'} in the "
                                 "baseline's: compare logs of one task version")
        for sid, b in b_docs.items():
            v = v_docs.get(sid)
            if v is not None:
                _same_request(name, task, b, v)
        o = OneSided([s for s in b_docs if s not in v_docs], [s for s in v_docs if s not in b_docs])
        out.paired[task] = len(b_docs) - len(o.baseline_only)
        if o.baseline_only or o.variant_only:
            out.one_sided[task] = o
    return out


def _same_request(name: str, task: str, b: Scored, v: Scored) -> None:
    if b.prompt_hash != v.prompt_hash:
        where = _first_difference(b.prompt, v.prompt)
        raise EvalsuiteError(f"{name}: task {task!r} doc {b.sample_id}: its prompt differs from the baseline's{where} "
                             "(another few-shot seed, system prompt or chat template?): pairs need identical "
                             "prompts; no report written")
    if b.request_hash != v.request_hash:
        raise EvalsuiteError(f"{name}: task {task!r} doc {b.sample_id}: same prompt, but its request differs from the "
                             "baseline's (generation settings, continuations or target): pairs need identical "
                             "requests; no report written")


def _first_difference(a: str, b: str) -> str:
    """`` at character 12: 'Answer' vs 'Be brief'`` (empty when the texts are equal: the difference is in
    repeats or in messages not shown)."""
    if a == b:
        return ""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f" at character {i}: {a[i:i + 24]!r} vs {b[i:i + 24]!r}"
