"""The KLD dimension of ``gate_simulation_tasks``: may a KLD check FAIL a variant whose mean KLD is within
``max_kld``, how often does it FAIL one at twice it, and what does gating KLD inside the family cost the other checks?

Per-sample KLD (a sample's mean over its answer tokens) is drawn heavy-tailed and independent of the answers:
lognormal (sigma 1.5: the mean is 3.1x the median) or Lomax (Pareto II, tail index 1.8: infinite variance), scaled
to a true mean of f x max_kld (0.5). The answers are ``gate_simulation_tasks``' four tasks (baseline accuracy 0.6,
5% churn, accuracy unchanged unless a case drops some). One variant, its tasks in lockstep, gated at the runner's
looks (16, 48, 112, 240 pairs per task) and stopped at the first decisive one, three ways on the same draws:

- ``point``: the gate before this change: the family of 11 checks, plus ``max_kld`` 0.5 as a point check on each
  gated row's sample mean (FAIL above it, else PASS), re-evaluated at every look, outside the family;
- ``screen``: the shipped policy now: ``max_kld`` off (KLD reported and ranked, never a FAIL);
- ``gated``: ``max_kld: 0.5`` set in the policy: each gated row's capped-mean sequence (``gate.means``) inside the
  family, which then holds 16 checks (each non-pooled one at 2.5% / 15).

The accuracy checks' verdicts are the real gate's (``gate_simulation_tasks.gate_at``, memoized on the counts, under
the shipped policy or with ``max_kld`` set, whose family holds the KLD shares); the KLD checks are decided on the
capital the gate bets with (``gate.means.kld_values``, ``stats.sequential.rejects`` at each check's level), the
point check on the rows' sample means. ``--kld-check N`` replays N runs per case through ``evaluate_gate`` with the
per-sample KLD on the rows and counts the looks whose verdict differs (must be 0).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.sim import gate_simulation_tasks as gst
from evalsuite.gate import family as fam
from evalsuite.gate import means
from evalsuite.gate.check import EPS
from evalsuite.gate.verdict import evaluate_gate
from evalsuite.stats import sequential as seq
from evalsuite.stats.types import ALL

MAX_KLD, SIGMA, TAIL, ALPHA = 0.5, 1.5, 1.8, 0.05
SHAPES = ("lognormal", "lomax")
MODES = ("point", "screen", "gated")
ROWS = tuple((task, ALL) for task in gst.TOL) + (("needle", gst.SLICE),)
CODE = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}


@dataclass(frozen=True)
class KldCase:
    """True mean per-sample KLD ``kld`` x max_kld of a ``shape``, with accuracy drops as ``gate_simulation_tasks``;
    ``kind``: "none" (a FAIL is wrong), "drop" (a PASS is wrong)."""

    label: str
    kld: float
    shape: str
    kind: str
    drops: tuple[float, ...] = (0, 0, 0, 0)
    churn: float = 0.05

    @property
    def multi(self) -> gst.Multi:
        return gst.Multi(self.label, self.churn, self.drops, self.kind)


def kld_cases() -> list[KldCase]:
    """Accuracy unchanged; mean KLD at 0.5x (about int4 g64 on the embedded model), 0.9x, 1.0x and 2x max_kld."""
    return [KldCase(f"KLD {f:g}x max_kld", f, shape, "drop" if f > 1 else "none")
            for shape in SHAPES for f in (0.5, 0.9, 1.0, 2.0)]


def cost_cases(churns: Sequence[float] = (0.01, 0.05, 0.10)) -> list[KldCase]:
    """``gate_simulation_tasks``' accuracy scenarios with a lognormal KLD at 0.5x max_kld (within it)."""
    return [KldCase(sc.label, 0.5, "lognormal", sc.kind, sc.drops, sc.churn) for sc in gst.scenarios(churns)
            if sc.label in ("no change", "1.0x every tolerance", "2x drop on code only", "2x drop on every task")]


