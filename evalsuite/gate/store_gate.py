"""Gate a stored run: store -> paired stats -> verdicts (no model needed)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.gate.policy import Policy, load_policy
from evalsuite.gate.verdict import evaluate_gate, slice_filters
from evalsuite.store.records import NOISE_SUFFIX, SampleResult
from evalsuite.store.sqlite import Store
from evalsuite.stats.slices import compare, noise_floor
from evalsuite.gate.types import GateResult
from evalsuite.stats.types import PairedStats


@dataclass
class GatedRun:
    """Everything the report and the CLI need from one gated run."""

    baseline: str
    variants: list[str]
    stats: list[PairedStats]
    gate: GateResult
    noise: list[PairedStats] | None
    policy: Policy
    expected: list[str] = field(default_factory=list)  # the tasks the run was asked for

    def under(self, policy: Policy) -> GateResult:
        """The same run gated under another policy (a tenant's): ``evaluate_gate`` on these stats, which hold that
        policy's selector slices when ``gate_store`` was given it in ``also``."""
        return evaluate_gate(self.stats, policy, self.variants, self.expected)


Key = tuple[tuple[int, int], ...]  #: what a (variant, task)'s stats were computed from: (rows, last rowid) per table


class StoreGate:
    """Gates a stored run, look after look: the policy is parsed once (a ``Policy``, or a path or None for the
    shipped one) and each (variant, task)'s paired statistics are recomputed only when its rows, its baseline's or
    its KLD rows changed since the last look (rows are only ever added: a row count and the last row id say it).
    The statistics are those ``gate_run`` computes (``stats.slices``: a task's rows alone decide its rows of
    the table), in the same order."""

    def __init__(self, policy: Policy | Path | None = None, also: Sequence[Policy] = ()) -> None:
        self.policy = policy if isinstance(policy, Policy) else load_policy(policy)
        self.also = list(also)
        self.filters = slice_filters(self.policy, self.also)
        self._run: tuple[Path, str] | None = None  # the store and baseline the caches hold
        self._stats: dict[tuple[str, str], tuple[Key, list[PairedStats]]] = {}
        self._base: dict[str, tuple[tuple[int, int], list[SampleResult]]] = {}
        self._last: tuple[tuple, GateResult] | None = None  # the last look's inputs and gate result

    def __call__(self, store: Store) -> GatedRun:
        """The run as ``store`` holds it now, gated."""
        state = store.state()
        baseline = state.baseline
        if (store.path, baseline) != self._run:  # another run (or baseline): nothing computed applies
            self._run, self._stats, self._base, self._last = (store.path, baseline), {}, {}, None
        order = state.variant_order or store.variants_present()
        present = set(store.variants_present())
        # every variant the run was asked for: one without samples (a budget spent before it ran) is INCONCLUSIVE
        # ("no paired samples"), never silently left out of the verdict
        variants = [v for v in order if v != baseline and not v.endswith(NOISE_SUFFIX)]
        rows, klds = store.row_marks("samples"), store.row_marks("kld")
        base_tasks = sorted(t for v, t in rows if v == baseline)
        stats: list[PairedStats] = []
        keys: list[tuple[str, str, Key]] = []
        for v in variants:
            tasks = base_tasks + sorted(t for w, t in rows if w == v and t not in base_tasks)
            for task in tasks:
                keys.append((v, task, (rows.get((baseline, task), (0, 0)), rows.get((v, task), (0, 0)),
                                       klds.get((v, task), (0, 0)))))
                stats += self._task_stats(store, baseline, *keys[-1])
        expected = list((state.config or {}).get("tasks") or [])
        look = (tuple(variants), tuple(expected), tuple(keys))
        if self._last is None or self._last[0] != look:  # the same inputs gate to the same result
            self._last = (look, evaluate_gate(stats, self.policy, variants, expected))
        gate = self._last[1]
        noise = None
        noise_name = baseline + NOISE_SUFFIX
        if noise_name in present:
            noise = noise_floor(store.samples(baseline), store.samples(noise_name), kld=store.kld(noise_name))
        return GatedRun(baseline, variants, stats, gate, noise, self.policy, expected)

    def _task_stats(self, store: Store, baseline: str, variant: str, task: str, key: Key) -> list[PairedStats]:
        """The stats rows of (``variant``, ``task``): those of the last look where ``key`` is unchanged."""
        held = self._stats.get((variant, task))
        if held is not None and held[0] == key:
            return held[1]
        base = self._base.get(task)
        if base is None or base[0] != key[0]:
            base = (key[0], store.samples(baseline, task))
            self._base[task] = base
        out = compare(base[1], store.samples(variant, task), store.kld(variant, task), None, None,
                      filters=self.filters, variant_name=variant)
        self._stats[(variant, task)] = (key, out)
        return out


def gate_store(store: Store, policy: Policy | Path | None = None, also: Sequence[Policy] = ()) -> GatedRun:
    """Compare every stored variant with the stored baseline and gate it against the policy (a ``Policy``, or a
    policy file, or None: the shipped one); the stats also hold the selector slices of the policies in ``also``
    (tenants' policies, ``GatedRun.under``). A run gated look after look keeps one ``StoreGate``."""
    return StoreGate(policy, also)(store)
