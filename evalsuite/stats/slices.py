"""Variant vs baseline, sample by sample: one PairedStats per (task, slice).

Pairing is by ``(task, sample_id)``. A sample present on one side only is excluded from the statistics and
counted in ``PairedStats.n_unpaired`` (a crashed or skipped sample shows up there, not as a silent gap).
A pair whose ``prompt_hash`` or ``task_version`` differs is refused: the samples changed, the baseline is stale.

Slices: ``"all"``; ``"key=value"`` for each scalar metadata key (auto-discovered keys with more than
``max_levels`` distinct values, such as ids, are skipped; explicit ``slice_keys`` are never skipped);
and one slice per :class:`SliceFilter`, which pools every sample whose metadata satisfies its predicate
(the gate uses these for policy selectors such as ``context_len >= 2048``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalsuite.errors import EvalsuiteError
from evalsuite.store.records import KLDResult, SampleResult, is_right
from evalsuite.stats.paired import kld_aggregate, mcnemar_exact, paired_bootstrap_ci, tango_ci
from evalsuite.stats.sequential import diff_cs, diff_values, flip_values
from evalsuite.stats.types import ALL, PairedStats

Predicate = Callable[[Mapping[str, Any]], bool]
NOISE_FLOOR = "noise-floor"  # variant name given to a baseline-vs-rerun comparison
BOOT_MIN_N, BOOT_MIN_NONZERO = 30, 5  # continuous scores: below either, the CI is the (valid) sequence instead


@dataclass(frozen=True)
class SliceFilter:
    """A named slice pooling the samples whose metadata satisfies ``predicate`` (of ``task``, or every task)."""

    name: str
    predicate: Predicate
    task: str | None = None


@dataclass(frozen=True)
class _Item:
    """One sample id of one task: its metadata and the record of each side (None when missing)."""

    metadata: Mapping[str, Any]
    base: SampleResult | None
    var: SampleResult | None


def compare(baseline: Sequence[SampleResult], variant: Sequence[SampleResult],
            kld: Sequence[KLDResult] = (), slice_keys: Sequence[str] | None = None,
            binary: bool | Set[str] | None = None, *, filters: Sequence[SliceFilter] = (),
            variant_name: str | None = None, max_levels: int = 20, n_boot: int = 2000,
            seed: int = 0) -> list[PairedStats]:
    """Paired statistics of ``variant`` against ``baseline`` for every (task, slice).

    ``binary``: True/False for every task, a set of binary task names, or None to infer per task
    (binary when every score is 0 or 1). Binary tasks get flips (right: ``store.records.is_right``) and McNemar.
    ``kld`` holds this variant's teacher-forced KLD records; aggregates pool all answer tokens of a slice.
    """
    name = variant_name or _variant_name(variant)
    kld_idx = _index_kld(kld, name)
    base_idx, var_idx = _index(baseline, "baseline"), _index(variant, name)
    out: list[PairedStats] = []
    for task in list(base_idx) + [t for t in var_idx if t not in base_idx]:
        items = _pair(task, base_idx.get(task, {}), var_idx.get(task, {}), name)
        is_binary = _is_binary(task, items, binary)
        for slice_name, members in _slices(task, items, slice_keys, filters, max_levels):
            out.append(_stats(name, task, slice_name, members, is_binary, kld_idx.get(task, {}),
                              n_boot, seed))
    return out


def noise_floor(a: Sequence[SampleResult], b: Sequence[SampleResult], **kwargs: Any) -> list[PairedStats]:
    """Two runs of the baseline (e.g. different batch sizes) compared as if ``b`` were a variant."""
    kwargs.setdefault("variant_name", NOISE_FLOOR)
    return compare(a, b, **kwargs)


def _variant_name(records: Sequence[SampleResult]) -> str:
    names = sorted({r.variant for r in records})
    if len(names) > 1:
        raise EvalsuiteError(f"variant records name several variants ({', '.join(names)}); compare one at a time")
    return names[0] if names else "variant"


def _index(records: Sequence[SampleResult], side: str) -> dict[str, dict[str, SampleResult]]:
    idx: dict[str, dict[str, SampleResult]] = {}
    for r in records:
        task = idx.setdefault(r.task, {})
        if r.sample_id in task:
            raise EvalsuiteError(f"{side}: sample {r.sample_id!r} of task {r.task!r} appears twice")
        task[r.sample_id] = r
    return idx


def _index_kld(kld: Sequence[KLDResult], name: str) -> dict[str, dict[str, KLDResult]]:
    idx: dict[str, dict[str, KLDResult]] = {}
    for k in kld:
        if k.variant != name:
            raise EvalsuiteError(f"KLD record of variant {k.variant!r} passed when comparing {name!r}")
        idx.setdefault(k.task, {})[k.sample_id] = k
    return idx


def _pair(task: str, base: Mapping[str, SampleResult], var: Mapping[str, SampleResult],
          name: str) -> list[_Item]:
    """Items in baseline order then variant-only ids; refuses changed samples."""
    items = []
    for sid in list(base) + [s for s in var if s not in base]:
        b, v = base.get(sid), var.get(sid)
        if b is not None and v is not None:
            if b.task_version != v.task_version:
                raise EvalsuiteError(f"task {task!r}: version {b.task_version!r} in the baseline but "
                                     f"{v.task_version!r} in {name}; rerun the baseline")
            if b.prompt_hash != v.prompt_hash:
                raise EvalsuiteError(f"task {task!r} sample {sid!r}: prompt_hash {b.prompt_hash} in the baseline "
                                     f"but {v.prompt_hash} in {name}; the samples changed, rerun the baseline")
        items.append(_Item((b or v).metadata, b, v))  # type: ignore[union-attr]
    return items


def _is_binary(task: str, items: Sequence[_Item], binary: bool | Set[str] | None) -> bool:
    if isinstance(binary, bool):
        return binary
    if binary is not None:
        return task in binary
    scores = [r.score for it in items for r in (it.base, it.var) if r is not None]
    return bool(scores) and all(s in (0, 1) for s in scores)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def _level_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value))
    return (1, str(value))


def _slices(task: str, items: Sequence[_Item], slice_keys: Sequence[str] | None,
            filters: Sequence[SliceFilter], max_levels: int) -> list[tuple[str, list[_Item]]]:
    """``[(slice name, member items)]``: all, key=value levels, then filters; empty slices are omitted."""
    if not items:
        return []
    out: list[tuple[str, list[_Item]]] = [(ALL, list(items))]
    keys = slice_keys if slice_keys is not None else sorted({k for it in items for k, v in it.metadata.items()
                                                             if _is_scalar(v)})
    for key in keys:
        levels = sorted({it.metadata[key] for it in items if _is_scalar(it.metadata.get(key))}, key=_level_key)
        if slice_keys is None and len(levels) > max_levels:
            continue
        for level in levels:
            out.append((f"{key}={level}", [it for it in items if it.metadata.get(key) == level]))
    seen = {n for n, _ in out}
    for f in filters:
        if (f.task is None or f.task == task) and f.name not in seen:
            members = [it for it in items if f.predicate(it.metadata)]
            if members:
                out.append((f.name, members))
                seen.add(f.name)
    return out


def _intervals(base: np.ndarray, var: np.ndarray, is_binary: bool, n_boot: int,
               seed: int) -> tuple[float, float, float, float, float, dict[str, Any]]:
    """delta, its 95% CI, its anytime-valid bounds, and (binary) the flip fields.

    Binary: Tango's score CI from the discordant pairs. Continuous: the paired bootstrap where it is
    reliable (n >= 30 with >= 5 non-zero differences); otherwise the confidence sequence, which is valid at
    any n but wider (a bootstrap of mostly-zero differences collapses towards zero width).
    """
    diff = var - base
    n = diff.size
    delta = float(diff.mean()) if n else 0.0
    if is_binary:
        right_b, right_v = is_right(base), is_right(var)
        r2w, w2r = int(np.sum(right_b & ~right_v)), int(np.sum(~right_b & right_v))
        lo, hi = tango_ci(r2w, w2r, n)
        cs_lo, cs_hi = diff_cs(*flip_values(r2w, w2r, n))
        flips = {"flips_right_to_wrong": r2w, "flips_wrong_to_right": w2r, "mcnemar_p": mcnemar_exact(r2w, w2r)}
        return delta, lo, hi, cs_lo, cs_hi, flips
    cs_lo, cs_hi = diff_cs(*diff_values(diff)) if n else (-1.0, 1.0)
    if n >= BOOT_MIN_N and np.count_nonzero(diff) >= BOOT_MIN_NONZERO:
        delta, lo, hi = paired_bootstrap_ci(base, var, n_boot=n_boot, seed=seed)
    else:
        lo, hi = cs_lo, cs_hi
    return delta, lo, hi, cs_lo, cs_hi, {}


def _stats(name: str, task: str, slice_name: str, members: Sequence[_Item], is_binary: bool,
           kld_idx: Mapping[str, KLDResult], n_boot: int, seed: int) -> PairedStats:
    pairs = [(it.base, it.var) for it in members if it.base is not None and it.var is not None]
    base = np.array([b.score for b, _ in pairs], dtype=float)
    var = np.array([v.score for _, v in pairs], dtype=float)
    delta, lo, hi, cs_lo, cs_hi, flips = _intervals(base, var, is_binary, n_boot, seed)
    klds = [kld_idx[b.sample_id] for b, _ in pairs if b.sample_id in kld_idx]
    return PairedStats(
        variant=name, task=task, slice=slice_name, n=len(pairs),
        baseline_mean=float(base.mean()) if pairs else 0.0, variant_mean=float(var.mean()) if pairs else 0.0,
        delta=delta, ci_low=lo, ci_high=hi, binary=is_binary,
        agreement=sum(b.output == v.output for b, v in pairs) / len(pairs) if pairs else 0.0,
        n_unpaired=len(members) - len(pairs), metrics=metric_means(pairs),
        metric_diffs=metric_diffs(pairs), **flips, **kld_aggregate(klds),
        cs_low=cs_lo, cs_high=cs_hi, diff_sd=float(np.std(var - base)) if pairs else 0.0,
        n_informative=informative(base, var, is_binary), diff_counts=_diff_counts(var - base),
        score_counts=_value_counts(var), kld_samples=tuple(sorted(k.mean for k in klds if k.token_kld)))


def informative(base: np.ndarray, var: np.ndarray, is_binary: bool) -> int:
    """Pairs with at least one side right (binary: ``is_right``; continuous: score > 0)."""
    if is_binary:
        return int(np.sum(is_right(base) | is_right(var)))
    return int(np.sum((base > 0) | (var > 0)))


def _diff_counts(diff: np.ndarray) -> tuple[tuple[float, int], ...]:
    return _value_counts(np.clip(diff, -1.0, 1.0))


def _value_counts(x: np.ndarray) -> tuple[tuple[float, int], ...]:
    """The distinct values of ``x`` (rounded to 12 decimals) with their counts."""
    values, counts = np.unique(np.round(x, 12), return_counts=True)
    return tuple((float(v), int(c)) for v, c in zip(values, counts))


def _metric_arrays(pairs: Sequence[tuple[SampleResult, SampleResult]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per numeric secondary metric (bools count as 0/1): its (baseline, variant) values over the pairs where both
    sides report it. Strings and None are left out."""
    names = sorted({k for b, v in pairs for k in (*b.metrics, *v.metrics)})
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in names:
        both = [(b.metrics.get(name), v.metrics.get(name)) for b, v in pairs]
        both = [(float(x), float(y)) for x, y in both if _numeric(x) and _numeric(y)]
        if both:
            out[name] = np.array([x for x, _ in both]), np.array([y for _, y in both])
    return out


