"""The scheduler (evalsuite.run.schedule): every open check's need priced in seconds; a check heading to a FAIL in
reach first, then first looks, then the rest by seconds; a pooled FAIL drawn from the cheapest task beyond its
tolerance; wants out of reach of the budget or the cap dropped; other variants join while the budget covers
them."""
from __future__ import annotations

from evalsuite.core.costs import UNMEASURED_FACTOR, RunCosts, StoredBaseline
from evalsuite.core.decision import Decision
from evalsuite.run.schedule import FAILING, FIRST_LOOK, OPEN, Book, choose, draw_seconds, order, price, reach, wants

TASKS = ["reasoning", "json", "code", "needle"]


def book(have: dict[str, dict[str, int]], costs: dict[str, list[float]], drawn: dict[str, int] | None = None,
         variants=("w", "kv"), batch: int = 32, stored: dict[str, StoredBaseline] | None = None) -> Book:
    drawn = drawn or {t: max((h.get(t, 0) for h in have.values()), default=0) for t in TASKS}
    return Book(list(variants), TASKS, have, drawn, {t: 1000 for t in TASKS}, RunCosts(costs, stored or {}), "bf16",
                first_look=16, batch=batch)


#: the Zen-1 run of issue 55, seconds per pair: reasoning cheap, json and code ~5-7 s, needle unmeasured
ZEN1 = {"bf16/reasoning": [16.0, 16], "w/reasoning": [22.4, 16], "kv/reasoning": [20.0, 16],
        "bf16/json": [95.0, 16], "w/json": [111.0, 16], "kv/json": [91.0, 16]}
LOOKED = {v: {"reasoning": 16, "json": 16} for v in ("bf16", "w", "kv")}


def test_a_pooled_fail_draws_its_pairs_from_the_cheapest_task_beyond_its_tolerance():
    b = book(LOOKED, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE", "kv": "INCONCLUSIVE"},
                        open={"w": {"reasoning": 4, "json": 4, "code": 0, "needle": 0},
                              "kv": {"reasoning": 200, "json": 200, "code": 0, "needle": 0}},
                        pooled={"w": {"reasoning": 8, "json": 8}})
    ranked = order(price(b, wants(b, decision)), TASKS)
    first = ranked[0]
    assert (first.variant, first.task, first.rank, first.pairs) == ("w", "reasoning", FAILING, 8)
    assert first.seconds < 20  # 8 x (1.4 + 1.0 / 2): ~15 s, where json's 8 would cost ~100 s
    draw = choose(b, ranked, left=500.0)
    assert draw.task == "reasoning" and draw.target == 24 and draw.variants[0] == "w"
    # then the same pooled FAIL from json (dearer), the first looks at code and needle (unmeasured: priced at
    # UNMEASURED_FACTOR times each variant's dearest task, json, so kv's before w's), kv's 200 pairs last
    assert (ranked[1].variant, ranked[1].task, ranked[1].rank) == ("w", "json", FAILING)
    assert [(w.variant, w.task, w.rank) for w in ranked[2:6]] == [("kv", "code", FIRST_LOOK),
                                                                  ("kv", "needle", FIRST_LOOK),
                                                                  ("w", "code", FIRST_LOOK),
                                                                  ("w", "needle", FIRST_LOOK)]
    kv_code = ranked[2]
    f = UNMEASURED_FACTOR
    assert kv_code.seconds == 16 * f * 91.0 / 16 + 16 * f * 95.0 / 16 / 2  # its own and half the baseline's
    assert ranked[-1].rank == OPEN


