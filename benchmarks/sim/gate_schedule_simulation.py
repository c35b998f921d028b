"""Several tasks per variant, driven by the real scheduler (``evalsuite.run.schedule``) under a budget of simulated
seconds: how often is a variant FAILed or PASSed wrongly, how often does a real drop FAIL, and how soon?

The scenarios, the synthetic paired outcomes and the gating are ``benchmarks/sim/gate_simulation_tasks.py``'s (imported,
not re-implemented): four binary tasks with the shipped policy (``family_alpha``, the default), baseline accuracy
0.6, a ``churn`` fraction of pairs flipping half each way, a drop of f times a row's tolerance. Per replicate one
variant ("v"; the imported gate calls it "q"), baseline "bf16", tasks reasoning / json / code / needle, each task's
outcome stream drawn in advance (its order fixed, never selected on outcomes), of the task's cap (``--cap``) pairs.

Each replicate is driven by the run's own planner, ``evalsuite.run.rounds.Rounds``, on a simulated clock, as
``evalsuite.run.pipeline.drive`` drives a sequential run: gate (``gate_simulation_tasks.gate_at`` ->
``gate.decide.decision``) and a ``schedule.Book`` of what is held -> ``Rounds.next`` -> the chunk it plans: the
task's stream drawn up to its target (a stream holds ``--cap`` samples), then paired up to the chunk's end, charging
the simulated seconds of ``SECONDS`` (a slow 2-core Zen-1 CPU, the field report) to the clock and to a
``core.costs.RunCosts`` (the planner plans with measured costs once a task has been drawn, with
``RunCosts.expected``'s prior before); re-gated after every chunk that paired. Everything else (which task, how
far, the chunks of one decode batch of 32 with a first ``rounds.PROBE``-sample chunk while a task's cost is
unmeasured, each cut to what the budget left affords, the look ended when the variant FAILs or is no longer open
on the task, the budget's reserve for the end of the command) is ``Rounds``' own; loading and building are not
simulated. A replicate stops when the planner stops (the variant decided, no want in reach, or the budget spent);
it records the verdict, the pairs per task, the seconds spent and why it stopped.

The lockstep comparison gates the same streams at ``gate_simulation_tasks.LOOKS`` (16, 48, 112, 240 pairs of every
task), stopping at the first decisive look, with only the looks whose cost (n x the sum over tasks of baseline +
variant seconds per pair, 50.5 s per n here) fits in the same budget (after the same reserve).

    python -m benchmarks.sim.gate_schedule_simulation --help
    python -m benchmarks.sim.gate_schedule_simulation --reps 400 --boundary-reps 800 --budgets 540,1800,6000

Flags: ``--reps`` (per cell), ``--boundary-reps`` (the 1.0x scenario), ``--churn`` (comma list), ``--budgets``
(simulated seconds, comma list; 540 = ``make gate``'s 9 minutes), ``--cap`` (pairs per task), ``--one-task``
(which task the "2x drop on one task" scenario hits, or "all" for each of the four), ``--first-look-reps``
(the first-look table, 0 skips), ``--first-looks`` (comma list, default 8,16), ``--first-look-churn`` (its
churns), ``--shaped-reps`` (a variant shaped like the embedded model's ``w4g64``, ``SHAPED``; 0 skips), ``--seed``.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.sim import gate_simulation_tasks as gst

from evalsuite.core.costs import RunCosts  # noqa: E402
from evalsuite.core.decision import Decision  # noqa: E402
from evalsuite.gate.decide import decision as gate_decision  # noqa: E402
from evalsuite.run.rounds import Rounds  # noqa: E402
from evalsuite.run.schedule import Book  # noqa: E402

VARIANT, BASE, GATE_NAME = "v", "bf16", "q"  # the imported gate names its variant "q"
TASKS = ("reasoning", "json", "code", "needle")  # the run's --tasks order (the scheduler's tie-break)
#: simulated seconds per sample (baseline) and per pair (variant) on a slow 2-core Zen-1 CPU, from the field
#: report; a draw of n new samples of a task costs n x (baseline + variant)
SECONDS = {BASE: {"reasoning": 1.0, "json": 5.9, "code": 5.5, "needle": 12.0},
           VARIANT: {"reasoning": 1.4, "json": 6.9, "code": 5.8, "needle": 12.0}}
BATCH, FIRST_LOOK, CAP = 32, 16, 1000
PER_N = sum(SECONDS[BASE][t] + SECONDS[VARIANT][t] for t in TASKS)  # one lockstep pair of every task


def reserve(budget: float) -> float:
    """Seconds of the budget the draws may use (``Rounds.end``: its reserve held back)."""
    end = Rounds(budget_s=budget, started=0.0).end()
    assert end is not None
    return end


def key_of(codes: dict[str, np.ndarray], r: int, have: dict[str, int]) -> tuple:
    """``gate_simulation_tasks.look_key`` at each task's pairs (its key is in ``gst.TOL``'s task order)."""
    return gst.look_key(codes, r, [have[t] for t in gst.TOL])


def decide(codes: dict[str, np.ndarray], r: int, have: dict[str, int]) -> Decision:
    """The real gate on the pairs held, as the run's ``Decision`` (renamed to ``VARIANT``)."""
    d = gate_decision(gst.gate_at(key_of(codes, r, have), "family_alpha"))
    ren = lambda m: {VARIANT if k == GATE_NAME else k: v for k, v in m.items()}  # noqa: E731
    return Decision(ren(d.verdicts), ren(d.open), ren(d.failing), ren(d.pooled))


