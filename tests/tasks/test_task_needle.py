"""The needle task: deterministic grid of samples, calibrated lengths, and scoring of every kind."""
from __future__ import annotations

import re

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks import needle_text as nt
from evalsuite.tasks.base import Sample
from evalsuite.tasks.needle import KINDS, NeedleTask, normalize
from evalsuite.tasks.registry import default_registry
from tests.conftest import greedy_answers

ALL_KINDS = {"kinds": list(KINDS)}


@pytest.fixture(scope="module")
def task() -> NeedleTask:
    return NeedleTask()


@pytest.fixture(scope="module")
def default_samples(task) -> list[Sample]:
    return task.samples({}, seed=0)


def _user(sample: Sample) -> str:
    return sample.messages[-1]["content"]


def test_registry_builds_needle():
    assert isinstance(default_registry(plugins=False).get("needle"), NeedleTask)


def test_default_grid_size_ids_and_slices(task, default_samples):
    p = task.params()
    assert len(default_samples) == len(p["kinds"]) * len(p["context_lens"]) * len(p["depths"]) == 36
    assert len({s.id for s in default_samples}) == len(default_samples)
    for s in default_samples:
        assert {"kind", "context_len", "depth"} <= set(s.metadata)
        assert all(isinstance(v, (str, int, float)) for v in s.metadata.values())
        assert s.messages[0]["role"] == "system" and s.messages[-1]["role"] == "user"
    cells = {(s.metadata["kind"], s.metadata["context_len"], s.metadata["depth"]) for s in default_samples}
    assert len(cells) == 36


def test_same_seed_same_samples_other_seed_differs(task, default_samples):
    again = task.samples({}, seed=0)
    assert [s.id for s in again] == [s.id for s in default_samples]
    assert [s.content_hash() for s in again] == [s.content_hash() for s in default_samples]
    other = task.samples({}, seed=1)
    assert [s.id for s in other] == [s.id for s in default_samples]
    assert all(a.content_hash() != b.content_hash() for a, b in zip(other, default_samples))


def test_sample_does_not_depend_on_rest_of_grid(task, default_samples):
    only = task.samples({"kinds": ["multi_value", "single"]}, seed=0)
    by_id = {s.id: s for s in default_samples}
    assert len(only) == 18 and all(s.content_hash() == by_id[s.id].content_hash() for s in only)
    shifted = task.samples({"kinds": ["single"], "context_lens": [1024, 2048]}, seed=0)
    same = [s for s in shifted if s.id in by_id]  # the value-type rotation follows the grid position
    assert all(s.content_hash() == by_id[s.id].content_hash() for s in same)


def test_values_and_distractors_are_in_the_haystack(task):
    for s in task.samples({**ALL_KINDS, "context_lens": [1024]}, seed=3):
        text = _user(s)
        for value in s.target["values"] + s.target["distractors"]:
            assert value in text, (s.id, value)
        if s.metadata["kind"] == "multi_key":
            assert len(s.target["distractors"]) == task.params()["num_distractors"]


def test_filler_is_free_of_digits_and_needle_words():
    import random

    text = " ".join(nt.filler(random.Random(0), 5000)).lower()
    assert not re.search(r"\d", text)
    words = set(re.findall(r"[a-z]+", text))
    assert not words & (set(nt.VALUE_WORDS) | set(nt.KEY_ADJS) | set(nt.KEY_NOUNS))


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_single_needle_sits_at_its_depth(task, depth):
    (s,) = task.samples({"kinds": ["single"], "context_lens": [2048], "depths": [depth],
                         "value_types": ["number"]}, seed=0)
    text = _user(s)
    body_start, body_end = text.index("\n\n") + 2, text.rindex("\n\n")
    where = (text.index(s.target["values"][0]) - body_start) / (body_end - body_start)
    assert abs(where - depth) < 0.05


def test_value_types_rotate_and_multi_answer_kinds_avoid_uuids(task, default_samples):
    single = {s.metadata["value_type"] for s in default_samples if s.metadata["kind"] == "single"}
    assert single == {"number", "word", "uuid"}
    multi = {s.metadata["value_type"] for s in default_samples if s.metadata["kind"] == "multi_value"}
    assert multi == {"number", "word"}
    vt = [s for s in default_samples if s.metadata["kind"] == "variable_tracking"]
    assert all(re.fullmatch(r"[A-Z]{5}", v) for s in vt for v in s.target["values"])


def test_token_length_within_ten_percent(task, tokenizer):
    samples = task.samples({**ALL_KINDS, "context_lens": [512, 1024, 4096], "depths": [0.3, 0.8]}, seed=5)
    for s in samples:
        ids = tokenizer.apply_chat_template(list(s.messages), tokenize=True, add_generation_prompt=True,
                                            return_dict=True)["input_ids"]
        assert abs(len(ids) / s.metadata["context_len"] - 1) <= 0.10, (s.id, len(ids))


@pytest.mark.parametrize("bad", [{"kinds": ["haystack"]}, {"kinds": []}, {"depths": [1.5]},
                                 {"context_lens": [64]}, {"value_types": ["emoji"]}, {"num_values": 0},
                                 {"num_distractors": 40}, {"repeats": 1.5}, {"depths": [0.5, 0.501]},
                                 {"context_lens": [512, 512]},
                                 {"colour": "red"}])
