"""The json stop rule: once ``score_fixed`` holds, nothing that follows changes the score (property tests on
constructed outputs, and the embedded model's real answers re-scored at every prefix)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.json_parse import score_fixed, whole_impossible
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.json_task import JsonTask, score_output
from evalsuite.tasks.stop_rules import reached, rule

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "minLength": 1}, "age": {"type": "integer", "minimum": 0},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}}
TRUTH = {"name": "Ada", "age": 41}
REAL = Path(__file__).parent.parent / "data" / "json_outputs.jsonl"


def _value(rng: random.Random, depth: int = 0) -> object:
    """A JSON value: nested objects and arrays, strings holding braces, backticks and fences, numbers, literals."""
    kinds = ["str", "int", "float", "lit"] + (["obj", "arr"] * 2 if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "obj":
        keys = rng.sample(["name", "age", "tags", "x", "{", "`"], rng.randint(0, 4))
        return {k: _value(rng, depth + 1) for k in keys}
    if kind == "arr":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "str":
        return rng.choice(["Ada", "", "{", "}", "a } b {", "```json\n{}\n```", "``", "x\"y", "é€"])
    if kind == "int":
        return rng.choice([0, 41, -3, 10**6])
    return rng.choice([True, False, None]) if kind == "lit" else rng.choice([1.5, -0.0, 2e3])


def _json_text(rng: random.Random) -> str:
    """A JSON text (often the right answer or close to it), sometimes broken."""
    value = rng.choice([TRUTH, {**TRUTH, "age": 40}, {**TRUTH, "tags": ["a", "b"]}, {"name": "Ada"}, _value(rng)])
    text = json.dumps(value, indent=rng.choice([None, 2, 4]))
    cut = rng.random()
    if cut < 0.15:
        return text[:rng.randint(0, len(text))]  # truncated
    if cut < 0.25:
        at = rng.randint(0, len(text))
        return text[:at] + rng.choice([",", "}", "]", "x", "\"", "```"]) + text[at:]  # a stray character
    return text


def _piece(rng: random.Random) -> str:
    """One part of an answer: a fenced block (closed or not, any opening), bare JSON, or prose."""
    kind = rng.random()
    if kind < 0.4:
        opening = rng.choice(["```json\n", "```\n", "```JSON \n", "``` json\t\n", "````json\n", "```python\n",
                              "```json", "``json\n"])
        closing = rng.choice(["\n```", "```", "\n``", "", "\n````"])
        return opening + _json_text(rng) + closing
    if kind < 0.7:
        return _json_text(rng)
    return rng.choice(["Here is the JSON:", "Sure!", "Note {this} is not JSON", "a `tick` or two``", "```",
                       "{", "}", "[1, 2", "\"quoted\"", "true", "12", "1.5", "2e+3", "-", "NaN", "\u00a0", "done."])


def _output(rng: random.Random) -> str:
    seps = ["", " ", "\n", "\n\n", "\t"]
    parts = [rng.choice(["", " ", "\n"])]
    for _ in range(rng.randint(1, 4)):
        parts += [_piece(rng), rng.choice(seps)]
    return "".join(parts)


def _target(mode: str, truth: dict | None) -> dict:
    return {"schema": SCHEMA, "truth": truth, "mode": mode}


def _first_fixed(text: str, mode: str) -> int | None:
    """The shortest prefix length at which the rule holds (None: never); checks it holds from there on."""
    first = next((k for k in range(len(text) + 1) if score_fixed(text[:k], mode)), None)
    if first is not None:
        assert all(score_fixed(text[:k], mode) for k in range(first, len(text) + 1)), text
    return first


@pytest.mark.parametrize("mode", ["lenient", "strict"])
def test_a_fixed_prefix_scores_as_every_continuation(mode):
    """Constructed outputs: where the rule holds, the prefix (and the prefix as the decoder stores it,
    right-stripped) scores exactly as the full output, and as the prefix followed by random other text."""
    rng = random.Random(f"json-stop-{mode}")
    fired = 0
    for _ in range(300):
        full = _output(rng)
        target = _target(mode, rng.choice([TRUTH, None]))
        first = _first_fixed(full, mode)
        if first is None:
            continue
        fired += 1
        want = score_output(target, full)
        for k in {first, *rng.choices(range(first, len(full) + 1), k=2)}:
            head = full[:k]
            assert score_output(target, head) == want, (head, full)
            assert score_output(target, head.rstrip()) == want, (head, full)
            tail = _output(rng)
            assert score_output(target, head + tail) == want, (head, tail)
    assert fired >= 60  # the property is not vacuous: the rule holds early in many outputs


def test_the_rule_holds_where_it_should_and_not_where_it_cannot():
    fenced = '```json\n{"name": "Ada", "age": 41}\n```'
    assert _first_fixed(fenced + "\nThis JSON object ...", "lenient") == len(fenced)
    assert _first_fixed(fenced, "strict") == 1  # a backtick can start no JSON text: strict scores 0 from there
    bare = '{"name": "Ada", "age": 41}'
    assert _first_fixed(bare + "\n\nMore text", "lenient") is None  # a parsable fence may still follow
    assert _first_fixed(bare + "\n\nMore text", "strict") == len(bare) + 3  # "M": extra data after the value
    assert _first_fixed(bare, "strict") is None  # whitespace may still follow: the value stays whole
    assert _first_fixed('"' + fenced + '"', "lenient") == len(fenced) + 1  # a string cannot hold the fence
    assert _first_fixed('"' + fenced + '"', "strict") is None  # ...but strict cannot tell that yet
    assert _first_fixed("```json\n{broken\n```", "lenient") is None  # no parsable block yet
    assert not whole_impossible("12") and not whole_impossible("  ") and whole_impossible("[1] 2")


def test_the_engine_hook_decides_on_the_decoded_answer():
    """``reached`` decodes the answer only after a triggering token, never decides on half a character, and
    names an unknown rule."""
    pieces = ["```", "json", "\n", '{"a": 1}', "\n", "``", "`", "\n", "more"]
    text_of = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    hits = [reached("json:lenient", text_of, list(range(k))) for k in range(1, len(pieces) + 1)]
    assert hits.index(True) == pieces.index("`")
    assert not reached("json:lenient", lambda ids: "```json\n{}\n```\ufffd", [0])
    with pytest.raises(EvalsuiteError, match="unknown stop rule 'nope'; known: json:lenient, json:strict"):
        rule("nope")


def test_the_task_names_its_rule_only_where_the_engine_applies_it():
    task = JsonTask()
    assert task.gen_settings({}).stop_rule == "" and "stop_rule" not in task.gen_settings({}).to_dict()
    task.context = TaskContext(stop_rules=True)
    for mode in ("lenient", "strict"):
        gen = task.gen_settings({"mode": mode})
        assert gen.to_dict()["stop_rule"] == f"json:{mode}" and rule(gen.stop_rule)


@pytest.mark.skipif(not REAL.is_file(), reason="tests/data/json_outputs.jsonl is missing")
@pytest.mark.parametrize("mode", ["lenient", "strict"])
def test_real_answers_score_the_same_stopped(mode):
    """The embedded model's answers (generated to the end, without the rule): at every character where the rule
    holds, the answer cut there scores as the whole answer."""
    rows = [json.loads(line) for line in REAL.read_text().splitlines() if line]
    samples = {s.id: s for s in JsonTask().samples({"n": 1 + max(int(r["id"].rsplit("/", 1)[1]) for r in rows)},
                                                  1234)}
    fired = saved = 0
    for row in rows:
        target = {**samples[row["id"]].target, "mode": mode}
        full = row["output"]
        first = _first_fixed(full, mode)
        if first is None:
            continue
        fired, saved = fired + 1, saved + len(full) - first
        want = score_output(target, full)
        assert all(score_output(target, full[:k]) == want for k in range(first, len(full) + 1, 7)), row["id"]
        assert score_output(target, full[:first]) == want
    assert fired >= len(rows) // 4 and saved > 0  # fenced answers: the rule holds at their closing fence
