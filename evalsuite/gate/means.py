"""Checks on the mean of one side rather than on a paired difference: ``max_kld`` and ``min_score``. Each is an
anytime-valid confidence sequence (``stats.sequential``, values in [0, 1]) with its FAIL side at its share of the
variant's family (``gate.family``) and its PASS side at the policy's alpha, like every check that can FAIL.

- ``max_kld``: per sample, the mean KLD over its answer tokens (``PairedStats.kld_samples``), capped at
  ``KLD_CAP`` × max_kld and scaled to y = min(K, cap) / cap; the limit is m = max_kld / cap. The capped mean is at
  most the true mean, so a FAIL ("capped mean > max_kld") is a valid FAIL of the true mean per sample at the check's
  level whatever the tail. The PASS side certifies the capped mean, mean of min(K, cap) <= max_kld, which a heavy
  tail above the cap can hide: that quantity is what a PASS means (docs/gate.md, "KLD: a screen by default").
- ``min_score``: the variant's mean score (``PairedStats.score_counts``), scores in [0, 1].
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evalsuite.gate.check import WORDS, CheckLevels, at_least, at_most, make_check
from evalsuite.gate.types import CheckResult
from evalsuite.stats import sequential as seq
from evalsuite.stats.slices import score_values
from evalsuite.stats.types import PairedStats

#: per-sample KLD is capped at KLD_CAP x max_kld (the simulation's sweep chose it: docs/gate.md)
KLD_CAP = 5.0
#: the KLD screen's reference level where no max_kld gates it: a card flags a variant above it (never a FAIL), and
#: ``evalsuite sensitivity --fix`` aims below it by default (the shipped max_kld before KLD became a screen)
KLD_SCREEN = 0.5


def kld_values(samples: Sequence[float], max_kld: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Per-sample KLD as the ``max_kld`` sequence sees it: the distinct y = min(K, cap) / cap with their counts, the
    limit m = max_kld / cap, and the cap (``KLD_CAP`` x max_kld; 1 under max_kld 0, where any positive KLD refutes
    a mean of 0)."""
    cap = KLD_CAP * max_kld if max_kld > 0 else 1.0
    values, counts = np.unique(np.clip(np.asarray(samples, dtype=float), 0.0, cap) / cap, return_counts=True)
    return values, counts.astype(float), max_kld / cap, cap


def max_kld(st: PairedStats, k: float, lv: CheckLevels) -> CheckResult:
    """Mean KLD must not exceed ``k``: the sequence of the capped per-sample mean, FAIL side (lower bound) at the
    check's level. A row with a pooled mean but no per-sample values (built by hand) is INCONCLUSIVE."""
    head = f"KLD {st.kld_mean or 0.0:.3f}/token (p99 {st.kld_p99 or 0.0:.3f})"
    if not st.kld_samples:
        return make_check(st, "max_kld", k, float(st.kld_mean or 0.0), "INCONCLUSIVE",
                          f"{head}: no per-sample KLD to bound", level=lv.fail)
    values, weights, m, cap = kld_values(st.kld_samples, k)
    levels = lv.low_high(False)
    lo, hi = seq.mean_cs(values, weights, levels)
    verdict = at_most(lo, hi, m)
    more = seq.more_needed(values, weights, m, levels) if verdict == "INCONCLUSIVE" else None
    observed = float(values @ weights / weights.sum()) * cap
    n = len(st.kld_samples)
    some = "" if n == st.n else f", KLD on {n} of them"
    return make_check(st, "max_kld", k, observed, verdict, f"{head}; per-sample mean capped at {cap:g}: "
                      f"{observed:.3f} CS [{lo * cap:.3f},{hi * cap:.3f}] {WORDS[verdict]} max_kld {k:g}"
                      f"{lv.note('lower')}{some}", (lo * cap, hi * cap), more, lv.fail, n)


def min_score(st: PairedStats, m: float, lv: CheckLevels) -> CheckResult:
    """The variant's mean score must be at least ``m``: its sequence, FAIL side (upper bound) at the check's
    level. A row without per-sample scores in [0, 1] is INCONCLUSIVE."""
    vw = score_values(st)
    if vw is None:
        return make_check(st, "min_score", m, st.variant_mean, "INCONCLUSIVE",
                          f"score {st.variant_mean:.3f}: no per-sample scores in [0, 1] to bound", level=lv.fail)
    levels = lv.low_high(True)
    lo, hi = seq.mean_cs(*vw, levels)
    verdict = at_least(lo, hi, m)
    more = seq.more_needed(*vw, m, levels) if verdict == "INCONCLUSIVE" else None
    word = {"PASS": "meets", "FAIL": "below", "INCONCLUSIVE": "straddles"}[verdict]
    return make_check(st, "min_score", m, st.variant_mean, verdict, f"score {st.variant_mean:.3f} CS "
                      f"[{lo:.3f},{hi:.3f}] {word} min_score {m:g}{lv.note('upper')}", (lo, hi), more, lv.fail)