def test_a_fail_in_reach_comes_before_a_pass_and_out_of_reach_is_dropped():
    b = book(LOOKED, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE"}, open={"w": {"reasoning": 30, "json": 6}},
                        failing={"w": {"json": 6}})
    found = price(b, wants(b, decision))
    json = next(w for w in found if w.task == "json")
    assert json.rank == FAILING and json.seconds == 6 * 111.0 / 16 + 6 * 95.0 / 16 / 1
    assert reach(b, json, left=30.0).startswith("~6 more pairs take ~77 s, more than the 30 s")
    assert reach(b, json, left=100.0) == ""
    in_reach = [w for w in found if not reach(b, w, 30.0)]
    assert all(w.task != "json" for w in in_reach)  # the FAIL out of reach is not drawn at all


def test_first_looks_exist_for_every_task_not_yet_seen_and_none_for_decided_variants():
    b = book({}, {}, variants=("w", "kv", "done"))
    decision = Decision({"w": "INCONCLUSIVE", "kv": "INCONCLUSIVE", "done": "PASS"})
    found = wants(b, decision)
    assert {(w.variant, w.task) for w in found} == {(v, t) for v in ("w", "kv") for t in TASKS}
    assert {w.rank for w in found} == {FIRST_LOOK} and {w.pairs for w in found} == {16}
    draw = choose(b, order(price(b, found), TASKS), left=None)
    assert draw.task == "reasoning" and set(draw.variants) == {"w", "kv"} and draw.target == 16
    assert wants(b, None) == [w for w in wants(b, None) if w.rank == FIRST_LOOK]  # the baseline alone


def test_a_draw_towards_a_pass_grows_in_whole_batches_and_joins_while_the_budget_covers():
    b = book(LOOKED, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE", "kv": "INCONCLUSIVE"},
                        open={"w": {"reasoning": 20}, "kv": {"reasoning": 300}})
    ranked = order(price(b, wants(b, decision)), ["reasoning"] + TASKS[1:])
    ranked = [w for w in ranked if w.task == "reasoning"]
    draw = choose(b, ranked, left=None, last=16)
    assert draw.target == 16 + 32 and draw.variants == ("w", "kv")  # 20 rounded up to a batch of 32
    cost_both = draw_seconds(b, "reasoning", ["w", "kv"], 48)
    tight = choose(b, ranked, left=cost_both - 1.0, last=16)
    assert tight.variants == ("w",)  # kv's joining would not fit what is left


def test_a_stored_baseline_makes_its_samples_free_to_the_scheduler():
    stored = {"reasoning": StoredBaseline(held=64, seconds=1.0)}
    b = book(LOOKED, ZEN1, stored=stored)
    assert draw_seconds(b, "reasoning", ["w"], 48) == 32 * 1.4  # the baseline's 16-47 are stored
    b = book(LOOKED, ZEN1)
    assert draw_seconds(b, "reasoning", ["w"], 48) == 32 * 1.4 + 32 * 1.0


def test_the_cap_puts_a_want_out_of_reach():
    b = Book(["w"], ["t"], {"w": {"t": 40}, "bf16": {"t": 40}}, {"t": 40}, {"t": 40}, RunCosts(), "bf16")
    decision = Decision({"w": "INCONCLUSIVE"}, open={"w": {"t": 57}})
    (w,) = wants(b, decision)
    assert reach(b, w, None) == "the cap of 40 is reached"


