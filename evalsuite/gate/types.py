"""Typed results of gating: one CheckResult per policy check, a GateResult per run (consumed by tenants, report)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
RANK: dict[str, int] = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}  #: an unknown verdict string ranks as PASS
POOLED = "*"  #: the task name of the pooled check (``gate.pooled``), in the results and the report
_E = TypeVar("_E")


def worst(verdicts: Iterable[str], empty: _E = "PASS") -> str | _E:  # type: ignore[assignment]
    """FAIL over INCONCLUSIVE over PASS; ``empty`` for no verdicts (the gate: PASS; the report: None, "no
    verdict")."""
    return max(verdicts, key=lambda v: RANK.get(v, 0), default=empty)


def heads_to_fail(check: str, observed: float, threshold: float) -> bool:
    """Whether an undecided per-task check's observed value is already beyond its threshold (its estimate heads to
    a FAIL, and a PASS would need the value to come back): a drop past ``max_drop``, flips past ``max_flip_rate``,
    a capped mean KLD past ``max_kld``, a score below ``min_score``.
    ``gate.decide.leans_fail`` and the report's ``pass_needs`` ask this."""
    if check == "max_drop":
        return observed < -threshold
    if check in ("max_flip_rate", "max_kld"):
        return observed > threshold
    if check == "min_score":
        return observed < threshold
    return False


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
    n: int = 0  # paired samples the decision used
    more_needed: int | None = None  # INCONCLUSIVE: about how many more paired samples would decide it
    #: the pooled check (task "*"): the tasks it pools, and each one's pairs (so the runner can share out
    #: more_needed); empty on every other check
    pools: tuple[tuple[str, int], ...] = ()
    #: the pooled check heading to a FAIL: per pooled task beyond its own tolerance, about how many more pairs of
    #: that task alone would decide it (``stats.pooled.more_needed_from``); empty on every other check
    needs_from: tuple[tuple[str, int], ...] = ()
    #: the error level of the check's FAIL side (its share of the variant's alpha, ``gate.family``); None on
    #: min_samples (never a FAIL)
    alpha: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateResult:
    """All checks, the per-variant verdicts and the overall verdict with its exit code."""

    checks: list[CheckResult] = field(default_factory=list)
    variant_verdicts: dict[str, Verdict] = field(default_factory=dict)
    overall: Verdict = "PASS"
    exit_code: int = 0
    #: variant -> the false-FAIL guarantee in force, one line (``gate.family.Family.describe``)
    guarantee: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"overall": self.overall, "exit_code": self.exit_code, "variant_verdicts": self.variant_verdicts,
                "checks": [c.to_dict() for c in self.checks], "guarantee": self.guarantee}
