"""Paired statistics: bootstrap CI coverage, exact McNemar, Wilson, pairing, slices, KLD aggregates."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.store.records import RIGHT_AT, KLDResult, SampleResult, is_right
from evalsuite.stats.slices import NOISE_FLOOR, SliceFilter, compare, noise_floor
from evalsuite.stats.paired import kld_aggregate, mcnemar_exact, paired_bootstrap_ci, wilson_ci


def rec(variant: str, sid: str, score: float, task: str = "t", output: str | None = None,
        phash: str | None = None, **meta) -> SampleResult:
    return SampleResult(variant=variant, task=task, task_version="1", sample_id=sid,
                        prompt_hash=phash or f"h-{task}-{sid}", output=output if output is not None else f"{score}",
                        score=score, metadata=meta)


def paired_binary(rng: np.random.Generator, n: int, p_base: float, r2w: float, w2r: float):
    """Baseline right with p_base; a right answer turns wrong with r2w/p_base, a wrong one right likewise."""
    base = rng.random(n) < p_base
    u = rng.random(n)
    var = np.where(base, u >= r2w / p_base, u < w2r / (1 - p_base))
    return base.astype(float), var.astype(float)


# --- bootstrap -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_bootstrap_ci_covers_true_delta_about_95_percent(kind: str) -> None:
    rng = np.random.default_rng(123)
    covered, true_delta = 0, -0.05
    for i in range(200):
        if kind == "binary":  # P(right) 0.6 -> 0.55: 10% right->wrong, 5% wrong->right
            base, var = paired_binary(rng, 100, 0.6, 0.10, 0.05)
        else:  # correlated scores in [0, 1]
            base = rng.beta(2, 2, 100)
            var = base + true_delta + rng.normal(0, 0.1, 100)
        _, lo, hi = paired_bootstrap_ci(base, var, n_boot=1000, seed=i)
        covered += lo <= true_delta <= hi
    assert 0.88 <= covered / 200 <= 0.99, covered


def test_bootstrap_is_paired_narrower_than_unpaired_spread() -> None:
    rng = np.random.default_rng(0)
    base = rng.random(200)
    var = base - 0.02  # every pair moves by the same amount: no variability in the differences
    var[0] -= 0.01
    delta, lo, hi = paired_bootstrap_ci(base, var)
    assert delta == pytest.approx(-0.02 - 0.01 / 200)
    assert hi - lo < 0.001  # an unpaired bootstrap would give a width of ~0.1 here


def test_bootstrap_reproducible_and_seed_dependent() -> None:
    rng = np.random.default_rng(1)
    base, var = rng.random(50), rng.random(50)  # continuous: quantiles do not sit on a lattice
    assert paired_bootstrap_ci(base, var, seed=7) == paired_bootstrap_ci(base, var, seed=7)
    assert paired_bootstrap_ci(base, var, seed=7) != paired_bootstrap_ci(base, var, seed=8)


def test_bootstrap_edge_cases() -> None:
    assert paired_bootstrap_ci(np.array([]), np.array([])) == (0.0, -1.0, 1.0)
    assert paired_bootstrap_ci(np.array([1.0]), np.array([0.0])) == (-1.0, -1.0, 1.0)
    same = np.array([0.0, 1.0, 1.0, 0.0])
    assert paired_bootstrap_ci(same, same) == (0.0, 0.0, 0.0)
    assert paired_bootstrap_ci(same, same + 0.25) == (0.25, 0.25, 0.25)
    assert paired_bootstrap_ci(np.array([1.0, 1.0]), np.array([0.0, 1.0]))[1:] == (-1.0, 0.0)  # clipped
    with pytest.raises(ValueError):
        paired_bootstrap_ci(np.zeros(3), np.zeros(4))


def test_small_sample_expansion_widens_the_percentile_interval() -> None:
    rng = np.random.default_rng(3)
    base, var = rng.random(30), rng.random(30)
    delta, lo, hi = paired_bootstrap_ci(base, var, seed=1)
    means = (var - base)[np.random.default_rng(1).integers(0, 30, (2000, 30))].mean(axis=1)
    plo, phi = np.quantile(means, [0.025, 0.975])  # the plain percentile interval, same resamples
    assert (delta - lo) / (delta - plo) == pytest.approx(1.061, abs=0.002)
    assert (hi - delta) / (phi - delta) == pytest.approx(1.061, abs=0.002)


# --- McNemar / Wilson ------------------------------------------------------------------------------------

def _mcnemar_by_hand(b: int, c: int) -> float:
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n)


def test_mcnemar_known_values() -> None:
    assert mcnemar_exact(10, 2) == pytest.approx(158 / 4096)  # 0.0386
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)  # 0.03125
    for b, c in [(1, 7), (3, 9), (12, 30), (0, 5), (25, 24)]:
        assert mcnemar_exact(b, c) == pytest.approx(_mcnemar_by_hand(b, c))
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_wilson_matches_formula() -> None:
    z = 1.959963984540054
    for k, n in [(0, 10), (3, 30), (12, 12), (50, 200)]:
        p = k / n
        mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        lo, hi = wilson_ci(k, n)
        assert lo == pytest.approx(max(0.0, (mid - half) / (1 + z * z / n)), abs=1e-9)
        assert hi == pytest.approx(min(1.0, (mid + half) / (1 + z * z / n)), abs=1e-9)
    assert wilson_ci(0, 0) == (0.0, 1.0)


# --- compare ---------------------------------------------------------------------------------------------

def _run(variant: str, scores: list[float], **kw) -> list[SampleResult]:
    return [rec(variant, f"s{i}", s, context_len=[512, 2048][i % 2], uid=f"u{i}", **kw) for i, s in enumerate(scores)]


def test_baseline_vs_itself_is_exactly_zero() -> None:
    base = _run("bf16", [1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0] * 3)
    kld = [KLDResult("bf16", "t", r.sample_id, (0.0, 0.0, 0.0), 3, 3) for r in base]
    stats = compare(base, base, kld)
    assert [s.slice for s in stats] == ["all", "context_len=512", "context_len=2048"]  # uid: too many levels
    for s in stats:  # no flip observed, yet the intervals keep a width that shrinks with n
        assert s.delta == 0.0 and s.ci_low == pytest.approx(-s.ci_high) and s.ci_low < 0
        assert s.cs_low <= s.ci_low and s.cs_high >= s.ci_high
        assert s.flips_right_to_wrong == s.flips_wrong_to_right == 0 and s.mcnemar_p == 1.0
        assert s.agreement == 1.0 and s.kld_mean == 0.0 and s.kld_max == 0.0 and s.top1_agreement == 1.0
    assert stats[0].n == 36 and stats[1].n == 18 and stats[0].binary
    assert stats[0].ci_high < stats[1].ci_high


def test_flips_mcnemar_and_agreement() -> None:
    base = _run("bf16", [1] * 12 + [0] * 8)
    scores = [0] * 10 + [1] * 2 + [1] * 2 + [0] * 6  # 10 right->wrong, 2 wrong->right
    var = [rec("w4", r.sample_id, s, output=r.output if s == r.score else "changed", **r.metadata)
           for r, s in zip(base, scores)]
    s = compare(base, var)[0]
    assert (s.flips_right_to_wrong, s.flips_wrong_to_right) == (10, 2)
    assert s.mcnemar_p == pytest.approx(158 / 4096)
    assert s.delta == pytest.approx(-8 / 20) and s.ci_high < 0
    assert s.agreement == pytest.approx(8 / 20) and s.flip_rate == pytest.approx(12 / 20)
    assert s.variant == "w4"


def test_non_binary_scores_have_no_flips() -> None:
    base = _run("bf16", [0.5, 0.25, 1.0, 0.75])
    var = _run("x", [0.25, 0.25, 1.0, 0.5])
    s = compare(base, var)[0]
    assert not s.binary and s.mcnemar_p is None and s.flips_right_to_wrong == 0
    assert s.delta == pytest.approx(-0.125)
    assert compare(base, var, binary=True)[0].flips_right_to_wrong == 1  # 0.5 -> 0.25 crosses 0.5
    assert compare(base, var, binary={"other"})[0].binary is False


def test_changed_samples_are_refused() -> None:
    base = _run("bf16", [1, 0, 1])
    var = _run("w4", [1, 0, 1])
    var[1] = rec("w4", "s1", 0, phash="different", context_len=2048)
    with pytest.raises(EvalsuiteError, match="prompt_hash"):
        compare(base, var)
    with pytest.raises(EvalsuiteError, match="twice"):
        compare(base, base + base[:1])
    with pytest.raises(EvalsuiteError, match="several variants"):
        compare(base, _run("a", [1]) + [rec("b", "s9", 1)])


def test_unpaired_samples_are_excluded_and_counted() -> None:
    base = _run("bf16", [1, 1, 0, 1])
    var = _run("w4", [1, 1, 0, 1])[:3] + [rec("w4", "extra", 0, context_len=512)]
    stats = {s.slice: s for s in compare(base, var)}
    assert stats["all"].n == 3 and stats["all"].n_unpaired == 2
    assert stats["context_len=2048"].n == 1 and stats["context_len=2048"].n_unpaired == 1


def test_slice_keys_and_filters_pool_samples() -> None:
    ctx = [512, 1024, 2048, 4096]
    base = [rec("bf16", f"s{i}", 1, context_len=ctx[i % 4], depth=0.5) for i in range(16)]
    var = [rec("kv2", f"s{i}", 0 if ctx[i % 4] >= 2048 else 1, context_len=ctx[i % 4], depth=0.5)
           for i in range(16)]
    long = SliceFilter("context_len>=2048", lambda m: m.get("context_len", 0) >= 2048, task="t")
    other = SliceFilter("never", lambda m: True, task="other-task")
    stats = {s.slice: s for s in compare(base, var, slice_keys=["context_len"], filters=[long, other])}
    assert set(stats) == {"all", "context_len=512", "context_len=1024", "context_len=2048",
                          "context_len=4096", "context_len>=2048"}
    assert stats["context_len>=2048"].n == 8 and stats["context_len>=2048"].delta == -1.0
    assert stats["context_len=1024"].delta == 0.0 and stats["all"].delta == -0.5


def test_kld_pools_tokens_not_sample_means() -> None:
    recs = [KLDResult("w4", "t", "a", (0.0,) * 99, 99, 99), KLDResult("w4", "t", "b", (10.0,), 0, 1)]
    agg = kld_aggregate(recs)
    assert agg["kld_mean"] == pytest.approx(0.1)  # mean of sample means would be 5.0
    assert agg["kld_max"] == 10.0 and agg["top1_agreement"] == pytest.approx(0.99)
    assert 0.0 < agg["kld_p99"] <= 10.0
    assert kld_aggregate([])["kld_mean"] is None
    base = [rec("bf16", "a", 1), rec("bf16", "b", 1)]
    var = [rec("w4", "a", 1), rec("w4", "b", 1)]
    assert compare(base, var, recs)[0].kld_mean == pytest.approx(0.1)
    with pytest.raises(EvalsuiteError, match="KLD record"):
        compare(base, var, [KLDResult("w8", "t", "a", (0.0,), 1, 1)])


def test_noise_floor_names_the_rerun() -> None:
    a = _run("bf16", [1, 0, 1, 1])
    b = [rec("bf16", r.sample_id, r.score, **r.metadata) for r in a]
    stats = noise_floor(a, b)
    assert {s.variant for s in stats} == {NOISE_FLOOR} and stats[0].flip_rate == 0.0


def test_one_definition_of_right() -> None:
    assert RIGHT_AT == 0.5 and is_right(0.5) is True and is_right(0.49) is False
    assert is_right(np.array([0.0, 0.5, 1.0])).tolist() == [False, True, True]


def test_rows_carry_what_the_mean_checks_bet_on() -> None:
    """Per-sample KLD (each sample's mean over its tokens, a sample without answer tokens left out) and the variant's
    distinct scores with their counts: what gate.means' max_kld and min_score sequences are built from."""
    recs = [KLDResult("w4", "t", "a", (0.0,) * 99, 99, 99), KLDResult("w4", "t", "b", (10.0, 2.0), 0, 2),
            KLDResult("w4", "t", "c", (), 0, 0)]
    base = [rec("bf16", s, 1) for s in "abc"]
    var = [rec("w4", "a", 1), rec("w4", "b", 0), rec("w4", "c", 1)]
    (row,) = compare(base, var, recs)
    assert row.kld_samples == (0.0, 6.0) and row.score_counts == ((0.0, 1), (1.0, 2))
    assert row.kld_mean == pytest.approx(12 / 101)  # the reported mean still pools tokens


def _bisect(f, a: float, b: float, tol: float = 1e-12) -> float:
    """A scalar bisection, one point at a time: what tango_ci's bounds must equal bit for bit."""
    fa = f(a)
    while b - a > tol:
        mid = (a + b) / 2
        fm = f(mid)
        if fm == 0:
            return mid
        if (fm > 0) == (fa > 0):
            a, fa = mid, fm
        else:
            b = mid
    return (a + b) / 2


@pytest.mark.parametrize("confidence", [0.95, 0.995])
def test_tangos_bounds_are_exactly_the_roots_a_scalar_bisection_finds(confidence):
    from scipy.special import ndtri

    from evalsuite.stats.paired import tango_ci, tango_z

    z, eps = float(ndtri(0.5 + confidence / 2)), 1e-12
    for n in (1, 2, 7, 40, 241):
        for r2w, w2r in {(0, 0), (0, n), (n, 0), (n // 3, n // 5), (1, 0), (n // 2, n - n // 2)}:
            est = (w2r - r2w) / n
            f = lambda d, t: float(tango_z(r2w, w2r, n, d)) - t  # noqa: E731
            lo = -1.0 if f(-1 + eps, z) <= 0 else _bisect(lambda d: f(d, z), -1 + eps, est)
            hi = 1.0 if f(1 - eps, -z) >= 0 else _bisect(lambda d: f(d, -z), est, 1 - eps)
            assert tango_ci(r2w, w2r, n, confidence) == (lo, hi), (r2w, w2r, n)
