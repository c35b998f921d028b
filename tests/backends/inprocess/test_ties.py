"""Near-ties decided by a decode step: the step's logits are the decoder's, and its choice decides the row."""
from __future__ import annotations

import pytest
import torch

from evalsuite.store.records import Reference
from evalsuite.backends.inprocess import verify
from evalsuite.backends.inprocess.decoder import decode
from evalsuite.backends.inprocess.forced import forced_pass
from evalsuite.backends.inprocess.ties import scan, step_logits
from evalsuite.backends.inprocess.verify import Side, baseline_logprobs, decide, verify_batch
from evalsuite.kvcache import make_cache
from evalsuite.tasks.base import GenSettings
from tests.backends.inprocess.test_verify import KV, ROWS, Tok, fp32, stepwise, w8  # noqa: F401 (fixtures)

KINDS = ["dynamic", "w8", "int4", "int8-r32", "w8+int4"]


def _model_cfg(kind, fp32, w8):
    model = w8 if kind.startswith("w8") else fp32
    return model, KV.get(kind.split("+")[-1])


def test_scan_splits_clear_mismatches_from_near_ties():
    logits = torch.tensor([[0.0, 5.0, 4.9], [0.0, 1.0, 4.0], [3.0, 0.0, 2.95], [0.0, 0.0, 3.0]])
    ref = Reference((1, 2, 0, 1), "length")
    clear, ties, checked = scan(logits, ref, {9}, margin=0.5)
    assert (clear, ties, checked) == (3, [0, 2], 4)  # 3 picks token 2 by 3.0: a clear mismatch
    assert scan(logits, ref, {9}, margin=0.0) == (3, [], 4)


def test_a_near_tie_follows_the_steps_choice_not_the_pass():
    ref = Reference((1, 2, 2), "length")
    passed = torch.tensor([[0.0, 5.0, 0.0], [0.0, 1.0, 1.1], [0.0, 0.0, 4.0]])  # position 1: a near-tie for 2
    found = scan(passed, ref, set(), margin=0.5)
    agree = {(0, 1): torch.tensor([0.0, 0.0, 1.0])}
    assert decide(found, passed, agree, 0, ref, set()).diverged is None  # the step picks 2 too: still verified
    differ = {(0, 1): torch.tensor([0.0, 1.0, 0.0])}
    check = decide(found, passed, differ, 0, ref, set())
    assert (check.diverged, check.near_ties, check.stepped, check.checked) == (1, 1, 1, 2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_step_logits_are_the_decoders_own(fp32, w8, kind, monkeypatch):
    """Teacher-forced on the variant's own greedy answers, a step at position t gives the logits the variant's
    decode had at its step t (rows decoded alone), across flush boundaries (int8-r32 flushes inside)."""
    model, cfg = _model_cfg(kind, fp32, w8)
    gen = GenSettings(max_new_tokens=40)
    alone = stepwise(model, cfg, ROWS, gen, monkeypatch)
    refs = [Reference(tuple(ids), "length") for ids, _ in alone]
    f = forced_pass(model, ROWS, None, make_cache(cfg, model.config, keep_exact=True) if cfg else None, 0,
                    [r.ids for r in refs])
    pairs = [(r, t) for r, (ids, _) in enumerate(alone) for t in (1, 7, 16, 33, len(ids) - 1) if 0 < t < len(ids)]
    got = step_logits(f, pairs, refs, lambda: make_cache(cfg, model.config) if cfg else None, max_tokens=40)
    assert set(got) == set(pairs)
    for (r, t), lg in got.items():
        torch.testing.assert_close(lg.float(), alone[r][1][t].float(), atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["w8", "int4", "w8+int4"])
def test_with_every_position_a_near_tie_verification_is_step_by_step_decoding(fp32, w8, kind, monkeypatch):
    """A margin so wide that every position is a near-tie: each choice comes from a decode step, and the
    answers are the variant's own decode; rows whose decode is the baseline's stay verified."""
    monkeypatch.setattr(verify, "near_tie", lambda dtype, exact=False: 1e9)
    gen = GenSettings(max_new_tokens=30)
    rows = ROWS + [[30, 31], [40, 41, 42, 43]]
    base = decode(fp32, Tok(), rows, gen, None, None, {1})
    refs = [Reference(tuple(d.ids), d.stop) for d in base]
    model, cfg = _model_cfg(kind, fp32, w8)
    own = decode(model, Tok(), rows, gen, None, make_cache(cfg, model.config) if cfg else None, {1})
    lp = baseline_logprobs(Side(fp32, lambda keep: None, None), rows, refs, 0)
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    got = verify_batch(var, Tok(), rows, refs, lp, gen, {1})
    assert [v.ids for v in got] == [d.ids for d in own]
    assert [v.decode == "verified" for v in got] == [tuple(d.ids) == r.ids and d.stop == r.stop
                                                     for d, r in zip(own, refs)]
    assert all(v.check.stepped >= min(v.check.checked - 1, v.check.near_ties) for v in got)
    assert sum(v.check.stepped for v in got) > len(rows)
