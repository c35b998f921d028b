"""The embedded model's conversion cache: in the user's cache folder, keyed by the GGUF and the converting
libraries' versions, and never a half-written folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.models import embedded


def test_the_key_follows_the_gguf_and_the_library_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = tmp_path / "a.gguf", tmp_path / "b.gguf"
    one.write_bytes(b"GGUF" + b"\0" * 100)
    two.write_bytes(b"GGUF" + b"\1" * 100)
    key = embedded.conversion_key(one)
    assert key == embedded.conversion_key(one) and key != embedded.conversion_key(two)
    real = embedded.package_version
    monkeypatch.setattr(embedded, "package_version", lambda name: "0.0-other" if name == "transformers" else real(name))
    assert embedded.conversion_key(one) != key


def test_the_folder_is_under_the_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALSUITE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    target = tmp_path / "xdg" / "evalsuite" / "converted" / f"m-{embedded.conversion_key(gguf)}"
    target.mkdir(parents=True)
    (target / embedded.COMPLETE).write_text("done\n")
    assert embedded.converted_folder(gguf) == target  # a finished conversion is reused, nothing loaded


@pytest.mark.embedded
def test_a_half_written_conversion_is_converted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder at the key without the completion mark (an interrupted conversion of an older evalsuite) is
    replaced by a whole conversion."""
    monkeypatch.setenv("EVALSUITE_CACHE", str(tmp_path))
    gguf = embedded.embedded_gguf()
    target = tmp_path / "converted" / f"{gguf.stem}-{embedded.conversion_key(gguf)}"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    assert embedded.converted_folder(gguf) == target
    assert (target / embedded.COMPLETE).is_file() and json.loads((target / "config.json").read_text())["model_type"]
    assert (target / "model.safetensors").stat().st_size > 100_000_000
    assert not list(target.parent.glob(".tmp-*"))
