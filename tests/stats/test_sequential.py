"""Small-n intervals: Tango's score CI and the anytime-valid betting confidence sequences."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from evalsuite.stats import sequential as seq
from evalsuite.stats.paired import tango_ci


@pytest.mark.parametrize("n", [12, 30, 100])
def test_tango_never_collapses_without_flips(n: int) -> None:
    z2 = norm.ppf(0.975) ** 2
    lo, hi = tango_ci(0, 0, n)
    assert lo == pytest.approx(-z2 / (n + z2)) and hi == pytest.approx(z2 / (n + z2))


def test_tango_edges_and_direction() -> None:
    assert tango_ci(0, 0, 0) == (-1.0, 1.0)
    lo, hi = tango_ci(12, 0, 12)  # every pair right -> wrong
    assert lo == -1.0 and hi < -0.4
    lo, hi = tango_ci(10, 2, 20)
    assert lo < -0.4 < hi < 0


@pytest.mark.parametrize("n", [12, 30])
def test_tango_covers_at_small_n(n: int) -> None:
    rng = np.random.default_rng(5)
    for r2w, w2r in [(0.10, 0.05), (0.02, 0.0), (0.15, 0.05)]:
        cats = rng.choice(3, size=(400, n), p=[r2w, 1 - r2w - w2r, w2r])
        cover = [lo <= w2r - r2w <= hi for lo, hi in
                 (tango_ci(int((c == 0).sum()), int((c == 2).sum()), n) for c in cats)]
        assert np.mean(cover) >= 0.92, (n, r2w, w2r)


def test_sequence_is_valid_under_continuous_monitoring() -> None:
    """Looked at after every 5 samples up to 400, each bound misses the truth in <= 5% of runs."""
    rng = np.random.default_rng(1)
    looks = np.arange(5, 401, 5)
    for p in [(0.10, 0.80, 0.10), (0.15, 0.80, 0.05), (0.02, 0.98, 0.0)]:
        codes = rng.choice(3, size=(400, looks[-1]), p=p)
        cnt = np.stack([np.cumsum(codes == k, axis=1)[:, looks - 1] for k in range(3)], axis=-1)
        mean_y = (p[1] * 0.5 + p[2])
        v = np.array([0.0, 0.5, 1.0])
        assert seq.rejects(v, cnt, mean_y).any(axis=1).mean() <= 0.075
        assert seq.rejects(v, cnt, mean_y, upper=True).any(axis=1).mean() <= 0.075


def test_sequence_bounds_match_rejections_and_ignore_order() -> None:
    rng = np.random.default_rng(2)
    d = np.clip(rng.normal(-0.1, 0.3, 200), -1, 1)
    lo, hi = seq.diff_cs(*seq.diff_values(d))
    assert lo < d.mean() < hi
    assert (lo, hi) == seq.diff_cs(*seq.diff_values(rng.permutation(d)))
    v, w = seq.diff_values(d)
    assert seq.rejects(v, w, (1 + lo) / 2 - 1e-6) and not seq.rejects(v, w, (1 + lo) / 2 + 1e-6)
    assert seq.mean_cs(np.array([0.5]), np.array([0.0])) == (0.0, 1.0)
    assert seq.proportion_cs(0, 50)[0] == 0.0 and 0 < seq.proportion_cs(0, 50)[1] < 0.15


def test_more_needed_extrapolates_the_observed_mix() -> None:
    m = (1 - 0.05) / 2  # max_drop 0.05
    need = next(n for n in range(1, 1000) if seq.rejects(*seq.flip_values(0, 0, n), m))
    assert 60 <= need <= 100  # a copy of the baseline PASSes within 60-100 pairs
    assert seq.more_needed(*seq.flip_values(0, 0, 10), m) == need - 10  # exact for zero flips
    assert seq.more_needed(*seq.flip_values(0, 0, need), m) == 0
    assert seq.more_needed(*seq.flip_values(1, 0, 20), m) == seq.MAX_MORE  # delta -0.05 sits on the limit
    assert 0 < seq.more_needed(*seq.flip_values(3, 0, 20), m) < 200  # delta -0.15: soon FAILs


def test_each_bound_at_its_own_level() -> None:
    """(lower level, upper level): a PASS side at alpha and a FAIL side at a share of it (evalsuite.gate.family)."""
    v, w = seq.flip_values(6, 0, 40)
    lo, hi = seq.diff_cs(v, w, (0.05, 0.0025))
    assert lo == seq.diff_cs(v, w, 0.05)[0] and hi == seq.diff_cs(v, w, 0.0025)[1] > seq.diff_cs(v, w)[1]
    assert seq.proportion_cs(9, 40, (0.001, 0.05)) == (seq.proportion_cs(9, 40, 0.001)[0],
                                                       seq.proportion_cs(9, 40)[1])
    m = (1 - 0.05) / 2  # Δ = -0.15 vs max_drop 0.05: the FAIL side (upper bound) decides it
    assert seq.more_needed(v, w, m, (0.05, 0.0025)) > seq.more_needed(v, w, m) > 0
    assert seq.more_needed(v, w, m, (0.0025, 0.05)) == seq.more_needed(v, w, m)  # the other side's level: no matter
    n = 40 + seq.more_needed(v, w, m, (0.05, 0.0025))
    assert seq.decided(v, w * n / 40, m, (0.05, 0.0025)) and not seq.decided(v, w * (n - 1) / 40, m, (0.05, 0.0025))
