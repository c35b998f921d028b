"""Procedural haystack text for the needle task: filler sentences, keys and values, and a token estimate.

Everything is drawn from a caller-supplied ``random.Random``, so a seed fixes the text. The token estimate is
calibrated against the embedded model's tokenizer (SmolLM2, a GPT-2-style BPE): digits and punctuation are one
token each, runs of letters and spaces about ``LETTERS_PER_TOKEN`` characters per token.
"""
from __future__ import annotations

import random
import re
import string
import uuid

#: Letters-and-spaces per token of the filler below, measured with the embedded tokenizer (see tests).
LETTERS_PER_TOKEN = 5.5
#: Tokens the chat template adds around a system + user message (role tags, newlines, assistant header).
TEMPLATE_TOKENS = 14

_SUBJECTS = ("the farmer", "the baker", "a young sailor", "the old teacher", "my neighbour", "the painter",
             "a tired traveller", "the gardener", "our captain", "the shy student", "a quiet monk",
             "the village doctor", "the carpenter", "a curious child", "the fisherman", "the weaver",
             "a clever merchant", "the shepherd", "the potter", "a patient nurse")
_VERBS = ("carried", "painted", "found", "cleaned", "repaired", "admired", "sold", "borrowed", "measured",
          "wrapped", "polished", "moved", "described", "sketched", "guarded", "opened", "counted", "folded")
_ADJS = ("wooden", "heavy", "small", "bright", "dusty", "broken", "tall", "narrow", "gentle", "ancient",
         "simple", "warm", "pale", "round", "rough", "clean", "quiet", "crooked")
_NOUNS = ("basket", "table", "boat", "window", "ladder", "blanket", "bucket", "fence", "chair", "barrel",
          "kettle", "wagon", "rope", "bench", "lamp", "door", "cart", "shelf")
_PLACES = ("near the river", "behind the mill", "in the market", "on the hill", "by the harbour",
           "inside the barn", "under the bridge", "at the edge of the forest", "beside the well",
           "in the orchard", "along the road", "across the valley")
_TIMES = ("every morning", "before dawn", "after the rain", "late at night", "during the festival",
          "in early spring", "on a cold evening", "at noon", "through the winter", "one autumn day")
_ADVERBS = ("slowly", "carefully", "happily", "quietly", "proudly", "calmly", "eagerly", "patiently")
_TEMPLATES = (
    "{S} {V} the {A} {N} {P}.",
    "{S} {V} a {A} {N} {T}.",
    "{T}, {s} {adv} {V} the {N} {P}.",
    "The {A} {N} stood {P}, and {s} {V} it {T}.",
    "{S} walked {adv} {P} and {V} a {A} {N}.",
)

#: Needle keys are ``adjective-noun`` pairs from words that never appear in the filler.
KEY_ADJS = ("amber", "silent", "frozen", "hollow", "scarlet", "velvet", "hidden", "golden", "lucky", "rapid",
            "silver", "misty", "brave", "cosmic", "fuzzy", "jagged", "noble", "royal", "sunny", "wild")
KEY_NOUNS = ("falcon", "harbor", "meadow", "comet", "canyon", "glacier", "lantern", "orchid", "panther",
             "prism", "quartz", "raven", "summit", "tundra", "walrus", "zephyr", "beacon", "citadel")
#: Values of the ``word`` type (never in the filler nor in keys).
VALUE_WORDS = ("apricot", "bamboo", "cinnamon", "dolphin", "emerald", "flamingo", "giraffe", "hazelnut",
               "iguana", "jasmine", "kangaroo", "lemonade", "mango", "nutmeg", "octopus", "pelican", "quince",
               "raspberry", "saffron", "tangerine", "umbrella", "vanilla", "walnut", "yogurt", "zucchini",
               "avocado", "biscuit", "cactus", "daffodil", "eucalyptus")

#: Tokens per letter of an all-capitals word (random variable names split into short pieces).
CAPS_TOKENS_PER_LETTER = 0.72
_CAPS_RE = re.compile(r"\b[A-Z]{2,}\b")
_TOKEN_RE = re.compile(r"\d|[A-Za-z ]+|\S|\s")


def estimate_tokens(text: str) -> float:
    """Model-independent token estimate: digits and punctuation 1 each, capitals words ~0.7 per letter,
    other runs of letters and spaces ``LETTERS_PER_TOKEN`` characters per token."""
    total = sum(len(w) for w in _CAPS_RE.findall(text)) * CAPS_TOKENS_PER_LETTER
    for piece in _TOKEN_RE.findall(_CAPS_RE.sub("", text)):
        if piece[0].isalpha() or piece[0] == " ":
            total += max(1.0, len(piece) / LETTERS_PER_TOKEN) if piece.strip() else len(piece) / LETTERS_PER_TOKEN
        else:
            total += 1.0
    return total


def filler_sentence(rng: random.Random) -> str:
    """One procedurally built filler sentence (no digits, no needle words)."""
    subject = rng.choice(_SUBJECTS)
    text = rng.choice(_TEMPLATES).format(
        S=subject[0].upper() + subject[1:], s=subject, V=rng.choice(_VERBS), A=rng.choice(_ADJS),
        N=rng.choice(_NOUNS), P=rng.choice(_PLACES), T=rng.choice(_TIMES), adv=rng.choice(_ADVERBS))
    return text[0].upper() + text[1:]


def filler(rng: random.Random, budget_tokens: float) -> list[str]:
    """Filler sentences whose estimated token count is closest to ``budget_tokens`` (at least one)."""
    sentences: list[str] = []
    used = 0.0
    while True:
        sentence = filler_sentence(rng)
        cost = estimate_tokens(sentence + " ")
        if sentences and used + cost / 2 > budget_tokens:
            return sentences
        sentences.append(sentence)
        used += cost


def distinct(rng: random.Random, make, count: int, avoid: set[str] | None = None) -> list[str]:
    """``count`` distinct values from ``make(rng)`` that are not in ``avoid``."""
    seen = set(avoid or ())
    out: list[str] = []
    for _ in range(count * 100):
        if len(out) == count:
            break
        value = make(rng)
        if value not in seen:
            seen.add(value)
            out.append(value)
    if len(out) < count:
        raise ValueError(f"cannot draw {count} distinct values")
    return out


def make_key(rng: random.Random) -> str:
    return f"{rng.choice(KEY_ADJS)}-{rng.choice(KEY_NOUNS)}"


def make_value(rng: random.Random, value_type: str) -> str:
    """A needle value: a 7-digit number, a word, or a UUID4 string."""
    if value_type == "number":
        return str(rng.randint(1_000_000, 9_999_999))
    if value_type == "word":
        return rng.choice(VALUE_WORDS)
    if value_type == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"unknown value type {value_type!r}")


def make_var(rng: random.Random) -> str:
    """A variable name for variable tracking: five upper-case letters."""
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(5))


def insert_at(sentences: list[str], items: list[tuple[float, str]]) -> str:
    """Insert ``(depth, text)`` items into the sentence list at fractional depths; join into one text.

    Items with equal positions keep their given order (so assignment chains stay in order).
    """
    slots: dict[int, list[str]] = {}
    for depth, text in items:
        slots.setdefault(round(depth * len(sentences)), []).append(text)
    out: list[str] = []
    for i in range(len(sentences) + 1):
        out.extend(slots.get(i, ()))
        if i < len(sentences):
            out.append(sentences[i])
    return " ".join(out)