def draw_kld(case: KldCase, reps: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Per task, (reps, n) per-sample KLD with mean ``case.kld`` x MAX_KLD."""
    rng, mean = np.random.default_rng(seed), case.kld * MAX_KLD
    if case.shape == "lognormal":
        return {t: rng.lognormal(math.log(mean) - SIGMA ** 2 / 2, SIGMA, (reps, n)) for t in gst.TOL}
    return {t: rng.pareto(TAIL, (reps, n)) * mean * (TAIL - 1) for t in gst.TOL}  # Lomax(1): mean 1 / (TAIL - 1)


def row_samples(kld: dict[str, np.ndarray], r: int, n: int, row: tuple[str, str]) -> np.ndarray:
    """The per-sample KLD of one gated row at a look of ``n`` pairs per task (needle's slice: every third sample)."""
    x = kld[row[0]][r, :n]
    return x if row[1] == ALL else x[np.arange(n) % 3 == 2]


def kld_checks(kld: dict[str, np.ndarray], r: int, n: int, levels: dict, alpha: float = ALPHA) -> tuple[bool, bool]:
    """(some max_kld check FAILs, every one PASSes) at one look, each FAIL side at its family ``levels``."""
    fail, passed = False, True
    for row in ROWS:
        values, weights, m, _ = means.kld_values(row_samples(kld, r, n, row), MAX_KLD)
        fail |= bool(seq.rejects(values, weights, m, False, levels[row]))
        passed &= bool(seq.rejects(values, weights, m, True, alpha))
    return fail, passed


def point_fails(kld: dict[str, np.ndarray], r: int, n: int) -> bool:
    """The former point check: some gated row's sample mean above MAX_KLD."""
    return any(float(row_samples(kld, r, n, row).mean()) > MAX_KLD + EPS for row in ROWS)


def combine(accuracy: str, fail: bool, passed: bool) -> int:
    """The variant's verdict code from the accuracy checks' verdict and the KLD checks'."""
    return 2 if accuracy == "FAIL" or fail else 0 if accuracy == "PASS" and passed else 1


def run(case: KldCase, reps: int, seed: int, looks: Sequence[int] = gst.LOOKS) -> dict:
    """Per mode and replication: the first decisive look (len(looks): none), its verdict, and whether a KLD check
    (point or sequence) was among the FAILs there."""
    codes, kld = gst.draw(case.multi, reps, looks[-1], seed), draw_kld(case, reps, looks[-1], seed + 10_000)
    levels = {row: fam.family(gst.policy_for("family_alpha", ALPHA, MAX_KLD), list(gst.TOL)).level(*row, "max_kld")
              for row in ROWS}
    out = {m: {"first": np.full(reps, len(looks)), "verdict": np.ones(reps, np.int8), "by_kld": np.zeros(reps, bool)}
           for m in MODES}
    for r in range(reps):
        live = set(MODES)
        for j, n in enumerate(looks):
            key = gst.look_key(codes, r, n)
            shipped = gst.gate_at(key, "family_alpha").overall
            gated = gst.gate_at(key, "family_alpha", ALPHA, MAX_KLD).overall
            point = point_fails(kld, r, n)
            kfail, kpass = kld_checks(kld, r, n, levels)
            now = {"point": (combine(shipped, point, not point), point), "screen": (CODE[shipped], False),
                   "gated": (combine(gated, kfail, kpass), kfail)}
            for m in list(live):
                v, by = now[m]
                if v != 1:
                    out[m]["first"][r], out[m]["verdict"][r], out[m]["by_kld"][r] = j, v, by
                    live.discard(m)
            if not live:
                break
    return {"case": case, "looks": tuple(looks), "modes": out, "codes": codes, "kld": kld}


def replay(res: dict, runs: int) -> tuple[int, int]:
    """(looks whose ``gated`` verdict differs from ``evaluate_gate`` on rows carrying the per-sample KLD, looks
    compared) over the first ``runs`` replications, every look up to the decisive one."""
    policy = gst.policy_for("family_alpha", ALPHA, MAX_KLD)
    levels = {row: fam.family(policy, list(gst.TOL)).level(*row, "max_kld") for row in ROWS}
    codes, kld, looks = res["codes"], res["kld"], res["looks"]
    differ = total = 0
    for r in range(min(runs, len(res["modes"]["gated"]["first"]))):
        for n in looks[:int(res["modes"]["gated"]["first"][r]) + 1]:
            key = gst.look_key(codes, r, n)
            rows = []
            for task, (counts, slice_counts) in zip(gst.TOL, key):
                for st in gst.task_rows(task, counts, slice_counts):
                    x = row_samples(kld, r, n, (task, st.slice))
                    rows.append(dataclasses.replace(st, kld_mean=float(x.mean()), kld_samples=tuple(sorted(x))))
            real = CODE[evaluate_gate(rows, policy, ["q"], list(gst.TOL)).overall]
            vec = combine(gst.gate_at(key, "family_alpha", ALPHA, MAX_KLD).overall, *kld_checks(kld, r, n, levels))
            differ += real != vec
            total += 1
    return differ, total


def at_budget(mode: dict, looks: Sequence[int], pairs: int) -> np.ndarray:
    return gst.at_budget({"first": mode["first"], "verdict": mode["verdict"], "looks": looks}, pairs)


def print_cases(results: list[dict], budgets: Sequence[int] = (48, 112, 240)) -> None:
    """Wrong verdicts within 240 pairs per task, then PASS / INC / FAIL at each budget, per mode."""
    print("\n| case | shape | reps | wrong verdict | " + " | ".join(MODES) + " | FAIL by a KLD check: "
          + " / ".join(m for m in MODES if m != "screen") + " |")
    print("|---|---|---|---|" + "---|" * (len(MODES) + 1))
    for res in results:
        c, looks = res["case"], res["looks"]
        wrong = 2 if c.kind == "none" else 0
        cells = [gst.rate(at_budget(res["modes"][m], looks, looks[-1]) == wrong) for m in MODES]
        by = [f"{100 * float(np.mean(res['modes'][m]['by_kld'])):.1f}" for m in MODES if m != "screen"]
        print(f"| {c.label}, churn {c.churn:.2f} | {c.shape} | {len(res['modes']['point']['first'])} | "
              f"{'FAIL' if wrong else 'PASS'} | " + " | ".join(cells) + f" | {' / '.join(by)} |")
    print("\nPASS / INC / FAIL (%) by pairs per task")
    print("| case | shape | " + " | ".join(f"{m} @{p}" for m in MODES for p in budgets) + " |")
    print("|---|---|" + "---|" * (len(MODES) * len(budgets)))
    for res in results:
        c, looks = res["case"], res["looks"]
        cells = [gst.pif(at_budget(res["modes"][m], looks, p)) for m in MODES for p in budgets]
        print(f"| {c.label}, churn {c.churn:.2f} | {c.shape} | " + " | ".join(cells) + " |")


def cap_sweep(caps: Sequence[float], reps: int, seed: int = 300) -> None:
    """The KLD checks alone (five rows, the gated family's levels) under caps of c x max_kld, stopped at their first
    decision: FAIL at 0.9x, 1.0x (wrong) and 2x (power), PASS at 1.25x and 2x (wrong for the true mean: a PASS
    certifies the capped mean) and at 0.5x (how soon a variant well within PASSes)."""
    print("\n| cap (x max_kld) | shape | 0.9x: FAIL @240 | 1.0x: FAIL @240 | 2x: FAIL @112 / @240 | 1.25x / 2x: PASS "
          "@240 | 0.5x: PASS @112 / @240 |")
    print("|---|---|---|---|---|---|---|")
    policy = gst.policy_for("family_alpha", ALPHA, MAX_KLD)
    levels = {row: fam.family(policy, list(gst.TOL)).level(*row, "max_kld") for row in ROWS}
    base = means.KLD_CAP
    for shape in SHAPES:
        draws = {f: draw_kld(KldCase("", f, shape, "none"), reps, gst.LOOKS[-1], seed + int(10 * f))
                 for f in (0.5, 0.9, 1.0, 1.25, 2.0)}
        for cap in caps:
            means.KLD_CAP = cap
            first = {f: _kld_only(k, reps, levels) for f, k in draws.items()}
            cell = {f: {p: (first[f][0] <= _last(p), first[f][1] <= _last(p)) for p in (112, 240)} for f in first}
            print(f"| {cap:g} | {shape} | {gst.rate(cell[0.9][240][0])} | {gst.rate(cell[1.0][240][0])} | "
                  f"{pct(cell[2.0][112][0])} / {pct(cell[2.0][240][0])} | {pct(cell[1.25][240][1])} / "
                  f"{pct(cell[2.0][240][1])} | "
                  f"{pct(cell[0.5][112][1])} / {pct(cell[0.5][240][1])} |", flush=True)
    means.KLD_CAP = base


def pct(hits: np.ndarray) -> str:
    return f"{100 * float(np.mean(hits)):.1f}"


def _last(pairs: int) -> int:
    return max(j for j, n in enumerate(gst.LOOKS) if n <= pairs)


def _kld_only(kld: dict[str, np.ndarray], reps: int, levels: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per replication, the first look at which some KLD check FAILs, and the first at which all PASS (4: never),
    stopping at the first of them."""
    fail, passed = np.full(reps, 4), np.full(reps, 4)
    for r in range(reps):
        for j, n in enumerate(gst.LOOKS):
            f, p = kld_checks(kld, r, n, levels)
            if f or p:
                (fail if f else passed)[r] = j
                break
    return fail, passed


def main_tables(reps: int, cost_reps: int, caps: Sequence[float], check: int) -> None:
    """The tables of docs/gate.md's KLD section (each part skipped at 0 replications / no caps)."""
    t0 = time.perf_counter()
    if reps:
        results = []
        for i, case in enumerate(kld_cases()):
            results.append(run(case, reps, seed=500 + i))
            print(f"  {case.label}, {case.shape}: {time.perf_counter() - t0:.0f} s", flush=True)
            if check:
                print(f"    replayed through evaluate_gate: {'%d of %d looks differ' % replay(results[-1], check)}")
        print_cases(results)
    if cost_reps:
        results = [run(case, cost_reps, seed=700 + i) for i, case in enumerate(cost_cases())]
        print("\nWhat gating KLD costs the other checks (KLD 0.5x max_kld, lognormal):")
        print_cases(results)
    if caps:
        cap_sweep(caps, max(reps, 200))
    print(f"\nKLD dimension: {time.perf_counter() - t0:.0f} s")
