"""Shipped baselines: read-only stored baselines, one folder per CPU class, that seed a run's working copy.

A project ships the baseline its demo gates against (the embedded model's, in the checkout's ``baselines/``), laid
out ``<root>/<cpu class>/<fingerprint>/`` in the stored-baseline format (``run.baselines``) without prompt K/V.
``evalsuite run --shipped-baseline ROOT --store-baseline WORK`` never writes under ``ROOT``: before the first look it
copies each task's shipped answers into the working copy ``WORK/<fingerprint>/`` where they match this run's key
(task, settings, libraries, CPU class) and the working copy does not already hold a match; the run then grows the
working copy as ``--store-baseline`` does. Where the key misses, one line names the differing field and the baseline
is generated as it would be without it. ``ship`` turns a built working copy into a shipped folder
(``make baseline``); ``python -m evalsuite.run.shipped BUILT ROOT`` calls it.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from evalsuite.errors import EvalsuiteError
from evalsuite.run.baselines import MANIFEST, mismatch_reason, run_key
from evalsuite.run.prepare import PreparedTask

#: the manifest fields every task entry of a folder shares
GLOBAL = ("run", "libraries", "decode_format")


def _read(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def candidates(root: Path, fingerprint: str, settings: dict[str, Any]) -> list[Path]:
    """The shipped folders that could serve this run: this CPU class's first, then the other classes' (whose
    mismatch says why not)."""
    own = root / str(settings.get("cpu_class", "")) / fingerprint
    others = sorted(p for p in root.glob(f"*/{fingerprint}") if p != own and (p / MANIFEST).is_file())
    return ([own] if (own / MANIFEST).is_file() else []) + others


def seed(root: Path, work: Path, fingerprint: str, tasks: list[PreparedTask], seed_: int, batch_size: int,
         settings: dict[str, Any], log: Callable[[str], None] = print) -> dict[str, int]:
    """Copy matching shipped answers into ``work/<fingerprint>/`` (task by task, atomically); returns how many
    answers each task took. A miss is logged once per reason, naming the field; ``root`` is only read."""
    run = run_key(batch_size, settings)
    target = work / fingerprint
    mine = _read(target)
    folders = candidates(root, fingerprint, settings)
    if not folders:
        log(f"shipped baseline not used: none for model fingerprint {fingerprint} under {root}; "
            "the baseline is generated")
        return {}
    taken: dict[str, int] = {}
    misses: dict[str, list[str]] = {}
    for task in tasks:
        if mine is not None and mismatch_reason(mine, task, seed_, run, partial=True) is None:
            continue  # the working copy already holds a match (it may have grown past the shipped one)
        shipped = _read(folders[0])
        assert shipped is not None
        reason = mismatch_reason(shipped, task, seed_, run, partial=True)
        if reason is not None:
            misses.setdefault(reason, []).append(task.name)
            continue
        if mine is None or any(mine.get(k) != shipped.get(k) for k in GLOBAL):
            mine = {**{k: v for k, v in shipped.items() if k != "tasks"}, "tasks": {}}  # nothing old matches
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / f".{task.name}.jsonl.tmp"
        shutil.copyfile(folders[0] / f"{task.name}.jsonl", tmp)
        tmp.replace(target / f"{task.name}.jsonl")
        mine["tasks"][task.name] = shipped["tasks"][task.name]
        taken[task.name] = int(shipped["tasks"][task.name].get("n", 0))
    if taken:
        assert mine is not None
        tmp = target / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(mine, indent=1))
        tmp.replace(target / MANIFEST)
        log("shipped baseline: " + ", ".join(f"{t} {n} answers" for t, n in taken.items())
            + f" from {folders[0]}")
    for reason, names in misses.items():
        log(f"shipped baseline not used for {', '.join(names)}: {reason}; the baseline is generated")
    return taken


def ship(built: Path, root: Path, model_package: str | None = None) -> Path:
    """Copy the one stored baseline under ``built`` (a ``--store-baseline`` folder) to
    ``root/<its cpu class>/<fingerprint>/``, answers and manifest only, replacing what was there."""
    folders = [p.parent for p in built.glob(f"*/{MANIFEST}")]
    if len(folders) != 1:
        raise EvalsuiteError(f"{built} holds {len(folders)} stored baselines, expected one")
    manifest = _read(folders[0])
    assert manifest is not None
    klass = manifest.get("run", {}).get("cpu_class")
    if not klass:
        raise EvalsuiteError(f"{folders[0]} records no cpu_class: only an in-process CPU baseline ships")
    if model_package:
        manifest["model_package"] = model_package
    dest = root / klass / folders[0].name
    tmp = root / klass / f".{folders[0].name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for task in manifest["tasks"]:
        shutil.copyfile(folders[0] / f"{task}.jsonl", tmp / f"{task}.jsonl")
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.replace(dest)
    return dest


def main(argv: list[str]) -> int:
    """``python -m evalsuite.run.shipped BUILT ROOT [PACKAGE]``: ``ship`` with the model package's version."""
    from evalsuite.models.embedded import package_version

    if len(argv) not in (2, 3):
        print("usage: python -m evalsuite.run.shipped BUILT ROOT [MODEL_PACKAGE]", file=sys.stderr)
        return 2
    package = f"{argv[2]}=={package_version(argv[2])}" if len(argv) == 3 else None
    try:
        print(f"shipped {ship(Path(argv[0]), Path(argv[1]), package)}")
    except EvalsuiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
