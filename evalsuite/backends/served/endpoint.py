"""An OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp) as a generation backend.

Model/variant syntax: ``openai:http://HOST:PORT/v1#name`` -- the part after ``#`` names the variant (default
``HOST:PORT``). Chat samples go to ``/chat/completions``, raw prompts to ``/completions``; greedy unless the task
asks for a temperature. Requests run on a bounded thread pool with retries (connection errors, 429, 5xx).
"""
from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import requests

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.inprocess.generate import Generation, cut_at_stop
from evalsuite.tasks.base import GenSettings, Sample
from evalsuite.variants.grammar import EndpointSpec, parse_spec, spec_kind

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: where servers say what they are (a path at the server's root, and the fields kept: none that change by the minute)
SELF_REPORTS = (("/version", ("version",)), ("/props", ("build_info", "model_path")),
                ("/info", ("version", "model_id", "model_sha", "model_dtype", "sha")))


def is_endpoint(text: Any) -> bool:
    """Whether ``text`` is an ``openai:`` spec (by the variant grammar's prefix)."""
    return isinstance(text, str) and spec_kind(text) == "openai"


def parse_endpoint(text: str) -> EndpointSpec:
    """``openai:http://127.0.0.1:8081/v1#f16`` -> EndpointSpec(url, 'f16'); bad input is an EvalsuiteError."""
    spec = parse_spec(text) if is_endpoint(text) else None
    if not isinstance(spec, EndpointSpec):
        raise EvalsuiteError(f"not an endpoint spec {text!r}: expected openai:http://HOST:PORT/v1#name")
    return spec


@dataclass(frozen=True)
class EndpointGeneration(Generation):
    """A Generation plus the server's per-token top-k logprobs (empty when not asked for / not returned)."""

    tokens: tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...] = ()


