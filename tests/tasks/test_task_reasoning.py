"""The reasoning task: generated word problems, GSM8K-format files, numeric answer extraction and scoring."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import Sample
from evalsuite.tasks.reasoning import ReasoningTask, extract_answer
from evalsuite.tasks.registry import default_registry
from tests.conftest import greedy_answers

DATA = Path(__file__).parents[1] / "data" / "gsm8k_mini.jsonl"


@pytest.fixture(scope="module")
def task() -> ReasoningTask:
    return ReasoningTask()


def _question(sample: Sample) -> str:
    return sample.messages[-1]["content"]


def _solve(text: str) -> int:
    """An independent reading of the generated problem text (each sentence is one operation)."""
    sentences = re.findall(r"[^.?]+[.?]", text)
    have = int(re.search(r"has (\d+)", sentences[0]).group(1))
    for s in sentences[1:-1]:
        nums = [int(n) for n in re.findall(r"\d+", s)]
        if "packs" in s:
            have += nums[0] * nums[1]
        elif "equal groups" in s:
            assert have % nums[0] == 0
            have //= nums[0]
        elif re.search(r"gives away|loses|uses", s):
            have -= nums[0]
        else:
            assert re.search(r"gets|buys|finds", s), s
            have += nums[0]
        assert have >= 0
    return have


def test_registry_builds_reasoning():
    assert isinstance(default_registry(plugins=False).get("reasoning"), ReasoningTask)


def test_default_grid_ids_slices(task):
    samples = task.samples({}, seed=0)
    p = task.params()
    assert len(samples) == len(p["steps"]) * len(p["difficulties"]) * p["per_cell"] == 32
    assert len({s.id for s in samples}) == len(samples)
    for s in samples:
        assert isinstance(s.metadata["steps"], int) and isinstance(s.metadata["difficulty"], str)
        assert [m["role"] for m in s.messages] == ["user", "assistant"] * 3 + ["user"]
        assert all("Answer: " in m["content"] for m in s.messages if m["role"] == "assistant")


def test_determinism(task):
    a, b, c = task.samples({}, seed=0), task.samples({}, seed=0), task.samples({}, seed=1)
    assert [s.content_hash() for s in a] == [s.content_hash() for s in b]
    assert [s.id for s in a] == [s.id for s in c]
    assert sum(x.content_hash() != y.content_hash() for x, y in zip(a, c)) >= len(a) - 2


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard", "expert"])
def test_generated_answers_match_the_text(task, difficulty):
    samples = task.samples({"steps": [1, 2, 3, 5], "difficulties": [difficulty], "per_cell": 10}, seed=7)
    for s in samples:
        text = _question(s)
        assert _solve(text) == s.target["answer"], (s.id, text)
        assert len(re.findall(r"[^.?]+[.?]", text)) == s.metadata["steps"] + 2


def test_difficulty_changes_number_sizes(task):
    def biggest(d: str) -> int:
        return max(int(n) for s in task.samples({"difficulties": [d], "per_cell": 10}, seed=0)
                   for n in re.findall(r"\d+", _question(s)))

    assert biggest("easy") <= 9 < biggest("medium") <= 30 < biggest("expert")


@pytest.mark.parametrize("output,expected", [
    ("Answer: 42", 42), ("The answer is 42.", 42), ("so x = 42", 42), ("#### 42", 42),
    ("It costs $1,234 in total", 1234), ("1,234.0", 1234), ("Answer: $1,200.50", 1200.5),
    ("First 3 + 4 = 7.\nAnswer: 7\nCheck: 7 - 4 = 3", 7), ("She has 5 left, then 9.", 9),
    ("answer: **12**", 12), ("The result is -3.", -3), ("#### 3,750", 3750),
])
def test_extract_answer(output, expected):
    value, _, _ = extract_answer(output)
    assert value == pytest.approx(expected)


def test_extract_answer_without_number():
    assert extract_answer("I do not know.") == (None, None, "no number")


def test_scoring(task):
    s = task.samples({"steps": [2], "difficulties": ["hard"], "per_cell": 1}, seed=0)[0]
    answer = s.target["answer"]
    right = task.score(s, f"Step one.\nAnswer: {answer:,}")
    assert right.value == 1.0 and right.extracted == str(answer) and right.metrics["method"] == "answer"
    wrong = task.score(s, f"Answer: {answer + 1}")
    assert wrong.value == 0.0 and str(answer) in wrong.reason
    assert task.score(s, f"So he has {answer}.0 now.").value == 1.0
    assert task.score(s, "no idea").value == 0.0


def test_gsm8k_file(task):
    samples = task.samples({"jsonl_path": str(DATA)}, seed=0)
    assert [s.target["answer"] for s in samples] == [7, 14, 900, 2.5, 3750]
    assert [s.metadata["steps"] for s in samples] == [2, 2, 2, 1, 1]
    assert len({s.id for s in samples}) == 5 and samples[0].metadata["difficulty"] == "file"
    assert task.score(samples[2], "There are 900 chickens left.").value == 1.0
    assert task.score(samples[3], "Answer: 2.5 meters").value == 1.0


def test_gsm8k_limit_is_a_seeded_subset(task):
    a = task.samples({"jsonl_path": str(DATA), "limit": 3}, seed=0)
    assert len(a) == 3
    assert [s.id for s in a] == [s.id for s in task.samples({"jsonl_path": str(DATA), "limit": 3}, seed=0)]
    ids = {tuple(s.id for s in task.samples({"jsonl_path": str(DATA), "limit": 3}, seed=k)) for k in range(6)}
    assert len(ids) > 1


@pytest.mark.parametrize("line", ['{"question": "q"}', '{"question": "q", "answer": "no marker"}', "not json"])
def test_gsm8k_bad_rows(task, tmp_path, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + line + "\n")
    with pytest.raises(EvalsuiteError, match=":2:"):
        task.samples({"jsonl_path": str(path)}, seed=0)


def test_missing_file_and_bad_params(task, tmp_path):
    with pytest.raises(EvalsuiteError, match="not found"):
        task.samples({"jsonl_path": str(tmp_path / "none.jsonl")}, seed=0)
    for bad in ({"steps": [0]}, {"difficulties": ["brutal"]}, {"per_cell": 0}, {"level": 3}):
        with pytest.raises(EvalsuiteError):
            task.samples(bad, seed=0)
    with pytest.raises(EvalsuiteError, match="limit"):
        task.samples({"jsonl_path": str(DATA), "limit": 0}, seed=0)


@pytest.mark.embedded
def test_embedded_model_solves_some_one_step_problems(embedded, task):
    samples = task.samples({"steps": [1], "difficulties": ["easy"], "per_cell": 8}, seed=0)
    answers = greedy_answers(embedded, samples, max_new_tokens=24)
    assert sum(task.score(s, a).value for s, a in zip(samples, answers)) >= 1
