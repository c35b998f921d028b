"""The fewest seconds of draws that could FAIL a variant, for a scheduler that knew every effect in advance.

Issue 55 asks a cold `make gate` on a 2-core Zen 1 to FAIL `w4g64` and `w4g64+kv4g32` within 9 minutes. This
bounds what any scheduler can do: each task's observed paired outcomes (flips down / up in n) are taken as the
truth and replicated to N pairs; over a grid of N per task it finds the cheapest draws (seconds per sample of the
baseline and every variant drawn) at which the shipped policy's checks FAIL every variant named: the pooled check
at its level, or a task's own max_drop check at its level (the gate's real sequences, ``evalsuite.stats``). No
first looks, no estimates, no regressing chases: a real run needs more.

    python -m benchmarks.sim.gate_oracle                      # the Zen-1 stand-in's effects and costs, family-wise
    python -m benchmarks.sim.gate_oracle --per-check           # every check at alpha (``false_fail: per_check``)
    python -m benchmarks.sim.gate_oracle --baseline-free       # the baseline's answers stored (cost 0)
    python -m benchmarks.sim.gate_oracle --max-kld 0.5         # a policy that gates KLD: 16 checks share alpha
    python -m benchmarks.sim.gate_oracle --measured            # the effects on all 80 code problems, this CPU's costs

Defaults: the effects `make gate` showed in fp32 on one core of the AMX Xeon (close to issue 55's Zen 1)
and that run's seconds per sample (benchmarks/RESULTS.md, "the Zen-1 stand-in").
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from evalsuite.gate.family import family
from evalsuite.gate.policy import load_policy
from evalsuite.stats import pooled, sequential as seq

Effects = dict[str, dict[str, tuple[int, int, int, float]]]  #: variant -> task -> (down, up, pairs, max_drop)


@dataclass(frozen=True)
class Case:
    """What the oracle takes as the truth: each variant's outcomes per task, seconds per sample of the baseline and
    of each variant, and the most pairs a task's stream holds."""

    effects: Effects
    base: dict[str, float]
    variant: dict[str, dict[str, float]]
    caps: dict[str, int] = field(default_factory=dict)


#: the effects `make gate` showed in fp32 on one core of the AMX Xeon (the Zen-1 stand-in) and its seconds per sample
STANDIN = Case(
    effects={"w4g64": {"reasoning": (7, 0, 48, 0.10), "json": (5, 2, 16, 0.05), "code": (3, 0, 16, 0.05)},
             "w4g64+kv4g32": {"reasoning": (7, 1, 48, 0.10), "json": (5, 1, 16, 0.05), "code": (3, 0, 16, 0.05)}},
    base={"reasoning": 0.60, "json": 4.29, "code": 3.48},
    variant={"w4g64": {"reasoning": 0.61, "json": 3.26, "code": 2.96},
             "w4g64+kv4g32": {"reasoning": 0.36, "json": 3.30, "code": 2.36}})
#: ``--measured``: what `make gate` sees on a 2-core AVX2 EPYC (Zen 3, avx2 fma, float32) with the shipped baseline
#: (2026-12-07, benchmarks/RESULTS.md): code on all 80 built-in problems (both variants 12 down, 6 up: the first 16
#: of the old 28 showed 3 down, 0 up), json at 48 pairs, reasoning the stand-in's 48, needle `w4g64`'s first 32
#: (3 down, 0 up) taken for both; the variants' seconds per pair; the baseline's answers are stored (free)
MEASURED = Case(
    effects={"w4g64": {"reasoning": (7, 0, 48, 0.10), "json": (11, 4, 48, 0.05), "code": (12, 6, 80, 0.05),
                       "needle": (3, 0, 32, 0.05)},
             "w4g64+kv4g32": {"reasoning": (7, 1, 48, 0.10), "json": (11, 4, 48, 0.05), "code": (12, 6, 80, 0.05),
                              "needle": (3, 0, 32, 0.05)}},
    base={},
    variant={"w4g64": {"reasoning": 1.36, "json": 3.87, "code": 2.09, "needle": 13.78},
             "w4g64+kv4g32": {"reasoning": 0.54, "json": 2.65, "code": 1.66, "needle": 10.89}},
    caps={"code": 80})
