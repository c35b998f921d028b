"""Logs in, an evalsuite run out: read every side, choose each task's score, pair exactly, write the run.

Everything is read, scored and checked before anything is written: a refused comparison leaves no run folder.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.compare.evalsuite_run import is_evalsuite_run, read_evalsuite
from evalsuite.compare.inspect_log import is_inspect, read_inspect
from evalsuite.compare.lmeval_log import is_lmeval, read_lmeval
from evalsuite.compare.pairing import Pairing, check_formats, ids_text, pair
from evalsuite.compare.scoring import MetricChoice, ScoredRun, choose_metrics, score_run
from evalsuite.compare.source import EVALSUITE, LogRun, split_named
from evalsuite.compare.write import write_run
from evalsuite.store.bulk import gc_paused
from evalsuite.store.records import NOISE_SUFFIX
from evalsuite.errors import EvalsuiteError

MAX_LEVELS = 20  #: the gate slices a key by itself only up to this many values (``stats.slices``'s default)


@dataclass
class Comparison:
    """What ``compare_logs`` wrote: the run folder, the notes the report shows, each variant's pairing."""

    run_dir: Path
    notes: list[str]
    pairings: list[Pairing]


def read_source(arg: str, baseline: bool, keep_fields: Sequence[str] = ()) -> list[LogRun]:
    """The model(s) an argument names (``[NAME=]PATH``): an lm-eval or inspect_ai log, or an evalsuite run (its
    baseline when ``baseline``, else each of its variants)."""
    name, path = split_named(arg)
    if not path.exists():
        raise EvalsuiteError(f"{path}: no such file or folder")
    if is_evalsuite_run(path):
        return read_evalsuite(path, name, baseline)
    if is_lmeval(path):
        return [read_lmeval(path, name, keep_fields)]
    if is_inspect(path):
        return [read_inspect(path, name, keep_fields)]
    raise EvalsuiteError(f"{path}: not an lm-eval --log_samples output (results_*.json + samples_*.jsonl), an "
                         "inspect_ai log (.eval / .json) or an evalsuite run folder (store.sqlite)")


def compare_logs(baseline: str, variants: Sequence[str], run_dir: Path, metrics: Mapping[str, str] | None = None,
                 slice_keys: Sequence[str] = ()) -> Comparison:
    """Pair every variant's documents with the baseline's and store them as an evalsuite run in ``run_dir``."""
    with gc_paused():  # hundreds of thousands of acyclic records, freed (by _compare's return) before it resumes
        return _compare(baseline, variants, run_dir, metrics or {}, slice_keys)


def _compare(baseline: str, variants: Sequence[str], run_dir: Path, metrics: Mapping[str, str],
             slice_keys: Sequence[str]) -> Comparison:
    (base,) = read_source(baseline, True, slice_keys)
    runs = [base] + [r for arg in variants for r in read_source(arg, False, slice_keys)]
    _check_names(runs)
    check_formats(runs)
    _check_slice_keys(runs, slice_keys)
    choices = choose_metrics(runs, metrics)
    scored = [score_run(r, choices, slice_keys) for r in runs]
    pairings = [pair(scored[0], s) for s in scored[1:]]
    notes = _notes(scored, choices, pairings, slice_keys)
    write_run(run_dir, scored[0], scored[1:], notes, _details(scored, choices, pairings, slice_keys))
    return Comparison(run_dir, notes, pairings)


def _check_names(runs: Sequence[LogRun]) -> None:
    seen: dict[str, LogRun] = {}
    for r in runs:
        if r.name.endswith(NOISE_SUFFIX):
            raise EvalsuiteError(f"{r.path}: the name {r.name!r} ends with {NOISE_SUFFIX!r}, which evalsuite keeps for "
                                 "a baseline's rerun: name it with NAME=PATH")
        if r.name in seen:
            raise EvalsuiteError(f"{seen[r.name].path} and {r.path} are both named {r.name!r} (the model name in "
                                 "their logs): name them with NAME=PATH")
        seen[r.name] = r


def _check_slice_keys(runs: Sequence[LogRun], slice_keys: Sequence[str]) -> None:
    names = set().union(*(r.field_names for r in runs))
    for key in slice_keys:
        if key not in names:
            shown = ", ".join(sorted(names)[:12]) or "none"
            raise EvalsuiteError(f"--slice-key {key}: no document of any log has that field (fields: {shown})")


def _notes(scored: Sequence[ScoredRun], choices: Mapping[str, MetricChoice], pairings: Sequence[Pairing],
           slice_keys: Sequence[str]) -> list[str]:
    """What the report says about where the samples came from and how they were paired."""
    base = scored[0].run
    out = [("baseline " if s is scored[0] else "") + f"{s.run.name}: {s.run.fmt} "
           f"{'run' if s.run.fmt == EVALSUITE else 'log'} {s.run.path} (model {s.run.model})" for s in scored]
    for task, c in choices.items():
        repeats = {s.run.name: s.repeats.get(task, 1) for s in scored if s.repeats.get(task, 1) > 1}
        kind = "binary: flips and McNemar apply" if c.binary and not repeats else "continuous checks"
        out.append(f"{task}: score = {c.key} ({kind}{'; chosen with --metric' if c.asked else ''})"
                   + (f"; also logged: {', '.join(c.others)}" if c.others else ""))
        if repeats:
            per = ", ".join(f"{n} {k}" for n, k in repeats.items())
            out.append(f"{task}: repeated generations averaged per document before pairing (at most: {per})"
                       + ("; the averages of a binary metric are fractions, gated as continuous" if c.binary else ""))
        out += [f"{task}: {text}" for text in dict.fromkeys(s.run.folded[task] for s in scored if task in s.run.folded)]
    for s in scored:
        out += [f"{s.run.name} · {task}: {len(ids)} documents without a value of {choices[task].key} (errored?): "
                f"{ids_text(ids)}" for task, ids in s.unscored.items()]
        out += s.run.notes
        if s.run.kld and s.run.origin != base.origin:
            out.append(f"{s.run.name}: its KLD rows were measured against its own run's baseline, not "
                       f"{base.name}'s: not carried over")
    out += [line for p in pairings for line in p.notes(base.name)]
    for key in slice_keys:
        levels = {d.metadata.get(key) for s in scored for docs in s.docs.values() for d in docs.values()} - {None}
        if len(levels) > MAX_LEVELS:
            out.append(f"slices: {key} has {len(levels)} values: the gate slices it only where a policy selector "
                       f"names it (e.g. where: {{{key}: '>=2048'}})")
    return out


def _details(scored: Sequence[ScoredRun], choices: Mapping[str, MetricChoice], pairings: Sequence[Pairing],
             slice_keys: Sequence[str]) -> dict[str, Any]:
    """The run's ``compare`` meta: sources, metric choices, repeats, every one-sided and unscored id."""
    return {
        "sources": {s.run.name: {"format": s.run.fmt, "path": str(s.run.path), "model": s.run.model}
                    for s in scored},
        "metrics": {t: {"key": c.key, "binary": c.binary, "asked": c.asked} for t, c in choices.items()},
        "repeats": {s.run.name: dict(s.repeats) for s in scored if s.repeats},
        "unscored": {s.run.name: dict(s.unscored) for s in scored if s.unscored},
        "one_sided": {p.variant: {t: {"baseline_only": o.baseline_only, "variant_only": o.variant_only}
                                  for t, o in p.one_sided.items()} for p in pairings if p.one_sided},
        "paired": {p.variant: dict(p.paired) for p in pairings},
        "slice_keys": list(slice_keys),
    }
