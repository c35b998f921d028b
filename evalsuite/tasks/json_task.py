"""The json task: produce a JSON object that matches a JSON Schema (and, for extraction, holds the right values).

Scoring rule: ``value`` = 1 when the output parses, validates against the schema (Draft 2020-12 with format
checks) and, where the case has a ground truth, every field equals it; else 0. ``metrics`` carries ``parsed``,
``valid`` and ``field_accuracy`` (fraction of ground-truth leaf fields right; None without a ground truth).
How an output is read (whole, fenced block, embedded object) and when its score is fixed: ``json_parse``.
"""
from __future__ import annotations

import json
import random
from itertools import count, islice
from typing import Any, Iterator

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.json_cases import KINDS, JsonCase, make_case
from evalsuite.tasks.json_parse import parse_json

SYSTEM = "You are a helpful assistant that replies with JSON only."


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    if isinstance(value, str):
        text = " ".join(value.split()).casefold()
        return text[4:] if text.startswith("the ") else text
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def leaves(truth: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Ground-truth leaf fields by dotted path (a list is one leaf)."""
    out: dict[str, Any] = {}
    for key, value in truth.items():
        if isinstance(value, dict):
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _lookup(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return KeyError
        value = value[part]
    return value


def field_accuracy(truth: dict[str, Any], got: Any) -> tuple[float, list[str]]:
    """Fraction of ground-truth leaves equal in ``got`` (strings ignore case, spacing and a leading "the";
    numbers compare as floats; lists compare in order), and the wrong paths."""
    expected = leaves(truth)
    wrong = [p for p, v in expected.items() if _norm(_lookup(got, p)) != _norm(v)]
    return (len(expected) - len(wrong)) / len(expected), wrong


def score_output(target: dict[str, Any], output: str) -> Score:
    """Parse, validate, compare (see the module docstring for the rule)."""
    metrics: dict[str, Any] = {"parsed": False, "valid": False, "field_accuracy": None}
    try:
        value, how = parse_json(output, target["mode"])
    except ValueError as exc:
        return Score(0.0, None, f"unparsed: {exc}", metrics)
    extracted = json.dumps(value, sort_keys=True)[:2000]
    metrics["parsed"] = True
    validator = Draft202012Validator(target["schema"], format_checker=FormatChecker())
    error = best_match(validator.iter_errors(value))
    metrics["valid"] = error is None
    truth = target.get("truth")
    wrong: list[str] = []
    if truth is not None:
        metrics["field_accuracy"], wrong = field_accuracy(truth, value)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return Score(0.0, extracted, f"schema violation at {where}: {error.message}"[:300], metrics)
    if wrong:
        return Score(0.0, extracted, f"valid but wrong fields: {', '.join(wrong)}"[:300], metrics)
    return Score(1.0, extracted, f"valid ({how})" + (", all fields right" if truth is not None else ""), metrics)


def _validate(params: dict[str, Any]) -> list[str]:
    kinds = list(params["kinds"]) if params["kinds"] else list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise EvalsuiteError(f"json: unknown kinds {unknown}; valid: {', '.join(KINDS)}")
    if params["prompt_format"] not in ("fields", "schema"):
        raise EvalsuiteError(f"json: prompt_format must be fields or schema, got {params['prompt_format']!r}")
    if params["mode"] not in ("strict", "lenient"):
        raise EvalsuiteError(f"json: mode must be strict or lenient, got {params['mode']!r}")
    if not isinstance(params["n"], int) or params["n"] < 1:
        raise EvalsuiteError("json: n must be an integer >= 1")
    return kinds


def _bounds(s: dict[str, Any], low: str, high: str) -> str:
    lo, hi = s.get(low), s.get(high)
    if lo is not None and hi is not None:
        return f" between {lo} and {hi}"
    if lo is not None:
        return f" of at least {lo}"
    return f" of at most {hi}" if hi is not None else ""


def describe(s: dict[str, Any]) -> str:
    """A JSON Schema fragment in plain words (the small models this suite targets echo raw schemas)."""
    if "enum" in s:
        return "one of " + ", ".join(json.dumps(v) for v in s["enum"])
    kind = s.get("type")
    if kind == "string":
        fmt = {"date": " in YYYY-MM-DD format", "email": " (an email address)"}.get(s.get("format", ""), "")
        digits = " of exactly 5 digits" if s.get("pattern") == "^[0-9]{5}$" else ""
        length = f" of {s.get('minLength', 0)} to {s['maxLength']} characters" if s.get("maxLength") else ""
        return f"a string{fmt}{digits}{length}"
    if kind in ("integer", "number"):
        positive = " greater than 0" if s.get("exclusiveMinimum") == 0 else ""
        return f"{'an integer' if kind == 'integer' else 'a number'}{positive}{_bounds(s, 'minimum', 'maximum')}"
    if kind == "boolean":
        return "true or false"
    if kind == "array":
        count = (f" of {s['minItems']} to {s['maxItems']} items" if "maxItems" in s
                 else f" of at least {s.get('minItems', 0)} item(s)")
        unique = ", no repeats" if s.get("uniqueItems") else ""
        return f"a list{count} (each {describe(s['items'])}{unique})"
    if kind == "object":
        inner = "; ".join(f'"{k}": {describe(v)}' for k, v in s["properties"].items())
        return f"an object with exactly these keys: {{{inner}}}"
    return json.dumps(s)


def render(case: JsonCase, prompt_format: str = "fields") -> str:
    """The user message: the instruction, the passage (extraction), and the schema in plain words
    (``fields``) or as JSON Schema text (``schema``)."""
    parts = [case.instruction]
    if case.passage:
        parts.append(f"Text: {case.passage}")
    if prompt_format == "schema":
        parts.append(f"The JSON object must match this JSON Schema:\n{json.dumps(case.schema, indent=1)}")
    else:
        keys = "\n".join(f'- "{k}": {describe(v)}' for k, v in case.schema["properties"].items())
        parts.append(f"The JSON object must have exactly these keys:\n{keys}")
    parts.append("Reply with only the JSON object.")
    return "\n\n".join(parts)


class JsonTask(Task):
    """Structured output: JSON that validates against a schema; extraction cases also check the values."""

    name = "json"
    version = "1"
    description = "JSON objects matching a JSON Schema (flat, nested, arrays, enums, ranges, extraction)"
    binary = True
    default_params: dict[str, Any] = {"n": 28, "kinds": list(KINDS), "mode": "lenient", "max_new_tokens": 192,
                                      "prompt_format": "fields"}

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        """The default set: the stream's first ``n`` samples."""
        params = self.params(params)
        _validate(params)
        return list(islice(self.stream(params, seed), params["n"]))

    def stream(self, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
        """Endless: case i = 0, 1, 2, ... with the kinds in turn (``json/{seed}/{i}``)."""
        params = self.params(params)
        kinds = _validate(params)
        for i in count(start):
            kind = kinds[i % len(kinds)]
            case = make_case(kind, random.Random(f"json-{seed}-{i}"))
            target = {"schema": case.schema, "truth": case.truth, "mode": params["mode"]}
            user = render(case, params["prompt_format"])
            messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
            yield Sample(id=f"json/{seed}/{i}", target=target, messages=messages,
                         metadata={"difficulty": kind, "entity": case.entity, "ground_truth": case.truth is not None})

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        """Up to ``max_new_tokens``; where the engine applies stop rules (``context.stop_rules``), a row ends
        once its score is fixed (``json_parse.score_fixed``: the same score whatever would follow)."""
        params = self.params(params)
        _validate(params)
        rule = f"json:{params['mode']}" if self.context.stop_rules else ""
        return GenSettings(max_new_tokens=int(params["max_new_tokens"]), stop_rule=rule)

    def score(self, sample: Sample, output: str) -> Score:
        return score_output(sample.target, output)