@dataclass
class EndpointClient:
    """HTTP client for one server: probe, then chat/completion requests with retries and timeouts."""

    spec: EndpointSpec
    timeout_s: float = 300.0
    retries: int = 4
    backoff_s: float = 0.5
    models: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] | None = None  # ``server_facts``, once asked

    def probe(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """GET /models once; an unreachable or non-OpenAI server is a one-line EvalsuiteError."""
        try:
            r = requests.get(f"{self.spec.url}/models", timeout=timeout_s)
            r.raise_for_status()
            self.models = r.json()
        except (requests.RequestException, ValueError) as exc:
            raise EvalsuiteError(f"endpoint {self.spec.url} unreachable ({_short(exc)}); is the server running?") \
                from None
        return self.models

    @property
    def served_model(self) -> str | None:
        data = self.models.get("data") or []
        return data[0].get("id") if data and isinstance(data[0], dict) else None

    def fingerprint(self) -> str:
        """Hash of URL + the /models answer: identifies the deployment, NOT the weights (weaker than a hash)."""
        models = _drop_volatile(self.models)
        blob = json.dumps({"url": self.spec.url, "models": models}, sort_keys=True, default=str)
        return "endpoint:" + hashlib.sha256(blob.encode()).hexdigest()[:16]

    def server_facts(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """What the server says about itself, for a stored baseline's key: its ``/models`` answer (``probe``;
        volatile keys dropped) and, where the server has them, the fields of ``SELF_REPORTS`` (vLLM's ``/version``,
        llama.cpp's ``/props``, TGI's ``/info``). Asked once."""
        if self.facts is None:
            if not self.models:
                self.probe()
            root = self.spec.url[:-3] if self.spec.url.endswith("/v1") else self.spec.url
            facts: dict[str, Any] = {"models": _drop_volatile(self.models)}
            for path, keys in SELF_REPORTS:
                try:
                    r = requests.get(root + path, timeout=timeout_s)
                    got = r.json() if r.ok else None
                except (requests.RequestException, ValueError):
                    got = None
                if isinstance(got, dict) and any(k in got for k in keys):
                    facts[path] = {k: got[k] for k in keys if k in got}
            self.facts = facts
        return self.facts

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries on connection errors, timeouts, 429 and 5xx (exponential backoff)."""
        last = ""
        for attempt in range(self.retries + 1):
            try:
                r = requests.post(f"{self.spec.url}{path}", json=body, timeout=self.timeout_s)
                if r.status_code not in TRANSIENT_STATUS:
                    if r.status_code >= 400:
                        raise EvalsuiteError(f"endpoint {self.spec.url}{path}: HTTP {r.status_code}: "
                                             f"{r.text.strip()[:200]}")
                    return r.json()
                last = f"HTTP {r.status_code}"
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = _short(exc)
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        raise EvalsuiteError(f"endpoint {self.spec.url}{path} failed after {self.retries + 1} tries: {last}")

    def tokenize(self, text: str) -> list[int] | None:
        """The server's token ids for ``text`` (llama-cpp-python ``/extras/tokenize``, vLLM ``/tokenize``,
        llama.cpp ``/tokenize``), or None when it has no such endpoint."""
        root = self.spec.url[:-3] if self.spec.url.endswith("/v1") else self.spec.url
        tries = [("/extras/tokenize", {"input": text}), ("/tokenize", {"prompt": text, "model": self.served_model,
                                                                      "add_special_tokens": False}),
                 ("/tokenize", {"content": text, "add_special": False, "parse_special": True})]
        for path, body in tries:
            try:
                r = requests.post(root + path, json=body, timeout=30)
                tokens = r.json().get("tokens") if r.ok else None
            except (requests.RequestException, ValueError, AttributeError):
                tokens = None
            if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
                return tokens
        return None

    def echo(self, prompt: str, top_k: int) -> tuple[tuple[tuple[str, float, tuple[tuple[str, float], ...]],
                                                             ...], int]:
        """``prompt`` echoed with its per-token log-probs (one token generated: ``max_tokens: 0`` means no limit
        on llama.cpp); returns (entries, tokens generated after the prompt)."""
        body: dict[str, Any] = {"prompt": prompt, "echo": True, "logprobs": top_k, "max_tokens": 1,
                                "temperature": 0.0}
        if self.served_model:
            body["model"] = self.served_model
        out = self.post("/completions", body)
        choice = (out.get("choices") or [{}])[0]
        used = (out.get("usage") or {}).get("completion_tokens")
        text = choice.get("text") or ""
        generated = int(used) if used is not None else int(text.startswith(prompt) and len(text) > len(prompt))
        return parse_logprobs(choice.get("logprobs")), generated

    def generate_one(self, sample: Sample, gen: GenSettings, top_k: int = 0, seed: int = 0) -> EndpointGeneration:
        """One sample: chat when it has messages, completion when it has a raw prompt."""
        body: dict[str, Any] = {"max_tokens": gen.max_new_tokens, "temperature": gen.temperature, "seed": seed}
        if self.served_model:
            body["model"] = self.served_model
        if gen.stop:
            body["stop"] = list(gen.stop)
        chat = sample.messages is not None
        if chat:
            body["messages"] = [dict(m) for m in sample.messages]
            if top_k:
                body.update(logprobs=True, top_logprobs=top_k)
        else:
            body["prompt"] = sample.prompt
            if top_k:
                body["logprobs"] = top_k
        start = time.perf_counter()
        out = self.post("/chat/completions" if chat else "/completions", body)
        latency = time.perf_counter() - start
        choice = (out.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        tokens = parse_logprobs(choice.get("logprobs"))
        usage = out.get("usage") or {}
        n = int(usage.get("completion_tokens") or len(tokens))
        return EndpointGeneration(text=cut_at_stop(text or "", gen.stop).strip(), n_tokens=n,
                                  prompt_tokens=int(usage.get("prompt_tokens") or 0), ttft_s=None,
                                  itl_s=latency / n if n else None, tokens=tokens)


def parse_logprobs(lp: Any) -> tuple[tuple[str, float, tuple[tuple[str, float], ...]], ...]:
    """Chat (``content: [{token, logprob, top_logprobs: [...]}]``) or completion (``tokens`` / ``token_logprobs`` /
    ``top_logprobs: [{tok: lp}]``) logprobs -> ((token, logprob, ((alt, logprob), ...)), ...)."""
    if not lp:
        return ()
    if lp.get("content") is not None:
        return tuple((c["token"], float(c["logprob"]),
                      tuple((t["token"], float(t["logprob"])) for t in c.get("top_logprobs") or ()))
                     for c in lp["content"])
    toks, lps, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    return tuple((t, float(l if l is not None else 0.0),
                  tuple((k, float(v)) for k, v in (tops[i] or {}).items()) if i < len(tops) else ())
                 for i, (t, l) in enumerate(zip(toks, lps)))


@dataclass
class EndpointPool:
    """``generate(samples, gen, seeds)`` yields (indices, [generation per seed]) as groups of samples complete."""

    client: EndpointClient
    concurrency: int = 4
    top_k: int = 0  # >0: ask for top-k logprobs (for the approximate KLD)

    @property
    def name(self) -> str:
        return self.client.spec.name

    def _sample(self, sample: Sample, gen: GenSettings, seeds: Sequence[int]) -> list[EndpointGeneration]:
        return [self.client.generate_one(sample, gen, self.top_k, seed) for seed in seeds]

    def generate(self, samples: Sequence[Sample], gen: GenSettings, seeds: Sequence[Sequence[int]],
                 group: int | None = None) -> Iterator[tuple[list[int], list[list[EndpointGeneration]]]]:
        """Bounded concurrency; one request per seed of a sample (``n`` for pass@k); each yielded group
        (default: ``concurrency`` samples) can be stored at once."""
        group = group or self.concurrency
        done: list[tuple[int, list[EndpointGeneration]]] = []
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"ep-{self.name}") as pool:
            pending = {pool.submit(self._sample, s, gen, seeds[i]): i for i, s in enumerate(samples)}
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        done.append((pending.pop(f), f.result()))
                    while len(done) >= group or (done and not pending):
                        chunk, done = done[:group], done[group:]
                        yield [i for i, _ in chunk], [g for _, g in chunk]
            finally:
                for f in pending:
                    f.cancel()


def _drop_volatile(obj: Any) -> Any:
    """Remove keys some servers fill with the current time (vLLM's ``created``) so fingerprints are stable."""
    if isinstance(obj, dict):
        return {k: _drop_volatile(v) for k, v in obj.items() if k not in ("created", "permission", "permissions")}
    if isinstance(obj, list):
        return [_drop_volatile(v) for v in obj]
    return obj


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]
