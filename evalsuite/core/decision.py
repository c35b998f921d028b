"""What a sequential run asks after each task and round: which (variant, task) are still open, how many more pairs
each needs, which variants are decided. ``evalsuite.run.rounds`` asks a ``Decide``; ``evalsuite.gate.decide``
builds one from a gate policy, and the CLI hands it down (run does not import the gate)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from evalsuite.store.sqlite import Store

DEFAULT_CAP = 1000  #: the safety cap per task of an endless stream when --max-samples is not given (run.draws)


@dataclass(frozen=True)
class Decision:
    """The gate's answer on what a run has stored so far."""

    #: variant -> PASS | FAIL | INCONCLUSIVE
    verdicts: Mapping[str, str] = field(default_factory=dict)
    #: variant -> task -> pairs after which its quickest open check would decide (0: no estimate); a variant that
    #: FAILs, or whose checks on a task are decided, has no entry for it
    open: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: the part of ``open`` heading to a FAIL: variant -> task -> pairs its quickest open per-task check whose
    #: observed value is already beyond its threshold needs (one such check deciding decides the variant; a PASS
    #: needs them all)
    failing: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: a pooled check heading to a FAIL (its observed mean margin below 0): variant -> task -> the pairs of that
    #: task alone it needs, for each pooled task whose own drop is beyond its tolerance (pairs of a task above the
    #: pooled mean would pull the bound away from a FAIL): the cheapest of them may supply them
    pooled: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def failed(self) -> set[str]:
        """The variants that FAIL (a FAIL on anytime-valid sequences stands: they need no more samples)."""
        return {v for v, verdict in self.verdicts.items() if verdict == "FAIL"}


class Decide(Protocol):
    """Decides a stored run (``evalsuite.gate.decide.store_decider``)."""

    def __call__(self, store: "Store") -> Decision: ...
