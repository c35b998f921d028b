"""Gate verdicts: PairedStats + Policy -> one CheckResult per check, a verdict per variant and overall.

Interval checks are three-way, decided on anytime-valid confidence sequences (evalsuite.stats.sequential:
valid simultaneously at every n), so a run may be re-gated after every round of samples and stopped as soon as
a check is decided without inflating its error rates: PASS when the sequence lies within the tolerance, FAIL
when it lies entirely beyond it, INCONCLUSIVE when it straddles the limit. The PASS side's bound is at the
policy's alpha; the FAIL side's at the check's share of it (evalsuite.gate.family: a variant within every
tolerance is FAILed with probability <= alpha however many checks it has; ``false_fail: per_check``: alpha).
- max_drop: the sequence of delta (from the row's counts, as PairedStats.cs_low/cs_high) against -max_drop.
- min_recovery: ratio variant/baseline with bounds 1 + bounds(delta)/baseline_mean (baseline mean taken as fixed).
- max_flip_rate (binary tasks): the sequence of the flip proportion against max_flip_rate.
- max_kld, min_score (evalsuite.gate.means): the sequence of the capped per-sample mean KLD (skipped where no KLD
  was measured) and of the variant's mean score, in the family like the others; both off in the shipped policy
  (KLD is a screen there: reported and ranked, never a FAIL).
- metric:NAME:max_drop / max_rise: a task's secondary metric (values in [0, 1]) on the sequence of its paired
  difference, like max_drop (e.g. JSON field_accuracy, a safety task's refusal flag).
- min_samples: a slice with fewer paired samples gets only an INCONCLUSIVE check; a policy task (unless
  ``optional``) or a selector slice of a task that ran, without samples, gets an INCONCLUSIVE "no samples" check.
An INCONCLUSIVE interval check carries ``more_needed``: the observed pairs replicated until the sequence
would decide (sequential.more_needed, each side at its level), an estimate; None where more samples cannot help.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence, Set

import numpy as np

from evalsuite.gate.check import WORDS, CheckLevels, at_least, at_most, label, make_check
from evalsuite.gate.family import Family, family
from evalsuite.gate.means import max_kld, min_score
from evalsuite.gate.policy import Policy, Thresholds
from evalsuite.gate.pooled import CHECK, pooled_check
from evalsuite.store.records import KLDResult, SampleResult
from evalsuite.stats.slices import SliceFilter, compare, paired_values
from evalsuite.stats import sequential as seq
from evalsuite.gate.types import POOLED, CheckResult, GateResult, Verdict, worst
from evalsuite.stats.types import ALL, PairedStats

def _bounds(st: PairedStats, lv: CheckLevels, metric: str | None = None,
            fail_high: bool = True) -> tuple[float, float, str]:
    """The decision interval of delta (or of a ``metric``'s difference): the confidence sequence, its PASS side at
    the policy's alpha and its FAIL side (the upper bound when ``fail_high``) at the check's level, from the row's
    counts (the bounds depend on the counts only). Rows built by hand without counts keep their stored sequence
    (both sides at 95%), or their CI when they have none."""
    vw = paired_values(st, metric)
    if vw is not None and (metric is not None or st.cs_low is not None):
        lo, hi = seq.diff_cs(*vw, lv.low_high(fail_high))
        return lo, hi, "CS"
    if metric is not None:
        return st.metrics[metric]["cs_low"], st.metrics[metric]["cs_high"], "CS"
    if st.cs_low is not None and st.cs_high is not None:
        return st.cs_low, st.cs_high, "CS"
    return st.ci_low, st.ci_high, "CI"


def _more_delta(st: PairedStats, limit: float, lv: CheckLevels) -> int:
    """Extrapolated pairs needed to decide "delta vs limit". Binary: the observed right->wrong / unchanged /
    wrong->right counts; continuous: two equally likely differences delta -/+ diff_sd (same mean and spread)."""
    if st.binary:
        values, weights = seq.flip_values(st.flips_right_to_wrong, st.flips_wrong_to_right, st.n)
    else:
        d = np.clip([st.delta - st.diff_sd, st.delta + st.diff_sd], -1.0, 1.0)
        values, weights = (1.0 + d) / 2.0, np.array([st.n / 2, st.n / 2])
    return seq.more_needed(values, weights, (1.0 + limit) / 2.0, lv.low_high(True))


def _max_drop(st: PairedStats, t: float, lv: CheckLevels) -> CheckResult:
    lo, hi, kind = _bounds(st, lv)
    v = at_least(lo, hi, -t)
    more = _more_delta(st, -t, lv) if v == "INCONCLUSIVE" else None
    return make_check(st, "max_drop", t, st.delta, v, f"Δ={st.delta:+.3f} {kind} [{lo:+.3f},{hi:+.3f}] "
                      f"{WORDS[v]} max_drop {t:g}{lv.note('upper')}", (lo, hi), more, lv.fail)


def _min_recovery(st: PairedStats, r: float, lv: CheckLevels) -> CheckResult:
    if st.baseline_mean <= 0:
        return make_check(st, "min_recovery", r, 0.0, "INCONCLUSIVE",
                          "baseline mean is 0, recovery undefined", level=lv.fail)
    ratio = st.variant_mean / st.baseline_mean
    dlo, dhi, kind = _bounds(st, lv)
    lo, hi = 1 + dlo / st.baseline_mean, 1 + dhi / st.baseline_mean
    v = at_least(lo, hi, r)
    more = _more_delta(st, (r - 1) * st.baseline_mean, lv) if v == "INCONCLUSIVE" else None
    word = {"PASS": "meets", "FAIL": "below", "INCONCLUSIVE": "straddles"}[v]
    return make_check(st, "min_recovery", r, ratio, v, f"recovery {ratio:.3f} {kind} [{lo:.3f},{hi:.3f}] {word} "
                      f"min_recovery {r:g}{lv.note('upper')}", (lo, hi), more, lv.fail)


def _max_flip_rate(st: PairedStats, f: float, lv: CheckLevels) -> CheckResult:
    k = st.flips_right_to_wrong + st.flips_wrong_to_right
    levels = lv.low_high(False)
    lo, hi = seq.proportion_cs(k, st.n, levels)
    v = at_most(lo, hi, f)
    more = seq.more_needed(np.array([0.0, 1.0]), np.array([st.n - k, k]), f, levels) if v == "INCONCLUSIVE" else None
    return make_check(st, "max_flip_rate", f, st.flip_rate, v, f"flip rate {st.flip_rate:.3f} "
                      f"({st.flips_right_to_wrong}↓ {st.flips_wrong_to_right}↑, CS [{lo:.3f},{hi:.3f}]) {WORDS[v]} "
                      f"max_flip_rate {f:g}{lv.note('lower')}", (lo, hi), more, lv.fail)


def _metric(st: PairedStats, name: str, kind: str, t: float, lv: CheckLevels) -> CheckResult:
    """A secondary metric's mean must not fall (``max_drop``) or rise (``max_rise``) by more than ``t``,
    decided on the anytime-valid bounds of its paired difference, as the score's ``max_drop`` is."""
    check = f"metric:{name}:{kind}"
    m = st.metrics.get(name)
    if m is None or "cs_low" not in m:
        why = "not reported" if m is None else "has values outside [0, 1] (only rates and fractions are gated)"
        return make_check(st, check, t, 0.0, "INCONCLUSIVE", f"metric {name} {why}", level=lv.fail)
    drop = kind == "max_drop"
    lo, hi, _ = _bounds(st, lv, name, fail_high=drop)
    d = m["delta"]
    v = at_least(lo, hi, -t) if drop else at_most(lo, hi, t)
    return make_check(st, check, t, d, v, f"{name} {m['baseline']:.3f}→{m['variant']:.3f} (Δ={d:+.3f} CS "
                      f"[{lo:+.3f},{hi:+.3f}]) {WORDS[v]} {kind} {t:g}{lv.note('upper' if drop else 'lower')}",
                      (lo, hi), level=lv.fail)


def slice_checks(st: PairedStats, th: Thresholds, fam: Family | None = None) -> list[CheckResult]:
    """Every enabled check of one (variant, task, slice) row; ``fam``: the variant's family (the level each check
    FAILs at; None: every check at the shipped alpha, per check)."""
    if st.n < max(th.min_samples, 1):
        what = "no paired samples" if st.n == 0 else f"n={st.n} < min_samples {th.min_samples}"
        return [make_check(st, "min_samples", th.min_samples, st.n, "INCONCLUSIVE", what, None,
                           max(th.min_samples - st.n, 1))]

    def lv(check: str) -> CheckLevels:
        return CheckLevels(fam.alpha, fam.level(st.task, st.slice, check)) if fam else CheckLevels()

    out = []
    if th.max_drop is not None:
        out.append(_max_drop(st, th.max_drop, lv("max_drop")))
    if th.min_recovery is not None:
        out.append(_min_recovery(st, th.min_recovery, lv("min_recovery")))
    if th.max_flip_rate is not None and st.binary:
        out.append(_max_flip_rate(st, th.max_flip_rate, lv("max_flip_rate")))
    if th.max_kld is not None and st.kld_mean is not None:
        out.append(max_kld(st, th.max_kld, lv("max_kld")))
    if th.min_score is not None:
        out.append(min_score(st, th.min_score, lv("min_score")))
    out += [_metric(st, name, kind, t, lv(f"metric:{name}:{kind}")) for (name, kind), t in th.metrics
            if t is not None]
    return out


def _missing(variant: str, task: str, slice_name: str, th: Thresholds, known: Sequence[str],
             expected: Sequence[str] = ()) -> CheckResult:
    """A task (or selector slice) without paired samples. A task the run was asked for (``expected``) can still
    get them, so it carries ``more_needed``; a task the run does not have gets a did-you-mean hint instead."""
    if task in expected and slice_name == ALL:
        return CheckResult(variant, task, slice_name, "min_samples", th.min_samples, 0, "INCONCLUSIVE",
                           f"{label(task, slice_name)}: no paired samples yet (n=0)", None, 0,
                           max(th.min_samples, 1))
    close = difflib.get_close_matches(task, known, n=1) if task not in known else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return CheckResult(variant, task, slice_name, "min_samples", th.min_samples, 0, "INCONCLUSIVE",
                       f"{label(task, slice_name)}: no samples{hint}")


def variant_tasks(variant: str, stats: Sequence[PairedStats], policy: Policy,
                  expected: Sequence[str] = ()) -> list[str]:
    """The tasks a variant is gated on: those with a row in ``stats``, the run's ``expected`` ones and the policy's
    required ones. Its family (``gate.family``) is fixed by this list and the policy, not by which tasks have
    samples yet."""
    tasks = list(dict.fromkeys(s.task for s in stats if s.variant == variant and s.slice == ALL))
    tasks += [t for t in expected if t not in tasks]
    return tasks + [t for t, tp in policy.tasks.items() if t not in tasks and not tp.optional]


def _variant_checks(variant: str, idx: Mapping[tuple[str, str, str], PairedStats], policy: Policy, fam: Family,
                    tasks: Sequence[str], known: Sequence[str], expected: Sequence[str] = ()) -> list[CheckResult]:
    checks: list[CheckResult] = []
    pools: list[tuple[PairedStats, float]] = []
    ready = 0  # pooled tasks with at least min_samples pairs
    for task in tasks:
        targets = [(ALL, policy.thresholds(task))] + [(r.name, policy.thresholds(task, r))
                                                      for r in policy.slices(task)]
        for slice_name, th in targets:
            st = idx.get((variant, task, slice_name))
            checks += slice_checks(st, th, fam) if st else [_missing(variant, task, slice_name, th, known, expected)]
            if st is not None and slice_name == ALL and th.max_drop is not None and st.n > 0:
                pools.append((st, th.max_drop))
                ready += st.n >= max(th.min_samples, 1)
    passed = all(c.verdict == "PASS" for c in checks if c.check == "max_drop" and c.slice == ALL)
    # The pooled bet runs over every pair of every task from its first one (a product over all pairs: a
    # supermartingale however the tasks were drawn); it is looked at once two tasks have min_samples pairs.
    level = fam.level(POOLED, ALL, CHECK) if len(pools) > 1 else fam.alpha  # under two tasks: no pooled check
    pooled = pooled_check(variant, pools, passed, level, fam.alpha) if ready > 1 else None
    return checks + ([pooled] if pooled is not None else [])


def evaluate_gate(stats: Sequence[PairedStats], policy: Policy, variants: Sequence[str] | None = None,
                  expected_tasks: Sequence[str] = ()) -> GateResult:
    """Gate every variant (those in ``stats``, or the given list) against ``policy``. ``expected_tasks``: the
    tasks the run was asked for; one without paired samples for a variant is INCONCLUSIVE, never left out, and
    holds its share of the variant's alpha (``gate.family``)."""
    idx = {(s.variant, s.task, s.slice): s for s in stats}
    names = list(variants) if variants is not None else list(dict.fromkeys(s.variant for s in stats))
    known = list(dict.fromkeys([s.task for s in stats] + list(expected_tasks)))
    result = GateResult()
    for name in names:
        tasks = variant_tasks(name, stats, policy, expected_tasks)
        fam = family(policy, tasks)
        checks = _variant_checks(name, idx, policy, fam, tasks, known, expected_tasks)
        result.checks += checks
        result.variant_verdicts[name] = worst([c.verdict for c in checks])
        result.guarantee[name] = fam.describe()
    result.overall = worst(list(result.variant_verdicts.values()))
    failing = result.overall == "FAIL" or (result.overall == "INCONCLUSIVE" and policy.on_inconclusive == "fail")
    result.exit_code = 1 if failing else 0
    return result


def undecided(gate: GateResult) -> dict[str, set[str]]:
    """variant -> tasks that still have an INCONCLUSIVE check more samples could decide (more_needed set); an
    open pooled check makes every task it pools open.

    The runner calls this after each round: a variant absent from the result needs no more samples. A variant
    that already FAILs is absent too: the sequences are valid at any stopping time, so its FAIL stands.
    """
    out: dict[str, set[str]] = {}
    for c in gate.checks:
        if (c.verdict == "INCONCLUSIVE" and c.more_needed is not None
                and gate.variant_verdicts.get(c.variant) != "FAIL"):
            out.setdefault(c.variant, set()).update([t for t, _ in c.pools] if c.task == POOLED else [c.task])
    return out


def slice_filters(policy: Policy, also: Sequence[Policy] = ()) -> list[SliceFilter]:
    """One compare() filter per selector slice of ``policy`` and of ``also``'s (one per task and name)."""
    return list({(f.task, f.name): f for p in (*also, policy) for f in p.filters()}.values())


def gate_run(baseline: Sequence[SampleResult], variants: Mapping[str, Sequence[SampleResult]],
             kld: Mapping[str, Sequence[KLDResult]], policy: Policy, binary_tasks: Set[str] | None = None,
             *, slice_keys: Sequence[str] | None = None, n_boot: int = 2000, seed: int = 0,
             expected_tasks: Sequence[str] = (), also: Sequence[Policy] = ()) -> tuple[list[PairedStats], GateResult]:
    """The stats table (all, key=value and the selector slices of the policy and of ``also``'s, per variant) and
    its gate result.

    ``binary_tasks``: names of binary tasks, or None to infer from the scores.
    """
    filters = slice_filters(policy, also)
    stats: list[PairedStats] = []
    for name, records in variants.items():
        stats += compare(baseline, records, kld.get(name, ()), slice_keys, binary_tasks,
                         filters=filters, variant_name=name, n_boot=n_boot, seed=seed)
    return stats, evaluate_gate(stats, policy, list(variants), expected_tasks)
