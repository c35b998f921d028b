"""A task's stop rule in every in-process decode loop (per batch, refilled pool, drafted tails): each row ends,
with stop reason "rule", at the first token after which the rule holds, and is otherwise the free decoding's."""
from __future__ import annotations

import pytest
import torch

from evalsuite.backends.inprocess.decoder import decode
from evalsuite.tasks import stop_rules
from evalsuite.tasks.base import GenSettings
from evalsuite.tasks.stop_rules import StopRule
from tests.backends.inprocess.test_decoder import MORE, _prompts, _run
from tests.backends.inprocess.test_drafted import _drafted
from tests.backends.inprocess.test_verify import ROWS, Tok
from tests.conftest import make_tiny_model

#: a rule the tiny random models meet at different steps: the answer holds two "e"s (looked at after an "e")
E_RULE = StopRule(lambda text: text.count("e") >= 2, lambda piece: "e" in piece)


def _first_hold(text_of, ids, rule):
    return next((k for k in range(1, len(ids) + 1) if rule.fixed(text_of(ids[:k]))), None)


def _check(free, ruled, text_of, rule):
    """Each ruled row is the free row cut where the rule first holds (or the free row itself)."""
    cut = 0
    for f, r in zip(free, ruled):
        k = _first_hold(text_of, list(f.ids), rule)
        if k is None:
            assert (list(r.ids), r.stop) == (list(f.ids), f.stop)
        else:
            assert (list(r.ids), r.stop) == (list(f.ids)[:k], "rule")
            cut += k < len(f.ids)
    return cut


@pytest.mark.parametrize("refill", [False, True], ids=["per-batch", "refill"])
def test_a_stop_rule_ends_each_row_where_it_first_holds(tokenizer, monkeypatch, refill):
    model = make_tiny_model(len(tokenizer), seed=3, dtype=torch.float32)
    monkeypatch.setitem(stop_rules.RULES, "test:e", E_RULE)
    free = _run(model, tokenizer, _prompts(MORE), GenSettings(max_new_tokens=14), max_batch=4, refill=refill)
    ruled = _run(model, tokenizer, _prompts(MORE), GenSettings(max_new_tokens=14, stop_rule="test:e"), max_batch=4,
                 refill=refill)
    text_of = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    assert _check(free, ruled, text_of, E_RULE) >= 2  # rows really were cut short, at different steps
    assert all(r.text == text_of(list(r.ids)).rstrip() for r in ruled)


def test_drafted_tails_stop_on_the_rule_as_decoding_does(monkeypatch):
    model = make_tiny_model(300, dtype=torch.float32)
    free = decode(model, Tok(), ROWS, GenSettings(max_new_tokens=40), None, None, {1})
    word = str(free[0].ids[9])  # ids are their own text (``Tok``): a token of row 0's answer, mid-answer
    rule = StopRule(lambda text: word in text.split(), lambda piece: word in piece)
    monkeypatch.setitem(stop_rules.RULES, "test:word", rule)
    gen = GenSettings(max_new_tokens=40, stop_rule="test:word")
    ruled = decode(model, Tok(), ROWS, gen, None, None, {1})
    assert _check(free, ruled, Tok().decode, rule) >= 1
    drafted = _drafted(model, None, ROWS, gen, [d.ids for d in free])  # the free answers as drafts
    assert [(d.ids, d.stop) for d in drafted] == [(d.ids, d.stop) for d in ruled]


@pytest.mark.parametrize("variants, applies", [(["bf16", "w4g64"], True),
                                               (["bf16", "openai:http://127.0.0.1:9/v1#served"], False)],
                         ids=["in-process", "mixed"])
def test_stop_rules_apply_only_where_every_side_can(tmp_path, variants, applies):
    """`evalsuite run` in process: json rows end by the rule, and the stored key says so; beside a served variant
    (stop strings only) no side applies it, so both sides of every pair generate alike."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.core.config import RunConfig
    from evalsuite.run.baselines import task_key
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    config = RunConfig(variants=variants, tasks=["json", "reasoning"], limit=2)
    backend = make_backend(config, tmp_path)  # loads nothing
    json_task, reasoning = prepare_tasks(config, default_registry(plugins=False), backend.task_context())
    assert json_task.gen.stop_rule == ("json:lenient" if applies else "")
    assert ("stop_rule" in task_key(json_task, 1234)["gen_settings"]) is applies
    assert "stop_rule" not in task_key(reasoning, 1234)["gen_settings"]  # no rule: its key is unchanged
