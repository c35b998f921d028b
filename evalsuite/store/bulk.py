"""Building many records at once: the cyclic garbage collector paused while they are built."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector (as found) for the block. Records, parsed JSON and rows hold no reference cycles
    (reference counting frees them), yet each collector pass walks every live container: building 100,000 rows
    with it on cost 1.3-1.6x the CPU time (``benchmarks/gating/compare_logs.py``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
