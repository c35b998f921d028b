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
    ci_low: float  # 95% CI of delta at this n: Tango's score interval (binary), else bootstrap (see compare)
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
    #: anytime-valid bounds on delta (sequential.diff_cs: each side at 95%, valid under repeated looks);
    #: the gate decides on these. None on rows built by hand: the gate then falls back to the CI.
    cs_low: float | None = None
    cs_high: float | None = None
    diff_sd: float = 0.0  # standard deviation of the paired differences (extrapolates more_needed)
    #: pairs where at least one side scored (binary: was right): the pairs that say something about the variant
    #: (None on rows built by hand). A slice both sides fail throughout adds pairs but no information.
    n_informative: int | None = None
    #: the distinct paired differences and their counts ((d, count), ...): what the pooled check bets on
    diff_counts: tuple[tuple[float, int], ...] = ()
    #: the same per [0, 1] secondary metric: name -> ((d, count), ...) (what a policy's metric checks bet on)
    metric_diffs: dict[str, tuple[tuple[float, int], ...]] = field(default_factory=dict)
    #: the variant's distinct scores and their counts ((score, count), ...): what a ``min_score`` check bets on
    score_counts: tuple[tuple[float, int], ...] = ()
    #: each paired sample's mean KLD per answer token (``KLDResult.mean``; samples with KLD over at least one token),
    #: sorted: what a ``max_kld`` check bets on (``kld_mean`` pools tokens instead)
    kld_samples: tuple[float, ...] = ()

    @property
    def flip_rate(self) -> float:
        return (self.flips_right_to_wrong + self.flips_wrong_to_right) / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flip_rate"] = self.flip_rate
        return d
