"""Variant specs -> vLLM server flags, refusals and the CLI's one-line errors (no server is started)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.vllm.specs import parse_served, served_variants


def _folder(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    return str(tmp_path)


def test_mapping(tmp_path: Path) -> None:
    base = _folder(tmp_path)
    assert parse_served("bf16", base).is_baseline
    kv = parse_served("vkvf8", base)
    assert kv.flags == ("--kv-cache-dtype", "fp8") and "per-tensor" in kv.kv_scheme and kv.model == base
    assert parse_served("vkvf8e5", base).flags == ("--kv-cache-dtype", "fp8_e5m2")
    assert parse_served("wf8+vkvf8", base).flags == ("--quantization", "fp8", "--kv-cache-dtype", "fp8")
    raw = parse_served('vllm:"--kv-cache-dtype fp8 --block-size 32"#kvb32', base)
    assert raw.name == "kvb32" and raw.flags == ("--kv-cache-dtype", "fp8", "--block-size", "32")
    assert "fp8" in raw.kv_scheme
    assert "fp8_e5m2" in parse_served('vllm:"--kv-cache-dtype=fp8_e5m2"#k', base).kv_scheme  # the = form too


def test_ckpt(tmp_path: Path) -> None:
    art = tmp_path / "art"
    art.mkdir()
    _folder(art)
    v = parse_served(f"ckpt:{art}+vkvf8#mine", str(tmp_path))
    assert v.name == "mine" and v.model == str(art.resolve()) and v.artifact == v.model
    assert v.flags == ("--kv-cache-dtype", "fp8")
    assert parse_served(f"ckpt:{art}", str(tmp_path)).name == "art"


@pytest.mark.parametrize("spec, words", [("kv4g32", "evalsuite's own KV cache"), ("kvf8e4", "vkvf8"),
                                         ("w4g64", "optimum-quanto"), ("w8a8", "optimum-quanto"),
                                         ("w4g64+kv4g32", "cannot be served"), ("wf8+kv8", "vkvf8"),
                                         ("ckpt:/no/such/dir", "not a model folder"),
                                         ("ckpt:model.gguf", "GGUF"), ('vllm:"--port 1"#x', "set by evalsuite"),
                                         ('vllm:"--block-size 32"', "#name"), ("nonsense", "expected")])
def test_refused(tmp_path: Path, spec: str, words: str) -> None:
    with pytest.raises(EvalsuiteError) as exc:
        served_variants([spec], _folder(tmp_path))
    assert words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("spec, words", [("wf8af8", "optimum-quanto"), ("wf8[keep=l0]", "optimum-quanto"),
                                         ("fp16", "expected"), ("ckpt:{art}#x+kv8", "evalsuite's own KV cache"),
                                         ("ckpt:{art}+vkvf8+vkvf8", "two KV parts"),
                                         ("openai:http://h:1/v1#x", "without --engine vllm")])
def test_refused_after_the_grammar(tmp_path: Path, spec: str, words: str) -> None:
    art = tmp_path / "art"
    art.mkdir()
    _folder(art)
    with pytest.raises(EvalsuiteError) as exc:
        served_variants([spec.format(art=art)], _folder(tmp_path))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_duplicates(tmp_path: Path) -> None:
    with pytest.raises(EvalsuiteError, match="twice"):
        served_variants(["vkvf8", "vkvf8"], _folder(tmp_path))
    assert [s.name for s in served_variants(["bf16", "vkvf8"], _folder(tmp_path))] == ["bf16", "vkvf8"]


def _run(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """(exit code, message) as the console entry point reports an EvalsuiteError."""
    from evalsuite.cli import cli

    res = CliRunner().invoke(cli, ["run", "--out", str(tmp_path / "runs"), "--no-gate", "-q", *args],
                             standalone_mode=False)
    assert isinstance(res.exception, EvalsuiteError), res.output
    return res.exception.exit_code, str(res.exception)


def test_cli_refuses_before_starting(tmp_path: Path) -> None:
    code, out = _run(["--engine", "vllm", "--variants", "kv4g32", "--tasks", "reasoning", "--limit", "1",
                      "--vllm-python", "/bin/true"], tmp_path)
    assert code == 2 and "cannot be served by vLLM" in out and len(out.strip().splitlines()) == 1
    assert not list((tmp_path / "runs").glob("*/servers"))


def test_cli_missing_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No vLLM anywhere evalsuite looks (this Python has none; no ./.venv-vllm here): one line saying how to get
    one; a --vllm-python that does not exist: one line naming it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALSUITE_VLLM_PYTHON", raising=False)
    code, out = _run(["--engine", "vllm", "--variants", "vkvf8", "--tasks", "reasoning", "--limit", "1"], tmp_path)
    assert code == 2 and "no vLLM found" in out and "--vllm-python" in out and len(out.strip().splitlines()) == 1
    code, out = _run(["--engine", "vllm", "--variants", "vkvf8", "--tasks", "reasoning", "--limit", "1",
                      "--vllm-python", str(tmp_path / "nope" / "python")], tmp_path)
    assert code == 2 and str(tmp_path / "nope" / "python") in out and len(out.strip().splitlines()) == 1
