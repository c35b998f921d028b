"""How often does the gate FAIL / PASS / stay INCONCLUSIVE, and after how many samples, under repeated looks?

One binary task, baseline right with probability ``p_base`` (0.6). A ``churn`` fraction of samples flips,
half right->wrong and half wrong->right (no change in accuracy); a true drop adds that many extra
right->wrong flips. The *sequential design* draws rounds of ``--round`` samples up to ``--cap``, re-gates
after every round with the default checks (max_drop, max_flip_rate 0.2) and stops as soon as the variant is
decided (every check PASSes, or one FAILs). The bulk goes through the statistics functions directly
(vectorised over runs: the confidence sequences depend on the counts only); ``--check`` runs replay through
the real ``gate_run`` path and must agree. The *fixed-n design* decides once, at n chosen in advance, with
Tango's score test for max_drop and the Wilson bound for the flip rate, each one-sided at 5%. The *runner's
schedule* (``--runner first,growth,cap``; default 16, +32, +64, +128 up to 240, the rounds' geometric draws) adds
what ``Rounds`` does beyond stopping on a decision: it also stops, INCONCLUSIVE, a run none of whose open checks
can decide within what the cap leaves (by ``more_needed``). These are one check's own figures: the replay uses
``false_fail: per_check`` (every check at alpha). Several tasks per variant, every check together, under both
guarantees: ``gate_simulation_tasks.py``. Usage::

    .venv/bin/python -m benchmarks.sim.gate_simulation [--reps 1000] [--cap 1000] [--max-drop 0.05]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from evalsuite.gate.policy import parse_policy
from evalsuite.gate.verdict import gate_run
from evalsuite.store.records import SampleResult
from evalsuite.stats import sequential as seq
from evalsuite.stats.paired import tango_z


P_BASE, FLIP_LIMIT, Z95 = 0.6, 0.2, float(norm.ppf(0.95))
FLIP_V, DIFF_V = np.array([0.0, 1.0]), np.array([0.0, 0.5, 1.0])


@dataclass(frozen=True)
class Scenario:
    churn: float
    drop: float
    kind: str  # "none" (PASS is right), "boundary" (no verdict is right), "drop" (FAIL is right)
    label: str

    def probs(self) -> list[float]:
        """P(right->wrong), P(unchanged), P(wrong->right)."""
        r2w, w2r = self.churn / 2 + self.drop, self.churn / 2
        return [r2w, 1 - r2w - w2r, w2r]


def streams(sc: Scenario, reps: int, length: int, seed: int) -> np.ndarray:
    """(reps, length) outcome codes: 0 right->wrong, 1 unchanged, 2 wrong->right."""
    return np.random.default_rng(seed).choice(3, size=(reps, length), p=sc.probs()).astype(np.int8)


def counts(codes: np.ndarray, looks: np.ndarray) -> np.ndarray:
    """(reps, looks, 3) cumulative counts of each outcome at every look."""
    return np.stack([np.cumsum(codes == k, axis=1, dtype=np.int32)[:, looks - 1] for k in range(3)], axis=-1)


def sequential_checks(cnt: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """(passed, failed) of the whole default gate at every look, on the anytime-valid sequences."""
    m = (1 - t) / 2
    drop_pass, drop_fail = seq.rejects(DIFF_V, cnt, m), seq.rejects(DIFF_V, cnt, m, upper=True)
    flips = cnt[..., [1]].repeat(2, axis=-1)
    flips[..., 1] = cnt[..., 0] + cnt[..., 2]
    flip_pass = seq.rejects(FLIP_V, flips, FLIP_LIMIT, upper=True)
    flip_fail = seq.rejects(FLIP_V, flips, FLIP_LIMIT)
    return drop_pass & flip_pass, drop_fail | flip_fail


def fixed_checks(cnt: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """(passed, failed) of the fixed-n design (Tango for max_drop, Wilson for the flip rate, one-sided 5%)."""
    r2w, w2r = cnt[..., 0], cnt[..., 2]
    n = cnt.sum(axis=-1)
    z = tango_z(r2w, w2r, n, -t)
    p = (r2w + w2r) / n
    half = Z95 * np.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n))
    mid, den = p + Z95 ** 2 / (2 * n), 1 + Z95 ** 2 / n
    flip_lo, flip_hi = (mid - half) / den, (mid + half) / den
    return (z >= Z95) & (flip_hi <= FLIP_LIMIT), (z <= -Z95) | (flip_lo > FLIP_LIMIT)


def runner_looks(first: int, growth: int, cap: int) -> np.ndarray:
    """The runner's look schedule: ``first`` samples, then draws growing ``growth``-fold (16, 48, 112, 240 at 16, 2)
    up to ``cap`` (``draws.draw_size`` when every check asks for more than a round)."""
    looks, step = [first], growth * first
    while looks[-1] < cap:
        looks.append(min(cap, looks[-1] + step))
        step *= growth
    return np.array(looks)


def open_need(cnt: np.ndarray, t: float) -> np.ndarray:
    """Per run (one look's counts, (reps, 3)): samples after which the quickest undecided check would decide, as
    the runner estimates it (``sequential.more_needed`` on the observed mix; 0 when the gate is decided)."""
    m = (1 - t) / 2
    need = np.zeros(len(cnt), dtype=np.int64)
    for i, (r2w, same, w2r) in enumerate(cnt):
        n = r2w + same + w2r
        drop = seq.more_needed(DIFF_V, np.array([r2w, same, w2r], float), m)
        flip = seq.more_needed(FLIP_V, np.array([same, r2w + w2r], float), FLIP_LIMIT)
        need[i] = min([x for x in (drop, flip) if x > 0] or [0]) if n else 0
    return need


def run_runner(codes: np.ndarray, t: float, looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Rounds`` as the runner drives it: stop when decided, or INCONCLUSIVE as soon as no open check can decide
    within what the cap leaves (the out-of-reach rule); (verdict, n used) per run."""
    passed, failed = sequential_checks(counts(codes, looks), t)
    verdict, used = np.ones(len(codes), dtype=np.int8), np.full(len(codes), looks[-1])
    live = np.ones(len(codes), dtype=bool)
    for j, n in enumerate(looks):
        done = live & (passed[:, j] | failed[:, j])
        verdict[done], used[done] = np.where(failed[done, j], 2, 0), n
        live &= ~done
        if j + 1 < len(looks) and live.any():
            idx = np.nonzero(live)[0]
            cnt = counts(codes[idx], np.array([n]))[:, 0]
            out = open_need(cnt, t) > looks[-1] - n
            used[idx[out]] = n
            live[idx[out]] = False
    return verdict, used


def print_runner(t: float, reps: int, first: int, growth: int, cap: int, seed: int = 0) -> None:
    """Verdict rates and samples under the runner's own schedule (16, 48, 112, 240: draws doubling)."""
    looks = runner_looks(first, growth, cap)
    print(f"\nThe runner's schedule: looks at {', '.join(map(str, looks))}, max_drop {t:g}, out-of-reach stopping; "
          "PASS / INCONCLUSIVE / FAIL (%), samples used")
    print("| scenario | churn | PASS / INC / FAIL | mean n | stopped out of reach | without that rule: PASS / INC / "
          "FAIL, mean n |")
    print("|---|---|---|---|---|---|")
    for i, sc in enumerate(scenarios(t)):
        codes = streams(sc, reps, cap, seed + 100 + i)
        verdict, used = run_runner(codes, t, looks)
        plain, plain_n = run_sequential(*sequential_checks(counts(codes, looks), t), looks)
        p, inc, fl = pct(verdict)
        q, qi, qf = pct(plain)
        early = float(np.mean((verdict == 1) & (used < looks[-1]))) * 100
        print(f"| {sc.label} | {sc.churn:.2f} | {p:.1f} / {inc:.1f} / {fl:.1f} | {used.mean():.0f} | {early:.1f}% | "
              f"{q:.1f} / {qi:.1f} / {qf:.1f}, {plain_n.mean():.0f} |")


def run_sequential(passed: np.ndarray, failed: np.ndarray, looks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run: its verdict (0 PASS, 1 INCONCLUSIVE, 2 FAIL) at the first decided look, and that look's n."""
    done = passed | failed
    hit = done.any(axis=1)
    first = np.where(hit, done.argmax(axis=1), len(looks) - 1)
    rows = np.arange(len(first))
    verdict = np.where(~hit, 1, np.where(failed[rows, first], 2, 0))
    return verdict, looks[first]


def pct(verdict: np.ndarray) -> tuple[float, float, float]:
    return tuple(100 * float(np.mean(verdict == k)) for k in (0, 1, 2))  # type: ignore[return-value]


def gate_replay(sc: Scenario, codes: np.ndarray, n: int, t: float) -> int:
    """The verdict of the real gate_run path on the first n outcomes of one run (0 / 1 / 2)."""
    r2w, same, _ = sc.probs()
    base_right = np.where(codes[:n] == 1, np.random.default_rng(n).random(n) < (P_BASE - r2w) / same, codes[:n] == 0)
    var_right = np.where(codes[:n] == 1, base_right, codes[:n] == 2)

    def recs(name: str, right: np.ndarray) -> list[SampleResult]:
        return [SampleResult(name, "task", "1", f"s{i}", f"h{i}", "", float(r)) for i, r in enumerate(right)]
    policy = parse_policy({"defaults": {"max_drop": t, "false_fail": "per_check"}})  # one check's own figures
    _, gate = gate_run(recs("bf16", base_right), {"q": recs("q", var_right)}, {}, policy, {"task"}, slice_keys=[])
    return {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}[gate.overall]


def noop_n(t: float) -> int:
    """Smallest n at which a copy of the baseline (no flip at all) PASSes max_drop t."""
    return next(n for n in range(1, 100_000) if seq.rejects(DIFF_V, np.array([0, n, 0]), (1 - t) / 2))


def scenarios(t: float) -> list[Scenario]:
    out = [Scenario(c, 0.0, "none", "no change") for c in (0.0, 0.05, 0.10)]
    out += [Scenario(c, t, "boundary", "drop = max_drop") for c in (0.0, 0.05, 0.10)]
    out += [Scenario(c, 2 * t, "drop", "drop = 2x max_drop") for c in (0.0, 0.05, 0.10)]
    return out + [Scenario(0.0, 0.5, "drop", "collapse 0.6 -> 0.1")]


def simulate(t: float, reps: int, cap: int, rnd: int, fixed_max: int, seed: int = 0) -> list[dict]:
    """Every scenario: sequential verdict rates and sample counts, single-look rates by n, fixed-n power."""
    looks = np.arange(rnd, cap + 1, rnd)
    fixed_looks = np.arange(rnd, fixed_max + 1, rnd)
    rows = []
    for i, sc in enumerate(scenarios(t)):
        codes = streams(sc, reps, max(cap, fixed_max), seed + i)
        passed, failed = sequential_checks(counts(codes, looks), t)
        verdict, used = run_sequential(passed, failed, looks)
        fp, ff = fixed_checks(counts(codes, fixed_looks), t)
        rows.append({"sc": sc, "verdict": verdict, "used": used, "codes": codes,
                     "look_pass": passed.mean(axis=0), "look_fail": failed.mean(axis=0), "looks": looks,
                     "fixed_pass": fp.mean(axis=0), "fixed_fail": ff.mean(axis=0), "fixed_looks": fixed_looks})
    return rows


def fixed_n_for(row: dict) -> int | None:
    """Smallest fixed n whose probability of the right verdict matches the sequential design's."""
    sc, v = row["sc"], row["verdict"]
    if sc.kind == "boundary":
        return None  # no verdict is right
    right, power = (row["fixed_pass"], np.mean(v == 0)) if sc.kind == "none" else (row["fixed_fail"], np.mean(v == 2))
    ok = np.nonzero(right >= power)[0]
    return int(row["fixed_looks"][ok[0]]) if ok.size else None


def print_sequential(rows: list[dict], t: float, rnd: int, cap: int) -> int:
    """The sequential table; returns the fixed n of the same power over every scenario (the design's n)."""
    fixed = [fixed_n_for(r) for r in rows]
    design = max((f for f, r in zip(fixed, rows) if r["sc"].kind != "boundary" and f is not None), default=0)
    print(f"\nSequential: rounds of {rnd} up to {cap}, max_drop {t:g}; PASS / INCONCLUSIVE / FAIL (%), "
          f"samples used; fixed n of the same power (Tango + Wilson, one-sided 5%); design n = {design}")
    print("| scenario | churn | PASS / INC / FAIL | mean n | median n | 90th pct n | fixed n, same power "
          "| mean n / design n |")
    print("|---|---|---|---|---|---|---|---|")
    for r, f in zip(rows, fixed):
        sc, used = r["sc"], r["used"]
        p, i, fl = pct(r["verdict"])
        ratio = f"{100 * used.mean() / design:.0f}%" if design else "-"
        print(f"| {sc.label} | {sc.churn:.2f} | {p:.1f} / {i:.1f} / {fl:.1f} | {used.mean():.0f} | "
              f"{np.median(used):.0f} | {np.percentile(used, 90):.0f} | {f if f else '-'} | {ratio} |")
    return design


def print_by_n(rows: list[dict], t: float, ns: list[int]) -> None:
    """Single-look error rates: gating once at n (sequence) against the fixed-n design at the same n."""
    print(f"\nOne look at n, max_drop {t:g}: false FAIL (no change) and false PASS (drop = 2x max_drop), %: "
          "confidence sequence / fixed-n design")
    print("| scenario | churn | " + " | ".join(f"n = {n}" for n in ns) + " |")
    print("|---|---|" + "---|" * len(ns))
    for r in rows:
        sc = r["sc"]
        if sc.kind == "boundary" or sc.label.startswith("collapse"):
            continue
        key = "fail" if sc.kind == "none" else "pass"
        cells = []
        for n in ns:
            a = r[f"look_{key}"][np.searchsorted(r["looks"], n)] if n <= r["looks"][-1] else np.nan
            b = r[f"fixed_{key}"][np.searchsorted(r["fixed_looks"], n)]
            cells.append(f"{100 * a:.1f} / {100 * b:.1f}")
        print(f"| {sc.label} (false {key.upper()}) | {sc.churn:.2f} | " + " | ".join(cells) + " |")


def check_replay(rows: list[dict], t: float, k: int) -> tuple[int, int]:
    """Replay k runs per scenario through gate_run at the n where the sequential design stopped."""
    agree = total = 0
    for r in rows:
        for j in range(min(k, len(r["verdict"]))):
            agree += gate_replay(r["sc"], r["codes"][j], int(r["used"][j]), t) == int(r["verdict"][j])
            total += 1
    return agree, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=1000)
    ap.add_argument("--round", type=int, default=10)
    ap.add_argument("--max-drop", type=float, nargs="+", default=[0.05])
    ap.add_argument("--check", type=int, default=5, help="runs per scenario replayed through gate_run")
    ap.add_argument("--runner", default="16,2,240", help="first round, growth, cap of the runner's schedule")
    ap.add_argument("--prior", default="c", choices=["c", "c2", "uniform"],
                    help="prior of the betting mixture over c (shipped: proportional to c)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    from benchmarks.sim.gate_simulation_tasks import set_prior

    set_prior(args.prior)
    for t in args.max_drop:
        rows = simulate(t, args.reps, args.cap, args.round, fixed_max=max(2000, args.cap))
        print_sequential(rows, t, args.round, args.cap)
        print_by_n(rows, t, [n for n in (10, 20, 30, 50, 100, 200, 500, 1000) if n <= args.cap])
        agree, total = check_replay(rows, t, args.check)
        print(f"\ngate_run replay agrees with the bulk on {agree}/{total} runs")
        first, growth, cap = (int(x) for x in args.runner.split(","))
        print_runner(t, args.reps, first, growth, cap)
    print("\nsmallest n at which a copy of the baseline PASSes: "
          + ", ".join(f"max_drop {t:g}: {noop_n(t)}" for t in (0.02, 0.05, 0.10, 0.20)))
    print(f"{args.reps} runs per scenario, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