def _unit(xs: np.ndarray, ys: np.ndarray) -> bool:
    """Whether every value lies in [0, 1] (rates, fractions, flags): what the sequences can bound."""
    return bool(min(xs.min(), ys.min()) >= 0.0 and max(xs.max(), ys.max()) <= 1.0)


def metric_means(pairs: Sequence[tuple[SampleResult, SampleResult]]) -> dict[str, dict[str, float]]:
    """Per numeric secondary metric (bools count as 0/1): its baseline and variant means over the pairs where
    both sides report it, and their difference. Strings and None are not averaged. Metrics whose values all
    lie in [0, 1] (rates, fractions, flags) also get anytime-valid bounds on the difference (``cs_low`` /
    ``cs_high``, as the score's), so the gate can threshold them (``metrics:`` in a policy)."""
    out: dict[str, dict[str, float]] = {}
    for name, (xs, ys) in _metric_arrays(pairs).items():
        row = {"baseline": float(xs.mean()), "variant": float(ys.mean()), "delta": float(ys.mean() - xs.mean()),
               "n": float(len(xs))}
        if _unit(xs, ys):
            row["cs_low"], row["cs_high"] = diff_cs(*diff_values(ys - xs))
        out[name] = row
    return out


def metric_diffs(pairs: Sequence[tuple[SampleResult, SampleResult]]) -> dict[str, tuple[tuple[float, int], ...]]:
    """The distinct paired differences of each [0, 1] metric with their counts (what the gate's sequences bet on
    at the level a policy sets)."""
    return {name: _diff_counts(ys - xs) for name, (xs, ys) in _metric_arrays(pairs).items() if _unit(xs, ys)}


