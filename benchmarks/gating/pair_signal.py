"""Where a run's pairs carry signal: per task and slice, the share of pairs both sides fail, both get right, or
that differ (the discordant pairs, the only ones that move Δ), and the baseline's accuracy on the whole slice.

A population on which the baseline (nearly) always fails or always succeeds gives mostly concordant pairs: they
narrow the interval of Δ on that population but cost as much as any other pair. Choosing where to draw goes by
these whole-slice figures (docs/gate.md, Informative pairs), never sample by sample.

    .venv/bin/python -m benchmarks.gating.pair_signal runs/RUN [--variant w4g64] [--slice source --slice difficulty]
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from evalsuite.store.sqlite import Store


def shares(run: Path, variant: str, keys: list[str]) -> list[tuple[str, str, int, float, float, float, float]]:
    """(task, slice, pairs, both fail, both right, discordant, baseline accuracy) rows: every task, then each
    value of each slice key."""
    store = Store.open(run)
    base = {(r.task, r.sample_id): r for r in store.samples(store.state().baseline)}
    groups: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in store.samples(variant):
        b = base.get((r.task, r.sample_id))
        if b is None:
            continue
        groups[(r.task, "all")].append((b.score, r.score))
        for key in keys:
            if key in b.metadata:
                groups[(r.task, f"{key}={b.metadata[key]}")].append((b.score, r.score))
    rows = []
    for (task, where), pairs in sorted(groups.items()):
        n = len(pairs)
        fail = sum(1 for a, v in pairs if a == 0 and v == 0) / n
        right = sum(1 for a, v in pairs if a == 1 and v == 1) / n
        rows.append((task, where, n, fail, right, 1 - fail - right, sum(a for a, _ in pairs) / n))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--variant", default="w4g64")
    ap.add_argument("--slice", action="append", default=None, help="metadata keys (default: source, difficulty)")
    args = ap.parse_args()
    print(f"{'task':<10} {'slice':<26} {'pairs':>5} {'both fail':>9} {'both right':>10} {'differ':>7} {'base acc':>8}")
    for task, where, n, fail, right, differ, acc in shares(args.run, args.variant, args.slice or ["source",
                                                                                                  "difficulty"]):
        print(f"{task:<10} {where:<26} {n:>5} {fail:>9.0%} {right:>10.0%} {differ:>7.0%} {acc:>8.0%}")


if __name__ == "__main__":
    main()
