"""The variant grammar: every spec kind parses to its typed record in one place; bad input is one line."""
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.grammar import (CheckpointRef, EndpointSpec, VllmArgs, parse_spec, spec_kind,
                                        split_specs)
from evalsuite.variants.quant_grammar import QuantForm, VllmKV
from evalsuite.variants.spec import parse_variant


@pytest.mark.parametrize("text,kind", [("w4g64", "quant"), ("kv4g32", "quant"), ("vkvf8", "quant"),
                                       (" CKPT:/a/b", "ckpt"), ("openai:http://h:1/v1", "openai"),
                                       ('VLLM:"--x"#n', "vllm"), ("ckptx", "quant")])
def test_kind_by_prefix(text: str, kind: str) -> None:
    assert spec_kind(text) == kind


def test_weights_and_kv() -> None:
    form = parse_spec("W4G64[keep=l0]+kv4g32[l0-1=8]")
    assert isinstance(form, QuantForm) and form.weights.name == "w4g64[keep=l0]"
    assert isinstance(form.kv, KVConfig) and form.kv.layer_bits == ((0, 1, 8),)
    alone = parse_spec("kvhf4")
    assert isinstance(alone, QuantForm) and alone.weights.fmt == "none" and alone.kv.backend == "hf"


def test_vllm_kv_forms() -> None:
    assert parse_spec("vkvf8") == QuantForm(weights=parse_spec("bf16").weights, kv=VllmKV("vkvf8"))
    both = parse_spec("WF8+VKVF8E5")
    assert both.weights.fmt == "float8" and both.kv == VllmKV("vkvf8e5") and both.kv.dtype == "fp8_e5m2"
    assert VllmKV("vkvf8e4").dtype == "fp8_e4m3"


def test_checkpoint_forms() -> None:
    ref = parse_spec("ckpt: /Models/Q4.gguf+kv4g32#q4-shipped")
    assert isinstance(ref, CheckpointRef) and ref.path == "/Models/Q4.gguf" and ref.name == "q4-shipped"
    assert isinstance(ref.kv, KVConfig) and ref.kv.group == 32
    assert parse_spec("ckpt:out/m#x+kv8").kv.bits == 8  # the name may come before the KV part
    assert parse_spec("ckpt:out/m+vkvf8").kv == VllmKV("vkvf8")
    assert parse_spec("ckpt:out/m") == CheckpointRef(path="out/m")


def test_endpoint_forms() -> None:
    spec = parse_spec("openai:http://127.0.0.1:8081/v1/#f16")
    assert spec == EndpointSpec(url="http://127.0.0.1:8081/v1", name="f16") and not spec.is_baseline
    assert parse_spec("openai:https://h:9/v1").name == "h:9"
    assert spec.to_dict() == {"name": "f16", "endpoint": "http://127.0.0.1:8081/v1"}


def test_vllm_raw_args() -> None:
    assert parse_spec('vllm:"--kv-cache-dtype fp8 --block-size 32"#kvb32') == VllmArgs(
        flags=("--kv-cache-dtype", "fp8", "--block-size", "32"), name="kvb32")
    assert parse_spec("vllm:--enforce-eager#eager").flags == ("--enforce-eager",)


@pytest.mark.parametrize("text,words", [
    ("", "valid forms"), ("w3", "unknown weight part"), ("w4+kv4+kv8", "valid forms"), ("kv4+w4", "weights come"),
    ("vkvf9", "unknown vLLM KV part"), ("vkvf8+kv4", "two KV parts"), ("w4g64[keep=a/b]", "pattern"),
])
def test_bad_weights_kv(text: str, words: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(text)
    assert words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text,err,words", [
    ("ckpt:", SpecError, "no path"), ("ckpt:m+kv4+kv8", SpecError, "two KV parts"),
    ("ckpt:m#bad name", SpecError, "name"), ("ckpt:m+kv9", SpecError, "kv9"),
    ("openai:ftp://h/v1#x", EvalsuiteError, "bad endpoint URL"), ("openai:#x", EvalsuiteError, "bad endpoint URL"),
    ("openai:http://h:1/v1#a,b", EvalsuiteError, "bad endpoint name"),
    ('vllm:"--block-size 32"', EvalsuiteError, "#name"), ('vllm:#x', EvalsuiteError, "#name"),
    ('vllm:"--a \'b"#x', EvalsuiteError, "bad served variant"),
])
def test_bad_prefixed_specs(text: str, err: type, words: str) -> None:
    with pytest.raises(err) as exc:
        parse_spec(text)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_in_process_refuses_served_kinds(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    for text, words in (("vkvf8", "--engine vllm"), ("w8+vkvf8", "--engine vllm"), (f"ckpt:{tmp_path}+vkvf8",
                        "--engine vllm"), ("openai:http://h:1/v1#x", "served"), ('vllm:"--x"#y', "served")):
        with pytest.raises(SpecError) as exc:
            parse_variant(text)
        assert words in str(exc.value) and "\n" not in str(exc.value)
    assert parse_variant(f"ckpt:{tmp_path}#mine").artifact == str(tmp_path.resolve())


def test_split_specs_keeps_brackets() -> None:
    assert split_specs(" bf16, w4g64[keep=l0,l1] ,,openai:http://h:1/v1#x") == [
        "bf16", "w4g64[keep=l0,l1]", "openai:http://h:1/v1#x"]