@dataclass
class Outcome:
    verdict: int  # gst.VERDICT: 0 PASS, 1 INCONCLUSIVE, 2 FAIL
    seconds: float
    pairs: dict[str, int]
    looks: int
    why: str = ""  # decided / spent (the budget) / reach (no want in reach: out of budget or cap)


def scheduled(codes: dict[str, np.ndarray], r: int, budget: float, first_look: int = FIRST_LOOK,
              cap: int = CAP) -> Outcome:
    """One replicate planned by ``Rounds`` (as ``run.pipeline.drive`` runs it), on simulated seconds."""
    have = {t: 0 for t in TASKS}  # pairs held: baseline and variant hold the same here (one variant)
    drawn = {t: 0 for t in TASKS}  # samples drawn of each task's stream (``cap`` long)
    costs, clock = RunCosts(), [0.0]
    plan = Rounds(caps={t: cap for t in TASKS}, round_size=first_look, budget_s=budget, log=lambda s: None,
                  batch_size=BATCH, started=0.0, clock=lambda: clock[0])
    d = decide(codes, r, have)
    while (chunk := plan.next(d, Book([VARIANT], list(TASKS), {BASE: dict(have), VARIANT: dict(have)}, dict(drawn),
                                      {}, costs, BASE))) is not None:
        task = chunk.tasks[0]
        if chunk.target is not None:
            drawn[task] = max(drawn[task], min(chunk.target, cap))
        k = (drawn[task] if chunk.upto is None else min(chunk.upto, drawn[task])) - have[task]
        if k <= 0:
            continue
        for name in (BASE, VARIANT):
            costs.add(name, task, k * SECONDS[name][task], k)
        clock[0] += k * (SECONDS[BASE][task] + SECONDS[VARIANT][task])
        have[task] += k
        d = decide(codes, r, have)  # the gate is a function of the pairs held: re-gated when they change
    verdict = gst.VERDICT[d.verdicts.get(VARIANT, "INCONCLUSIVE")]
    why = "reach" if plan.stop_reason.startswith(("every check", "sample cap")) else "spent"
    return Outcome(verdict, clock[0], dict(have), plan.looks, "decided" if verdict != 1 else why)


def lockstep(codes: dict[str, np.ndarray], r: int, budget: float) -> Outcome:
    """The fixed looks of every task that fit in ``budget``, stopping at the first decisive one."""
    n_last, verdict = 0, 1
    for n in gst.LOOKS:
        if n * PER_N > reserve(budget):
            break
        n_last = n
        verdict = gst.VERDICT[gst.gate_at(gst.look_key(codes, r, n), "family_alpha").overall]
        if verdict != 1:
            break
    return Outcome(verdict, n_last * PER_N, {t: n_last for t in TASKS}, 0)


def scenarios(churns: Sequence[float], one_task: str) -> list[gst.Multi]:
    """(a)-(c), (e) as ``gst.scenarios``; (d) the 2x drop on ``one_task`` (or each task, "all")."""
    out = []
    for label, drops, kind in (("no change", (0, 0, 0, 0), "none"), ("0.9x every tolerance", (0.9,) * 4, "none"),
                               ("1.0x every tolerance", (1.0,) * 4, "none")):
        out += [gst.Multi(label, c, drops, kind) for c in churns]
    for t in (gst.TOL if one_task == "all" else [one_task]):
        drops = tuple(2.0 if u == t else 0.0 for u in gst.TOL)
        out += [gst.Multi(f"2x drop on {t} only", c, drops, "drop") for c in churns]
    out += [gst.Multi("2x drop on every task", c, (2.0,) * 4, "drop") for c in churns]
    return out


