"""Teacher-forced KLD: the two-chunk pass (decoder prefill, then the answer) and its shared prefix."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evalsuite.kvcache import KVConfig, make_cache
from evalsuite.backends.inprocess.decoder import encode_prefix
from evalsuite.backends.inprocess.answer import prefill_answer_logprobs
from evalsuite.backends.inprocess.kld import BaselineLogprobCache, teacher_forced_kld
from tests.conftest import make_tiny_model

HEAD = "System: answer in a few words. Be brief and exact, and do not explain anything at all. "
PROMPTS = [(HEAD + q, True) for q in ["What is red?", "Name a sea animal that is large", "Why?"]]
ANSWERS = ["A colour.", "The blue whale, probably", "Because."]


@pytest.fixture
def fp32(tokenizer):
    return make_tiny_model(len(tokenizer), seed=5, dtype=torch.float32)


def test_chunked_logprobs_equal_one_plain_forward(fp32, tokenizer):
    """Batched, padded, prefix-shared two-chunk log-probs equal a single unpadded forward per sample."""
    ids = [tokenizer(p)["input_ids"] for p, _ in PROMPTS]
    p = 10
    assert all(x[:p] == ids[0][:p] for x in ids)
    tokenizer.padding_side = "right"
    ans = tokenizer(ANSWERS, return_tensors="pt", padding=True, add_special_tokens=False)
    tokenizer.padding_side = "left"
    lp = prefill_answer_logprobs(fp32, [x[p:] for x in ids], encode_prefix(fp32, ids[0][:p]), None,
                                 tokenizer.pad_token_id, ans["input_ids"], ans["attention_mask"])
    for row, (x, a) in enumerate(zip(ids, ANSWERS)):
        a_ids = tokenizer(a, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = fp32(torch.tensor([x + a_ids])).logits[0, len(x) - 1 : len(x) + len(a_ids) - 1]
        torch.testing.assert_close(lp[row, : len(a_ids)], F.log_softmax(logits.float(), -1), atol=1e-4, rtol=1e-4)


def test_kld_is_zero_for_the_baseline_and_positive_for_a_2bit_cache(fp32, tokenizer):
    same = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS)
    assert all(max(k) < 1e-6 and agree == n for k, agree, n in same)
    cfg = KVConfig(bits=2, group=8, residual=8)  # exact prefill: only the answer chunk reads 2-bit K/V
    kv2 = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, lambda: make_cache(cfg, fp32.config))
    assert sum(sum(k) for k, _, _ in kv2) > 1e-3


def test_shared_prefix_does_not_change_the_kld(fp32, tokenizer):
    cfg = KVConfig(bits=4, group=8, residual=8)
    make = lambda: make_cache(cfg, fp32.config)  # noqa: E731
    plain = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make)
    shared = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make, prefix_len=12)
    for (a, _, n), (b, _, m) in zip(plain, shared):
        assert n == m
        assert a == pytest.approx(b, abs=5e-3)


@pytest.mark.parametrize("cfg", [None, KVConfig(bits=4, group=8, residual=8),
                                 KVConfig(backend="hf", bits=4, group=16, residual=8)],
                         ids=["dynamic", "kv4", "quanto4"])
def test_prompt_snapshot_gives_the_same_kld_without_a_second_prefill(fp32, tokenizer, monkeypatch, cfg):
    """A variant sharing the baseline's weights reuses the baseline's prompt K/V: same KLD, no prompt prefill."""
    import evalsuite.backends.inprocess.answer as answer
    import evalsuite.backends.inprocess.kld as kld

    from evalsuite.backends.inprocess.decoder import prefill
    from evalsuite.backends.inprocess.generate import encode_prompts
    from evalsuite.backends.inprocess.snapshots import PromptSnapshots

    make = None if cfg is None else (lambda: make_cache(cfg, fp32.config))
    plain = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make, prefix_len=12)
    store = kld.BaselineLogprobCache()
    teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, None, store, "batch", prefix_len=12)
    ids = encode_prompts(tokenizer, PROMPTS)  # the baseline's generation keeps its prompts' K/V (engine.snapshots)
    snaps = PromptSnapshots()
    snaps.observe(None, ids, *prefill(fp32, ids, None, None, tokenizer.pad_token_id))
    snap = snaps.take([tuple(x) for x in ids], keep=True)
    prefills = []
    monkeypatch.setattr(answer, "prefill", lambda *a, orig=answer.prefill: (prefills.append(1), orig(*a))[1])
    fast = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make, store, "batch", prefix_len=12,
                              base_snapshot=snap)
    assert not prefills  # neither the baseline (cached) nor the variant prefilled the prompt
    for (a, agree_a, n), (b, agree_b, m) in zip(plain, fast):
        assert (n, agree_a) == (m, agree_b)
        assert a == pytest.approx(b, abs=1e-4)


def test_other_weights_prefill_their_own_prompt(fp32, tokenizer):
    other = make_tiny_model(len(tokenizer), seed=6, dtype=torch.float32)
    store = BaselineLogprobCache()
    ref = teacher_forced_kld(fp32, other, tokenizer, PROMPTS, ANSWERS, prefix_len=12)
    teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, None, store, "k", prefix_len=12)
    got = teacher_forced_kld(fp32, other, tokenizer, PROMPTS, ANSWERS, None, store, "k", prefix_len=12)
    for (a, _, _), (b, _, _) in zip(ref, got):
        assert a == pytest.approx(b, abs=1e-4) and max(a) > 0


def test_answer_in_chunks_gives_the_one_chunk_log_probs(fp32, tokenizer):
    """``answer_logits`` in calls of a few tokens (the lm-eval bridge) equals the one-chunk pass (KLD)."""
    from evalsuite.backends.inprocess.answer import answer_logits, answer_logprobs
    from evalsuite.backends.inprocess.decoder import prefill
    from evalsuite.backends.inprocess.generate import encode_prompts

    ids = encode_prompts(tokenizer, PROMPTS)
    ans = tokenizer(ANSWERS, return_tensors="pt", padding=True, add_special_tokens=False)
    one = answer_logprobs(fp32, *prefill(fp32, ids, None, None, tokenizer.pad_token_id), ans["input_ids"],
                          ans["attention_mask"])
    pieces = list(answer_logits(fp32, *prefill(fp32, ids, None, None, tokenizer.pad_token_id), ans["input_ids"],
                                ans["attention_mask"], chunk=2))
    assert [p.shape[1] for p in pieces] == [1] + [2] * ((ans["input_ids"].shape[1] - 1) // 2) + (
        [1] if (ans["input_ids"].shape[1] - 1) % 2 else [])
    torch.testing.assert_close(F.log_softmax(torch.cat(pieces, dim=1), -1), one, atol=1e-4, rtol=1e-4)


def test_a_baseline_prefill_hands_its_prompt_kv_to_the_store_not_the_variants(fp32, tokenizer):
    """Without a snapshot (a warm run) the baseline's prefill of a KLD pass is observed, so a KV variant's pass next
    starts from it; a variant with other weights prefilling its own prompt is not observed."""
    from evalsuite.backends.inprocess.decoder import prefill
    from evalsuite.backends.inprocess.generate import encode_prompts
    from evalsuite.backends.inprocess.snapshots import PromptSnapshots

    other = make_tiny_model(len(tokenizer), seed=6, dtype=torch.float32)
    seen = PromptSnapshots()
    with_obs = teacher_forced_kld(fp32, other, tokenizer, PROMPTS, ANSWERS, prefix_len=12, observe_base=seen.observe)
    assert with_obs == teacher_forced_kld(fp32, other, tokenizer, PROMPTS, ANSWERS, prefix_len=12)
    ids = [tuple(x) for x in encode_prompts(tokenizer, PROMPTS)]
    got = seen.take(ids, keep=True)
    assert got is not None  # every prompt held
    want = PromptSnapshots()
    want.observe(None, [list(x) for x in ids], *prefill(fp32, [list(x) for x in ids], None, None,
                                                         tokenizer.pad_token_id))
    ref = want.take(ids, keep=True)
    for (k, v), (k0, v0) in zip(got[0], ref[0]):  # the baseline's K/V, not the other model's
        torch.testing.assert_close(k, k0, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(v, v0, atol=1e-4, rtol=1e-4)
    cfg = KVConfig(bits=4, group=8, residual=8)
    make = lambda: make_cache(cfg, fp32.config)  # noqa: E731
    from_seen = teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make, prefix_len=12, base_snapshot=got)
    for (a, _, n), (b, _, m) in zip(teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, make,
                                                       prefix_len=12), from_seen):
        assert n == m and a == pytest.approx(b, abs=1e-4)
    cached = BaselineLogprobCache()
    teacher_forced_kld(fp32, fp32, tokenizer, PROMPTS, ANSWERS, None, cached, "k", prefix_len=12)
    none_seen = PromptSnapshots()  # the baseline's log-probs cached: only the other model prefills, unobserved
    teacher_forced_kld(fp32, other, tokenizer, PROMPTS, ANSWERS, None, cached, "k", prefix_len=12,
                       observe_base=none_seen.observe)
    assert none_seen.take(ids, keep=True) is None


def padded_kld(base_model, var_model, tokenizer, prompts, answers):
    """The KLD as computed before answer positions were packed: float [batch, answer, vocab] tensors of the whole
    padded batch, sliced per row afterwards (the reference the packed computation must reproduce bit for bit)."""
    from evalsuite.backends.inprocess.generate import encode_prompts
    from evalsuite.backends.inprocess.kld import encode_answers

    ids, ans = encode_prompts(tokenizer, prompts), encode_answers(tokenizer, answers)
    args = (tokenizer.pad_token_id, ans["input_ids"], ans["attention_mask"])
    base = prefill_answer_logprobs(base_model, ids, None, None, *args).to(torch.bfloat16).float()
    var = prefill_answer_logprobs(var_model, ids, None, None, *args).to(torch.bfloat16).float()
    kl = (base.exp() * (base - var)).sum(-1).clamp(min=0.0)
    agree = base.argmax(-1) == var.argmax(-1)
    return [(kl[r, :n].tolist(), int(agree[r, :n].sum()), n)
            for r, n in enumerate(int(m.sum()) for m in ans["attention_mask"])]


@pytest.mark.parametrize("positions", [512, 3, 2])
def test_packed_answer_positions_give_the_padded_batchs_kld_bit_for_bit(fp32, tokenizer, monkeypatch, positions):
    """KL, argmax and log-softmax over real answer positions only, in chunks of any size (3 and 2 leave a lone last
    position to join the chunk before it), equal the padded batch's values exactly; an empty answer is its EOS."""
    import evalsuite.backends.inprocess.kld as kld

    monkeypatch.setattr(kld, "POSITIONS", positions)
    other = make_tiny_model(len(tokenizer), seed=6, dtype=torch.float32)
    answers = ANSWERS[:2] + [""]
    assert teacher_forced_kld(fp32, other, tokenizer, PROMPTS, answers) == padded_kld(fp32, other, tokenizer,
                                                                                        PROMPTS, answers)


def test_position_chunks_keep_order_and_never_leave_a_lone_position(monkeypatch):
    import evalsuite.backends.inprocess.kld as kld

    monkeypatch.setattr(kld, "POSITIONS", 4)
    rows = [torch.arange(3.0)[:, None], (torch.arange(3.0, 4.0)[:, None], torch.arange(4.0, 9.0)[:, None])]
    chunks = list(kld.position_chunks(rows))
    assert torch.cat(chunks).flatten().tolist() == list(range(9))
    assert [c.shape[0] for c in chunks] == [4, 5]  # cut once a chunk reaches 4 positions
    rows.append(torch.arange(9.0, 10.0)[:, None])  # one more position: it joins the last chunk, never alone
    sizes = [c.shape[0] for c in kld.position_chunks(rows)]
    assert sizes == [4, 6]
    assert [t.flatten().tolist() for t in kld.split_rows(torch.arange(10.0), rows)] == [
        [0, 1, 2], [3, 4, 5, 6, 7, 8], [9]]
