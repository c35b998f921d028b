"""Verification: the teacher-forced pass gives each token what decoding gives it; verified answers equal decoded."""
from __future__ import annotations

import pytest
import torch

from evalsuite.kvcache import KVConfig, make_cache
from evalsuite.backends.inprocess import decoder as engine
from evalsuite.backends.inprocess.decoder import decode
from evalsuite.backends.inprocess.forced import forced_pass
from evalsuite.store.records import Reference
from evalsuite.backends.inprocess.verify import Side, first_divergence, verify_batch
from evalsuite.tasks.base import GenSettings
from tests.conftest import make_tiny_model

ROWS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [20, 21, 22, 23, 24]]  # different lengths: left padding
KV = {"int4": KVConfig(bits=4, group=8, residual=8), "int2-token-keys": KVConfig(bits=2, group=8, residual=16,
                                                                                key_axis="token"),
      "fp8": KVConfig(fmt="fp8e4", group=0, residual=8), "int4-quantized-prefill": KVConfig(bits=4, group=8,
                                                                                             residual=8,
                                                                                             prefill="quantized"),
      "int8-r32": KVConfig(bits=8, group=16, residual=32)}


class Tok:
    """Enough of a tokenizer for the decoder: ids are their own text."""

    pad_token_id, eos_token_id = 0, 1

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def fp32():
    return make_tiny_model(300, dtype=torch.float32)


@pytest.fixture(scope="module")
def w8(fp32):
    from evalsuite.variants.spec import parse_variant
    from evalsuite.variants.weights import quantize_weights

    return quantize_weights(fp32, parse_variant("w4g32").weights)


def stepwise(model, cfg, rows, gen, monkeypatch):
    """Each row decoded alone, step by step: its ids and the logits of every step."""
    out, seen = [], []
    orig = engine.pick_tokens
    monkeypatch.setattr(engine, "pick_tokens", lambda lg, g, r: (seen.append(lg.clone()), orig(lg, g, r))[1])
    for row in rows:
        seen.clear()
        d = decode(model, Tok(), [row], gen, None, make_cache(cfg, model.config) if cfg else None, {1})
        out.append((d[0].ids, torch.cat(seen)))
    monkeypatch.setattr(engine, "pick_tokens", orig)
    return out


@pytest.mark.parametrize("kind", ["dynamic", pytest.param("weights-w8", marks=pytest.mark.slow), *KV,
                                  "w8+int4"])
def test_pass_logits_equal_step_by_step_decoding(fp32, w8, kind, monkeypatch):
    model = w8 if kind.startswith("w8") or kind.startswith("weights") else fp32
    cfg = KV.get(kind.split("+")[-1])
    gen = GenSettings(max_new_tokens=40)
    ref = stepwise(model, cfg, ROWS, gen, monkeypatch)
    cache = make_cache(cfg, model.config, keep_exact=True) if cfg else None
    f = forced_pass(model, ROWS, None, cache, 0, [ids for ids, _ in ref])
    for r, (ids, logits) in enumerate(ref):
        got = f.logits(r)[: len(logits)]
        assert got.shape == logits.shape
        assert (got - logits).abs().max() < 1e-4  # float rounding of batched vs one-token matmuls
    if cfg is not None:  # the KV mix matters: an unquantized cache's logits are far from these
        plain = forced_pass(model, ROWS, None, None, 0, [ids for ids, _ in ref])
        assert max((plain.logits(r)[: len(lg)] - lg).abs().max() for r, (_, lg) in enumerate(ref)) > 1e-3


@pytest.mark.parametrize("kind", list(KV))
def test_a_row_decodes_the_same_whatever_its_batch(fp32, kind):
    """Flushes count each row's own tokens: padding added by other rows changes nothing."""
    cfg, gen = KV[kind], GenSettings(max_new_tokens=30)
    alone = [decode(fp32, Tok(), [r], gen, None, make_cache(cfg, fp32.config), {1})[0].ids for r in ROWS]
    batch = decode(fp32, Tok(), ROWS, gen, None, make_cache(cfg, fp32.config), {1})
    assert [d.ids for d in batch] == alone


def test_one_chunk_is_not_what_decoding_reads(fp32, monkeypatch):
    """Why the pass is chunked at flush boundaries: the answer as one chunk attends to itself exactly."""
    from evalsuite.backends.inprocess import forced

    cfg = KV["int4"]
    ref = stepwise(fp32, cfg, ROWS, GenSettings(max_new_tokens=40), monkeypatch)
    monkeypatch.setattr(forced, "segment_block", lambda cache: None)
    f = forced_pass(fp32, ROWS, None, make_cache(cfg, fp32.config, keep_exact=True), 0, [i for i, _ in ref])
    assert max((f.logits(r)[: len(lg)] - lg).abs().max() for r, (_, lg) in enumerate(ref)) > 1e-3


