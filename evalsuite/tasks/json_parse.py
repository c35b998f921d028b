"""How the json task reads an answer, and when the rest of an answer can no longer change its score.

``parse_json`` reads an output in a fixed order of attempts:

* ``strict``: 1. the whole output (stripped) is JSON, else the output is unparsed;
* ``lenient``: 1. the whole output; 2. the first ```json fenced block (``FENCE``, in order) that parses;
  3. the first ``{`` from which a JSON value decodes.

``score_fixed(text, mode)`` is True only when ``text + C`` is read to the same result as ``text`` for every
continuation ``C``, so the task's score is fixed and generation may stop (the json stop rule, ``tasks.stop_rules``).
Proof sketch, against the order above (docs/tasks.md, the json task, has it in full):

* strict: ``whole_impossible(text)``: the stripped text starts with a character no JSON text starts with, or
  with a complete object, array or string followed by more non-whitespace. ``json.loads`` then fails on
  ``text + C`` for every ``C`` with the same message at the same position: such a value ends at its closing
  character and Python's scanner reads nothing after it, so the data after it stays where it was.
* lenient: some block of ``FENCE.findall(text)`` parses. (a) Step 1 fails on ``text + C``: a fence's opening is
  backticks, then only blanks and letters, then a raw newline; JSON holds backticks only inside strings, and a
  string can hold neither a raw tab nor a raw newline (``json.loads`` is strict) nor end before them (no quote).
  (b) An opening ends at the first newline after its backticks and a block at the first ``` after that, and an
  opening cannot overlap the backticks of a later match; so every match in ``text`` is a match in ``text + C`` at
  the same place with the same block, and no new match comes before one of them. Step 2 meets the same blocks
  first, in the same order, and returns the same parsable one.

Nothing else can be stopped early in lenient mode: without a parsable fence a continuation can still add one
(scoring 1 or 0) or complete the whole output.
"""
from __future__ import annotations

import json
import re
from typing import Any

FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)```", re.S | re.I)
#: first characters of a JSON text as Python's ``json`` reads it (NaN, Infinity and -Infinity included)
STARTS = frozenset('{["-0123456789tfnNI')
#: values that end at their own closing character (a number or literal may still grow)
CLOSED = frozenset('{["')
_DECODER = json.JSONDecoder()  # what json.loads uses


def parse_json(output: str, mode: str) -> tuple[Any, str]:
    """(value, how) or raise ValueError. strict: the whole output must be JSON. lenient: also a ```json fence
    or the first JSON object inside surrounding text."""
    text = output.strip()
    try:
        return json.loads(text), "whole output"
    except ValueError as exc:
        if mode == "strict":
            raise ValueError(f"not JSON ({exc.msg} at char {exc.pos})") from None
    for block in FENCE.findall(output):
        try:
            return json.loads(block), "fenced block"
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", output):
        try:
            return decoder.raw_decode(output, match.start())[0], "embedded object"
        except ValueError:
            continue
    raise ValueError("no JSON object found")


def whole_impossible(output: str) -> bool:
    """True when no continuation of ``output`` is a JSON text as a whole (``json.loads`` of the stripped output
    fails for all of them, the same way). False when unsure."""
    text = output.strip()
    if not text:
        return False
    if text[0] not in STARTS:
        return True
    if text[0] not in CLOSED:
        return False
    try:
        _, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return False
    return end < len(text)


def _parses(block: str) -> bool:
    try:
        json.loads(block)
    except (ValueError, RecursionError):
        return False
    return True


def score_fixed(output: str, mode: str) -> bool:
    """True when ``parse_json(output + C, mode)`` gives what ``parse_json(output, mode)`` gives (the same value,
    or the same error) for every string ``C`` (see the module docstring)."""
    if mode == "strict":
        return whole_impossible(output)
    return any(_parses(block) for block in FENCE.findall(output))
