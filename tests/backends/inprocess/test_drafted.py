"""Drafted tails (engine.drafted): the same answers and logits as step-by-step decoding, in fewer forwards."""
from __future__ import annotations

import pytest
import torch

from evalsuite.backends.inprocess import drafted
from evalsuite.backends.inprocess.decoder import Decoded, decode, prefill
from evalsuite.backends.inprocess.drafted import Drafter, decode_drafted
from evalsuite.backends.inprocess.growcache import dynamic_layers, grow_cache
from evalsuite.backends.inprocess.verify import near_tie
from evalsuite.kvcache import make_cache
from evalsuite.models.invariance import invariant
from evalsuite.tasks.base import GenSettings
from tests.backends.inprocess.test_verify import KV, ROWS, Tok, stepwise

KINDS = ["dynamic", "int4", "int2-token-keys", "int4-quantized-prefill", "int8-r32"]


@pytest.fixture(scope="module")
def fp32():
    from tests.conftest import make_tiny_model

    return make_tiny_model(300, dtype=torch.float32)


def _drafted(model, cfg, rows, gen, corpora, draft=drafted.DRAFT, margin=None):
    """``rows`` prefilled into a fresh cache and decoded drafted from their first token (``margin``: the
    near-tie threshold, default the model's)."""
    cache, logits, mask = prefill(model, rows, None, make_cache(cfg, model.config) if cfg else None, 0)
    if dynamic_layers(cache):
        cache = grow_cache(cache)
    out = [Decoded(ids=[]) for _ in rows]
    margin = near_tie(logits.dtype, invariant(model)) if margin is None else margin
    return decode_drafted(model, Tok(), cache, logits, mask, gen, {1}, out, corpora, margin, draft)


def _perturbed(ids, every=5):
    """A draft text that departs from ``ids`` every ``every`` tokens (rejections inside accepted runs)."""
    return [2 + (t + 1) % 290 if i % every == every - 1 else t for i, t in enumerate(ids)]


@pytest.mark.parametrize("kind", KINDS)
def test_drafted_answers_equal_step_by_step_decoding(fp32, kind):
    """Perfect, perturbed and useless drafts: every row's ids and stop reason are the decoder's own."""
    gen = GenSettings(max_new_tokens=40)
    cfg = KV.get(kind)
    own = decode(fp32, Tok(), ROWS, gen, None, make_cache(cfg, fp32.config) if cfg else None, {1})
    for corpora in ([d.ids for d in own], [_perturbed(d.ids) for d in own], [[7, 7, 7]] * len(ROWS)):
        got = _drafted(fp32, cfg, ROWS, gen, corpora)
        assert [(d.ids, d.stop) for d in got] == [(d.ids, d.stop) for d in own], kind


def test_a_stop_string_inside_an_accepted_draft_ends_the_row_there(fp32):
    gen0 = GenSettings(max_new_tokens=30)
    own = decode(fp32, Tok(), ROWS, gen0, None, None, {1})
    stop = " ".join(map(str, own[0].ids[9:11]))  # the row's tokens 9-10 as text: a stop string mid-answer
    gen = GenSettings(max_new_tokens=30, stop=[stop])
    ref = decode(fp32, Tok(), ROWS, gen, None, None, {1})
    got = _drafted(fp32, None, ROWS, gen, [d.ids for d in own])
    assert [(d.ids, d.stop) for d in got] == [(d.ids, d.stop) for d in ref]
    assert got[0].stop == "stop" and len(got[0].ids) <= 11