def test_near_ties_and_the_stop_token_are_checked():
    logits = torch.tensor([[0.0, 5.0, 1.0], [0.0, 1.0, 4.0], [3.0, 0.0, 0.0]])
    assert first_divergence(logits, Reference((1, 2), "eos"), {0}).diverged is None
    assert first_divergence(logits, Reference((1, 2), "length"), {0}).checked == 2  # no stop position
    assert first_divergence(logits, Reference((1, 1), "eos"), {0}).diverged == 1
    assert first_divergence(logits, Reference((1, 2), "eos"), {2}).diverged == 2  # EOS not chosen after it
    tie = logits.clone()
    tie[1, 1] = 4.0 - 1e-4  # token 2 still wins, by less than the fp32 near-tie margin
    check = first_divergence(tie, Reference((1, 2), "eos"), {0})
    assert check.diverged == 1 and check.near_ties == 1


@pytest.mark.parametrize("kind", ["w8", "int4", "int2-token-keys", "int4-quantized-prefill", "w8+int4"])
def test_verified_answers_equal_decoded_ones(fp32, w8, kind):
    """The baseline decodes; the variant is verified against it; the result equals the variant's own decode."""
    gen = GenSettings(max_new_tokens=30)
    rows = ROWS + [[30, 31], [40, 41, 42, 43]]
    base = decode(fp32, Tok(), rows, gen, None, None, {1})
    refs = [Reference(tuple(d.ids), d.stop) for d in base]
    model = w8 if kind.startswith("w8") else fp32
    cfg = KV.get(kind.split("+")[-1])
    own = decode(model, Tok(), rows, gen, None, make_cache(cfg, model.config) if cfg else None, {1})
    base_side = Side(fp32, lambda keep: None, None)
    from evalsuite.backends.inprocess.verify import baseline_logprobs

    lp = baseline_logprobs(base_side, rows, refs, 0)
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    got = verify_batch(var, Tok(), rows, refs, lp, gen, {1})
    assert [v.ids for v in got] == [d.ids for d in own]
    assert [v.stop for v in got] == [d.stop for d in own]
    assert all(len(v.kld[0]) == max(len(r.ids), 1) for v, r in zip(got, refs))
    differs = [tuple(d.ids) != r.ids for d, r in zip(own, refs)]
    assert all(v.decode.startswith("diverged@") for v, d in zip(got, differs) if d)  # tails really decode
    if kind == "w8":  # quantized weights change some answers: the tail path is exercised
        assert any(differs)


@pytest.mark.parametrize("kind", ["w8", "int4", "int2-token-keys", "int4-quantized-prefill", "int8-r32", "w8+int4"])
def test_tails_diverging_at_different_positions_decode_as_the_variant_does(fp32, w8, kind):
    """References that differ from the variant's own answers at position 0, 3 and 12 (flushes of a group-8
    residual-8 cache fall inside the kept prefix): the tails, decoded in one batch from the pass's K/V and logits,
    reproduce the variant's own step-by-step answers exactly."""
    gen = GenSettings(max_new_tokens=30)
    rows = ROWS + [[30, 31], [40, 41, 42, 43]]
    model = w8 if kind.startswith("w8") else fp32
    cfg = KV.get(kind.split("+")[-1])
    own = decode(model, Tok(), rows, gen, None, make_cache(cfg, model.config) if cfg else None, {1})
    refs, wrong = [], {0: 0, 1: 3, 3: 12}  # row -> the position where its reference departs
    for r, d in enumerate(own):
        ids = list(d.ids)
        if r in wrong and len(ids) > wrong[r]:
            ids[wrong[r]] = 2 + (ids[wrong[r]] + 1) % 290  # another token, never the stop id 1
        refs.append(Reference(tuple(ids), d.stop))
    from evalsuite.backends.inprocess.verify import baseline_logprobs

    lp = baseline_logprobs(Side(fp32, lambda keep: None, None), rows, refs, 0)
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    got = verify_batch(var, Tok(), rows, refs, lp, gen, {1})
    assert [v.ids for v in got] == [d.ids for d in own]
    assert [v.stop for v in got] == [d.stop for d in own]
    for r, t in wrong.items():
        if len(own[r].ids) > t:
            assert got[r].decode == f"diverged@{t}", (r, got[r].decode)
    assert {v.decode for v in got} >= {"diverged@0", "diverged@3"}  # one batch holds tails from 0 and later


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["w8", "int4", "int8-r32", "w8+int4"])
def test_tails_of_several_batches_decode_together_as_each_batch_alone(fp32, w8, kind):
    """Two batches checked apart, their tails decoded in one batch (``finish``): the same answers, stop reasons and
    paths as each batch verified alone, and as the variant's own decode."""
    from evalsuite.backends.inprocess.verify import baseline_logprobs, check_batch, finish

    gen = GenSettings(max_new_tokens=30)
    batches = [ROWS, [[30, 31], [40, 41, 42, 43], [50, 51, 52, 53, 54, 55, 56, 57, 58]]]
    model = w8 if kind.startswith("w8") else fp32
    cfg = KV.get(kind.split("+")[-1])
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    base_side = Side(fp32, lambda keep: None, None)
    checked, alone, own = [], [], []
    for rows in batches:
        refs = [Reference(tuple(d.ids), d.stop) for d in decode(fp32, Tok(), rows, gen, None, None, {1})]
        ids = list(refs[0].ids)
        ids[2] = 2 + (ids[2] + 1) % 290  # the first row of each batch departs from its reference at 2: a tail
        refs[0] = Reference(tuple(ids), refs[0].stop)
        lp = baseline_logprobs(base_side, rows, refs, 0)
        checked.append(check_batch(var, Tok(), rows, refs, lp, {1}))
        alone.append(verify_batch(var, Tok(), rows, refs, lp, gen, {1}))
        own.append(decode(model, Tok(), rows, gen, None, make_cache(cfg, model.config) if cfg else None, {1}))
    together = finish(checked, model, Tok(), lambda: var.make_cache(False), gen, {1})
    assert all(c.tails for c in checked)  # tails from both batches share one decode
    for got, ref, mine in zip(together, alone, own):
        assert [(v.ids, v.stop, v.decode) for v in got] == [(v.ids, v.stop, v.decode) for v in ref]
        assert [v.ids for v in got] == [d.ids for d in mine]


