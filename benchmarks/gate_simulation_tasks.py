"""Several tasks per variant, every check together: per-task max_drop and max_flip_rate, the needle
``context_len>=2048`` slice, and the pooled early FAIL (evalsuite.stats.pooled).

Four binary tasks with the shipped tolerances (reasoning 0.10, code / json / needle 0.05; needle's long third
0.10). A ``churn`` fraction of pairs flips both ways; a drop of ``f`` times a task's tolerance adds that many
right->wrong flips. The variant's tasks are drawn in lockstep on the runner's growing rounds (16, +32, +64, ...
up to ``pairs`` per task, what the budget affords) and re-gated at every look; the variant stops when decided
(any check FAILs, or every per-task check PASSes), or, INCONCLUSIVE, when no open check could decide within
what is left (the runner's out-of-reach rule, on ``more_needed``). Used by gate_simulation.py (``--tasks``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from evalsuite.stats import pooled
from evalsuite.stats import sequential as seq

TOL = {"reasoning": 0.10, "code": 0.05, "json": 0.05, "needle": 0.05}
SLICE_TOL, FLIP_LIMIT = 0.10, 0.2  # needle context_len>=2048 (every third needle sample), max_flip_rate
DIFF_V, FLIP_V = np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0])
MIN_SAMPLES, P_BASE = 10, 0.6


@dataclass(frozen=True)
class Multi:
    """Per-task drop in units of the task's tolerance (0: none) at a churn; ``kind``: which verdict is right."""

    label: str
    churn: float
    drops: tuple[float, ...]  # in TOL's order
    kind: str  # "none" (FAIL is wrong), "drop" (PASS is wrong)


def scenarios() -> list[Multi]:
    out = [Multi("no change", c, (0, 0, 0, 0), "none") for c in (0.01, 0.05, 0.10, 0.15)]
    out += [Multi("every task 0.8x its tolerance", c, (0.8,) * 4, "none") for c in (0.01, 0.05, 0.10)]
    out += [Multi("2x drop on code only", c, (0, 2, 0, 0), "drop") for c in (0.01, 0.05, 0.10)]
    out += [Multi("2x drop on every task", c, (2,) * 4, "drop") for c in (0.01, 0.05, 0.10, 0.15)]
    return out + [Multi("collapse (-0.5 on every task)", 0.0, (5, 10, 10, 10), "drop")]


def looks_for(pairs: int, first: int = 16) -> np.ndarray:
    """The runner's looks: ``first``, then rounds doubling (16, 48, 112, 240, ...) up to ``pairs``."""
    out, step = [first], 2 * first
    while out[-1] < pairs:
        out.append(min(pairs, out[-1] + step))
        step *= 2
    return np.array(out)


def draw(sc: Multi, reps: int, n: int, seed: int) -> list[np.ndarray]:
    """Per task, (reps, n) outcome codes: 0 right->wrong, 1 unchanged, 2 wrong->right."""
    rng = np.random.default_rng(seed)
    out = []
    for f, t in zip(sc.drops, TOL.values()):
        r2w, w2r = sc.churn / 2 + f * t, sc.churn / 2
        out.append(rng.choice(3, size=(reps, n), p=[r2w, 1 - r2w - w2r, w2r]).astype(np.int8))
    return out


def cum(codes: np.ndarray, looks: np.ndarray, every: int = 1, offset: int = 0) -> np.ndarray:
    """(reps, looks, 3) counts at every look, over the samples i with i % every == offset."""
    mask = (np.arange(codes.shape[1]) % every == offset)[None, :]
    return np.stack([np.cumsum((codes == k) & mask, axis=1)[:, looks - 1] for k in range(3)], -1).astype(float)


