"""Several tasks per variant, every check together, through the real gate: how often is a variant FAILed or
PASSed wrongly, under ``false_fail: per_check`` (before) and ``family_alpha`` (the default, after)?

Four binary tasks with the shipped policy (reasoning 0.10, code / json / needle 0.05; needle's ``context_len>=2048``
slice, a third of its samples, 0.10; ``max_flip_rate`` 0.2 on every row; the pooled check). Baseline accuracy 0.6;
a ``churn`` fraction of pairs flips, half each way; a drop of f times a row's tolerance adds that many right->wrong
flips (needle: f x 0.10 on its long third and f x 0.025 on the rest, so that the task as a whole is at f x 0.05
and the slice at f x its own 0.10: "1.0x every tolerance" puts every gated row exactly on its limit). Each variant
is gated at the runner's looks (16, 48, 112, 240 pairs per task, its tasks drawn in lockstep) and stops at the
first decisive one; with a budget of 48 or 112 pairs per task it stops there, INCONCLUSIVE.

Every verdict is the code's: per look, each task's rows are built by ``stats.slices.compare`` from synthetic
``SampleResult`` lists holding those counts, and ``gate.verdict.evaluate_gate`` gates them with the shipped policy
(the run's four tasks expected). Because the sequences depend on the counts only, rows, verdicts and the pure
numerical functions of ``stats.sequential`` / ``stats.pooled`` (and Tango's interval in ``stats.slices``) are
memoized on their arguments (same results, computed once). ``python -m benchmarks.sim.gate_simulation_tasks --help``.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from evalsuite.store.records import SampleResult
from evalsuite.gate import family as fam
from evalsuite.gate.policy import Policy, load_policy
from evalsuite.gate.pooled import CHECK as POOLED_CHECK
from evalsuite.gate.types import GateResult
from evalsuite.gate.verdict import evaluate_gate
from evalsuite.stats import pooled
from evalsuite.stats import sequential as seq
from evalsuite.stats import slices as slices_mod
from evalsuite.stats.slices import compare
from evalsuite.stats.types import PairedStats

TOL = {"reasoning": 0.10, "code": 0.05, "json": 0.05, "needle": 0.05}
SLICE_TOL, P_BASE, LOOKS = 0.10, 0.6, (16, 48, 112, 240)
SLICE = "context_len>=2048"
VERDICT = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}
MODES = ("per_check", "family_alpha")


@dataclass(frozen=True)
class Multi:
    """Per-task drop in units of the task's tolerance (0: none) at a churn; ``kind``: "none" (a FAIL is wrong:
    every row within its tolerance), "drop" (a PASS is wrong)."""

    label: str
    churn: float
    drops: tuple[float, ...]  # in TOL's order
    kind: str


def scenarios(churns: Sequence[float] = (0.01, 0.05, 0.10)) -> list[Multi]:
    out: list[Multi] = []
    for label, drops, kind in (("no change", (0, 0, 0, 0), "none"), ("0.9x every tolerance", (0.9,) * 4, "none"),
                               ("1.0x every tolerance", (1.0,) * 4, "none"),
                               ("2x drop on code only", (0, 2, 0, 0), "drop"),
                               ("2x drop on every task", (2,) * 4, "drop")):
        out += [Multi(label, c, drops, kind) for c in churns]
    return out


def outcome_probs(churn: float, drop: float) -> list[float]:
    """P of the outcome codes 0 right->wrong, 1 both right, 2 both wrong, 3 wrong->right (baseline right 0.6)."""
    r2w, w2r = churn / 2 + drop, churn / 2
    return [r2w, P_BASE - r2w, 1 - P_BASE - w2r, w2r]


def draw(sc: Multi, reps: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Per task, (reps, n) outcome codes; needle's sample i is in the >=2048 slice when i % 3 == 2."""
    rng = np.random.default_rng(seed)
    out = {}
    for (task, t), f in zip(TOL.items(), sc.drops):
        if task != "needle":
            out[task] = rng.choice(4, size=(reps, n), p=outcome_probs(sc.churn, f * t)).astype(np.int8)
            continue
        long = np.arange(n) % 3 == 2
        rest = f * (3 * t - SLICE_TOL) / 2
        codes = rng.choice(4, size=(reps, n), p=outcome_probs(sc.churn, rest)).astype(np.int8)
        codes[:, long] = rng.choice(4, size=(reps, int(long.sum())), p=outcome_probs(sc.churn, f * SLICE_TOL))
        out[task] = codes
    return out


