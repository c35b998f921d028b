"""Artifact variants (``ckpt:PATH``): grammar, round trip, bytes, pairing refusals, a tiny in-process gate."""
import pytest
import torch

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.variants.artifact import artifact_fingerprint, folder_bytes, safetensors_header
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant, parse_variant_list, variant_from_dict


def _save(model, tok, folder, template=None, extra_token=None):
    """Save ``model`` with a fresh copy of ``tok`` (optionally another chat template / an added token)."""
    from transformers import AutoTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    fresh = AutoTokenizer.from_pretrained(str(folder))
    if template is not None:
        fresh.chat_template = template
    if extra_token is not None:
        fresh.add_tokens([extra_token])
    fresh.save_pretrained(folder)
    return folder


@pytest.fixture
def art(tiny, tmp_path):
    """The tiny baseline's own weights saved as a folder artifact (same tokenizer)."""
    return _save(tiny.model, tiny.tokenizer, tmp_path / "tiny-ckpt")


def test_grammar_names_and_round_trip(art):
    plain = parse_variant(f"ckpt:{art}")
    assert plain.artifact == str(art.resolve()) and plain.name == "tiny-ckpt" and not plain.is_baseline
    named = parse_variant(f"ckpt:{art}+kv4g32#Shipped-1")
    assert named.name == "Shipped-1" and named.kv is not None and named.kv.bits == 4
    assert parse_variant(f"ckpt:{art}#x+kv8").kv.bits == 8
    assert parse_variant(f"ckpt:{art}+kv4g32").name.startswith("tiny-ckpt+kv4g32")
    for spec in (plain, named):
        back = variant_from_dict(spec.to_dict())
        assert (back.name, back.artifact, back.kv, back.is_baseline) == (spec.name, spec.artifact, spec.kv, False)
    assert variant_from_dict({"spec": f"ckpt:{art}"}).name == "tiny-ckpt"
    assert [s.name for s in parse_variant_list(f"w8,ckpt:{art}#a,ckpt:{art}#b")] == ["w8", "a", "b"]
    assert "artifact" not in parse_variant("w4g64").to_dict()  # other specs' stored form is unchanged


@pytest.mark.parametrize("text,why", [("ckpt:", "no path"), ("ckpt:/no/such.gguf", "not found"),
                                      ("ckpt:{tmp}", "no config.json"), ("ckpt:{art}#bad name", "name"),
                                      ("ckpt:{art}+kv4g32+kv8", "KV"), ("ckpt:{art}+kv9", "kv9")])
def test_bad_artifact_specs_are_one_line_errors(art, tmp_path, text, why):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError) as exc:
        parse_variant(text.format(art=art, tmp=tmp_path / "empty"))
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_artifact_takes_no_weight_quantization(art):
    with pytest.raises(SpecError, match="only a \\+KV part"):
        variant_from_dict({"artifact": str(art), "weights": {"fmt": "int", "bits": 8}})


@pytest.mark.slow
def test_bytes_and_fingerprint_come_from_the_artifact(tiny, art):
    v = build_variant(tiny, parse_variant(f"ckpt:{art}"))
    header = safetensors_header(art / "model.safetensors")
    stored = sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
    assert v.weights.measured == v.weights.formula == stored == folder_bytes(art).total
    assert v.weights.unquantized_params == sum(p.numel() for p in tiny.model.parameters())  # tied: once
    assert v.fingerprint == artifact_fingerprint(str(art)) and len(v.fingerprint) == 20
    assert v.model is not tiny.model and v.tokenizer is tiny.tokenizer
    mine, theirs = v.model.state_dict(), tiny.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    other = _save(tiny.model.float(), tiny.tokenizer, art.parent / "fp32")
    assert artifact_fingerprint(str(other)) != v.fingerprint  # same values, other bytes: another artifact


@pytest.mark.slow
def test_other_tokenizer_or_chat_template_is_refused(tiny, tmp_path):
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    tmpl = _save(tiny.model, tiny.tokenizer, tmp_path / "tmpl", template="{{ messages[0]['content'] }}")
    vocab = _save(tiny.model, tiny.tokenizer, tmp_path / "vocab", extra_token="<zzz-extra>")
    backend = InProcessBackend.of(tiny)
    with pytest.raises(EvalsuiteError, match="chat template differs"):
        backend.variants(["bf16", f"ckpt:{tmpl}"])  # refused before any model loads
    with pytest.raises(EvalsuiteError, match="vocabulary differs .*<zzz-extra>"):
        build_variant(tiny, parse_variant(f"ckpt:{vocab}#renamed"))


@pytest.mark.slow
def test_artifact_gated_in_process(tiny, art, tmp_path):
    from tests.conftest import prepared, run_model

    store = run_model(tiny, tmp_path / "run", variants=("bf16", f"ckpt:{art}#same", f"ckpt:{art}+kv2g32r0pq#kv"),
                      tasks=prepared(n=4, stop_at_newline=False))
    infos = store.variant_infos()
    assert infos["same"].fingerprint == artifact_fingerprint(str(art)) and infos["bf16"].fingerprint is None
    assert infos["same"].spec["artifact"] == str(art.resolve())
    kld = {k.variant: k.mean for k in store.kld()}
    assert kld["same"] < 1e-4 and kld["kv"] > kld["same"]


@pytest.mark.slow
def test_resume_refuses_a_changed_artifact(tiny, art, tmp_path):
    from evalsuite.errors import StoreMismatch
    from tests.conftest import prepared, run_model

    tasks = prepared(n=2, stop_at_newline=False)
    store = run_model(tiny, tmp_path / "run", variants=("bf16", f"ckpt:{art}#same"), tasks=tasks, kld=False)
    assert store.meta()["artifact_fingerprints"]["same"] == artifact_fingerprint(str(art))
    run_model(tiny, None, variants=("bf16", f"ckpt:{art}#same"), tasks=tasks, kld=False, store=store)  # unchanged
    with torch.no_grad():
        tiny_copy = type(tiny.model)(tiny.model.config)
    tiny_copy.save_pretrained(art)  # other weights under the same path
    with pytest.raises(StoreMismatch, match="artifact of variant 'same' changed"):
        run_model(tiny, None, variants=("bf16", f"ckpt:{art}#same"), tasks=tasks, kld=False, store=store)
