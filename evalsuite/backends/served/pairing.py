"""Pairing a served variant with an in-process baseline: both must turn the same text into the same tokens.

The served variant is sent the prompt text the baseline's chat template rendered, so the server's own chat
template never applies; what must match is the tokenizer. A fixed probe (rendered through the baseline's chat
template, with special tokens, accents, digits, code and CJK) is tokenized by the server (``/tokenize``-style
endpoint) and compared id for id with the baseline tokenizer; a server without one is compared through the token
texts it echoes for the probe. Anything else is refused with a one-line reason before generation.
"""
from __future__ import annotations

from typing import Any, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.run.prompts import render_prompt
from evalsuite.backends.served.kld import token_texts
from evalsuite.tasks.base import Sample

PROBE = ("Pairing probe: naïve café costs 3.14159 € — {\"k\": [1, 22, 333]}\n"
         "def f(x):\n    return x ** 2  # 日本語 テスト 🙂")


def probe_prompt(tokenizer: Any) -> tuple[str, bool]:
    """The probe as the baseline renders a chat prompt (text, add_special_tokens)."""
    return render_prompt(Sample(id="pairing-probe", target=None, messages=({"role": "user", "content": PROBE},)),
                         tokenizer)


def _show(tokenizer: Any, ids: Sequence[Any], j: int) -> str:
    if j >= len(ids):
        return "end"
    x = ids[j]
    return repr(x) if isinstance(x, str) else f"{x} {tokenizer.convert_ids_to_tokens([x])[0]!r}"


def token_mismatch(tokenizer: Any, base: Sequence[Any], served: Sequence[Any], what: str = "ids") -> str | None:
    """Where two tokenizations of the probe differ (one line), or None when equal; ``base``/``served`` are ids
    (or token texts, ``what="texts"``) of the baseline tokenizer and of the server."""
    if list(base) == list(served):
        return None
    j = next((k for k, (a, b) in enumerate(zip(base, served)) if a != b), min(len(base), len(served)))
    return (f"tokenizer differs: the probe is {len(served)} token {what} on the server vs {len(base)} for the "
            f"baseline, first difference at token {j} (server {_show(tokenizer, served, j)}, baseline "
            f"{_show(tokenizer, base, j)})")


def served_mismatch(tokenizer: Any, client: Any) -> str | None:
    """Why ``client``'s server cannot be paired with the baseline ``tokenizer``, or None."""
    text, special = probe_prompt(tokenizer)
    base = tokenizer(text, add_special_tokens=special)["input_ids"]
    served = client.tokenize(text)
    if served is not None:
        return token_mismatch(tokenizer, base, served)
    entries, generated = client.echo(text, 1)
    if not entries:
        return ("cannot verify its tokenizer: the server has no tokenize endpoint and echoes no prompt tokens "
                "(llama.cpp: --logits_all; vLLM: /tokenize)")
    got = [e[0] for e in entries[:len(entries) - generated] if e[0]]
    want = [t for t in token_texts(tokenizer, base) if t]
    return token_mismatch(tokenizer, want, got, "texts")


def check_served_pairing(tokenizer: Any, client: Any, name: str) -> None:
    """Refuse (one line, exit 2) a served variant whose tokenizer differs from the baseline's."""
    why = served_mismatch(tokenizer, client)
    if why:
        raise EvalsuiteError(f"served variant {name!r} cannot be paired with the baseline: {why}")
