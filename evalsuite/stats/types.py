"""Typed results of paired comparison (consumed by the gate, tenants, report)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ALL = "all"  # the slice name covering every sample of a task


@dataclass(frozen=True)
class PairedStats:
    """Variant vs baseline on the same sample ids of one (task, slice)."""

    variant: str
    task: str
    slice: str  # "all", or "key=value" such as "context_len=2048"
    n: int
    baseline_mean: float
    variant_mean: float
    delta: float  # variant - baseline
    ci_low: float  # paired bootstrap 95% CI of delta
    ci_high: float
    binary: bool
    flips_right_to_wrong: int = 0
    flips_wrong_to_right: int = 0
    mcnemar_p: float | None = None
    agreement: float = 0.0  # fraction of identical output texts
    kld_mean: float | None = None
    kld_p99: float | None = None
    kld_max: float | None = None
    top1_agreement: float | None = None
    n_unpaired: int = 0  # samples of this (task, slice) present on one side only (excluded from n)
    #: numeric secondary metrics of the task (Score.metrics): name -> {"baseline", "variant", "delta"} means
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def flip_rate(self) -> float:
        return (self.flips_right_to_wrong + self.flips_wrong_to_right) / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flip_rate"] = self.flip_rate
        return d