def test_a_fail_out_of_reach_leaves_the_pass_of_the_same_task_drawable():
    """A check that leans to a FAIL on noise but would need 5,400 pairs to get there does not strand the task:
    its PASS need of 32 pairs is still drawn (the scheduler simulation found no-change variants stuck there)."""
    b = book(LOOKED, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE"}, open={"w": {"json": 32}}, failing={"w": {"json": 5400}})
    found = [w for w in price(b, wants(b, decision)) if w.task == "json"]
    assert sorted(w.rank for w in found) == [FAILING, OPEN]
    in_reach = [w for w in found if not reach(b, w, left=600.0)]  # the FAIL: past the cap of 1000
    assert [(w.rank, w.pairs) for w in in_reach] == [(OPEN, 32)]
    draw = choose(b, order(in_reach, TASKS), left=600.0, last=16)
    assert draw.task == "json" and draw.target == 48


def test_a_draw_chasing_a_fail_is_joined_by_first_looks_and_fails_not_by_pass_wants():
    """Issue 55's re-run: a needle draw chasing the combined variant's FAIL was joined by the KV variant's PASS want
    of ~2,000 pairs, which cost it pairs that no decision could use."""
    have = {v: {"reasoning": 16, "json": 16, "needle": 16} for v in ("bf16", "w", "kv", "wkv")}
    have["new"] = {}
    b = book(have, ZEN1, variants=("w", "kv", "wkv", "new"))
    decision = Decision({v: "INCONCLUSIVE" for v in ("w", "kv", "wkv", "new")},
                        open={"w": {"needle": 40}, "kv": {"needle": 300}, "wkv": {"needle": 18}, "new": {}},
                        failing={"w": {"needle": 40}, "wkv": {"needle": 18}})
    ranked = [w for w in order(price(b, wants(b, decision)), TASKS) if w.task == "needle"]
    assert ranked[0].rank in (FAILING, FIRST_LOOK)
    draw = choose(b, ranked, left=None, last=16)
    assert set(draw.variants) == {"wkv", "w", "new"}  # heading to a FAIL, and a first look; not kv's PASS want
    kv_only = [w for w in ranked if w.variant == "kv"]
    assert choose(b, kv_only, left=None, last=16).variants == ("kv",)  # on its own it is still drawable


def test_catching_up_on_samples_the_baseline_holds_takes_a_batch_not_a_pair_at_a_time():
    """A re-run of issue 55 spent four looks pairing the KV variant's reasoning 16 -> 20 -> 22 -> 23 -> 24, each
    re-gated, on samples the baseline already held for the other variants."""
    have = {"bf16": {"reasoning": 35}, "w": {"reasoning": 35}, "kv": {"reasoning": 16}}
    b = book(have, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE", "kv": "INCONCLUSIVE"}, open={"kv": {"reasoning": 4}})
    ranked = [w for w in order(price(b, wants(b, decision)), TASKS) if w.task == "reasoning"]
    draw = choose(b, ranked, left=None, last=19)
    assert draw.variants == ("kv",) and draw.target == 35  # up to what the baseline holds: no new baseline sample
    assert draw_seconds(b, "reasoning", ["kv"], draw.target) == 19 * 20.0 / 16  # kv's own pairs only


def test_a_fail_in_reach_is_drawn_before_a_cheaper_first_look():
    """Issue 55 on a Zen 1: first looks at json and code (~13 s a pair) went before the FAIL chases on reasoning
    (~2.4 s a pair) because each first look was the cheaper want, though a first look decides nothing and the
    FAIL after it on such a task costs many times the chase. A FAIL in reach comes first; then the first looks by
    seconds; then the rest."""
    b = book(LOOKED, ZEN1)
    decision = Decision({"w": "INCONCLUSIVE", "kv": "INCONCLUSIVE"},
                        open={"w": {"reasoning": 90, "json": 90, "code": 0, "needle": 0},
                              "kv": {"reasoning": 40, "json": 40, "code": 0, "needle": 0}},
                        failing={"w": {"reasoning": 90}})
    ranked = order(price(b, wants(b, decision)), TASKS)
    fail = ranked[0]
    assert (fail.variant, fail.task, fail.rank) == ("w", "reasoning", FAILING)
    first_looks = [w for w in ranked if w.rank == FIRST_LOOK]
    assert first_looks and all(w.seconds < fail.seconds for w in first_looks)  # cheaper, yet after it
    assert [w.rank for w in ranked] == sorted(w.rank for w in ranked)
    assert [w.seconds for w in first_looks] == sorted(w.seconds for w in first_looks)
    draw = choose(b, ranked, left=500.0, last=16)
    assert draw.task == "reasoning" and draw.target == 48  # at most GROWTH x the last draw: look again first
