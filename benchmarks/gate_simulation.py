"""How often does the gate FAIL / PASS / say INCONCLUSIVE, by sample size, under no change and under a drop?

Simulates paired binary outcomes for one task: the baseline is right with probability ``p_base``; a
``churn`` fraction of samples flips, half right->wrong and half wrong->right (no change in P(right)); a
true drop of ``delta`` adds that many extra right->wrong flips. Each simulated run goes through the real
path (SampleResult records -> gate_run -> verdict) with the shipped default thresholds, and optionally a
tighter max_drop. Usage::

    .venv/bin/python benchmarks/gate_simulation.py [--reps 400] [--n 30 100 300 1000] [--max-drop 0.05 0.02]
"""
from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from evalsuite.gate.policy import parse_policy
from evalsuite.gate.verdict import gate_run
from evalsuite.run.records import SampleResult


def simulate(rng: np.random.Generator, n: int, p_base: float, churn: float,
             delta: float) -> tuple[list[SampleResult], list[SampleResult]]:
    """Baseline and variant records with P(r->w) = churn/2 + delta and P(w->r) = churn/2."""
    r2w, w2r = churn / 2 + delta, churn / 2
    cats = rng.choice(4, size=n, p=[p_base - r2w, 1 - p_base - w2r, r2w, w2r])  # RR, WW, RW, WR
    base_right, var_right = np.isin(cats, (0, 2)), np.isin(cats, (0, 3))

    def recs(name: str, right: np.ndarray) -> list[SampleResult]:
        return [SampleResult(name, "task", "1", f"s{i}", f"h{i}", "", float(r)) for i, r in enumerate(right)]
    return recs("bf16", base_right), recs("q", var_right)


def rates(n: int, churn: float, delta: float, max_drop: float, reps: int, seed: int) -> Counter[str]:
    policy = parse_policy({"defaults": {"max_drop": max_drop}})
    rng = np.random.default_rng(seed)
    verdicts: Counter[str] = Counter()
    for rep in range(reps):
        base, var = simulate(rng, n, 0.6, churn, delta)
        _, gate = gate_run(base, {"q": var}, {}, policy, {"task"}, slice_keys=[], seed=rep)
        verdicts[gate.overall] += 1
    return verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--n", type=int, nargs="+", default=[30, 100, 300, 1000])
    ap.add_argument("--churn", type=float, nargs="+", default=[0.05, 0.10])
    ap.add_argument("--delta", type=float, nargs="+", default=[0.0, 0.05, 0.10])
    ap.add_argument("--max-drop", type=float, nargs="+", default=[0.05, 0.02])
    args = ap.parse_args()
    print(f"p_base=0.6, max_flip_rate=0.2, min_samples=10, n_boot=2000, {args.reps} runs per row")
    print(f"{'max_drop':>8} {'churn':>5} {'true drop':>9} {'n':>5} {'PASS':>6} {'INCONCL':>7} {'FAIL':>6}")
    t0, runs = time.perf_counter(), 0
    for max_drop in args.max_drop:
        for churn in args.churn:
            for delta in args.delta:
                for n in args.n:
                    v = rates(n, churn, delta, max_drop, args.reps, seed=n)
                    runs += args.reps
                    pct = {k: 100 * v[k] / args.reps for k in ("PASS", "INCONCLUSIVE", "FAIL")}
                    print(f"{max_drop:8.2f} {churn:5.2f} {delta:9.2f} {n:5d} {pct['PASS']:5.1f}% "
                          f"{pct['INCONCLUSIVE']:6.1f}% {pct['FAIL']:5.1f}%", flush=True)
    print(f"{runs} simulated gate runs in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
