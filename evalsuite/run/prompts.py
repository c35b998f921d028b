"""Render a Sample into the text the model sees (chat template for instruct models, or a raw prompt)."""
from __future__ import annotations

from typing import Any

from evalsuite.tasks.base import Sample


def render_prompt(sample: Sample, tokenizer: Any) -> tuple[str, bool]:
    """Return (text, add_special_tokens). Chat samples use the tokenizer's chat template when it has one."""
    if sample.prompt is not None:
        return sample.prompt, True
    messages = [dict(m) for m in sample.messages or ()]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text, False
    # No template (base model): a plain transcript ending with the assistant's turn.
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:", True