def _count(codes: np.ndarray) -> tuple[int, ...]:
    return tuple(int(x) for x in np.bincount(codes, minlength=4))


def look_key(codes: dict[str, np.ndarray], r: int, n: int | Sequence[int]) -> tuple:
    """The counts that determine every row at this look (``n`` pairs of every task, or per task): per task, (its
    counts[, needle: the slice's apart])."""
    out = []
    for k, (task, c) in enumerate(codes.items()):
        m = n if isinstance(n, int) else int(n[k])
        x = c[r, :m]
        out.append((_count(x[np.arange(m) % 3 != 2]), _count(x[np.arange(m) % 3 == 2])) if task == "needle"
                   else (_count(x), ()))
    return tuple(out)


def _records(task: str, counts: tuple[int, ...], start: int, long: bool) -> tuple[list, list]:
    base, var = [], []
    i = start
    for code, k in enumerate(counts):
        for _ in range(k):
            meta = {"context_len": 2048 if long else 512} if task == "needle" else {}
            for out, name, right in ((base, "bf16", code in (0, 1)), (var, "q", code in (1, 3))):
                out.append(SampleResult(name, task, "1", f"{task}-{i}", f"h{i}", "", float(right), metadata=meta))
            i += 1
    return base, var


@functools.lru_cache(maxsize=None)
def task_rows(task: str, counts: tuple[int, ...], slice_counts: tuple[int, ...]) -> tuple:
    """The task's PairedStats rows as ``compare`` builds them from records with these counts (the shipped
    policy's selector slices; both modes have the same)."""
    b1, v1 = _records(task, counts, 0, False)
    b2, v2 = _records(task, slice_counts, sum(counts), True)
    filters = policy_for("family_alpha").filters()
    return tuple(compare(b1 + b2, v1 + v2, (), [], set(TOL), filters=filters, variant_name="q"))


@functools.lru_cache(maxsize=200_000)
def gate_at(key: tuple, mode: str, alpha: float = 0.05, max_kld: float | None = None) -> GateResult:
    """The real gate, under ``false_fail: mode`` at ``alpha`` (and ``max_kld`` set: its checks hold their shares of
    the family; these rows carry no KLD, ``gate_simulation_kld`` decides those checks), on the rows of every task
    at one look (``key``: ``look_key``)."""
    rows: list[PairedStats] = []
    for task, (counts, slice_counts) in zip(TOL, key):
        rows += task_rows(task, counts, slice_counts)
    return evaluate_gate(rows, policy_for(mode, alpha, max_kld), ["q"], list(TOL))


def _arrays_key(*xs: object) -> tuple:
    return tuple(np.asarray(x, dtype=float).tobytes() if isinstance(x, np.ndarray) else x for x in xs)


