"""cli.finish: the verdict table printed after a run."""
from __future__ import annotations

from types import SimpleNamespace

from evalsuite.cli.finish import verdict_rows
from evalsuite.stats.types import PairedStats


def _stat(variant: str, task: str, n: int) -> PairedStats:
    return PairedStats(variant, task, "all", n, 0.5 if n else 0.0, 0.25 if n else 0.0, -0.25 if n else 0.0,
                       -0.5 if n else -1.0, -0.05 if n else 1.0, True, 4 if n else 0, 0, 0.5, 0.9)


def test_a_task_no_pair_reached_prints_no_delta():
    """A variant that FAILed before a task was drawn for it: the row says so instead of Δ +0.000 [-1, +1]."""
    gated = SimpleNamespace(gate=SimpleNamespace(checks=[SimpleNamespace(variant="q", task="a", verdict="FAIL"),
                                                         SimpleNamespace(variant="q", task="b",
                                                                         verdict="INCONCLUSIVE")]),
                            stats=[_stat("q", "a", 16), _stat("q", "b", 0)])
    header, rows = verdict_rows(gated)
    got = {r[1]: dict(zip(header[1:], r[1:])) for r in rows}
    assert got["a"]["Δ [95% CI]"] == "-0.250 [-0.500,-0.050]" and got["a"]["verdict"] == "FAIL"
    assert got["b"]["Δ [95% CI]"] == "no paired samples" and got["b"]["n"] == "0" and got["b"]["base"] == "-"
    assert got["b"]["verdict"] == "INCONCLUSIVE"


def test_the_last_lines_say_what_a_pass_of_an_undecided_variant_needs():
    """Under an INCONCLUSIVE variant's line: what a PASS would take (``report.deciding.pass_text``); nothing under a
    decided one."""
    from evalsuite.cli.finish import decision_lines

    gated = SimpleNamespace(gate=SimpleNamespace(variant_verdicts={"q": "FAIL", "kv": "INCONCLUSIVE"}, overall="FAIL",
                                                 exit_code=1),
                            stats=[_stat("q", "a", 16), _stat("kv", "a", 48)])
    lines = decision_lines(gated, {"q": "", "kv": "a PASS needs every open check decided: the slowest, a max_drop"})
    assert lines[0].startswith("q ") and "FAIL  (a n=16)" in lines[0] and lines[1].startswith("kv ")
    assert lines[2].strip() == "a PASS needs every open check decided: the slowest, a max_drop"
    assert lines[3] == "may ship: none; may not ship: q (FAIL), kv (INCONCLUSIVE)" and len(lines) == 5