@pytest.mark.parametrize("kind", ["dynamic", "int4", "int8-r32"])
def test_good_drafts_take_fewer_forwards(fp32, kind, monkeypatch):
    """With the decoder's own answers as drafts, whole runs are accepted per forward; without drafts it takes a
    forward per token of the longest answer, as step-by-step decoding does. (Margin 0: the tiny random model's
    logits are nearly flat, so at the fp32 threshold most of its choices are near-ties, each fed again alone.)"""
    gen = GenSettings(max_new_tokens=40)
    cfg = KV.get(kind)
    own = decode(fp32, Tok(), ROWS, gen, None, make_cache(cfg, fp32.config) if cfg else None, {1})
    calls = []
    orig = drafted._feed
    monkeypatch.setattr(drafted, "_feed", lambda *a: (calls.append(1), orig(*a))[1])
    _drafted(fp32, cfg, ROWS, gen, [d.ids for d in own], margin=0.0)
    good = len(calls)
    calls.clear()
    plain = _drafted(fp32, cfg, ROWS, gen, [d.ids for d in own], draft=0, margin=0.0)
    assert [d.ids for d in plain] == [d.ids for d in own]
    assert len(calls) >= max(len(d.ids) for d in own) - 1
    assert good * 2 < len(calls)


@pytest.mark.parametrize("kind", ["dynamic", "int4", "int2-token-keys", "int4-quantized-prefill"])
def test_drafted_logits_equal_step_by_step_decoding(fp32, kind, monkeypatch):
    """The logits after every fed token that was kept, against each row decoded alone step by step: masked
    holes and capped drafts leave the cache holding what decoding held (the tiny model's argmax barely depends
    on context, so ids alone would not show a wrong cache)."""
    gen = GenSettings(max_new_tokens=30)
    rows = [ROWS[0], ROWS[2]]
    cfg = KV.get(kind)
    alone = stepwise(fp32, cfg, rows, gen, monkeypatch)
    state, seen = {}, []
    feed, accept = drafted._feed, drafted._accept

    def spy_feed(*a):
        mask, lg, where = feed(*a)
        state.update(lg=lg, at=0)
        return mask, lg, where

    def spy_accept(row, fed, choice, trusted, take):
        at = state["at"]
        state["at"] += len(fed)
        seen.append((row, len(row.ids), list(fed), state["lg"][at:at + len(fed)].clone()))
        return accept(row, fed, choice, trusted, take)

    monkeypatch.setattr(drafted, "_feed", spy_feed)
    monkeypatch.setattr(drafted, "_accept", spy_accept)
    got = _drafted(fp32, cfg, rows, gen, [_perturbed(ids, 4) for ids, _ in alone])
    compared = 0
    for row, n, fed, lg in seen:
        r = got.index(row)
        ids, ref = alone[r]
        assert row.ids == ids
        for c in range(len(fed)):
            if ids[n - 1:n + c] != fed[:c + 1] or n + c >= len(ref):
                break  # fed tokens from here on were rejected (their logits are thrown away)
            torch.testing.assert_close(lg[c].float(), ref[n + c].float(), atol=2e-4, rtol=1e-4)
            compared += 1
    assert compared >= 30 and any(len(f) > 2 for _, _, f, _ in seen)


def test_the_drafter_prefers_the_rows_own_latest_match_then_the_aligned_one():
    own = [9, 4, 5]
    d = Drafter([1, 2, 3, 4, 5, 6, 7, 8], own)
    assert d.propose(3) == [6, 7, 8]  # "4 5" continues "6 7 8" in the baseline's answer
    own += [6, 0, 4, 5]
    assert d.propose(2) == [6, 0]  # the row's own earlier "4 5" wins over the baseline's
    assert Drafter([], [1, 2, 3, 1, 2]).propose(5) == [3, 1, 2, 3, 1]  # a loop is drafted past what was written
    own.append(42)
    assert d.propose(4) == []  # nothing like it before
    rep = [11] * 6 + [7, 7, 7]
    assert Drafter(rep, [11, 3, 11]).propose(4) == [3, 11, 3, 11]  # the row's own earlier "11" first
    assert Drafter(rep, [3, 2, 11]).propose(4) == [11, 11, 11, 7]  # the baseline's "11" nearest position 2
    assert Drafter([1, 2], [2]).propose(4) == []  # a match at the end of the baseline's answer: nothing follows
    assert Drafter([1, 2, 3], [2]).propose(0) == []