def test_bad_params_raise(task, bad):
    with pytest.raises(EvalsuiteError):
        task.samples(bad, seed=0)


def test_context_too_small_for_needles_raises(task):
    with pytest.raises(EvalsuiteError, match="too small"):
        task.samples({"kinds": ["multi_key"], "context_lens": [160], "value_types": ["uuid"],
                      "num_distractors": 6}, seed=0)


def _one(task, kind, vtype="number", **extra) -> Sample:
    return task.samples({"kinds": [kind], "context_lens": [512], "depths": [0.5], "value_types": [vtype],
                         **extra}, seed=0)[0]


def test_normalize_matches_whole_words_only():
    assert normalize("The NUMBER is: 1,234,567!") == " the number is 1234567 "
    assert " 1234567 " in normalize("x=1234567.")
    assert " 1234567 " not in normalize("12345678")


@pytest.mark.parametrize("vtype", ["number", "word", "uuid"])
def test_single_scoring(task, vtype):
    s = _one(task, "single", vtype)
    value = s.target["values"][0]
    right = task.score(s, f'The special magic {vtype} is "{value.upper()}".')
    assert right.value == 1.0 and right.extracted == value and right.metrics["fraction"] == 1.0
    wrong = task.score(s, "The special magic value is 7654321 or lemon.")
    assert wrong.value == 0.0 and wrong.extracted is None and value in wrong.reason


def test_number_inside_a_longer_number_does_not_count(task):
    s = _one(task, "single", "number")
    value = s.target["values"][0]
    assert task.score(s, value + "9").value == 0.0
    assert task.score(s, f"{int(value):,}").value == 1.0  # thousands separators are fine


def test_multi_key_distractor_answer_scores_zero(task):
    s = _one(task, "multi_key")
    value, distractor = s.target["values"][0], s.target["distractors"][0]
    assert task.score(s, value).value == 1.0
    assert task.score(s, distractor).value == 0.0
    both = task.score(s, f"{value} or {distractor}")
    assert both.value == 0.0 and "distractor" in both.reason


@pytest.mark.parametrize("kind", ["multi_value", "multi_query", "variable_tracking"])
def test_all_values_must_come_back(task, kind):
    s = _one(task, kind)
    values = s.target["values"]
    assert len(values) >= 2
    full = task.score(s, "They are: " + ", ".join(reversed(values)) + ".")
    assert full.value == 1.0 and full.metrics["fraction"] == 1.0
    partial = task.score(s, " and ".join(values[:-1]))
    assert partial.value == 0.0
    assert partial.metrics["fraction"] == pytest.approx((len(values) - 1) / len(values))
    assert values[-1] in partial.reason


def test_variable_tracking_chain_is_in_order(task):
    s = _one(task, "variable_tracking", vt_hops=3, vt_chains=2)
    text, names = _user(s), s.target["values"]
    first = re.search(rf"VAR {names[0]} = (\d+)\.", text)
    assert first and f"the value {first.group(1)}" in text
    for a, b in zip(names, names[1:]):
        assert text.index(f"VAR {b} = VAR {a}.") > text.index(f"VAR {a} =")
    assert len(names) == 3 and len(s.target["distractors"]) == 3
    assert task.score(s, " ".join(names)).value == 1.0
    assert task.score(s, " ".join(s.target["distractors"][:1] + names)).value == 0.0


def test_gen_settings_follow_params(task):
    assert task.gen_settings({}).max_new_tokens == task.default_params["max_new_tokens"]
    assert task.gen_settings({"max_new_tokens": 7}).max_new_tokens == 7


@pytest.mark.embedded
def test_embedded_model_finds_single_needles(embedded, task):
    samples = task.samples({"kinds": ["single"], "context_lens": [512], "value_types": ["number", "word"]},
                           seed=0)
    answers = greedy_answers(embedded, samples, max_new_tokens=24)
    assert sum(task.score(s, a).value for s, a in zip(samples, answers)) >= 2


def test_context_beyond_the_window_is_refused_before_any_haystack_is_built(monkeypatch):
    """[99999999] used to build a 10^8-token haystack for minutes before the window check refused it."""
    import evalsuite.tasks.needle as needle_mod
    from evalsuite.tasks.base import TaskContext

    def no_build(*a, **k):
        raise AssertionError("a haystack was built")

    monkeypatch.setattr(needle_mod, "build_sample", no_build)
    t = NeedleTask()
    t.context = TaskContext(count_tokens=lambda s: 0, max_positions=lambda: 8192, model_name="tiny")
    with pytest.raises(EvalsuiteError, match="8192-token window") as err:
        t.samples({"context_lens": [512, 99999999]}, seed=0)
    assert "\n" not in str(err.value) and "99999999" in str(err.value)
    with pytest.raises(EvalsuiteError, match="window"):
        next(t.stream({"context_lens": [8192]}, seed=0))  # the answer tokens do not fit either
    with pytest.raises(EvalsuiteError, match="more than 2097152 tokens"):
        NeedleTask().samples({"context_lens": [99999999]}, seed=0)  # no model: an absolute cap
