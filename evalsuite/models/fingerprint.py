"""Content fingerprints: a hash of the weight bytes (never the model's name)."""
from __future__ import annotations

import hashlib

import torch


def fingerprint(model: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, bytes) of every parameter and buffer, in name order."""
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:20]
