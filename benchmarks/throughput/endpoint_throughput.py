"""Samples/s of the endpoint backend (a local llama.cpp server) vs the in-process HF path, same samples.

    .venv/bin/python -m benchmarks.throughput.endpoint_throughput --task json --n 16
    .venv/bin/python -m benchmarks.throughput.endpoint_throughput --url http://127.0.0.1:8081/v1 --concurrency 8

Without --url a llama.cpp server (llama-cpp-python) is started on the embedded GGUF (Q4_1 weights, f16 KV cache);
the in-process path is evalsuite's own batched HF generation on the same model converted to bf16. Note the two
are not the same numerics (GGUF Q4_1 kernels vs bf16 torch), so this compares throughput of the paths, not quality.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time



def in_process(task, samples, gen, batch: int) -> float:
    """Seconds for evalsuite's in-process batched generation over ``samples``."""
    from evalsuite.models import load_model, offline
    from evalsuite.backends.inprocess.generate import iter_generate
    from evalsuite.run.prompts import render_prompt

    offline()
    base = load_model("default")
    prompts = [render_prompt(s, base.tokenizer) for s in samples]
    start = time.perf_counter()
    for _ in iter_generate(base.model, base.tokenizer, prompts, gen, None, max_batch=batch):
        pass
    return time.perf_counter() - start


def endpoint(url: str, samples, gen, concurrency: int) -> float:
    from evalsuite.backends.served.endpoint import EndpointClient, EndpointPool, EndpointSpec

    client = EndpointClient(EndpointSpec(url, "bench"))
    client.probe()
    start = time.perf_counter()
    for _ in EndpointPool(client, concurrency).generate(samples, gen, [[0]] * len(samples)):
        pass
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="json")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--url", help="An already running OpenAI-compatible server (default: start llama.cpp).")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, help="Override the task's max_new_tokens.")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads when started here.")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the server we started
    from evalsuite.tasks.registry import default_registry

    task = default_registry().get(args.task)
    params = task.params({"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {})
    samples = task.samples(params, 1234)[: args.n]
    gen = task.gen_settings(params)
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            from evalsuite.models.embedded import embedded_gguf
            from tests.llama_server import llama_server

            url = stack.enter_context(llama_server(embedded_gguf(), "f16", threads=args.threads, logits_all=False))
        t_ep = endpoint(url, samples, gen, args.concurrency)
    t_hf = in_process(task, samples, gen, args.batch)
    n = len(samples)
    print(f"{args.task}, {n} samples, max_new_tokens={gen.max_new_tokens}")
    print(f"endpoint   (concurrency {args.concurrency}): {n / t_ep:6.2f} samples/s ({t_ep:.1f} s)")
    print(f"in-process (batch {args.batch}):       {n / t_hf:6.2f} samples/s ({t_hf:.1f} s)")
    print(f"ratio endpoint / in-process: {t_hf / t_ep:.2f}x")


if __name__ == "__main__":
    main()