def memoize_numerics() -> None:
    """Memoize the pure numerical functions the gate calls on counts (identical results, computed once)."""
    def wrap(mod: object, name: str, key: Callable[..., tuple]) -> None:
        f = getattr(mod, name)
        f = getattr(f, "__wrapped_original__", f)
        cache: dict = {}

        @functools.wraps(f)
        def g(*args, **kwargs):  # type: ignore[no-untyped-def]
            k = key(*args, **kwargs)
            if k not in cache:
                cache[k] = f(*args, **kwargs)
            return cache[k]
        g.__wrapped_original__ = f  # type: ignore[attr-defined]
        setattr(mod, name, g)

    def parts_key(parts, *rest, **kw):  # type: ignore[no-untyped-def]
        return (tuple(_arrays_key(v, w, t) for v, w, t in parts), rest, tuple(sorted(kw.items())))

    wrap(seq, "lower_bound", lambda v, w, *a, **kw: (_arrays_key(v, w), a, tuple(sorted(kw.items()))))
    wrap(seq, "more_needed", lambda v, w, *a, **kw: (_arrays_key(v, w), a, tuple(sorted(kw.items()))))
    wrap(pooled, "upper_bound", parts_key)
    wrap(pooled, "more_needed", parts_key)
    wrap(slices_mod, "tango_ci", lambda *a, **kw: (a, tuple(sorted(kw.items()))))


def forget() -> None:
    """Drop every memoized result (after the betting prior or the pooled share changed)."""
    task_rows.cache_clear()
    gate_at.cache_clear()
    memoize_numerics()


@functools.lru_cache(maxsize=None)
def policy_for(mode: str, alpha: float = 0.05, max_kld: float | None = None) -> Policy:
    """The shipped policy with ``false_fail: mode`` (and ``alpha``; ``max_kld``: set, as a user's policy sets it)."""
    p = load_policy()
    return dataclasses.replace(p, false_fail=mode, alpha=alpha,
                               defaults=dataclasses.replace(p.defaults, max_kld=max_kld))


def run(sc: Multi, reps: int, mode: str, seed: int, looks: Sequence[int] = LOOKS, alpha: float = 0.05) -> dict:
    """Per replication: the first decisive look's index (len(looks): none) and its verdict, and whether the pooled
    check / a per-task check had FAILed there."""
    codes = draw(sc, reps, looks[-1], seed)
    first = np.full(reps, len(looks))
    verdict = np.ones(reps, dtype=np.int8)
    by_pooled, by_task = np.zeros(reps, bool), np.zeros(reps, bool)
    for r in range(reps):
        for j, n in enumerate(looks):
            g = gate_at(look_key(codes, r, n), mode, alpha)
            if g.overall != "INCONCLUSIVE":
                first[r], verdict[r] = j, VERDICT[g.overall]
                fails = [c for c in g.checks if c.verdict == "FAIL"]
                by_pooled[r] = any(c.check == POOLED_CHECK for c in fails)
                by_task[r] = any(c.check != POOLED_CHECK for c in fails)
                break
    return {"sc": sc, "mode": mode, "first": first, "verdict": verdict, "by_pooled": by_pooled,
            "by_task": by_task, "looks": tuple(looks), "codes": codes}


def adaptive(sc: Multi, reps: int, mode: str, seed: int, total: int = 4 * 240, step: int = 16) -> dict:
    """The runner's later rounds draw where a FAIL looks nearest (``Rounds.quickest_first``); made adversarial here:
    after 16 pairs per task, every draw of ``step`` goes to the task whose observed margin (Δ + tolerance) is lowest,
    re-gated after every draw (the real gate), no stop on a PASS, to ``total`` pairs in all. The choice depends on
    the pairs seen (predictable), so the guarantee must hold. FAIL rate and the most-drawn task's mean pairs."""
    codes = draw(sc, reps, total, seed)
    failed, most = np.zeros(reps, bool), np.zeros(reps)
    for r in range(reps):
        taken = np.full(len(TOL), 16)
        while True:
            key = look_key(codes, r, taken)
            if gate_at(key, mode).overall == "FAIL":
                failed[r] = True
                break
            if taken.sum() + step > total:
                break
            margin = []
            for (c0, c1), n, t in zip(key, taken, TOL.values()):
                c = np.add(c0, c1) if c1 else np.array(c0)
                margin.append((c[3] - c[0]) / n + t)  # observed Δ + tolerance
            taken[int(np.argmin(margin))] += step
        most[r] = taken.max()
    return {"sc": sc, "mode": mode, "false_fail": float(failed.mean()), "hits": failed, "most_drawn": most.mean()}


