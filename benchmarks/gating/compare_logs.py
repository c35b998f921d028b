"""`evalsuite compare` on 100,000 paired samples: wall time of the whole command, and of its stages in one process.

Writes an lm-eval ``--log_samples`` output for a baseline and a variant with lm-eval's own writer
(``EvaluationTracker.save_results_aggregated`` / ``save_results_samples``, fed sample dicts shaped as lm-eval's
evaluator builds them: a ~300-character few-shot prompt, generation kwargs, the answer, ``exact_match`` and ``f1``),
the variant flipping a seeded ``--flip`` share of answers. Then times

* ``evalsuite compare`` as a fresh process (imports, reading, pairing, the run store, the gate, the report), with the
  binary metric (``exact_match``, the default) and with a continuous one (``--metric f1``: paired bootstrap), and
  ``evalsuite gate`` re-gating the stored comparison;
* the same stages in this process: reading + scoring + pairing + writing the store (``compare_logs``), the gate
  (``gate_store``), the report (``report_model`` + ``write_report``).

    .venv/bin/python -m benchmarks.gating.compare_logs               # 100,000 documents
    .venv/bin/python -m benchmarks.gating.compare_logs --n 20000 --keep /tmp/cmp   # a second run reuses the logs
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TASK = "synth_qa"


def samples(n: int, flip: float, seed: int, variant: bool) -> list[dict[str, Any]]:
    """lm-eval's per-document dicts (``evaluator.evaluate`` with log_samples) for ``n`` documents."""
    from lm_eval.utils import hash_string

    rng, flips = random.Random(seed), random.Random(seed + 1)  # the same documents on both sides
    shots = "".join(f"Question: What is {i} plus {i + 3}?\nAnswer: {2 * i + 3}\n\n" for i in range(7))
    out = []
    for i in range(n):
        right, flipped = rng.random() < 0.7, flips.random() < flip
        if variant and flipped:
            right = not right
        target = str(i % 977)
        answer = target if right else str(i % 977 + 1)
        ctx = f"{shots}Question: item {i}, what number comes back?\nAnswer:"
        gen = {"until": ["\n\n", "Question:"], "max_gen_toks": 32, "do_sample": False}
        doc = {"id": i, "question": f"item {i}", "answer": target, "context_len": 256 * (1 + i % 8)}
        out.append({"doc_id": i, "doc": doc, "target": target, "arguments": [(ctx, gen)], "resps": [[answer]],
                    "filtered_resps": [answer], "filter": "none", "metrics": ["exact_match", "f1"],
                    "doc_hash": hash_string(str(doc)), "prompt_hash": hash_string(ctx),
                    "target_hash": hash_string(target), "exact_match": float(right),
                    "f1": 1.0 if right else (0.0, 0.5, 0.667)[i % 3]})
    return out


def write_log(folder: Path, model: str, rows: list[dict[str, Any]]) -> Path:
    """Save ``rows`` as lm-eval's CLI saves a run's results and samples (its own EvaluationTracker)."""
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(folder))
    tracker.general_config_tracker.log_experiment_args(model_source="hf", model_args=f"pretrained={model}",
                                                       system_instruction=None, chat_template=None,
                                                       fewshot_as_multiturn=False)
    results = {"results": {TASK: {"alias": TASK, "exact_match,none": 0.7}}, "versions": {TASK: 1.0},
               "configs": {TASK: {"task": TASK, "repeats": 1, "output_type": "generate_until"}},
               "n-samples": {TASK: {"original": len(rows), "effective": len(rows)}}, "config": {}}
    tracker.save_results_aggregated(results=results, samples={TASK: rows})
    tracker.save_results_samples(task_name=TASK, samples=rows)
    return folder


def timed_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of ``evalsuite ARGS`` as a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from evalsuite.cli import main; main()", *args], env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"evalsuite compare failed ({done.returncode}): {done.stderr.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.returncode


def stages(base: Path, var: Path, work: Path, metric: dict[str, str]) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of compare_logs, the gate and the report, in this process."""
    from evalsuite.compare.build import compare_logs
    from evalsuite.store.bulk import gc_paused
    from evalsuite.store.sqlite import Store
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.build import report_model, write_report

    out: dict[str, tuple[float, float]] = {}
    clock = [time.perf_counter(), time.process_time()]

    def lap(name: str) -> None:
        now = [time.perf_counter(), time.process_time()]
        out[name] = (now[0] - clock[0], now[1] - clock[1])
        clock[:] = now

    run = compare_logs(f"base={base}", [f"variant={var}"], work / f"runs-{len(metric)}" / "r", metric).run_dir
    lap("read + pair + store")
    store = Store.open(run)
    with gc_paused():  # as `evalsuite compare` gates and reports
        gated = gate_store(store)
        lap("gate")
        write_report(store, gated, work / f"reports-{len(metric)}", report_model(store, gated).to_dict())
        lap("report")
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="documents per side")
    ap.add_argument("--flip", type=float, default=0.02, help="share of the variant's answers flipped")
    ap.add_argument("--keep", type=Path, help="keep the logs, runs and reports here (default: a temporary folder)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="compare-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        start = time.perf_counter()
        base, var = work / "base", work / "variant"
        if not (base.is_dir() and var.is_dir()):  # --keep of an earlier run: its logs are reused
            write_log(base, "base-model", samples(args.n, args.flip, 0, False))
            write_log(var, "variant-model", samples(args.n, args.flip, 0, True))
        for old in ("cli-runs", "cli-reports", "runs-0", "runs-1", "reports-0", "reports-1"):
            shutil.rmtree(work / old, ignore_errors=True)
        print(f"logs: {sum(1 for _ in next(base.rglob('samples_*.jsonl')).open()):,} documents per side "
              f"({sum(p.stat().st_size for p in work.rglob('samples_*.jsonl')) / 2**20:.0f} MiB of samples, "
              f"{time.perf_counter() - start:.1f} s to write or find)")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSUITE_RUNS": str(work / "cli-runs"),
               "EVALSUITE_REPORTS": str(work / "cli-reports")}
        for label, extra in (("exact_match (binary)", []), ("f1 (continuous)", ["--metric", f"{TASK}=f1"])):
            wall, cpu, code = timed_cli(["compare", str(base), str(var), "--run-id", f"r{len(extra)}", *extra], env)
            print(f"evalsuite compare, {label}: {wall:.2f} s wall, {cpu:.2f} s CPU (fresh process, exit {code})")
        wall, cpu, code = timed_cli(["gate", str(work / "cli-runs" / "r0")], env)
        print(f"evalsuite gate of that run (re-gate + report, no logs read): {wall:.2f} s wall, {cpu:.2f} s CPU")
        for label, metric in (("exact_match", {}), ("f1", {TASK: "f1"})):
            parts = stages(base, var, work, metric)
            print(f"  in-process, {label} (wall / CPU): " + ", ".join(f"{k} {w:.2f} / {c:.2f} s"
                                                                     for k, (w, c) in parts.items()))
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
