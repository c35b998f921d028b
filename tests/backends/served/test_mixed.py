"""Mixed runs: served teacher-forced KLD and pairing (an in-process baseline next to a real llama.cpp variant:
test_llama_live.py)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from evalsuite.backends.served.kld import align_answer, partition_kl
from evalsuite.backends.served.pairing import token_mismatch


def test_partition_kl_known_values():
    p = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64).log()
    # the variant reports tokens 0 and 1 (q = 0.4 each): tokens 2, 3 form the rest bucket (P 0.25, Q 0.2)
    got = partition_kl(p, {0: math.log(0.4), 1: math.log(0.4)})
    want = 0.5 * math.log(0.5 / 0.4) + 0.25 * math.log(0.25 / 0.4) + 0.25 * math.log(0.25 / 0.2)
    assert got == pytest.approx(want, abs=1e-9)
    assert partition_kl(p, {0: math.log(0.5), 1: math.log(0.25)}) == pytest.approx(0.0, abs=1e-12)
    # a lower bound on the full KL: the full variant distribution (0.4, 0.4, 0.15, 0.05)
    q = torch.tensor([0.4, 0.4, 0.15, 0.05], dtype=torch.float64)
    full = float((p.exp() * (p - q.log())).sum())
    assert got <= full + 1e-12 and full - got > 0.01
    assert partition_kl(p, {i: math.log(float(q[i])) for i in range(4)}) == pytest.approx(full, abs=1e-9)


def test_align_answer_takes_the_answer_positions_or_says_why():
    entries = [("a", -1.0, ()), ("b", -0.5, ()), ("c", -0.2, ()), ("x", -3.0, ())]
    seg, why = align_answer(entries, 1, ["b", "c"])
    assert [e[0] for e in seg] == ["b", "c"] and why == ""
    seg, why = align_answer(entries, 1, ["b", "cd"])
    assert seg == [] and "token 1" in why and "'cd'" in why
    assert align_answer(entries, 1, ["a"] * 9)[0] == []


def _word_tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_token_mismatch_names_the_first_difference():
    a = _word_tokenizer(["the", "cat", "sat"])
    b = _word_tokenizer(["the", "sat", "cat"])
    text = "the cat sat"
    ia, ib = a(text)["input_ids"], b(text)["input_ids"]
    assert token_mismatch(a, ia, list(ia)) is None
    why = token_mismatch(a, ia, ib)
    assert why is not None and "first difference at token 1" in why and "'cat'" in why and "\n" not in why
    assert "3 token ids on the server vs 2" in token_mismatch(a, ia[:2], ib)


class _WrongVocab(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose tokenizer is not the baseline's; any completion is a test failure."""

    completions = 0

    def _json(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._json({"object": "list", "data": [{"id": "other-model", "object": "model"}]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "tokenize" in self.path:
            return self._json({"tokens": [7, 7, 7]})
        type(self).completions += 1
        return self._json({"choices": [{"text": "x"}]})

    def log_message(self, *a):
        pass


@pytest.mark.slow
def test_tokenizer_mismatch_is_refused_before_generation(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _WrongVocab)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    exe = str(Path(sys.executable).with_name("evalsuite"))
    try:
        p = subprocess.run([exe, "run", "--model", "default", "--variants",
                            f"openai:http://127.0.0.1:{srv.server_port}/v1#other", "--tasks", "reasoning",
                            "--limit", "1", "--out", str(tmp_path), "-q"], capture_output=True, text=True, timeout=300)
    finally:
        srv.shutdown()
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "'other' cannot be paired" in lines[0] and "tokenizer differs" in lines[0], p.stderr
    assert _WrongVocab.completions == 0 and not any(tmp_path.iterdir())


def test_vllm_style_echo_parses_and_aligns():
    """vLLM answers ``echo`` + ``logprobs`` with the OpenAI completion format, the first prompt token unscored
    (``null``): the answer positions still align and carry their top-k."""
    from evalsuite.backends.served.endpoint import parse_logprobs

    payload = {"tokens": ["<|im_start|>", "user", " Hi", " The", " answer", "!"],
               "token_logprobs": [None, -3.0, -2.0, -0.5, -0.25, -1.5],
               "top_logprobs": [None, {"user": -3.0}, {" Hi": -2.0}, {" The": -0.5, " A": -1.2},
                                {" answer": -0.25, " result": -2.0}, {"!": -1.5, ".": -0.4}]}
    entries = parse_logprobs(payload)
    assert entries[0] == ("<|im_start|>", 0.0, ())
    seg, why = align_answer(entries, 1, [" The", " answer"])
    assert why == "" and [s[0] for s in seg] == [" The", " answer"]
    assert dict(seg[1][2]) == {" answer": -0.25, " result": -2.0}
