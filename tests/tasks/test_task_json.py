"""The json task: deterministic schema cases and every scoring path."""
from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.json_cases import KINDS
from evalsuite.tasks.json_task import JsonTask, field_accuracy, parse_json, score_output
from evalsuite.tasks.registry import default_registry
from tests.conftest import greedy_answers

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tier", "email"],
          "properties": {"name": {"type": "string", "minLength": 1},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tier": {"enum": ["gold", "silver"]}, "email": {"type": "string", "format": "email"},
                         "when": {"type": "string", "format": "date"},
                         "address": {"type": "object", "properties": {"city": {"type": "string"}}}}}
TRUTH = {"name": "Ada Brakmor", "age": 41, "tier": "gold", "email": "ada@example.com"}


def target(mode="lenient", truth=TRUTH):
    return {"schema": SCHEMA, "truth": truth, "mode": mode}


@pytest.fixture(scope="module")
def task() -> JsonTask:
    return JsonTask()


def test_registry_and_deterministic_samples(task):
    assert isinstance(default_registry(plugins=False).get("json"), JsonTask)
    a, b, c = task.samples({}, 0), task.samples({}, 0), task.samples({}, 1)
    assert 20 <= len(a) <= 30
    assert [s.content_hash() for s in a] == [s.content_hash() for s in b]
    assert [s.content_hash() for s in a] != [s.content_hash() for s in c]
    assert {s.metadata["difficulty"] for s in a} == set(KINDS)
    only = task.samples({"kinds": ["extract"], "n": 5}, 0)
    assert {s.metadata["difficulty"] for s in only} == {"extract"} and len(only) == 5


def test_every_schema_is_valid_and_every_truth_satisfies_it(task):
    for seed in range(3):
        for sample in task.samples({"n": 35}, seed):
            schema = sample.target["schema"]
            Draft202012Validator.check_schema(schema)
            assert all(f'- "{key}": ' in sample.messages[-1]["content"] for key in schema["properties"])
            truth = sample.target["truth"]
            if sample.metadata["difficulty"].startswith("extract"):
                assert Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(truth)
                assert task.score(sample, json.dumps(truth)).value == 1.0
            else:
                assert truth is None


def test_prompt_formats(task):
    raw = task.samples({"prompt_format": "schema", "n": 3}, 0)
    assert all(json.dumps(s.target["schema"], indent=1) in s.messages[-1]["content"] for s in raw)
    fields = task.samples({"n": 3}, 0)
    assert [s.target for s in fields] == [s.target for s in raw]  # same cases, only the wording differs
    from evalsuite.tasks.json_task import describe
    assert describe(SCHEMA["properties"]["age"]) == "an integer between 0 and 120"
    assert describe(SCHEMA["properties"]["tier"]) == 'one of "gold", "silver"'
    assert "YYYY-MM-DD" in describe(SCHEMA["properties"]["when"])
    assert describe(SCHEMA["properties"]["address"]) == 'an object with exactly these keys: {"city": a string}'


def test_invalid_json():
    score = score_output(target(), '{"name": "Ada", "age": 41')
    assert score.value == 0 and score.metrics == {"parsed": False, "valid": False, "field_accuracy": None}
    assert score.reason.startswith("unparsed")


@pytest.mark.parametrize("bad, where", [
    ({**TRUTH, "age": "41"}, "age"),            # wrong type
    ({k: v for k, v in TRUTH.items() if k != "tier"}, "required"),
    ({**TRUTH, "tier": "bronze"}, "tier"),      # not in enum
    ({**TRUTH, "age": 130}, "age"),             # out of range
    ({**TRUTH, "email": "not-an-email"}, "email"),  # format
    ({**TRUTH, "when": "2024-13-45"}, "when"),  # format
    ({**TRUTH, "extra": 1}, "extra"),           # additionalProperties
])
def test_valid_json_that_violates_the_schema(bad, where):
    score = score_output(target(), json.dumps(bad))
    assert score.value == 0 and score.metrics["parsed"] and not score.metrics["valid"]
    assert score.reason.startswith("schema violation") and where in score.reason


def test_right_schema_wrong_values():
    got = {**TRUTH, "name": "Ada Lovelace", "age": 14}
    score = score_output(target(), json.dumps(got))
    assert score.value == 0 and score.metrics["valid"] and score.metrics["field_accuracy"] == 0.5
    assert "name" in score.reason and "age" in score.reason
    ok = score_output(target(), json.dumps({**TRUTH, "name": "  ada   BRAKMOR "}))
    assert ok.value == 1 and ok.metrics["field_accuracy"] == 1.0


def test_without_ground_truth_validity_decides():
    score = score_output(target(truth=None), json.dumps({**TRUTH, "name": "Anyone"}))
    assert score.value == 1 and score.metrics["field_accuracy"] is None


def test_fenced_and_surrounded_json_strict_vs_lenient():
    fenced = f"Here it is:\n```json\n{json.dumps(TRUTH)}\n```\nAnything else?"
    surrounded = f"Sure! {json.dumps(TRUTH)} is the answer."
    for text in (fenced, surrounded):
        assert score_output(target("strict"), text).metrics["parsed"] is False
        lenient = score_output(target("lenient"), text)
        assert lenient.value == 1 and lenient.metrics["parsed"]
    assert score_output(target("strict"), f"  {json.dumps(TRUTH)}\n").value == 1
    assert parse_json('x {"a": {"b": [1, 2]}} y {"c": 1}', "lenient")[0] == {"a": {"b": [1, 2]}}


def test_nested_field_accuracy():
    truth = {"a": 1, "b": {"c": "x", "d": [1, 2]}}
    assert field_accuracy(truth, {"a": 1.0, "b": {"c": "X", "d": [1, 2]}}) == (1.0, [])
    assert field_accuracy(truth, {"a": 1, "b": {"c": "y", "d": [2, 1]}}) == (1 / 3, ["b.c", "b.d"])
    assert field_accuracy(truth, [1, 2])[0] == 0.0


@pytest.mark.parametrize("bad", [{"kinds": ["yaml"]}, {"mode": "loose"}, {"n": 0}, {"seed": 1},
                                 {"prompt_format": "xml"}])
def test_bad_params(task, bad):
    with pytest.raises(EvalsuiteError):
        task.samples(bad, 0)


@pytest.mark.embedded
def test_embedded_model_produces_some_valid_json(embedded):
    task = JsonTask()
    samples = task.samples({"n": 4, "kinds": ["flat", "extract"]}, 0)
    outs = greedy_answers(embedded, samples, gen=task.gen_settings({"max_new_tokens": 96}))
    scores = [task.score(s, o) for s, o in zip(samples, outs)]
    assert sum(s.metrics["parsed"] for s in scores) >= 2, [s.reason for s in scores]