def med(xs: Sequence[float]) -> str:
    return f"{np.median(xs):.0f}" if len(xs) else "–"


def cell(res: list[Outcome], wrong: int) -> dict:
    v = np.array([o.verdict for o in res])
    dec = [o for o in res if o.verdict != 1]
    return {"v": v, "wrong": gst.rate(v == wrong), "fail": gst.rate(v == 2), "pif": gst.pif(v),
            "sec": med([o.seconds for o in dec]), "pairs": med([sum(o.pairs.values()) for o in dec]),
            "spent": med([o.seconds for o in res])}


def main_tables(churns: Sequence[float], budgets: Sequence[float], reps: int, boundary_reps: int, one_task: str,
                cap: int, seed: int) -> None:
    rows = []
    for i, sc in enumerate(scenarios(churns, one_task)):
        n = boundary_reps if sc.label.startswith("1.0x") else reps
        codes = gst.draw(sc, n, cap, seed + i)
        t0 = time.perf_counter()
        for b in budgets:
            s = [scheduled(codes, r, b, cap=cap) for r in range(n)]
            ls = [lockstep(codes, r, b) for r in range(n)]
            rows.append((sc, b, n, s, ls))
        print(f"  {sc.label}, churn {sc.churn:.2f}: {n} reps, {time.perf_counter() - t0:.0f} s", flush=True)
    print("\nWrong verdicts: FAIL in (a)-(c), PASS in (d); % ± 1.96 s.e. (0: the one-sided 95% bound 3/n). "
          "Scheduler vs lockstep looks that fit the budget; PASS / INC / FAIL % of the scheduler")
    print("| scenario | churn | wrong | budget s | reps | scheduler | lockstep | scheduler PASS / INC / FAIL |")
    print("|---|---|---|---|---|---|---|---|")
    for sc, b, n, s, ls in rows:
        if sc.label.startswith("2x drop on every"):
            continue
        wrong = 2 if sc.kind == "none" else 0
        a, c = cell(s, wrong), cell(ls, wrong)
        print(f"| {sc.label} | {sc.churn:.2f} | {'FAIL' if wrong else 'PASS'} | {b:g} | {n} | {a['wrong']} | "
              f"{c['wrong']} | {a['pif']} |")
    print("\nPower: FAIL % (± 1.96 s.e.) and, of the decided replicates, the median seconds and pairs (all tasks) to "
          "the decision; the scheduler's median seconds spent over all replicates")
    print("| scenario | churn | budget s | reps | scheduler FAIL | median s / pairs | median s spent | "
          "lockstep FAIL | lockstep median s / pairs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sc, b, n, s, ls in rows:
        if sc.kind != "drop":
            continue
        a, c = cell(s, 2), cell(ls, 2)
        print(f"| {sc.label} | {sc.churn:.2f} | {b:g} | {n} | {a['fail']} | {a['sec']} / {a['pairs']} | "
              f"{a['spent']} | {c['fail']} | {c['sec']} / {c['pairs']} |")
    print("\nPairs per task at the end (scheduler, mean over replicates; order " + " / ".join(TASKS) + "), and why "
          "the run stopped: decided / budget spent / no want in reach (%)")
    print("| scenario | churn | budget s | pairs per task | decided / spent / out of reach % |")
    print("|---|---|---|---|---|")
    for sc, b, n, s, ls in rows:
        whys = [o.why for o in s]
        print(f"| {sc.label} | {sc.churn:.2f} | {b:g} | "
              + " / ".join(f"{np.mean([o.pairs[t] for o in s]):.0f}" for t in TASKS) + " | "
              + " / ".join(f"{100 * whys.count(w) / len(whys):.0f}" for w in ("decided", "spent", "reach")) + " |")


def first_look_table(churns: Sequence[float], budgets: Sequence[float], reps: int, first_looks: Sequence[int],
                     cap: int, seed: int) -> None:
    """Does a smaller first look decide sooner? The same streams under each ``Book.first_look``."""
    cases = [gst.Multi("2x drop on every task", c, (2.0,) * 4, "drop") for c in churns]
    cases += [gst.Multi("2x drop on needle only", c, (0, 0, 0, 2.0), "drop") for c in churns]
    cases += [gst.Multi("no change", c, (0,) * 4, "none") for c in churns]
    print("\nFirst look: FAIL % (± 1.96 s.e.), median seconds to a decision (decided replicates); "
          + " vs ".join(f"first_look {f}" for f in first_looks))
    print("| scenario | churn | budget s | reps | " + " | ".join(f"FAIL / PASS % @{f} | median s @{f}"
                                                            for f in first_looks) + " |")
    print("|---|---|---|---|" + "---|---|" * len(first_looks))
    for i, sc in enumerate(cases):
        codes = gst.draw(sc, reps, cap, seed + 500 + i)
        for b in budgets:
            parts = []
            for f in first_looks:
                res = [scheduled(codes, r, b, first_look=f, cap=cap) for r in range(reps)]
                v = np.array([o.verdict for o in res])
                parts.append(f"{gst.rate(v == 2)} / {100 * float(np.mean(v == 0)):.1f} | "
                             f"{med([o.seconds for o in res if o.verdict != 1])}")
            print(f"| {sc.label} | {sc.churn:.2f} | {b:g} | {reps} | " + " | ".join(parts) + " |", flush=True)


#: the embedded model's weight-quantized variants, roughly (issue 55's runs): per task (churn, absolute drop): json
#: churns ~30% of answers and loses ~2 points, reasoning half its tolerance, code 2x, needle 4x
SHAPED = {"reasoning": (0.10, 0.05), "json": (0.30, 0.02), "code": (0.05, 0.10), "needle": (0.05, 0.20)}


def shaped_table(budgets: Sequence[float], reps: int, cap: int, seed: int) -> None:
    """A variant shaped like the embedded model's ``w4g64`` (``SHAPED``): noisy json whose first looks lean to a
    FAIL, a real drop on the dear tasks. How often, and how soon, is it FAILed?"""
    rng = np.random.default_rng(seed + 900)
    codes = {t: rng.choice(4, size=(reps, cap), p=gst.outcome_probs(*SHAPED[t])).astype(np.int8) for t in gst.TOL}
    print("\nShaped like the embedded model's w4g64 (churn, drop per task: "
          + ", ".join(f"{t} {c:.2f}, {d:.2f}" for t, (c, d) in SHAPED.items()) + ")")
    print("| budget s | reps | FAIL % | median s to the FAIL | pairs per task at the end |")
    print("|---|---|---|---|---|")
    for b in budgets:
        res = [scheduled(codes, r, b, cap=cap) for r in range(reps)]
        v = np.array([o.verdict for o in res])
        print(f"| {b:g} | {reps} | {gst.rate(v == 2)} | {med([o.seconds for o in res if o.verdict == 2])} | "
              + " / ".join(f"{np.mean([o.pairs[t] for o in res]):.0f}" for t in TASKS) + " |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400, help="replicates per scenario and churn (0: skip)")
    ap.add_argument("--boundary-reps", type=int, default=800, help="replicates of the 1.0x scenario")
    ap.add_argument("--churn", default="0.01,0.05,0.10")
    ap.add_argument("--budgets", default="540,1800,6000", help="simulated seconds per run, comma list")
    ap.add_argument("--cap", type=int, default=CAP, help="pairs per task at most (each stream's length)")
    ap.add_argument("--one-task", default="needle", choices=[*gst.TOL, "all"],
                    help="the task of the 2x drop on one task")
    ap.add_argument("--first-look-reps", type=int, default=200, help="replicates of the first-look table (0: skip)")
    ap.add_argument("--first-looks", default="8,16")
    ap.add_argument("--first-look-churn", default="0.05")
    ap.add_argument("--shaped-reps", type=int, default=0,
                    help="replicates of a variant shaped like the embedded model's w4g64 (0: skip)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    churns = [float(x) for x in args.churn.split(",")]
    budgets = [float(x) for x in args.budgets.split(",")]
    t0 = time.perf_counter()
    gst.memoize_numerics()
    print("seconds per pair (baseline + variant), per task: "
          + ", ".join(f"{t} {SECONDS[BASE][t] + SECONDS[VARIANT][t]:.1f}" for t in TASKS)
          + f"; lockstep n pairs of every task: {PER_N:.1f} n s; budgets {budgets} (draws get "
          + ", ".join(f"{reserve(b):.0f}" for b in budgets) + " s)")
    if args.reps:
        main_tables(churns, budgets, args.reps, args.boundary_reps, args.one_task, args.cap, args.seed)
    if args.first_look_reps:
        first_look_table([float(x) for x in args.first_look_churn.split(",")], budgets, args.first_look_reps,
                         [int(x) for x in args.first_looks.split(",")], args.cap, args.seed)
    if args.shaped_reps:
        shaped_table(budgets, args.shaped_reps, args.cap, args.seed)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
