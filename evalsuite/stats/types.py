"""Typed results of paired comparison and gating (consumed by the gate, tenants, report)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
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

    @property
    def flip_rate(self) -> float:
        return (self.flips_right_to_wrong + self.flips_wrong_to_right) / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flip_rate"] = self.flip_rate
        return d


@dataclass(frozen=True)
class CheckResult:
    """One policy check (e.g. max_drop on needle, context_len>=2048) for one variant."""

    variant: str
    task: str
    slice: str
    check: str  # max_drop | min_recovery | max_flip_rate | max_kld | min_score | min_samples
    threshold: float
    observed: float
    verdict: Verdict
    reason: str  # one line
    ci: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateResult:
    """All checks, the per-variant verdicts and the overall verdict with its exit code."""

    checks: list[CheckResult] = field(default_factory=list)
    variant_verdicts: dict[str, Verdict] = field(default_factory=dict)
    overall: Verdict = "PASS"
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"overall": self.overall, "exit_code": self.exit_code,
                "variant_verdicts": self.variant_verdicts, "checks": [c.to_dict() for c in self.checks]}
