"""What the run keeps about verification: per (variant, task) tallies, and the audit that regenerates a sample.

``meta.verify[variant][task]``: samples verified / diverged, answer positions checked and near-ties among them
(the share the near-tie threshold flags, ``run.verify.NEAR_TIE``), and how many of those a decode step decided
(``stepped``, ``backends.inprocess.ties``). ``meta.verify_audit[variant][task]``: audited
samples (a seeded fraction of the verified ones, regenerated in full) and how many gave the same answer.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

from evalsuite.run.prepare import PreparedTask
from evalsuite.store.sqlite import Store


class VerifyTally:
    """Counts of one (variant, task)'s verification, added to what the run's meta already holds."""

    def __init__(self, store: Store, variant: str, task: str) -> None:
        self.store, self.variant, self.task = store, variant, task
        self.counts = {"verified": 0, "diverged": 0, "positions": 0, "near_ties": 0, "stepped": 0}

    def add(self, outcomes: Iterable[Any]) -> None:
        """Count ``run.verify.Verified`` outcomes."""
        for v in outcomes:
            self.counts["verified" if v.decode == "verified" else "diverged"] += 1
            self.counts["positions"] += v.check.checked
            self.counts["near_ties"] += v.check.near_ties
            self.counts["stepped"] += v.check.stepped

    def save(self) -> None:
        tallies = self.store.state().verify
        old = tallies.setdefault(self.variant, {}).get(self.task, {})
        tallies[self.variant][self.task] = {k: old.get(k, 0) + n for k, n in self.counts.items()}
        self.store.update_state(verify=tallies)
        self.counts = dict.fromkeys(self.counts, 0)


def audited(seed: int, sample_id: str, fraction: float) -> bool:
    """Whether ``sample_id`` is in the seeded audit fraction (fixed per sample: the same on resume)."""
    digest = hashlib.sha256(f"{seed}:audit:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64 < fraction


def audit(runner: Any, variant: Any, task: PreparedTask, fraction: float) -> None:
    """Regenerate the audit fraction of ``variant``'s verified samples of ``task`` in full (not stored) and
    record how many equal their verified answer."""
    name, store = variant.name, runner.store
    verified = {r.sample_id: r for r in store.samples(name, task.name) if r.decode == "verified"}
    audits = store.state().verify_audit
    entry = audits.setdefault(name, {}).setdefault(task.name, {"n": 0, "same": 0, "ids": [], "differ": []})
    picks = [i for i, s in enumerate(task.samples) if s.id in verified and s.id not in entry["ids"]
             and audited(runner.config.seed, s.id, fraction)]
    if not picks:
        return
    for rows in runner.backend.generate(variant, name, task, picks, runner.config.batch_size):
        for r in rows:
            entry["n"] += 1
            entry["ids"].append(r.sample_id)
            if r.output == verified[r.sample_id].output:
                entry["same"] += 1
            else:
                entry["differ"].append(r.sample_id)
    store.update_state(verify_audit=audits)
    runner.log(f"{name}/{task.name}: audit regenerated {entry['n']} verified samples, {entry['same']} identical")


def note_unverified(store: Store, log: Callable[[str], None], name: str, task: str, why: str) -> None:
    """Log once per (variant, task) why its answers are regenerated, and keep the reason in the run's meta."""
    notes = store.state().unverified
    if notes.get(name, {}).get(task) != why:
        log(f"{name}/{task}: answers regenerated, not verified: {why}")
        notes.setdefault(name, {})[task] = why
        store.update_state(unverified=notes)
