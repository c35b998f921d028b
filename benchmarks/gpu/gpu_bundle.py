"""`make gpu-bundle`: everything the GPU check needs beyond the checkout and the GPU machine's own image, in one folder.

The machine it is made for (docs/gpu-gate.md): one H100, Python 3.12, torch 2.11 (cu130), transformers 5.17, nvcc and
ninja, pytest; no vLLM, optimum-quanto, gguf, jsonschema or lm_eval; no network; 64 MiB for all that travels (the
checkout's files and this folder). The folder (default ``.cache/gpu-bundle``, ignored by git: name it in ``carry``):

* ``wheels/``: the pure-Python wheels (and rpds-py's cp312 manylinux build) of the packages evalsuite needs there
  that the image lacks, at the versions installed here (``WHEELS``), fetched by ``pip download`` (its cache serves a
  second bundle offline). optimum-quanto (weight variants), gguf (reads the model), jsonschema and its format
  checkers (the json task).
* ``model/``: the embedded SmolLM2-135M-Instruct GGUF cut to ``KEEP`` of its 30 decoder layers (the first six and
  the last two), every kept tensor copied byte for byte (Q4_1 layers, the Q8_0 embedding, the tokenizer and chat
  template in its metadata): about 50 MB where the whole model is 98 MB (the embedding alone is 30 MB). Real
  weights, not a language model any more: it answers gibberish. It checks that every CUDA path runs end to end
  on real weight distributions, a real vocabulary and real prompts (quantization, KV caches, KLD, verification,
  16k-token needles through YaRN, spilled prompt K/V, refusals); its verdicts say nothing about quality. Speed and
  memory are measured on a random model of Llama-3-8B's shape built on the GPU (``gpu_decode.py``).
* ``MANIFEST.json``: each file's bytes and sha256, the layers kept, the versions.

    python -m benchmarks.gpu.gpu_bundle [--out DIR] [--keep 0-5,28,29]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".cache" / "gpu-bundle"
LIMIT = 64 << 20  #: what may travel to the GPU machine, the checkout included
#: packages the GPU image lacks that the check imports (at the versions installed here)
WHEELS = ("optimum-quanto", "gguf", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py",
          "fqdn", "isoduration", "arrow", "tzdata", "jsonpointer", "rfc3339-validator", "rfc3986-validator",
          "rfc3987-syntax", "lark", "uri-template", "webcolors")
KEEP = (0, 1, 2, 3, 4, 5, 28, 29)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def truncate_gguf(src: Path, dst: Path, keep: tuple[int, ...]) -> int:
    """Copy the GGUF ``src`` to ``dst`` with only the decoder layers ``keep`` (renumbered from 0), its metadata
    (``<arch>.block_count`` set to their number) and every other tensor byte for byte. Returns dst's size."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():  # as gguf's own gguf_new_metadata.py copies them
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = len(keep) if field.name == f"{arch}.block_count" else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    index = {old: new for new, old in enumerate(keep)}
    tensors = []
    for t in reader.tensors:
        name = t.name
        if name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if int(layer) not in index:
                continue
            name = f"blk.{index[int(layer)]}.{rest}"
        tensors.append((name, t))
    for name, t in tensors:
        writer.add_tensor_info(name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, t in tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst.stat().st_size


def download_wheels(dest: Path, names: tuple[str, ...] = WHEELS) -> None:
    """``pip download`` each package at this venv's version, for CPython 3.12 on manylinux x86-64, no deps."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{n}=={version(n)}" for n in names]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS], "-d", str(dest), *pins]
    subprocess.run(cmd, check=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def travelling_tree(root: Path = ROOT) -> int:
    """Bytes of the checkout that travel to the GPU machine: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout.decode()
    return sum((root / p).stat().st_size for p in out.split("\0") if p and (root / p).is_file())


def bundle_model(folder: Path) -> Path | None:
    """The bundle's GGUF, if it has one."""
    found = sorted((folder / "model").glob("*.gguf"))
    return found[0] if found else None


def build(out: Path, keep: tuple[int, ...]) -> dict:
    """Make the bundle in ``out`` (replaced) and return its manifest."""
    from evalsuite.models.embedded import EMBEDDED_FILE, embedded_gguf

    if out.exists():
        shutil.rmtree(out)
    download_wheels(out / "wheels")
    (out / "model").mkdir(parents=True)
    model = out / "model" / EMBEDDED_FILE.replace("135M-Instruct", f"135M-Instruct-{len(keep)}L")
    truncate_gguf(embedded_gguf(), model, keep)
    manifest = {"made_from": EMBEDDED_FILE, "layers_kept": list(keep), "of_layers": 30,
                "versions": {n: version(n) for n in WHEELS},
                "files": {p: {"bytes": b, "sha256": sha256(out / p)} for p, b in files(out).items()}}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def parse_keep(text: str) -> tuple[int, ...]:
    """``0-5,28,29`` -> (0, 1, 2, 3, 4, 5, 28, 29)."""
    keep: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        keep += range(int(lo), int(hi or lo) + 1)
    return tuple(keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--keep", default="0-5,28,29", help="decoder layers of the embedded model kept")
    args = ap.parse_args(argv)
    manifest = build(args.out, parse_keep(args.keep))
    size = sum(f["bytes"] for f in manifest["files"].values())
    tree = travelling_tree()
    print(f"bundle {args.out}: {len(manifest['files'])} files, {size / 2**20:.1f} MiB; with the checkout "
          f"({tree / 2**20:.1f} MiB) {(size + tree) / 2**20:.1f} MiB of the {LIMIT >> 20} MiB that may travel")
    return 0 if size + tree <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
