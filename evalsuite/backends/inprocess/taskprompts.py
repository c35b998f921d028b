"""Each task's rendered prompts and the tokens they all share, computed once per task.

The backends render a sample's prompt with the baseline's tokenizer and chat template (``run.prompts``) for every
pass over it (generation, verification, KLD), and encode a task's shared prompt prefix once. Both are kept per task
here and recomputed when a sequential round added samples: a new prompt may share less than the first ones did, and
a resumed or sharded subset must compute what a full run does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from evalsuite.backends.inprocess.generate import encode_prompts, shared_prefix_len
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.prompts import render_prompt
from evalsuite.tasks.base import Sample


@dataclass
class TaskPrompts:
    """``tokenizer`` returns the baseline's tokenizer (called on first use, so nothing loads before a task asks)."""

    tokenizer: Callable[[], Any]
    _rendered: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)
    _prefix: dict[str, tuple[int, int]] = field(default_factory=dict)  # task -> (samples seen, prefix tokens)

    def of(self, task: PreparedTask) -> list[tuple[str, bool]]:
        """Rendered prompts (text, add_special_tokens) of every sample of ``task``."""
        if len(self._rendered.get(task.name, ())) != len(task.samples):
            tok = self.tokenizer()
            self._rendered[task.name] = [render_prompt(s, tok) for s in task.samples]
        return self._rendered[task.name]

    def prefix_len(self, task: PreparedTask) -> int:
        """Tokens all of ``task``'s prompts share."""
        seen, p = self._prefix.get(task.name, (0, 0))
        if seen != len(task.samples):
            p = shared_prefix_len(self.tokenizer(), self.of(task))
            self._prefix[task.name] = (len(task.samples), p)
        return p

    def count_tokens(self, sample: Sample) -> int:
        """``sample``'s prompt length in the model's tokens, chat template included."""
        tok = self.tokenizer()
        text, special = render_prompt(sample, tok)
        return len(tok(text, add_special_tokens=special)["input_ids"])

    def keys(self, task: PreparedTask, indices: Sequence[int]) -> list[tuple[int, ...]]:
        """The prompt token ids of ``indices`` (what kept prompt K/V are looked up by)."""
        prompts = self.of(task)
        return [tuple(x) for x in encode_prompts(self.tokenizer(), [prompts[i] for i in indices])]