DIFF_V, FLIP_V = np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0])


@functools.lru_cache(maxsize=200_000)
def averaged_fails(key: tuple) -> bool:
    """The alternative not shipped: FAIL when the family's weighted average of e-values reaches 1 / alpha
    (Vovk & Wang's e-merging; valid for "the variant is within every tolerance", but it names no check and prices
    none). Each check's e-value is the capital ``stats.sequential.log_capital`` (``stats.pooled.log_capital`` for
    the pooled check) at its threshold; a row below min_samples bets nothing yet (as the gate)."""
    policy = policy_for("family_alpha")
    weights = {k: v / policy.alpha for k, v in fam.family(policy, list(TOL)).levels.items()}
    total, parts = 0.0, []
    for (task, t), (counts, slice_counts) in zip(TOL.items(), key):
        rows = [("all", counts, slice_counts, t)] + ([(SLICE, slice_counts, (), SLICE_TOL)] if task == "needle" else [])
        for name, c, extra, tol in rows:
            cnt = np.array(c) + (np.array(extra) if extra else 0)
            r2w, same, w2r = float(cnt[0]), float(cnt[1] + cnt[2]), float(cnt[3])
            if r2w + same + w2r < policy.defaults.min_samples:
                total += weights[(task, name, "max_drop")] + weights[(task, name, "max_flip_rate")]
                continue
            total += weights[(task, name, "max_drop")] * math.exp(
                float(seq.log_capital(DIFF_V, np.array([r2w, same, w2r]), (1 - tol) / 2, upper=True)))
            total += weights[(task, name, "max_flip_rate")] * math.exp(float(seq.log_capital(
                FLIP_V, np.array([same, r2w + w2r]), policy.defaults.max_flip_rate or 1.0)))
            if name == "all":
                parts.append((DIFF_V, np.array([r2w, same, w2r]), t))
    pool = math.exp(float(pooled.log_capital(parts, 0.0))) if len(parts) > 1 else 1.0
    return total + weights[("*", "all", POOLED_CHECK)] * pool >= 1.0 / policy.alpha


def run_averaged(res: dict) -> dict:
    """``run``'s replications (family_alpha) re-decided by ``averaged_fails`` (PASS as the gate: every check)."""
    looks, reps = res["looks"], len(res["first"])
    first, verdict = np.full(reps, len(looks)), np.ones(reps, dtype=np.int8)
    for r in range(reps):
        for j, n in enumerate(looks):
            key = look_key(res["codes"], r, n)
            v = 2 if averaged_fails(key) else 0 if gate_at(key, "family_alpha").overall == "PASS" else 1
            if v != 1:
                first[r], verdict[r] = j, v
                break
    return {**res, "mode": "e-average", "first": first, "verdict": verdict}


def at_budget(res: dict, pairs: int) -> np.ndarray:
    """Verdicts (0 / 1 / 2) when the budget affords ``pairs`` per task: INCONCLUSIVE unless decided by then."""
    last = max(j for j, n in enumerate(res["looks"]) if n <= pairs)
    return np.where(res["first"] <= last, res["verdict"], 1)


def rate(hits: np.ndarray) -> str:
    """A rate in % with its Monte Carlo error (1.96 standard errors; for 0, the one-sided 95% bound 3/n)."""
    n, p = hits.size, float(np.mean(hits))
    if p == 0:
        return f"0.0 (≤ {100 * 3 / n:.1f})"
    return f"{100 * p:.1f} ± {100 * 1.96 * math.sqrt(p * (1 - p) / n):.1f}"


def pif(v: np.ndarray) -> str:
    return " / ".join(f"{100 * float(np.mean(v == k)):.1f}" for k in range(3))