def paired_values(st: PairedStats, metric: str | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The paired differences of a row (or of one of its [0, 1] ``metric``s) as the sequences see them: distinct
    y = (1 + d) / 2 and their counts; None on a row built by hand without them."""
    if metric is None and st.binary:
        return flip_values(st.flips_right_to_wrong, st.flips_wrong_to_right, st.n)
    counts = st.diff_counts if metric is None else st.metric_diffs.get(metric, ())
    if not counts:
        return None
    return (1.0 + np.array([d for d, _ in counts])) / 2.0, np.array([c for _, c in counts], dtype=float)


def _numeric(x: Any) -> bool:
    return isinstance(x, (int, float, bool)) and not (isinstance(x, float) and x != x)


def score_values(st: PairedStats) -> tuple[np.ndarray, np.ndarray] | None:
    """The variant's scores of a row as the sequences see them: distinct values in [0, 1] and their counts (a
    binary row built by hand: its right / wrong counts from ``variant_mean``); None without them, or when a score
    lies outside [0, 1] (what a bounded mean's sequence needs)."""
    if st.score_counts:
        values = np.array([v for v, _ in st.score_counts])
        if values.min() < 0.0 or values.max() > 1.0:
            return None
        return values, np.array([c for _, c in st.score_counts], dtype=float)
    if st.binary and st.n:
        right = round(st.variant_mean * st.n)
        return np.array([0.0, 1.0]), np.array([st.n - right, right], dtype=float)
    return None
