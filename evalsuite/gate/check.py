"""What every gate check is built from: a three-way comparison of an interval with a limit, the check's error levels
(its PASS side at the policy's alpha, its FAIL side at its share of the variant's family, ``gate.family``) and the
CheckResult with its one-line reason."""
from __future__ import annotations

from dataclasses import dataclass

from evalsuite.gate.family import level_note
from evalsuite.gate.types import CheckResult, Verdict
from evalsuite.stats import sequential as seq
from evalsuite.stats.types import ALL, PairedStats

EPS = 1e-12  # float slack so that e.g. a CI bound of exactly -0.05 meets max_drop 0.05
WORDS = {"PASS": "within", "FAIL": "exceeds", "INCONCLUSIVE": "straddles"}


def at_least(lo: float, hi: float, limit: float) -> Verdict:
    """Three-way verdict of 'value >= limit' from an interval of the value."""
    return "PASS" if lo >= limit - EPS else "FAIL" if hi < limit - EPS else "INCONCLUSIVE"


def at_most(lo: float, hi: float, limit: float) -> Verdict:
    """Three-way verdict of 'value <= limit' from an interval of the value."""
    return "PASS" if hi <= limit + EPS else "FAIL" if lo > limit + EPS else "INCONCLUSIVE"


def label(task: str, slice_name: str) -> str:
    """``needle[context_len>=2048]``, or the task alone for its ``all`` row."""
    return task if slice_name == ALL else f"{task}[{slice_name}]"


def pairs_text(st: PairedStats) -> str:
    """``n=40, 9 with a side right, 2 unpaired``: what a reason ends with."""
    info = f", {st.n_informative} with a side right" if st.n_informative is not None else ""
    return f"n={st.n}" + info + (f", {st.n_unpaired} unpaired" if st.n_unpaired else "")


@dataclass(frozen=True)
class CheckLevels:
    """A check's error levels: its PASS side at the policy's alpha, its FAIL side at its share of the family."""

    alpha: float = seq.ALPHA
    fail: float = seq.ALPHA

    def low_high(self, fail_high: bool) -> tuple[float, float]:
        """(lower bound's level, upper bound's level) when the FAIL side is the upper bound (``fail_high``)."""
        return (self.alpha, self.fail) if fail_high else (self.fail, self.alpha)

    def note(self, side: str) -> str:
        return level_note(side, self.fail, self.alpha)


def make_check(st: PairedStats, check: str, threshold: float, observed: float, verdict: Verdict, reason: str,
               ci: tuple[float, float] | None = None, more: int | None = None, level: float | None = None,
               n: int | None = None) -> CheckResult:
    """The CheckResult of one check on row ``st``: ``more`` kept (at least 1) only when INCONCLUSIVE; ``n``: the
    observations it used, when not the row's pairs (a ``max_kld`` check: the pairs with KLD)."""
    more = max(more, 1) if verdict == "INCONCLUSIVE" and more is not None else None
    tail = f"; ~{more} more pairs to decide" if more else ""
    return CheckResult(st.variant, st.task, st.slice, check, threshold, observed, verdict,
                       f"{label(st.task, st.slice)}: {reason} ({pairs_text(st)}){tail}", ci,
                       st.n if n is None else n, more, alpha=level)
