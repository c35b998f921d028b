"""Sample streams: determinism, unique ids, stratified prefixes, finite sizes, ``take`` and the plugin default."""
from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import Sample, TaskContext
from evalsuite.tasks.code import CodeTask
from evalsuite.tasks.json_task import JsonTask
from evalsuite.tasks.needle import NeedleTask
from evalsuite.tasks.reasoning import ReasoningTask
from evalsuite.tasks.stream import balanced_grid, round_robin, take
from tests.toytask import CopyTask

LONG = 500
#: (task, params, slice keys, grid size) of the procedural (endless) streams
PROCEDURAL = [
    (NeedleTask, {}, ("kind", "context_len", "depth"), 36),
    (NeedleTask, {"kinds": ["single", "multi_query"], "context_lens": [256, 512, 1024, 2048],
                  "depths": [0.0, 0.5]}, ("kind", "context_len", "depth"), 16),
    (ReasoningTask, {}, ("steps", "difficulty"), 4),
    (ReasoningTask, {"steps": [1, 2, 3], "difficulties": ["easy", "medium", "hard"]}, ("steps", "difficulty"), 9),
    (JsonTask, {}, ("difficulty",), 7),
]
IDS = [f"{t.name}-{i}" for i, (t, *_) in enumerate(PROCEDURAL)]


def _fingerprint(samples: list[Sample]) -> list[tuple[str, str]]:
    return [(s.id, s.content_hash()) for s in samples]


def _imbalance(samples: list[Sample], keys: tuple[str, ...], levels: dict[str, set[Any]]) -> int:
    """Largest spread of per-level counts over the slice keys (levels never seen count as 0)."""
    worst = 0
    for key in keys:
        counts = Counter(s.metadata[key] for s in samples)
        worst = max(worst, max(counts[v] for v in levels[key]) - min(counts[v] for v in levels[key]))
    return worst


@pytest.fixture(scope="module")
def long_prefixes() -> dict[str, list[Sample]]:
    return {name: take(task(), params, 0, LONG) for name, (task, params, _, _) in zip(IDS, PROCEDURAL)}


def test_balanced_grid_covers_every_cell_once_and_every_prefix_is_balanced():
    for sizes in (s for k in (1, 2, 3, 4) for s in itertools.product(range(1, 6), repeat=k)):
        order = balanced_grid(sizes)
        assert sorted(order) == list(itertools.product(*(range(n) for n in sizes))), sizes
        counts = [Counter() for _ in sizes]
        for cell in order:
            for f, level in enumerate(cell):
                counts[f][level] += 1
            assert all(max(c[v] for v in range(n)) - min(c[v] for v in range(n)) <= 1
                       for c, n in zip(counts, sizes)), sizes
    with pytest.raises(ValueError):
        balanced_grid((3, 0))


def test_round_robin_takes_groups_in_turn():
    assert round_robin([[1, 2, 3], ["a"], [10, 20]]) == [1, "a", 10, 2, 20, 3]
    assert round_robin([]) == []


@pytest.mark.parametrize("case", PROCEDURAL, ids=IDS)
def test_procedural_stream_is_deterministic_unique_and_endless(case, long_prefixes):
    task, params, _, _ = case
    name = IDS[PROCEDURAL.index(case)]
    first = long_prefixes[name]
    assert len(first) == LONG and task().stream_size(params) is None
    assert len({s.id for s in first}) == LONG
    assert _fingerprint(take(task(), params, 0, 60)) == _fingerprint(first[:60])
    other = take(task(), params, 1, 60)
    assert [s.content_hash() for s in other] != [s.content_hash() for s in first[:60]]


@pytest.mark.parametrize("case", PROCEDURAL, ids=IDS)
def test_procedural_stream_is_stratified(case, long_prefixes):
    task, params, keys, grid = case
    first = long_prefixes[IDS[PROCEDURAL.index(case)]]
    levels = {k: {s.metadata[k] for s in first} for k in keys}
    assert {k: {s.metadata[k] for s in first[:grid]} for k in keys} == levels  # one pass shows every level
    for n in range(1, LONG + 1):
        assert _imbalance(first[:n], keys, levels) <= (0 if n % grid == 0 else 1), n


@pytest.mark.parametrize("case", PROCEDURAL, ids=IDS)
def test_take_with_start_is_a_window_of_the_stream(case, long_prefixes):
    task, params, _, grid = case
    first = long_prefixes[IDS[PROCEDURAL.index(case)]]
    for start, n in ((0, 5), (3, 7), (grid, grid), (LONG - 10, 10)):
        assert _fingerprint(take(task(), params, 0, n, start=start)) == _fingerprint(first[start:start + n])
    assert take(task(), params, 0, 0, start=4) == []
    with pytest.raises(EvalsuiteError):
        take(task(), params, 0, 1, start=-1)


