"""Stop rules: a task's proof that the rest of an answer can no longer change its score.

A task names one in ``GenSettings.stop_rule`` (only when its ``TaskContext.stop_rules`` says the engine applies
them). evalsuite's in-process decoder (``backends.inprocess.decoder.take_token``, shared by every decode loop: per
batch, refilled pool, verification tails, drafted decoding) checks the rule after each token and ends the row with stop
reason ``"rule"`` once it holds. Served engines (vLLM, ``openai:`` endpoints) take stop strings only: there the
task leaves the rule out, both sides generate to their stop strings or ``max_new_tokens``, and the scores are the
same by the rule's proof.

A rule must hold for every continuation: ``fixed(text)`` True means ``score(text + C) == score(text)`` for all
strings ``C``. ``trigger`` is a cheap filter on the newest token's text (it decides only when ``fixed`` is
evaluated, so a rule that holds is at worst noticed a token later, never wrongly).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.json_parse import score_fixed as json_fixed


@dataclass(frozen=True)
class StopRule:
    """When an answer's score is fixed (``fixed``), looked at after tokens whose text passes ``trigger``."""

    fixed: Callable[[str], bool]
    trigger: Callable[[str], bool]


RULES: dict[str, StopRule] = {
    # a parsable ```json block closed (then the whole output can no longer be JSON): closing backticks end it
    "json:lenient": StopRule(lambda text: json_fixed(text, "lenient"), lambda piece: "`" in piece),
    # the whole output can no longer be JSON: a non-blank character decides it
    "json:strict": StopRule(lambda text: json_fixed(text, "strict"), lambda piece: bool(piece.strip())),
}


def rule(name: str) -> StopRule:
    """The rule called ``name``; an unknown name is a one-line error naming the known ones."""
    if name not in RULES:
        raise EvalsuiteError(f"unknown stop rule {name!r}; known: {', '.join(sorted(RULES))}")
    return RULES[name]


def reached(name: str, text_of: Callable[[list[int]], str], ids: Sequence[int]) -> bool:
    """Whether rule ``name`` holds for the answer ``ids`` (decoded by ``text_of``) after its newest token. A text
    ending in U+FFFD may end in half a character (the next token completes it): not decided there."""
    found = rule(name)
    if not ids or not found.trigger(text_of(list(ids[-1:]))):
        return False
    text = text_of(list(ids))
    return not text.endswith("\ufffd") and found.fixed(text)