def print_tables(results: list[dict], budgets: Sequence[int] = (48, 112, 240)) -> None:
    """Wrong-verdict rates with their Monte Carlo error, then PASS / INC / FAIL at each budget, per mode."""
    by = {(r["sc"], r["mode"]): r for r in results}
    cases = list(dict.fromkeys(r["sc"] for r in results))
    modes = list(dict.fromkeys(r["mode"] for r in results))
    print("\nWrong verdict within 240 pairs per task, % (± 1.96 s.e.); FAIL via the pooled check (%)")
    print(f"| scenario | churn | wrong verdict | reps | {' | '.join(modes)} | FAIL via pooled: "
          f"{' / '.join(m for m in modes if m in MODES)} |")
    print("|---|---|---|---|" + "---|" * (len(modes) + 1))
    for sc in cases:
        wrong = 2 if sc.kind == "none" else 0
        cells = [rate(at_budget(by[(sc, m)], LOOKS[-1]) == wrong) for m in modes]
        via = [f"{100 * float(np.mean(by[(sc, m)]['by_pooled'] & (at_budget(by[(sc, m)], LOOKS[-1]) == 2))):.1f}"
               for m in modes if m in MODES]
        print(f"| {sc.label} | {sc.churn:.2f} | {'FAIL' if wrong else 'PASS'} | {len(by[(sc, modes[0])]['first'])} | "
              + " | ".join(cells) + f" | {' / '.join(via)} |")
    print("\nPASS / INC / FAIL (%) by pairs per task the budget affords")
    head = " | ".join(f"{m} @{p}" for m in modes for p in budgets)
    print(f"| scenario | churn | {head} |")
    print("|---|---|" + "---|" * (len(modes) * len(budgets)))
    for sc in cases:
        cells = [pif(at_budget(by[(sc, m)], p)) for m in modes for p in budgets]
        print(f"| {sc.label} | {sc.churn:.2f} | " + " | ".join(cells) + " |")


def simulate(reps: int, boundary_reps: int, churns: Sequence[float], seed: int = 0,
             averaged: bool = True) -> list[dict]:
    """Every scenario under both modes on the same draws (and, ``averaged``, the e-average alternative)."""
    out = []
    for i, sc in enumerate(scenarios(churns)):
        n = boundary_reps if sc.label.startswith("1.0x") else reps
        for mode in MODES:
            t0 = time.perf_counter()
            out.append(run(sc, n, mode, seed + i))
            print(f"  {sc.label}, churn {sc.churn:.2f}, {mode}: {time.perf_counter() - t0:.0f} s", flush=True)
        if averaged:
            out.append(run_averaged(out[-1]))
    return out


def print_adaptive(reps: int, churns: Sequence[float], seed: int = 200) -> None:
    """False FAIL under the adversarial allocation where every row is exactly at its tolerance, both modes."""
    print("\n| scenario | churn | reps | per_check | family_alpha | pairs of the most-drawn task |")
    print("|---|---|---|---|---|---|")
    for i, sc in enumerate(s for s in scenarios(churns) if s.label.startswith("1.0x")):
        a, b = (adaptive(sc, reps, mode, seed + i) for mode in MODES)
        print(f"| {sc.label} | {sc.churn:.2f} | {reps} | {rate(a['hits'])} | {rate(b['hits'])} | "
              f"{b['most_drawn']:.0f} |", flush=True)


