"""Samples/s of `evalsuite run` vs lm-eval's `simple_evaluate` (HFLM over the same model object) on the same
samples of a generation task, side by side in one run.

The evalsuite task is exported as a local lm-eval task (jsonl with absolute paths, prompts rendered with the chat
template exactly as evalsuite renders them), so both tools generate for identical prompts with identical
max_new_tokens and stop strings. lm-eval runs at its default batch size (1) and at evalsuite's batch size.

    python benchmarks/throughput.py --task reasoning --n 32 [--dtype bfloat16] [--batch-size 16]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def run_evalsuite(base, task, batch_size: int, run_dir: Path) -> float:
    from evalsuite.run.config import RunConfig
    from evalsuite.run.inprocess import InProcessBackend
    from evalsuite.run.runner import Runner
    from evalsuite.run.store import Store

    config = RunConfig(model=base.name, variants=["bf16"], tasks=[task.name], batch_size=batch_size, kld=False)
    store = Store.create(run_dir, config.to_dict())
    backend = InProcessBackend.of(base, seed=config.seed)
    start = time.perf_counter()
    Runner(config, backend, [task], store, progress=False, log=lambda s: None).run(backend.variants(config.variants))
    elapsed = time.perf_counter() - start
    assert len(store.samples("bf16")) == len(task.samples)
    return elapsed


def run_lm_eval(base, folder: Path, name: str, batch_size: int) -> float:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=base.model, tokenizer=base.tokenizer, batch_size=batch_size)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    start = time.perf_counter()
    simple_evaluate(model=lm, tasks=[name], task_manager=manager, log_samples=False, verbosity="ERROR")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="reasoning")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    from evalsuite.lmeval.export import export_task
    from evalsuite.models import load_model, offline
    from evalsuite.run.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    offline()
    base = load_model("default", args.dtype)
    config = RunConfig(tasks=[args.task], seed=args.seed, limit=args.n)
    (task,) = prepare_tasks(config, default_registry())
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_task(task, base.tokenizer, Path(tmp) / "lm", args.seed)
        rows = [("evalsuite run", args.batch_size, run_evalsuite(base, task, args.batch_size, Path(tmp) / "run"))]
        for bs in (1, args.batch_size):
            rows.append(("lm-eval simple_evaluate (HFLM)", bs, run_lm_eval(base, exported.yaml_path.parent,
                                                                           exported.task_name, bs)))
    n = len(task.samples)
    ours = n / rows[0][2]
    print(f"task {args.task}, {n} samples, {args.dtype}, max_new_tokens {task.gen.max_new_tokens}")
    print(f"{'runner':<32}{'batch':>6}{'seconds':>10}{'samples/s':>11}{'evalsuite ×':>13}")
    for label, bs, secs in rows:
        print(f"{label:<32}{bs:>6}{secs:>10.1f}{n / secs:>11.2f}{ours / (n / secs):>13.2f}")


if __name__ == "__main__":
    main()