def test_pooled_gives_whole_batches_once_their_tails_fill_the_pool():
    """Batches wait while their tails are few; a batch is given only with its tails decoded, never before."""
    from evalsuite.backends.inprocess.verify import Checked, Verified, pooled
    from evalsuite.kvcache.layer import RowState

    kv = lambda n: (RowState(torch.zeros(1, n, 2), torch.zeros(1, n, 2)),)  # noqa: E731  one layer, n tokens
    def batch(tails):
        return Checked([Reference((5,), "eos")] * 3, [None] * 3, [None] * 3, {r: (kv(n), None) for r, n in tails})
    calls = []
    def finish_all(batches):
        calls.append([sum(len(b.tails) for b in batches)])
        return [[Verified([], "eos", "verified", None, None)] * 3 for _ in batches]
    seq = [("a", batch([(0, 10)])), ("b", batch([])), ("c", batch([(1, 10), (2, 10)])), ("d", batch([])),
           ("e", batch([(0, 100)])), ("f", batch([(0, 10)]))]
    got = [[k for k, _ in group] for group in pooled(iter(seq), finish_all, max_rows=3, max_tokens=150)]
    # a: 1 tail, b: none new, c: 3 tails (max_rows) -> decode a-c; d: no tails pending -> at once;
    # e: 1 tail x 100 tokens; f: 2 tails x 100 padded >= 150 -> decode e-f
    assert got == [["a", "b", "c"], ["d"], ["e", "f"]]
    assert calls == [[3], [0], [2]]
    assert [[k for k, _ in g] for g in pooled(iter(seq[:1]), finish_all, 8, 10**6)] == [["a"]]  # the rest at the end


@pytest.mark.parametrize("kind", ["w8", "int4", "int2-token-keys", "int4-quantized-prefill", "w8+int4"])
def test_tail_logits_equal_step_by_step_decoding(fp32, w8, kind, monkeypatch):
    """The tails' logits, step by step, against each row decoded alone: the cache rebuilt from the pass holds
    what decoding held at the divergence (the tiny model's argmax barely depends on context, so ids alone would
    not show a wrong cache)."""
    gen = GenSettings(max_new_tokens=24)
    rows = [ROWS[0], ROWS[2]]
    model = w8 if kind.startswith("w8") else fp32
    cfg = KV.get(kind.split("+")[-1])
    alone = stepwise(model, cfg, rows, gen, monkeypatch)
    refs = []
    for (ids, _), t in zip(alone, (0, 11)):  # row 0 departs at once, row 1 after 11 kept tokens (flushes inside)
        ids = list(ids)
        ids[t] = 2 + (ids[t] + 1) % 290
        refs.append(Reference(tuple(ids), "length"))
    from evalsuite.backends.inprocess.verify import baseline_logprobs

    lp = baseline_logprobs(Side(fp32, lambda keep: None, None), rows, refs, 0)
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    seen, orig = [], engine.pick_tokens
    monkeypatch.setattr(engine, "pick_tokens", lambda lg, g, r: (seen.append(lg.clone()), orig(lg, g, r))[1])
    got = verify_batch(var, Tok(), rows, refs, lp, gen, {1}, draft=0)  # step by step (drafted: test_drafted)
    assert [v.decode for v in got] == ["diverged@0", "diverged@11"]
    steps = [lg for lg in seen if lg.shape[0] == 2]
    assert len(steps) >= 5
    for s, lg in enumerate(steps):
        for b, t in enumerate((0, 11)):
            if t + s < len(alone[b][1]):
                torch.testing.assert_close(lg[b].float(), alone[b][1][t + s].float(), atol=2e-4, rtol=1e-4)