def share_sweep(configs: Sequence[tuple[float, float]], reps: int, churns: Sequence[float], seed: int = 100) -> None:
    """Weights of the family (the pooled check's share of alpha, each flip-rate check's weight against a max_drop
    check's) against the power they buy (2x drop everywhere, on code only; 30% churn with no change in accuracy,
    which only max_flip_rate can FAIL) and the boundary's false FAIL (family_alpha, the same draws per config)."""
    print("\n| pooled share | flip weight | 1.0x every tolerance: FAIL @240 | 2x on code only: FAIL @112 / @240 | "
          "2x everywhere: FAIL @48 / @112 | 30% churn: FAIL @48 / @112 |")
    print("|---|---|---|---|---|---|")
    cases = [s for s in scenarios(churns) if s.label.startswith(("1.0x", "2x"))]
    cases.append(Multi("30% churn", 0.30, (0, 0, 0, 0), "drop"))
    for share, flip in configs:
        fam.POOLED_SHARE, fam.RELATIVE = share, {"max_flip_rate": flip}
        forget()
        cells: dict[str, list[np.ndarray]] = {k: [] for k in ("b", "c112", "c240", "e48", "e112", "f48", "f112")}
        for i, sc in enumerate(cases):
            r = run(sc, reps, "family_alpha", seed + i)
            tag = "b" if sc.label.startswith("1.0x") else "c" if "code" in sc.label else \
                "e" if "every" in sc.label else "f"
            for name, pairs in (("b", 240), ("c112", 112), ("c240", 240), ("e48", 48), ("e112", 112), ("f48", 48),
                                ("f112", 112)):
                if name[0] == tag:
                    cells[name].append(at_budget(r, pairs) == 2)
        m = {k: 100 * float(np.mean(np.concatenate(v))) for k, v in cells.items()}
        print(f"| {share:g} | {flip:g} | {m['b']:.1f} | {m['c112']:.1f} / {m['c240']:.1f} | {m['e48']:.1f} / "
              f"{m['e112']:.1f} | {m['f48']:.1f} / {m['f112']:.1f} |", flush=True)
    fam.POOLED_SHARE, fam.RELATIVE = 0.5, {}
    forget()


def set_prior(name: str) -> None:
    """The betting mixture's prior over the fractions c = 1/64 ... 1: "c" (shipped), "c2" (bolder), "uniform"."""
    c = np.arange(1, seq.GRID + 1) / seq.GRID
    w = {"c": c, "c2": c ** 2, "uniform": np.ones_like(c)}[name]
    seq._LOGW = np.log(w / w.sum())
    forget()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="replications per scenario (0: skip the main tables)")
    ap.add_argument("--boundary-reps", type=int, default=2000, help="replications of the 1.0x scenarios")
    ap.add_argument("--churn", default="0.01,0.05,0.10")
    ap.add_argument("--weights", default="", help="family weights to sweep, pooled share:flip weight pairs "
                    "(e.g. 0.0909:1,0.25:1,0.5:1,0.5:0.25)")
    ap.add_argument("--share-reps", type=int, default=300)
    ap.add_argument("--adaptive", type=int, default=0, help="replications of the adversarial allocation (0: skip)")
    ap.add_argument("--adaptive-churn", default="0.05")
    ap.add_argument("--averaged", action=argparse.BooleanOptionalAction, default=True,
                    help="also decide FAIL on the weighted average of the e-values (not shipped)")
    ap.add_argument("--kld", type=int, default=0, help="replications of the KLD dimension (gate_simulation_kld; "
                    "0: skip)")
    ap.add_argument("--kld-cost-reps", type=int, default=0, help="replications of what gating KLD costs the other "
                    "checks (0: skip)")
    ap.add_argument("--kld-caps", default="", help="caps (x max_kld) to sweep for the KLD checks alone, e.g. 2,4,8")
    ap.add_argument("--kld-check", type=int, default=0, help="KLD runs replayed through evaluate_gate per case")
    args = ap.parse_args()
    churns = [float(x) for x in args.churn.split(",")]
    t0 = time.perf_counter()
    memoize_numerics()
    if args.reps:
        print_tables(simulate(args.reps, args.boundary_reps, churns, averaged=args.averaged))
    if args.adaptive:
        print_adaptive(args.adaptive, [float(x) for x in args.adaptive_churn.split(",")])
    if args.weights:
        configs = [tuple(float(y) for y in x.split(":")) for x in args.weights.split(",")]
        share_sweep(configs, args.share_reps, churns)  # type: ignore[arg-type]
    if args.kld or args.kld_cost_reps or args.kld_caps:
        from benchmarks.sim import gate_simulation_kld as kld

        kld.main_tables(args.kld, args.kld_cost_reps, [float(x) for x in args.kld_caps.split(",") if x],
                        args.kld_check)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
