"""A fixed speed probe per variant: the same prompts in the same batch, so TTFT and inter-token latency compare.

Why not the quality run's timings: there, batch composition follows each task's samples and the decoder's
choices (refilled pools, length-sorted batches), and prompt prefills are shared where exact (a KV-cache-only
variant starts from the baseline's prompt K/V, see ``run.snapshots``), so a variant's "time to first token" there
is not its own. The probe runs ``rows`` prompts of ``prompt_tokens`` tokens each (windows of the shipped
calibration text, identical for every variant) through the decoder with the variant's model and a fresh cache of
its kind, no shared prefix, and decodes ``new_tokens`` greedy tokens per row with no stopping; TTFT is the batch's
prefill + first token, ITL the median step after it. A short warm-up runs first. The device is synchronized
before every clock read (``engine.decode``).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from evalsuite.backends.inprocess.decoder import decode
from evalsuite.tasks.base import GenSettings


@dataclass(frozen=True)
class SpeedProbe:
    """The probe's shape (stored with the figures so a reader knows what they measure)."""

    rows: int = 4
    prompt_tokens: int = 64
    new_tokens: int = 16

    def prompts(self, tokenizer: Any) -> list[list[int]]:
        """``rows`` disjoint windows of ``prompt_tokens`` tokens of the calibration text."""
        text = resources.files("evalsuite").joinpath("data/calibration.txt").read_text(encoding="utf-8")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        while len(ids) < self.rows * self.prompt_tokens:
            ids = ids + ids
        return [ids[i * self.prompt_tokens:(i + 1) * self.prompt_tokens] for i in range(self.rows)]

    def measure(self, model: Any, tokenizer: Any, make_cache: Callable[[], Any | None]) -> tuple[float, float]:
        """(TTFT, median inter-token latency) in seconds of one probe batch."""
        prompts = self.prompts(tokenizer)
        gen = GenSettings(max_new_tokens=self.new_tokens)
        decode(model, tokenizer, [prompts[0][:32]], GenSettings(max_new_tokens=2), None, make_cache(), set())
        stamps = decode(model, tokenizer, prompts, gen, None, make_cache(), set())[0].stamps
        gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]
        return stamps[1] - stamps[0], statistics.median(gaps)

    def to_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens}
