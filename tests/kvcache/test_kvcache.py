"""evalsuite's quantized KV cache on a tiny model: residual flushing, bytes, prefill modes, generate."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache import KVConfig, cache_nbytes, kv_bytes_for_length, kv_bytes_per_token, make_cache
from evalsuite.kvcache.cache import plan_for
from evalsuite.kvcache.layer import QuantKVLayer

from tests.conftest import make_tiny_model

VOCAB = 1000


@pytest.fixture(scope="module")
def model():
    return make_tiny_model(VOCAB, seed=3)


def _ids(batch: int = 2, length: int = 61, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _kl(ref: torch.Tensor, other: torch.Tensor) -> float:
    lp, lq = F.log_softmax(ref.float(), -1), F.log_softmax(other.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).mean().item()


def _layer(cfg: KVConfig, head_dim: int = 32, keep: bool = False) -> QuantKVLayer:
    return QuantKVLayer(plan_for(cfg, head_dim), keep_exact=keep)


@pytest.mark.parametrize("keep", [True, False])
def test_residual_flush_keeps_every_token_once(keep: bool) -> None:
    cfg = KVConfig(bits=4, group=8, residual=16)
    layer = _layer(cfg, keep=keep)
    x = torch.randn(1, 2, 70, 32)
    sizes, pos = [13, 1, 1, 20, 1, 1, 1, 30, 2], 0
    first_block = None
    for n in sizes:
        keys, values = layer.update(x[:, :, pos:pos + n], -x[:, :, pos:pos + n])
        pos += n
        assert keys.shape[-2] == values.shape[-2] == layer.get_seq_length() == pos
        residual = pos % 16
        assert layer.n_quant == pos - residual
        assert sum(b.tokens for b in layer.k_blocks) == sum(b.tokens for b in layer.v_blocks) == layer.n_quant
        if residual:  # the newest tokens are held exactly; the rest within the 4-bit error
            assert torch.equal(keys[:, :, -residual:], x[:, :, pos - residual:pos])
        assert (keys - x[:, :, :pos]).abs().max() <= x.abs().max() / 15 * 1.01  # half step of a range <= 2 max
        if layer.k_blocks and first_block is None:
            first_block = layer.k_blocks[0].data.clone()
    assert torch.equal(layer.k_blocks[0].data, first_block)  # stored blocks are never re-quantized


def test_per_channel_groups_at_odd_lengths() -> None:
    for residual, flush in [(0, 8), (20, 24), (3, 8)]:
        layer = _layer(KVConfig(bits=2, group=8, residual=residual, key_axis="channel"))
        assert layer.plan.flush == flush
        x = torch.randn(3, 2, 157, 32)
        pos = 0
        for n in [37, 1, 1, 1, 5, 99, 13]:
            keys, _ = layer.update(x[:, :, pos:pos + n], x[:, :, pos:pos + n])
            pos += n
            assert keys.shape == (3, 2, pos, 32) and layer.n_quant == pos - pos % flush
        assert all(b.tokens % 8 == 0 for b in layer.k_blocks)


@pytest.mark.parametrize("cfg", [KVConfig(bits=8), KVConfig(bits=4), KVConfig(bits=2, key_axis="token"),
                                 KVConfig(fmt="fp8e4", group=0), KVConfig(fmt="fp8e5", residual=0)])
def test_bytes_match_formula(model, cfg: KVConfig) -> None:
    cfg = KVConfig(**{**cfg.to_dict(), "residual": min(cfg.residual, 32)})
    cache = make_cache(cfg, model.config)
    ids = _ids(length=64)
    with torch.no_grad():
        out = model(ids, cache=cache, use_cache=True)
        assert cache_nbytes(cache) == kv_bytes_per_token(cfg, model.config) * 64 * 2  # 64 = whole flush blocks
        step = model(out.logits[:, -1:].argmax(-1), cache=cache, use_cache=True)
        model(step.logits[:, -1:].argmax(-1), cache=cache, use_cache=True)
    assert cache_nbytes(cache) == kv_bytes_for_length(cfg, model.config, 66, batch=2)
    full = kv_bytes_per_token(None, model.config)
    assert kv_bytes_per_token(KVConfig(bits=4), model.config) < 0.35 * full
    assert kv_bytes_per_token(KVConfig(bits=2), model.config) < kv_bytes_per_token(KVConfig(bits=4), model.config)


def _quantized_forward_kl(model, bits: int) -> float:
    ids = _ids()
    cfg = KVConfig(bits=bits, residual=0, prefill="quantized")
    with torch.no_grad():
        ref = model(ids).logits
        return _kl(ref, model(ids, cache=make_cache(cfg, model.config), use_cache=True).logits)


def test_int8_close_and_2bit_worse_than_4bit(model) -> None:
    kl8, kl4, kl2 = (_quantized_forward_kl(model, b) for b in (8, 4, 2))
    assert kl8 < 1e-3
    assert kl8 < kl4 and 3 * kl4 < kl2


def test_prefill_modes_single_forward(model) -> None:
    ids = _ids()
    with torch.no_grad():
        ref = model(ids).logits
        for prefill, changed in [("exact", False), ("quantized", True)]:
            cfg = KVConfig(bits=4, residual=0, prefill=prefill)
            out = model(ids, cache=make_cache(cfg, model.config), use_cache=True).logits
            assert (not torch.equal(out, ref)) is changed


@pytest.mark.parametrize("cfg", [KVConfig(bits=8, residual=0, group=16), KVConfig(fmt="fp8e4", residual=8)])
def test_decode_steps_close_to_dynamic_cache(model, cfg: KVConfig) -> None:
    ids = _ids(length=40)
    logits = {}
    with torch.no_grad():
        for name, cache in [("dyn", DynamicCache(config=model.config)), ("q", make_cache(cfg, model.config))]:
            out = model(ids, cache=cache, use_cache=True)
            steps = [out.logits[:, -1]]
            for t in range(12):
                out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
                steps.append(out.logits[:, -1])
            logits[name] = torch.stack(steps, 1)
    assert not torch.equal(logits["dyn"][:, 1:], logits["q"][:, 1:])  # decode steps read quantized K/V
    assert _kl(logits["dyn"], logits["q"]) < 1e-3


def test_keep_exact_is_only_a_memory_choice(model) -> None:
    ids = _ids(length=45)
    cfg = KVConfig(bits=2, group=8, residual=8, prefill="quantized")
    with torch.no_grad():
        outs = []
        for keep in (True, False):
            cache = make_cache(cfg, model.config, keep_exact=keep)
            a = model(ids[:, :30], cache=cache, use_cache=True).logits
            b = model(ids[:, 30:], cache=cache, use_cache=True).logits
            outs.append((torch.cat([a, b], 1), cache_nbytes(cache)))
    assert torch.equal(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]


def test_batched_left_padded_generate(tiny) -> None:
    tok, model = tiny.tokenizer, tiny.model
    enc = tok(["Hello there, how are you today my friend?", "Hi"], return_tensors="pt", padding=True)
    assert enc["attention_mask"][1, 0] == 0  # left padded
    gen = dict(max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        ref = model.generate(**enc, cache=DynamicCache(config=model.config), **gen)
        cfg = KVConfig(bits=8, group=4, residual=0)
        out = model.generate(**enc, cache=make_cache(cfg, model.config), **gen)
        out2 = model.generate(**enc, cache=make_cache(KVConfig(bits=2, residual=4), model.config), **gen)
    assert torch.equal(out, ref)
    assert out2.shape == ref.shape


def test_beam_search_runs_and_reorder_is_exact(model) -> None:
    ids = _ids(batch=1, length=20)
    with torch.no_grad():
        out = model.generate(ids, cache=make_cache(KVConfig(bits=4, residual=4, group=4), model.config),
                             max_new_tokens=6, num_beams=3, num_return_sequences=2, do_sample=False)
    assert out.shape == (2, 26)
    layer = _layer(KVConfig(bits=4, group=4, residual=4, prefill="quantized"))
    x = torch.randn(3, 2, 10, 32)
    keys, _ = layer.update(x, x)
    keys = keys.clone()
    layer.reorder_cache(torch.tensor([2, 0, 0]))
    assert torch.equal(layer.update(x[:, :, :1], x[:, :, :1])[0][:, :, :10], keys[[2, 0, 0]])


def test_hf_backend_builds_and_generates(model) -> None:
    cfg = KVConfig(backend="hf", bits=4, group=32, residual=8)
    cache = make_cache(cfg, model.config)
    assert type(cache).__name__ == "QuantizedCache"
    with torch.no_grad():
        out = model.generate(_ids(length=32), cache=cache, max_new_tokens=10, do_sample=False)
    assert out.shape == (2, 42)
    full = kv_bytes_for_length(None, model.config, 41, batch=2)
    assert 0 < cache_nbytes(cache) < 0.6 * full


def test_bad_configs_raise(model) -> None:
    with pytest.raises(EvalsuiteError):
        make_cache(KVConfig(group=24), model.config)  # does not divide head_dim 32
    with pytest.raises(EvalsuiteError):
        make_cache(KVConfig(group=0, residual=0), model.config)
    with pytest.raises(EvalsuiteError):
        make_cache(KVConfig(backend="hf", bits=8), model.config)
    layer = _layer(KVConfig(group=4, residual=4))
    layer.update(torch.randn(1, 2, 6, 32), torch.randn(1, 2, 6, 32))
    layer.crop(-2)
    assert layer.get_seq_length() == 4
    with pytest.raises(EvalsuiteError):
        layer.crop(-1)


def test_sliding_window_model_supported_by_evalsuite_backend_only() -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=32, vocab_size=VOCAB, sliding_window=8,
                           layer_types=["sliding_attention", "full_attention"])
    model = Gemma3ForCausalLM(cfg).eval()
    ids = _ids(length=30)
    logits = []
    with torch.no_grad():  # residual larger than the sequence: nothing quantized, so exactly DynamicCache's result
        for cache in (DynamicCache(config=cfg), make_cache(KVConfig(residual=64), cfg)):
            model(ids, cache=cache, use_cache=True)
            logits.append(torch.cat([model(ids[:, t:t + 1], cache=cache, use_cache=True).logits for t in range(4)]))
        ref, out = logits
        gen = model.generate(ids, cache=make_cache(KVConfig(bits=4, residual=4, group=4), cfg), max_new_tokens=12,
                             do_sample=False)
    assert torch.allclose(out, ref, atol=1e-5) and gen.shape == (2, 42)
    with pytest.raises(EvalsuiteError):
        make_cache(KVConfig(backend="hf", bits=4, group=32), cfg)


@pytest.mark.parametrize("text", ["kv4g32r32[l0=8]", "kv4g32r32[l1=16]", "kv2g8r16[l0=16;l1=4]",
                                  "kvf8e4g32r32[l1=2]"])
def test_per_layer_bits_exact_bytes(model, text: str) -> None:
    from transformers.cache_utils import DynamicLayer

    from evalsuite.capacity.bytes import kv_bytes_for_context, kv_bytes_per_token as plan_bpt
    from evalsuite.capacity.shape import shape_from_config
    from evalsuite.variants.spec import parse_variant

    cfg = parse_variant(text).kv
    cache = make_cache(cfg, model.config)
    assert [isinstance(layer, DynamicLayer) for layer in cache.layers] == [cfg.bits_of(i) == 16 for i in range(2)]
    ids = _ids(length=64)
    with torch.no_grad():
        out = model(ids, cache=cache, use_cache=True)
        assert cache_nbytes(cache) == kv_bytes_for_length(cfg, model.config, 64, batch=2)
        model(out.logits[:, -1:].argmax(-1), cache=cache, use_cache=True)
    assert cache_nbytes(cache) == kv_bytes_for_length(cfg, model.config, 65, batch=2)
    layers = [parse_variant(text.split("[")[0]).kv, None]  # what each layer would hold on its own
    for i, layer in enumerate(cache.layers):
        bits = cfg.bits_of(i)
        if bits == 16:
            assert layer.keys.shape[-2] == 65
        elif bits is not None:
            assert layer.plan.bits == bits and layer.plan.fmt == "int"
    uniform = kv_bytes_per_token(layers[0], model.config)
    assert kv_bytes_per_token(cfg, model.config) != uniform  # the override changes the formula
    shape = shape_from_config(model.config.to_dict())
    assert plan_bpt(shape, cfg) == pytest.approx(kv_bytes_per_token(cfg, model.config))
    assert kv_bytes_for_context(shape, cfg, 64) >= kv_bytes_for_length(cfg, model.config, 64)  # planner: worst case


def test_per_layer_bits_past_last_layer_is_error(model) -> None:
    from evalsuite.variants.spec import parse_variant

    with pytest.raises(EvalsuiteError, match="l5"):
        make_cache(parse_variant("kv4g32[l5=8]").kv, model.config)


def test_only_one_layer_quantized_changes_decode(model) -> None:
    from evalsuite.variants.spec import parse_variant

    ids = _ids(length=40)
    outs = []
    with torch.no_grad():
        for text in (None, "kv2g8r0[l1=16]", "kv2g8r0[l0=16]", "kv2g8r0[l0-1=16]"):
            cache = make_cache(parse_variant(text).kv, model.config) if text else DynamicCache(config=model.config)
            model(ids[:, :30], cache=cache, use_cache=True)
            outs.append(model(ids[:, 30:], cache=cache, use_cache=True).logits)
    assert torch.equal(outs[0], outs[3])  # every layer kept at 16 bits = the unquantized cache
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2]) and not torch.equal(outs[1], outs[2])


def _fed(layer: QuantKVLayer, x: torch.Tensor, mask: torch.Tensor, sizes: list[int]) -> None:
    """Feed ``x`` [B, H, T, D] (values -x) in chunks of ``sizes`` columns under the 2-D ``mask``."""
    pos = 0
    for n in sizes:
        layer.rows.mask = mask[:, : pos + n]
        layer.update(x[:, :, pos:pos + n], -x[:, :, pos:pos + n])
        pos += n


@pytest.mark.parametrize("cfg", [KVConfig(bits=4, group=8, residual=16), KVConfig(bits=2, group=8, residual=8,
                                                                                  key_axis="token"),
                                 KVConfig(fmt="fp8e4", group=0, residual=8, key_axis="token"),
                                 KVConfig(bits=8, group=8, residual=24, prefill="quantized")],
                         ids=["int4", "int2-kt", "fp8", "int8-pq"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adopted_rows_hold_what_a_fresh_fill_holds(cfg: KVConfig, dtype: torch.dtype) -> None:
    """A row's state at any length handed over (``row_state`` -> ``adopt``) equals a fresh layer filled with
    the row's full-precision K/V bit for bit, and stays equal through later updates that flush."""
    x = torch.randn(2, 2, 90, 32, generator=torch.Generator().manual_seed(5)).to(dtype)
    mask = torch.ones(2, 90, dtype=torch.long)
    mask[1, :11] = 0  # row 1: left padding and a hole in the middle
    mask[1, 40:43] = 0
    src = _layer(cfg, keep=True)
    _fed(src, x, mask, [30, 1, 1, 17, 1, 40])
    for row in (0, 1):
        cols = mask[row].nonzero().flatten()
        for tokens in (5, 16, 23, 24, 47, 48, 63, int(mask[row].sum())):
            state = src.row_state(row, tokens)
            k, v = x[row:row + 1][:, :, cols[:tokens]], -x[row:row + 1][:, :, cols[:tokens]]
            fresh, adopted = _layer(cfg), _layer(cfg)
            fresh.update(k, v)
            adopted.adopt(state.keys[None], state.values[None], torch.tensor([state.quantized]), state.row_bytes)
            more = torch.randn(1, 2, 30, 32, generator=torch.Generator().manual_seed(tokens)).to(dtype)
            for one in (fresh, adopted):
                for j in range(30):
                    keys, values = one.update(more[:, :, j:j + 1], more[:, :, j:j + 1])
            assert torch.equal(fresh._kbuf.view(), adopted._kbuf.view())
            assert torch.equal(fresh._vbuf.view(), adopted._vbuf.view())
            assert torch.equal(fresh.qcount, adopted.qcount) and fresh.nbytes() == adopted.nbytes()
    assert src.row_state(0, 5).quantized == 0 and src.row_state(0, 47).quantized == 47 - 47 % src.plan.flush


def test_adopt_refuses_a_used_layer_and_partial_blocks() -> None:
    cfg = KVConfig(bits=4, group=8, residual=16)
    k = torch.randn(1, 2, 20, 32)
    with pytest.raises(EvalsuiteError, match="whole quantized blocks"):
        _layer(cfg).adopt(k, k, torch.tensor([8]), 1.0)
    used = _layer(cfg)
    used.update(k, k)
    with pytest.raises(EvalsuiteError, match="fresh layer"):
        used.adopt(k, k, torch.tensor([16]), 1.0)
    src = _layer(cfg)
    src.update(k, k)
    with pytest.raises(EvalsuiteError, match="exact K/V were not kept"):
        src.row_state(0, 10)  # token 10 lies in a block this layer has flushed since: needs the exact shadow