def test_the_baseline_against_itself_is_verified_everywhere(fp32):
    gen = GenSettings(max_new_tokens=30)
    base = decode(fp32, Tok(), ROWS, gen, None, None, {1})
    refs = [Reference(tuple(d.ids), d.stop) for d in base]
    side = Side(fp32, lambda keep: None, None)
    from evalsuite.backends.inprocess.verify import baseline_logprobs

    got = verify_batch(side, Tok(), ROWS, refs, baseline_logprobs(side, ROWS, refs, 0), gen, {1})
    ties = sum(v.check.near_ties for v in got)
    assert all(v.decode == "verified" for v in got) or ties > 0
    assert [v.ids for v in got] == [d.ids for d in base]
    assert max(max(v.kld[0]) for v in got) < 1e-3


def _invariant(model):
    """``model`` on evalsuite's batch-invariant kernels (in place); quanto weight modules unpacked to plain Linears."""
    from evalsuite.models.attention import use_invariant_kernels
    from evalsuite.variants.weights import dequantize_linears

    dequantize_linears(model)  # in place: quantize_weights made a copy
    use_invariant_kernels(model)
    return model


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def invariant_models(request):
    from evalsuite.models.invariance import invariant
    from evalsuite.variants.spec import parse_variant
    from evalsuite.variants.weights import quantize_weights

    base = make_tiny_model(300, dtype=request.param)
    w4 = quantize_weights(base, parse_variant("w4g32").weights)
    models = {"base": _invariant(base), "w4": _invariant(w4)}
    if not all(invariant(m) for m in models.values()):
        pytest.skip(f"this CPU's {request.param} matmuls are not batch-invariant (models.invariance.probe)")
    return models


@pytest.mark.parametrize("kind", ["dynamic", "w4", *KV, "w4+int4", "w4+int2-token-keys"])
def test_invariant_pass_logits_are_the_decodes_bit_for_bit(invariant_models, kind, monkeypatch):
    """With batch-invariant kernels the pass (rows batched, answers in chunks cut at flushes) computes exactly what
    each row decoded alone, step by step, computes: equal logits, not merely close."""
    model = invariant_models["w4" if kind.startswith("w4") else "base"]
    cfg = KV.get(kind.split("+")[-1])
    ref = stepwise(model, cfg, ROWS, GenSettings(max_new_tokens=40), monkeypatch)
    cache = make_cache(cfg, model.config, keep_exact=True) if cfg else None
    f = forced_pass(model, ROWS, None, cache, 0, [ids for ids, _ in ref])
    for r, (ids, logits) in enumerate(ref):
        assert torch.equal(f.logits(r)[: len(logits)], logits), (kind, r)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["w4", "int4", "int4-quantized-prefill", "w4+int4"])
def test_invariant_verification_needs_no_margin(invariant_models, kind):
    """Verified against the baseline with the exact margin, the answers are the variant's own decode, and every
    row that agrees with the baseline is accepted without a decode."""
    from evalsuite.backends.inprocess.verify import baseline_logprobs

    gen = GenSettings(max_new_tokens=30)
    rows = ROWS + [[30, 31], [40, 41, 42, 43]]
    base = invariant_models["base"]
    model = invariant_models["w4" if kind.startswith("w4") else "base"]
    cfg = KV.get(kind.split("+")[-1])
    refs = [Reference(tuple(d.ids), d.stop) for d in decode(base, Tok(), rows, gen, None, None, {1})]
    own = [decode(model, Tok(), [r], gen, None, make_cache(cfg, model.config) if cfg else None, {1})[0] for r in rows]
    var = Side(model, lambda keep: make_cache(cfg, model.config, keep_exact=keep) if cfg else None, None)
    got = verify_batch(var, Tok(), rows, refs, baseline_logprobs(Side(base, lambda keep: None, None), rows, refs, 0),
                       gen, {1})
    assert [v.ids for v in got] == [d.ids for d in own]
    assert [v.decode == "verified" for v in got] == [tuple(d.ids) == r.ids and d.stop == r.stop
                                                      for d, r in zip(own, refs)]