GRID = (0, 16, 32, 48, 64, 80, 96, 128, 160, 200, 256, 320, 400, 512, 640, 800, 1000)


def part(effect: tuple[int, int, int, float], pairs: int) -> pooled.Part:
    """A task's outcomes replicated to ``pairs`` pairs, as the pooled bets see them."""
    down, up, n, t = effect
    return np.array([0.0, 0.5, 1.0]), np.array([down, n - down - up, up], dtype=float) * pairs / n, t


def fails(effects: dict, pairs: dict[str, int], pooled_level: float, task_level: float) -> bool:
    """Whether the pooled check or a task's own max_drop check FAILs at these pairs."""
    parts = {t: part(effects[t], k) for t, k in pairs.items() if k}
    if len(parts) >= 2 and pooled.rejects(list(parts.values()), 0.0, pooled_level):
        return True
    return any(seq.rejects(v, w, (1 - t) / 2, True, task_level) for v, w, t in parts.values())


def cheapest(case: Case, variants: list[str], pooled_level: float, task_level: float, base_free: bool
             ) -> tuple[float, dict]:
    """The cheapest grid point of pairs per task (within ``case.caps``) at which every variant in ``variants``
    FAILs."""
    best: tuple[float, dict] = (float("inf"), {})
    tasks = list(case.variant[variants[0]])
    per = {t: (0.0 if base_free else case.base.get(t, 0.0)) + sum(case.variant[v][t] for v in variants)
           for t in tasks}
    for ks in itertools.product(GRID, repeat=len(tasks)):
        pairs = dict(zip(tasks, ks))
        if any(pairs[t] > cap for t, cap in case.caps.items() if t in pairs):
            continue
        seconds = sum(per[t] * pairs[t] for t in tasks)
        if seconds < best[0] and all(fails(case.effects[v], pairs, pooled_level, task_level) for v in variants):
            best = (seconds, pairs)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-check", action="store_true", help="every check at alpha 0.05 (no family-wise split)")
    ap.add_argument("--baseline-free", action="store_true", help="the baseline's answers cost nothing (stored)")
    ap.add_argument("--max-kld", type=float, help="a policy that sets max_kld: its checks join the family (the "
                    "variants' KLD is within it: they only take their shares)")
    ap.add_argument("--measured", action="store_true", help="the effects and variant costs make gate measured on a "
                    "2-core AVX2 EPYC with the shipped baseline (code on all 80 built-in problems); implies "
                    "--baseline-free")
    args = ap.parse_args()
    case, base_free = (MEASURED, True) if args.measured else (STANDIN, args.baseline_free)
    # the shipped policy on four tasks: the pooled check at 2.5%, each of the ten others at 0.25% (docs/gate.md);
    # with max_kld set, 16 checks: each non-pooled one at 2.5% / 15
    policy = load_policy()
    policy = dataclasses.replace(policy, defaults=dataclasses.replace(policy.defaults, max_kld=args.max_kld))
    fam = family(policy, ["reasoning", "json", "code", "needle"])
    pooled_level, task_level = (0.05, 0.05) if args.per_check else (fam.level("*", "all", "pooled_max_drop"),
                                                                   fam.level("code", "all", "max_drop"))
    print(f"pooled check at {pooled_level:.4g}, a task's max_drop at {task_level:.4g} ({fam.describe()})")
    for variants in (["w4g64"], ["w4g64+kv4g32"], ["w4g64", "w4g64+kv4g32"]):
        seconds, pairs = cheapest(case, variants, pooled_level, task_level, base_free)
        print(f"{' and '.join(variants)} FAIL: {seconds:.0f} s of draws at least ({pairs})")


if __name__ == "__main__":
    main()
