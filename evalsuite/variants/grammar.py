"""The variant grammar: every spec string -> one typed parsed spec. The only place that reads spec prefixes.

| spec | parsed |
|---|---|
| ``WEIGHTS[+KV]``, ``KV`` (``w4g64+kv4g32``, ``wf8+vkvf8``; ``quant_grammar.py``) | ``QuantForm`` |
| ``ckpt:PATH[+KV][#NAME]`` (a model folder or a ``.gguf`` file, ``artifact.py``) | ``CheckpointRef`` |
| ``openai:http://HOST:PORT/v1[#NAME]`` (a server you run, ``backends/served/endpoint.py``) | ``EndpointSpec`` |
| ``vllm:"ARGS"#NAME`` (the baseline's vLLM server plus raw flags, ``backends/served/vllm/specs.py``) | ``VllmArgs`` |

Parsing is syntax only (no file system, no network); what a backend can run is the consumer's decision
(``parse_variant`` for in-process variants, ``parse_served`` for ``--engine vllm``). Pure Python: it uses no torch.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal, Sequence, Union
from urllib.parse import urlsplit

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.quant_grammar import QuantForm, VllmKV, parse_quant

Kind = Literal["quant", "ckpt", "openai", "vllm"]
CKPT = "ckpt:"
PREFIXES: dict[str, Kind] = {CKPT: "ckpt", "openai:": "openai", "vllm:": "vllm"}
CKPT_FORM = ("form: ckpt:PATH[+KV][#NAME], PATH a model folder with config.json or a .gguf file "
             "(e.g. ckpt:out/model-q4.gguf+kv4g32#q4-shipped)")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_CKPT_RE = re.compile(r"^(?P<path>.+?)(?:\+(?P<kv>v?kv[^#+]*))?(?:#(?P<name>[^#+]*))?(?:\+(?P<kv2>v?kv[^#+]*))?$",
                      re.IGNORECASE)


@dataclass(frozen=True)
class CheckpointRef:
    """``ckpt:PATH[+KV][#NAME]``: the path as written (not checked here), an optional KV cache and name."""

    path: str
    kv: KVConfig | VllmKV | None = None
    name: str | None = None


@dataclass(frozen=True)
class EndpointSpec:
    """``openai:URL#NAME``: where a model is served and what the run calls it."""

    url: str  # base URL, ending in /v1 (or wherever /models and /chat/completions live)
    name: str

    @property
    def is_baseline(self) -> bool:  # the Runner's baseline-reuse path never applies to endpoints
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "endpoint": self.url}


@dataclass(frozen=True)
class VllmArgs:
    """``vllm:"ARGS"#NAME``: raw vLLM server flags (shell-split) and the variant's name."""

    flags: tuple[str, ...]
    name: str


ParsedSpec = Union[QuantForm, CheckpointRef, EndpointSpec, VllmArgs]


def flag_values(flags: Sequence[str], name: str) -> list[str]:
    """The values of ``name`` in a server's flags, written ``--name VALUE`` or ``--name=VALUE``."""
    values = [flags[i + 1] for i, f in enumerate(flags[:-1]) if f == name]
    return values + [f.split("=", 1)[1] for f in flags if f.startswith(name + "=")]


def _split(text: str) -> tuple[Kind, str]:
    """(kind, body after the prefix) of a spec string."""
    stripped = text.strip()
    for prefix, kind in PREFIXES.items():
        if stripped.lower().startswith(prefix):
            return kind, stripped[len(prefix):]
    return "quant", stripped


def spec_kind(text: str) -> Kind:
    """Which kind of spec ``text`` is, from its prefix alone (its body is not checked)."""
    return _split(text)[0]


def parse_spec(text: str) -> ParsedSpec:
    """Parse one spec string; bad input is a one-line error (SpecError for weights/KV and ``ckpt:``)."""
    kind, body = _split(text)
    if kind == "quant":
        return parse_quant(text)
    return {"ckpt": _checkpoint, "openai": _endpoint, "vllm": _vllm_args}[kind](text, body)


def bad_checkpoint(text: str, why: str) -> SpecError:
    """The one-line error for a ``ckpt:`` spec (shows the form)."""
    return SpecError(f"bad artifact spec {text!r} ({why}); {CKPT_FORM}")


def _checkpoint(text: str, body: str) -> CheckpointRef:
    """``PATH[+KV][#NAME]`` (the path keeps its case; a KV part is evalsuite's or vLLM's)."""
    body = body.strip()
    m = _CKPT_RE.match(body)
    if not body or not m:
        raise bad_checkpoint(text, "no path")
    if m["kv"] and m["kv2"]:
        raise bad_checkpoint(text, "two KV parts")
    kv_text = m["kv"] or m["kv2"]
    kv = parse_quant(kv_text).kv if kv_text else None
    name = m["name"]
    if name is not None and not _NAME_RE.match(name):
        raise bad_checkpoint(text, f"name {name!r} may hold only A-Z a-z 0-9 _ . - and must start with a letter or "
                                   "digit")
    return CheckpointRef(path=m["path"].strip(), kv=kv, name=name)


def _endpoint(text: str, body: str) -> EndpointSpec:
    """``http://127.0.0.1:8081/v1#f16`` -> EndpointSpec(url, 'f16'); the name defaults to ``HOST:PORT``."""
    url, _, name = body.partition("#")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EvalsuiteError(f"bad endpoint URL {url!r} in {text!r}: expected http(s)://HOST:PORT/v1")
    name = name.strip() or parts.netloc
    if any(c in name for c in ",+ "):
        raise EvalsuiteError(f"bad endpoint name {name!r}: no commas, '+' or spaces")
    return EndpointSpec(url=url.rstrip("/"), name=name)


def _vllm_args(text: str, body: str) -> VllmArgs:
    """``"--flag value ..."#name`` (quotes optional) -> VllmArgs; the name is required."""
    args, _, name = body.rpartition("#")
    if not name.strip() or not args.strip():
        raise EvalsuiteError(f"bad served variant {text.strip()!r}: expected vllm:\"--flag value ...\"#name")
    try:
        flags = tuple(shlex.split(args.strip().strip("'\"") if args.strip()[:1] in "'\"" else args))
    except ValueError as exc:
        raise EvalsuiteError(f"bad served variant {text.strip()!r}: {exc}") from None
    return VllmArgs(flags=flags, name=name.strip())


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of specs, leaving commas inside ``[...]`` alone."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [t.strip() for t in out + [cur] if t.strip()]