def _pass_fail(cnt: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """One row's max_drop t and max_flip_rate checks: (both PASS, either FAILs)."""
    flips = np.stack([cnt[..., 1], cnt[..., 0] + cnt[..., 2]], -1)
    ok = seq.rejects(DIFF_V, cnt, (1 - t) / 2) & seq.rejects(FLIP_V, flips, FLIP_LIMIT, upper=True)
    bad = seq.rejects(DIFF_V, cnt, (1 - t) / 2, upper=True) | seq.rejects(FLIP_V, flips, FLIP_LIMIT)
    return ok, bad


def checks(codes: list[np.ndarray], looks: np.ndarray, use_pooled: bool = True) -> dict[str, np.ndarray]:
    """(reps, looks) booleans: variant PASS, variant FAIL, pooled FAIL, and the per-row counts for estimates."""
    rows = [(cum(c, looks), t) for c, t in zip(codes, TOL.values())]
    rows.append((cum(codes[3], looks, 3, 2), SLICE_TOL))
    passed, failed = np.ones(rows[0][0].shape[:2], bool), np.zeros(rows[0][0].shape[:2], bool)
    for cnt, t in rows:
        ok, bad = _pass_fail(cnt, t)
        few = cnt.sum(-1) < MIN_SAMPLES  # the gate's min_samples: only an INCONCLUSIVE check below it
        passed &= ok & ~few
        failed |= bad & ~few
    pool = pooled.rejects([(DIFF_V, cnt, t) for cnt, t in rows[:4]]) if use_pooled else np.zeros_like(failed)
    return {"pass": passed & ~failed & ~pool, "fail": failed | pool, "pooled": pool & ~failed, "rows": rows}


@lru_cache(maxsize=None)
def _need(r2w: int, same: int, w2r: int, t: float) -> int:
    """Pairs after which this row's quickest open check would decide (0: decided)."""
    drop = seq.more_needed(DIFF_V, np.array([r2w, same, w2r], float), (1 - t) / 2)
    flip = seq.more_needed(FLIP_V, np.array([same, r2w + w2r], float), FLIP_LIMIT)
    return min([x for x in (drop, flip) if x > 0] or [0])


@lru_cache(maxsize=None)
def _pooled_need(key: tuple[tuple[int, int, int], ...]) -> int:
    return pooled.more_needed([(DIFF_V, np.array(c, float), t) for c, t in zip(key, TOL.values())])


def reachable(res: dict, r: int, j: int, left: int, use_pooled: bool) -> bool:
    """Whether some open check of run ``r`` at look ``j`` could decide within ``left`` more pairs per task."""
    rows = res["rows"]
    for k, (cnt, t) in enumerate(rows):
        a, b, c = (int(x) for x in cnt[r, j])
        scale = 3 if k == 4 else 1  # the slice holds a third of needle's samples
        if 0 < _need(a, b, c, t) * scale <= left:
            return True
    if not use_pooled:
        return False
    key = tuple(tuple(int(x) for x in cnt[r, j]) for cnt, _ in rows[:4])
    return 0 < _pooled_need(key) <= 4 * left


def run(sc: Multi, reps: int, pairs: int, seed: int, use_pooled: bool = True) -> dict:
    """Sequential verdicts (0 PASS, 1 INC, 2 FAIL), pairs per task used, per-look PASS / FAIL rates."""
    looks = looks_for(pairs)
    codes = draw(sc, reps, int(looks[-1]), seed)
    res = checks(codes, looks, use_pooled)
    verdict, used = np.ones(reps, np.int8), np.full(reps, looks[-1])
    live = np.ones(reps, bool)
    for j, n in enumerate(looks):
        done = live & (res["pass"][:, j] | res["fail"][:, j])
        verdict[done], used[done] = np.where(res["fail"][done, j], 2, 0), n
        live &= ~done
        if j + 1 < len(looks):
            for r in np.nonzero(live)[0]:
                if not reachable(res, int(r), j, int(looks[-1] - n), use_pooled):
                    live[r], used[r] = False, n
    early_pool = np.array([res["pooled"][r, :].any() and verdict[r] == 2 for r in range(reps)])
    return {"sc": sc, "verdict": verdict, "used": used, "looks": looks, "look_pass": res["pass"].mean(0),
            "codes": codes,
            "look_fail": res["fail"].mean(0), "by_pooled": float(early_pool.mean())}


def _worst(a: dict) -> str:
    """The largest rate of the wrong verdict when gated once at any single look (no stopping)."""
    if a["sc"].kind == "none":
        return f"FAIL {100 * a['look_fail'].max():.1f}%"
    return f"PASS {100 * a['look_pass'].max():.1f}%"


def set_prior(name: str) -> None:
    """The betting mixture's prior over the fractions c = 1/64 ... 1: "c" (shipped), "c2" (bolder), "uniform"."""
    c = np.arange(1, seq.GRID + 1) / seq.GRID
    w = {"c": c, "c2": c ** 2, "uniform": np.ones_like(c)}[name]
    seq._LOGW = np.log(w / w.sum())
    _need.cache_clear()
    _pooled_need.cache_clear()


def print_multi(reps: int, pairs_list: list[int], seed: int = 0) -> list[dict]:
    """The table per scenario and budget (pairs per task), with the pooled check and without it."""
    print("\nSeveral tasks (reasoning 0.10, code / json / needle 0.05, needle >=2048 slice 0.10, flips 0.2, pooled); "
          "PASS / INC / FAIL (%), mean pairs per task; worst single-look false rate over the looks")
    print("| scenario | churn | pairs per task | PASS / INC / FAIL | mean n | FAIL with pooled check involved | "
          "without pooled: PASS / INC / FAIL | worst single look: false verdict |")
    print("|---|---|---|---|---|---|---|---|")
    out = []
    for pairs in pairs_list:
        for i, sc in enumerate(scenarios()):
            a, b = run(sc, reps, pairs, seed + i), run(sc, reps, pairs, seed + i, use_pooled=False)
            pa = [100 * float(np.mean(a["verdict"] == k)) for k in range(3)]
            pb = [100 * float(np.mean(b["verdict"] == k)) for k in range(3)]
            print(f"| {sc.label} | {sc.churn:.2f} | {pairs} | {pa[0]:.1f} / {pa[1]:.1f} / {pa[2]:.1f} | "
                  f"{a['used'].mean():.0f} | {100 * a['by_pooled']:.1f}% | {pb[0]:.1f} / {pb[1]:.1f} / {pb[2]:.1f} | "
                  f"{_worst(a)} |")
            out.append({**a, "pairs": pairs, "plain": b})
    return out


def replay(codes: list[np.ndarray], r: int, n: int) -> int:
    """The verdict (0 / 1 / 2) of the real ``gate_run`` with the shipped policy (no KLD) on run ``r``'s first
    ``n`` pairs of every task: the bulk above must agree with it."""
    from evalsuite.gate.policy import load_policy
    from evalsuite.gate.verdict import gate_run
    from evalsuite.core.records import SampleResult

    base, var = [], []
    for task, c in zip(TOL, codes):
        rng = np.random.default_rng(n)
        for i, code in enumerate(c[r, :n]):
            b = bool(code == 0) if code != 1 else bool(rng.random() < P_BASE)
            v = bool(code == 2) if code != 1 else b
            meta = {"context_len": 2048 if i % 3 == 2 else 512} if task == "needle" else {}
            for out, name, right in ((base, "bf16", b), (var, "q", v)):
                out.append(SampleResult(name, task, "1", f"{task}-{i}", f"h{i}", "", float(right), metadata=meta))
    _, gate = gate_run(base, {"q": var}, {}, load_policy(), set(TOL), slice_keys=[])
    return {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}[gate.overall]


def adaptive(sc: Multi, reps: int, total: int, seed: int, step: int = 16) -> dict:
    """The runner's later-round allocation, made adversarial: after 16 pairs per task, every further draw of
    ``step`` pairs goes to the task whose observed margin (Δ + tolerance) is lowest, i.e. the task heading to a
    FAIL (as ``Rounds.quickest_first`` puts ``Decision.failing`` first), until ``total`` pairs over all tasks.
    The choice depends on the pairs seen so far (predictable), so under "every task within its tolerance" the
    per-task and pooled checks must still FAIL at most α. Returns FAIL rates (any check, pooled alone) and the
    mean pairs per task the allocation gave the most-drawn task."""
    n_max = total  # a task can at most take every draw
    codes = draw(sc, reps, n_max, seed)
    tols = list(TOL.values())
    taken = np.full((reps, len(tols)), 16)
    failed, by_pool = np.zeros(reps, bool), np.zeros(reps, bool)
    while True:
        cnts = [np.stack([((c == k) & (np.arange(n_max)[None, :] < taken[:, [j]])).sum(1) for k in range(3)],
                         -1).astype(float) for j, c in enumerate(codes)]
        bad = np.zeros(reps, bool)
        for cnt, t in zip(cnts, tols):
            bad |= _pass_fail(cnt, t)[1] & (cnt.sum(-1) >= MIN_SAMPLES)
        pool = pooled.rejects([(DIFF_V, cnt, t) for cnt, t in zip(cnts, tols)])
        failed |= bad | pool
        by_pool |= pool & ~bad
        if taken.sum(1).max() + step > total:
            break
        margin = np.stack([(cnt[:, 2] - cnt[:, 0]) / cnt.sum(-1) + t for cnt, t in zip(cnts, tols)], 1)
        taken[np.arange(reps), margin.argmin(1)] += step
    return {"sc": sc, "false_fail": float(failed.mean()), "by_pooled": float(by_pool.mean()),
            "most_drawn": float(taken.max(1).mean())}


def print_adaptive(reps: int, total: int = 4 * 240, seed: int = 0) -> list[dict]:
    """False FAIL under the adversarial allocation, for the scenarios where a FAIL is wrong."""
    print(f"\nAdaptive allocation (each draw of 16 to the task with the lowest observed margin), {total} pairs in all; "
          "false FAIL (any check) where every task is within its tolerance")
    print("| scenario | churn | false FAIL | of which pooled alone | pairs of the most-drawn task |")
    print("|---|---|---|---|---|")
    cases = [s for s in scenarios() if s.kind == "none"]
    cases += [Multi("every task at its tolerance", c, (1,) * 4, "none") for c in (0.01, 0.05, 0.10)]
    out = []
    for i, sc in enumerate(cases):
        a = adaptive(sc, reps, total, seed + i)
        print(f"| {sc.label} | {sc.churn:.2f} | {100 * a['false_fail']:.1f}% | {100 * a['by_pooled']:.1f}% | "
              f"{a['most_drawn']:.0f} |")
        out.append(a)
    return out
