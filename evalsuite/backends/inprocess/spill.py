"""The baseline's prompt K/V kept on disk beside a stored baseline, so a later run does not prefill them again.

A stored baseline (``--store-baseline``) keeps the baseline's answers, not its prompts' K/V, so a later run with a
new candidate recomputes the baseline's prefill of every stored prompt: a KV-cache-only variant starts its cache
from those K/V (exact prefill) and every variant's KLD and verification read the baseline's log-probs over its
answer, computed on top of them. On long prompts (needle) that prefill is most of a KV variant's cost on a stored
baseline. ``PromptDisk`` holds each prompt's unpadded K/V (per layer ``[heads, len, dim]``) and last-position
logits as one safetensors file named by a hash of the prompt's token ids (the ids are stored too and compared on
read, so a hash collision is a miss), written atomically; ``PromptSnapshots`` reads a prompt from here when its
memory does not hold it.

Bounded: files are written while the folder holds less than ``max_bytes`` (then the first ones are kept), since
K/V take ~23 KB per prompt token of the embedded model in bf16 (a 2k-token needle prompt ~47 MB). The folder is
keyed by everything that changes the K/V (``run.baselines.BaselineSource.prompt_folder``: the model's fingerprint,
its dtype and kernels settings, batching where kernels are not batch-invariant, library versions, the decode
format), like the answers it sits beside. Trade: disk for time; the K/V come from the batch the baseline prefilled
them in, so with kernels that are not batch-invariant they differ from a recomputed prefill in the last float bits,
as the in-memory snapshots do (``backends.inprocess.snapshots``).

Read back onto the run's device: a file holds CPU tensors, and ``get`` moves a row's K/V and logits to ``device``
(the model's input device, ``InProcessBackend.spill_prompts``), where the cache they fill and the forward that reads
them live; a CUDA run would otherwise mix devices at its first spilled prompt.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

#: default byte budget of one folder of prompt K/V on disk
SPILL_BYTES = 8 << 30

Key = tuple[int, ...]
Row = tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor]  # per layer (K, V) [heads, len, dim]; logits


def kv_bytes(kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Bytes of a row's K/V (what a prompt K/V store counts against its budget)."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class PromptDisk:
    """Prompt K/V rows in ``folder`` (created), written while it holds less than ``max_bytes``. ``writable=False``
    only reads what is there (a strictly reused baseline, ``--baseline``: its folder is never written). Rows are
    read back onto ``device``."""

    def __init__(self, folder: Path, max_bytes: int = SPILL_BYTES, writable: bool = True,
                 device: torch.device | str = "cpu") -> None:
        self.folder = Path(folder)
        self.writable = writable
        self.device = torch.device(device)
        if writable:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.used = sum(p.stat().st_size for p in self.folder.glob("*.safetensors"))

    def path(self, key: Key) -> Path:
        digest = hashlib.sha1(torch.tensor(key, dtype=torch.int64).numpy().tobytes()).hexdigest()
        return self.folder / f"{digest}.safetensors"

    def has(self, key: Key) -> bool:
        return self.path(key).exists()

    def get(self, key: Key) -> Row | None:
        """The row stored for ``key`` on this store's device; None when absent, unreadable, or stored for other
        ids."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            t = load_file(str(path))  # on the CPU: the ids are compared there
        except Exception:  # a file cut short by a crash elsewhere: a miss, recomputed
            return None
        if t["ids"].tolist() != list(key):
            return None
        layers, dev = int(t["layers"].item()), self.device
        return tuple((t[f"k{i}"].to(dev), t[f"v{i}"].to(dev)) for i in range(layers)), t["last"].to(dev)

    def put(self, key: Key, row: Row) -> bool:
        """Store ``row`` unless it is held or the budget is spent; whether it is on disk now."""
        path = self.path(key)
        if path.exists() or not self.writable:
            return path.exists()
        kv, last = row
        tensors = {"ids": torch.tensor(key, dtype=torch.int64), "layers": torch.tensor(len(kv)),
                   "last": last.contiguous()}
        for i, (k, v) in enumerate(kv):
            tensors[f"k{i}"], tensors[f"v{i}"] = k.contiguous(), v.contiguous()
        size = sum(x.numel() * x.element_size() for x in tensors.values())
        if self.used + size > self.max_bytes:
            return False
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        save_file(tensors, str(tmp))
        tmp.replace(path)
        self.used += path.stat().st_size
        return True

    def held(self, keys: Sequence[Key]) -> bool:
        """Whether every key has a file (read with ``get``; a file for other ids still reads as a miss)."""
        return all(self.has(k) for k in keys)
