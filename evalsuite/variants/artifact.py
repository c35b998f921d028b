"""Artifact variants: gate the checkpoint that actually ships, ``ckpt:PATH[+KV][#NAME]``.

PATH is a local model folder (loaded with whatever quantization transformers applies from its config on this
device) or a ``.gguf`` file of any llama.cpp type (dequantized by transformers, converted once like a GGUF
baseline). The name defaults to the folder / file stem (``+KV`` appended); ``#NAME`` sets it. ``+kv4g32`` puts an
evalsuite KV cache on top. Pairing stays exact: an artifact whose tokenizer vocabulary, special tokens or chat
template differ from the baseline's is refused. Weight bytes are the artifact's own (a GGUF's tensor data bytes, a
folder's safetensors tensor bytes); its fingerprint is a hash of its files' bytes.
"""
from __future__ import annotations

import functools
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.variants.forms import VariantSpec
from evalsuite.variants.grammar import CKPT, CheckpointRef, bad_checkpoint
from evalsuite.variants.quant_grammar import VllmKV

_FLOAT_GGML = {"F32", "F16", "BF16", "F64"}
_FLOAT_ST = {"F64", "F32", "F16", "BF16"}
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def check_path(path: str | Path, text: str = "") -> Path:
    """The absolute artifact path, or a one-line error when it is neither a .gguf file nor a model folder."""
    p = Path(path).expanduser()
    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise bad_checkpoint(text or str(path), f"GGUF file {p} not found")
    elif not p.is_dir():
        raise bad_checkpoint(text or str(path), f"{p} is neither a .gguf file nor a folder")
    elif not (p / "config.json").is_file():
        raise bad_checkpoint(text or str(path), f"model folder {p} has no config.json")
    return p.resolve()


def artifact_variant(ref: CheckpointRef, text: str) -> VariantSpec:
    """The in-process variant of a parsed ``ckpt:`` spec: its path checked to exist and stored absolute."""
    if isinstance(ref.kv, VllmKV):
        raise bad_checkpoint(text, f"{ref.kv.name} is vLLM's KV cache: serve it with --engine vllm")
    path = check_path(ref.path, text)
    return VariantSpec(kv=ref.kv, label=ref.name, artifact=str(path))


def check_artifact_spec(spec: VariantSpec) -> None:
    """An artifact spec (e.g. from YAML / a stored run) takes no weight quantization and points at a real path."""
    if spec.weights.fmt != "none" or spec.weights.overrides:
        raise SpecError(f"artifact variant {spec.name!r} takes only a +KV part, not weights {spec.weights.name}")
    check_path(spec.artifact, f"{CKPT}{spec.artifact}")


# --- pairing: the artifact must read and write the same tokens as the baseline ------------------------------------

def load_artifact_tokenizer(path: str) -> Any:
    """Only the artifact's tokenizer (a GGUF's from its metadata, without converting the weights)."""
    from transformers import AutoTokenizer

    p = Path(path)
    try:
        if p.suffix.lower() == ".gguf":
            return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        return AutoTokenizer.from_pretrained(str(p))
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EvalsuiteError(f"cannot load the tokenizer of artifact {path}: {first}") from None


def pairing_problem(base_tok: Any, art_tok: Any) -> str | None:
    """Why the two tokenizers cannot be compared sample by sample (vocabulary, special tokens, chat template), or
    None when they match. Names are never compared."""
    bv, av = base_tok.get_vocab(), art_tok.get_vocab()
    if bv != av:
        diff = sorted(set(bv.items()) ^ set(av.items()), key=lambda kv: kv[1])
        tok, idx = diff[0]
        return (f"tokenizer vocabulary differs ({len(av)} tokens vs the baseline's {len(bv)}; e.g. {tok!r} -> "
                f"{idx} in only one of them)")
    for attr in ("eos_token_id", "bos_token_id"):
        a, b = getattr(art_tok, attr, None), getattr(base_tok, attr, None)
        if a != b:
            return f"{attr} differs ({a} vs the baseline's {b})"
    at, bt = getattr(art_tok, "chat_template", None), getattr(base_tok, "chat_template", None)
    if (at or None) != (bt or None):
        what = "has none" if not at else ("the baseline has none" if not bt else "differs")
        return f"chat template {what}"
    return None


def check_pairing(base_tok: Any, path: str, name: str) -> None:
    """Refuse (one line, exit 2) an artifact whose tokenizer or chat template differs from the baseline's."""
    why = pairing_problem(base_tok, load_artifact_tokenizer(path))
    if why:
        raise EvalsuiteError(f"artifact variant {name!r} cannot be paired with the baseline: {why}")


# --- bytes and fingerprint of what the artifact holds --------------------------------------------------------------

@dataclass(frozen=True)
class ArtifactBytes:
    """Tensor bytes the artifact stores, split into quantized and unquantized (float) tensors' parameters."""

    total: int
    quantized_params: int
    unquantized_params: int
    types: dict[str, int]  # tensor storage type -> count of tensors


def gguf_bytes(path: Path) -> ArtifactBytes:
    """A GGUF's tensor data bytes (llama.cpp's block sizes; header and metadata excluded)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    total = q = unq = 0
    types: dict[str, int] = {}
    for t in reader.tensors:
        kind = t.tensor_type.name
        types[kind] = types.get(kind, 0) + 1
        total += int(t.n_bytes)
        if kind in _FLOAT_GGML:
            unq += int(t.n_elements)
        else:
            q += int(t.n_elements)
    return ArtifactBytes(total, q, unq, types)


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a .safetensors file (tensor name -> dtype, shape, data_offsets)."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def folder_bytes(path: Path) -> ArtifactBytes:
    """A folder's safetensors tensor bytes (or its .bin files' sizes when it has no safetensors)."""
    total = q = unq = 0
    types: dict[str, int] = {}
    files = sorted(path.glob("*.safetensors"))
    for f in files:
        for name, t in safetensors_header(f).items():
            if name == "__metadata__":
                continue
            start, end = t["data_offsets"]
            total += end - start
            types[t["dtype"]] = types.get(t["dtype"], 0) + 1
            numel = 1
            for d in t["shape"]:
                numel *= d
            if t["dtype"] in _FLOAT_ST:
                unq += numel
            else:
                q += numel
    if not files:
        bins = sorted(path.glob("*.bin")) + sorted(path.glob("*.pt"))
        if not bins:
            raise EvalsuiteError(f"artifact folder {path} holds no .safetensors or .bin weights")
        total = sum(f.stat().st_size for f in bins)
        types = {"bin": len(bins)}
    return ArtifactBytes(total, q, unq, types)


def artifact_bytes(path: str) -> ArtifactBytes:
    """Bytes the artifact at ``path`` stores (GGUF file or model folder)."""
    p = Path(path)
    return gguf_bytes(p) if p.suffix.lower() == ".gguf" else folder_bytes(p)


def artifact_fingerprint(path: str) -> str:
    """sha256 over the artifact's bytes: the GGUF file, or a folder's config.json and weight files (name order).
    Hashed once per process while the files' sizes and modification times stay the same."""
    p = Path(path)
    files = [p] if p.is_file() else sorted({f for g in ("config.json", *WEIGHT_GLOBS) for f in p.glob(g)})
    return _hash_files(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=32)
def _hash_files(files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for name, size, _ in files:
        f = Path(name)
        h.update(f"{f.name}|{size}".encode())
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:20]
