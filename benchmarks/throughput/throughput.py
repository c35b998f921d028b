"""Samples/s of `evalsuite run` vs lm-eval's `simple_evaluate` (HFLM over the same model object) on the same
samples of generation tasks, side by side in one run, one dtype for both.

Each evalsuite task is exported as a local lm-eval task (jsonl with absolute paths, prompts rendered with the chat
template exactly as evalsuite renders them), so both tools generate for identical prompts with identical
max_new_tokens and stop strings. Rows: evalsuite with per-batch decoding (finished rows dropped, no refill), with
continuous refill (a pool of ``--batch-size`` rows), and optionally with a pool ``--pool-factor`` times larger;
lm-eval at ``--lm-eval-batches`` (batch 1 is its default; slow). ``--dtype auto`` measures bf16 vs fp32 matmuls
at the model's shapes (``evalsuite.models.dtype``) and runs both tools at the faster one.

    python -m benchmarks.throughput.throughput --task json,reasoning --n 32 --dtype auto [--batch-size 16]
"""
from __future__ import annotations

import argparse
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def run_evalsuite(base, task, batch_size: int, run_dir: Path, refill: bool = True, pool_factor: int = 1) -> float:
    import evalsuite.backends.inprocess.inprocess as inprocess
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.generate import iter_generate
    from evalsuite.run.runner import Runner
    from evalsuite.store.sqlite import Store

    def patched(*args, max_batch: int = 16, **kw):  # benchmark-only knobs: refill on/off, a larger pool
        return iter_generate(*args, max_batch=max_batch * pool_factor, refill=refill, **kw)

    config = RunConfig(model=base.name, variants=["bf16"], tasks=[task.name], batch_size=batch_size, kld=False)
    store = Store.create(run_dir, config.to_dict())
    backend = inprocess.InProcessBackend.of(base, seed=config.seed)
    saved, inprocess.iter_generate = inprocess.iter_generate, patched
    try:
        start = time.perf_counter()
        Runner(config, backend, [task], store, progress=False, log=lambda s: None).run(
            backend.variants(config.variants))
        elapsed = time.perf_counter() - start
    finally:
        inprocess.iter_generate = saved
    assert len(store.samples("bf16")) == len(task.samples)
    return elapsed


def make_hflm(model: Any, tokenizer: Any, batch_size: int, make_cache: Callable[[], Any] | None = None) -> Any:
    """lm-eval's HFLM over an in-memory model; ``make_cache`` (e.g. a variant's quantized KV cache factory) gives
    every ``generate`` call a fresh cache of that kind instead of transformers' DynamicCache."""
    from lm_eval.models.huggingface import HFLM

    class CacheHFLM(HFLM):
        def _model_generate(self, context, max_length, stop, **generation_kwargs):  # type: ignore[override]
            if make_cache is not None:  # transformers >= 5.2x calls it ``cache``, before ``past_key_values``
                forward = inspect.signature(self.model.forward).parameters
                generation_kwargs["cache" if "cache" in forward else "past_key_values"] = make_cache()
            return super()._model_generate(context, max_length, stop, **generation_kwargs)

    return CacheHFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)


def lm_eval_generate(model: Any, tokenizer: Any, folder: Path | list[Path], names: list[str], batch_size: int,
                     make_cache: Callable[[], Any] | None = None, keep_outputs: bool = False
                     ) -> tuple[float, dict[str, dict[str, str]]]:
    """One ``simple_evaluate`` over exported tasks ``names``: seconds, and (``keep_outputs``) each task's
    outputs by sample id."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    lm = make_hflm(model, tokenizer, batch_size, make_cache)
    include = [str(f) for f in folder] if isinstance(folder, list) else str(folder)
    manager = TaskManager(include_path=include, include_defaults=False)
    start = time.perf_counter()
    results = simple_evaluate(model=lm, tasks=names, task_manager=manager, log_samples=keep_outputs,
                              verbosity="ERROR")
    elapsed = time.perf_counter() - start
    outputs: dict[str, dict[str, str]] = {}
    for task, rows in ((results or {}).get("samples") or {}).items():
        outputs[task] = {}
        for row in rows:
            resp = row["filtered_resps"][0] if row.get("filtered_resps") else row["resps"][0]
            outputs[task][str(row["doc"]["id"])] = resp[0] if isinstance(resp, list) else resp
    return elapsed, outputs


def run_lm_eval(base, folder: Path, name: str, batch_size: int) -> float:
    return lm_eval_generate(base.model, base.tokenizer, folder, [name], batch_size)[0]


def bench_task(base, name: str, args: argparse.Namespace, tmp: Path) -> None:
    """Time every row for one task and print the table (evalsuite's refill row is the one the ratios use)."""
    from evalsuite.lmeval.export import export_task
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    config = RunConfig(tasks=[name], seed=args.seed, limit=args.n)
    (task,) = prepare_tasks(config, default_registry())
    exported = export_task(task, base.tokenizer, tmp / f"lm-{name}", args.seed)
    bs = args.batch_size
    rows = [("evalsuite, per-batch (no refill)", bs, run_evalsuite(base, task, bs, tmp / f"a-{name}", False)),
            ("evalsuite, refill", bs, run_evalsuite(base, task, bs, tmp / f"b-{name}", True))]
    if args.pool_factor > 1:
        rows.append((f"evalsuite, refill pool x{args.pool_factor}", bs * args.pool_factor,
                     run_evalsuite(base, task, bs, tmp / f"c-{name}", True, args.pool_factor)))
    for lb in [int(x) for x in args.lm_eval_batches.split(",")]:
        rows.append(("lm-eval simple_evaluate (HFLM)", lb, run_lm_eval(base, exported.yaml_path.parent,
                                                                       exported.task_name, lb)))
        print(f"{name}: lm-eval batch {lb} {rows[-1][2]:.1f} s (evalsuite refill {rows[1][2]:.1f} s, "
              f"x{rows[-1][2] / rows[1][2]:.2f})", flush=True)
    n = len(task.samples)
    print(f"\ntask {name}, {n} samples, {base.dtype}, max_new_tokens {task.gen.max_new_tokens}")
    print(f"{'runner':<34}{'batch':>6}{'seconds':>10}{'samples/s':>11}{'refill ×':>10}")
    for label, b, secs in rows:
        print(f"{label:<34}{b:>6}{secs:>10.1f}{n / secs:>11.2f}{secs / rows[1][2]:>10.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="json,reasoning", help="comma-separated tasks")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--dtype", default="auto", help="bfloat16, float32 or auto (measure, pick the faster)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pool-factor", type=int, default=1, help="also time a refill pool this many times larger")
    ap.add_argument("--lm-eval-batches", default="16", help="comma-separated lm-eval batch sizes, e.g. 1,16")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import torch

    from evalsuite.models import load_model, offline
    from evalsuite.models.dtype import choose_compute_dtype

    offline()
    dtype = args.dtype
    if dtype == "auto":
        choice = choose_compute_dtype()
        print(choice.describe())
        dtype = choice.dtype
    base = load_model("default", dtype)
    print(f"torch threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.task.split(","):
            bench_task(base, name, args, Path(tmp))


if __name__ == "__main__":
    main()