@pytest.mark.parametrize("params,repeats", [({}, 1), ({"context_lens": [512, 1024], "repeats": 3}, 3)])
def test_needle_default_set_is_the_first_passes_and_ids_keep_their_format(params, repeats):
    task = NeedleTask()
    samples = task.samples(params, 0)
    grid = len(samples) // repeats
    head = take(task, params, 0, len(samples))
    assert sorted(_fingerprint(head)) == sorted(_fingerprint(samples))
    p = task.params(params)
    expected = [(k, c, f"{d:.2f}", r) for k in p["kinds"] for c in p["context_lens"] for d in p["depths"]
                for r in range(repeats)]  # the default set keeps its grid order
    got = [s.id.split("/") for s in samples]
    assert [(i[0].rsplit("-", 1)[0], int(i[1][3:]), i[2][1:], int(i[3])) for i in got] == expected
    reps = [int(s.id.rsplit("/", 1)[1]) for s in take(task, params, 0, 3 * grid)]
    assert reps == [0] * grid + [1] * grid + [2] * grid


def test_needle_stream_measures_prompts_with_the_models_counter():
    task, seen = NeedleTask(), []

    def count(sample: Sample) -> int:
        seen.append(sample.id)
        return 512

    task.context = TaskContext(count_tokens=count, max_positions=lambda: 8192)
    got = take(task, {"context_lens": [512]}, 0, 3, start=20)
    assert [s.target["prompt_tokens"] for s in got] == [512] * 3 and seen == [s.id for s in got]


def test_reasoning_and_json_default_sets_are_stream_prefixes():
    reasoning = ReasoningTask()
    samples = reasoning.samples({}, 0)
    assert sorted(_fingerprint(take(reasoning, {}, 0, len(samples)))) == sorted(_fingerprint(samples))
    assert [s.id for s in samples][:3] == ["s1/easy/0", "s1/easy/1", "s1/easy/2"]
    js = JsonTask()
    assert _fingerprint(take(js, {}, 3, 28)) == _fingerprint(js.samples({}, 3))
    assert [s.id for s in take(js, {}, 3, 3, start=40)] == ["json/3/40", "json/3/41", "json/3/42"]


@pytest.mark.parametrize("params,size", [({}, 80), ({"source": "humaneval"}, 164), ({"source": "both"}, 244),
                                         ({"source": "both", "limit": 20}, 20)])
def test_code_stream_is_finite_seeded_and_interleaves_slices(params, size):
    task = CodeTask()
    assert task.stream_size(params) == size
    everything = take(task, params, 0, size + 10)
    assert len(everything) == size and sorted(_fingerprint(everything)) == sorted(_fingerprint(task.samples(params, 0)))
    assert _fingerprint(take(task, params, 0, size)) == _fingerprint(everything)
    assert _fingerprint(take(task, params, 0, 5, start=size - 3)) == _fingerprint(everything[-3:])
    if size > 20:
        assert [s.id for s in take(task, params, 1, size)] != [s.id for s in everything]  # seeded order
    if params.get("source") == "both" and "limit" not in params:
        assert [s.metadata["source"] for s in everything[:56]] == ["builtin", "humaneval"] * 28
    builtin = [s.metadata["difficulty"] for s in everything if s.metadata["source"] == "builtin"]
    if builtin and "limit" not in params:
        assert builtin == ["easy", "medium"] * 40  # 40 easy, 40 medium


def test_reasoning_jsonl_stream_is_finite_in_a_seeded_order(tmp_path):
    path = tmp_path / "gsm.jsonl"
    rows = [{"question": f"Q{i}?", "answer": f"{i} + 1 = <<{i}+1>>{i + 1}\n#### {i + 1}"} for i in range(30)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = ReasoningTask()
    for params, size in (({"jsonl_path": str(path)}, 30), ({"jsonl_path": str(path), "limit": 12}, 12)):
        assert task.stream_size(params) == size
        got = take(task, params, 0, 100)
        assert len(got) == size and sorted(_fingerprint(got)) == sorted(_fingerprint(task.samples(params, 0)))
        assert _fingerprint(take(task, params, 0, size)) == _fingerprint(got)
        assert [s.id for s in got] != [s.id for s in task.samples(params, 0)]  # shuffled, not file order
        assert _fingerprint(take(task, params, 0, 4, start=size - 2)) == _fingerprint(got[-2:])


def test_plugin_without_stream_gets_the_default():
    task, params = CopyTask(), CopyTask().params()
    samples = task.samples(params, 7)
    assert task.stream_size(params) == 6
    assert _fingerprint(list(task.stream(params, 7))) == _fingerprint(samples)
    assert _fingerprint(take(task, params, 7, 10)) == _fingerprint(samples)
    assert _fingerprint(take(task, params, 7, 2, start=3)) == _fingerprint(samples[3:5])


def test_plugin_stream_without_start_argument_is_skipped_item_by_item():
    class Endless(CopyTask):
        def stream(self, params, seed):
            for i in itertools.count():
                yield Sample(id=f"e{i}", target="x", prompt=f"{seed}:{i}")

    task = Endless()
    assert task.stream_size(task.params()) is None  # overridden stream, size unknown
    assert [s.id for s in take(task, task.params(), 0, 3, start=5)] == ["e5", "e6", "e7"]
