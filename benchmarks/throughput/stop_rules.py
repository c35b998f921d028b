"""Tokens per sample and seconds per pair before and after issue 66's generation changes, side by side on the
embedded model: the same samples, the baseline and a variant generating in process, the two settings alternating.

* json: without its stop rule (before) and with it (``json:lenient``: a row ends once a parsable ```json block
  has closed, ``tasks.json_parse``); the scores must be the same pair by pair, and the script checks they are;
* code: `make gate`'s population before (``code.source=both``: the stream takes built-in problems and HumanEval
  in turn) and after (``builtin``), the stream's first ``n`` problems of each (different problems, by design);
* reasoning: `make gate`'s population before (one- and two-step problems) and after (one-step: the embedded
  baseline solves almost no two-step problem), the stream's first ``n`` of each; no rule (its last "Answer:" line
  counts, so nothing is fixed before the end);
* needle: no rule (a value may still appear, a distractor may still be completed), generated once for the record.

Seconds per pair: the baseline's and the variant's seconds generating and scoring the task's samples, per sample
(the fastest round; verification excluded: `make gate` verifies greedy variants, so its variant side costs less).

    .venv/bin/python -m benchmarks.throughput.stop_rules --n 16 --dtype float32 --rounds 2
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from evalsuite.cpu.threads import choose_wait_policy

choose_wait_policy()  # as the command line does, before torch loads (the CPUs are usually shared here)

from evalsuite.core.config import RunConfig  # noqa: E402
from evalsuite.backends.inprocess.inprocess import InProcessBackend  # noqa: E402
from evalsuite.models.loader import ModelFactory  # noqa: E402
from evalsuite.run.prepare import PreparedTask, prepare_tasks  # noqa: E402
from evalsuite.tasks.registry import default_registry  # noqa: E402

#: task -> (label, task parameters, stop rules applied) of the settings compared
SETTINGS = {"json": [("before: no rule", {}, False), ("after: json:lenient", {}, True)],
            "code": [("before: source=both", {"source": "both"}, True), ("after: source=builtin", {}, True)],
            "reasoning": [("before: steps=[1, 2]", {}, True), ("after: steps=[1]", {"steps": [1]}, True)],
            "needle": [("no rule", {}, True)]}


def prepared(backend: InProcessBackend, task: str, params: dict[str, Any], rules: bool, n: int) -> PreparedTask:
    """The stream's first ``n`` samples of ``task`` (as a sequential run's first look draws them)."""
    config = RunConfig(tasks=[task], task_params={task: params}, max_samples=n, round_size=n)
    context = dataclasses.replace(backend.task_context(), stop_rules=rules)
    return prepare_tasks(config, default_registry(plugins=False), context)[0]


def timed(backend: InProcessBackend, spec: Any, task: PreparedTask, batch: int) -> tuple[float, list[Any]]:
    """(seconds, scored samples) of one side generating every sample of ``task``."""
    start = time.perf_counter()
    rows = [r for group in backend.generate(spec, spec.name, task, range(len(task.samples)), batch) for r in group]
    return time.perf_counter() - start, sorted(rows, key=lambda r: r.sample_id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--variant", default="w4g64")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="repetitions of the compared settings, alternating")
    ap.add_argument("--tasks", default="json,code,reasoning,needle")
    args = ap.parse_args()
    loaded = ModelFactory("default", args.dtype, "cpu")()
    probe = InProcessBackend.of(loaded, stop_rules=True)
    specs = probe.variants(["bf16", args.variant])
    print(f"embedded model, dtype {args.dtype}, n={args.n}, batch {args.batch}, variant {args.variant}")
    print(f"{'task':<10} {'setting':<24} {'tok/sample base':>15} {'tok/sample var':>14} {'s/pair':>7} "
          f"{'rule stops':>10} {'score':>6}")
    for name in args.tasks.split(","):
        # a backend per setting: a backend keeps a task's rendered prompts by its name
        backends = {label: InProcessBackend.of(loaded, snapshot_bytes=0, stop_rules=True)
                    for label, *_ in SETTINGS[name]}
        tasks = [(label, prepared(probe, name, params, rules, args.n)) for label, params, rules in SETTINGS[name]]
        for backend in backends.values():
            for spec in specs:
                backend.built(spec)  # built before the clock starts
        seconds: dict[str, list[float]] = {label: [] for label, _ in tasks}
        rows: dict[str, list[list[Any]]] = {}
        for r in range(args.rounds if len(tasks) > 1 else 1):
            for label, task in (tasks if r % 2 == 0 else tasks[::-1]):
                took = [timed(backends[label], spec, task, args.batch) for spec in specs]
                seconds[label].append(sum(s for s, _ in took) / len(task.samples))
                rows[label] = [got for _, got in took]
        for label, _ in tasks:
            base, var = rows[label]
            stops = sum(x.stop == "rule" for x in base + var)
            print(f"{name:<10} {label:<24} {sum(x.n_tokens for x in base) / len(base):>15.1f} "
                  f"{sum(x.n_tokens for x in var) / len(var):>14.1f} {min(seconds[label]):>7.2f} "
                  f"{stops:>10} {sum(x.score for x in base) / len(base):>6.3f}")
        if name == "json":  # the rule cuts answers short and changes no score: sample by sample, both sides
            before, after = (rows[label][0] + rows[label][1] for label, _ in tasks)
            changed = [(a.sample_id, a.score, b.score) for a, b in zip(before, after) if a.score != b.score]
            cut = sum(a.output != b.output and a.output.startswith(b.output) for a, b in zip(before, after))
            print(f"json: {cut} of {len(before)} answers cut short; scores changed: {changed or 'none'}")


if __name__ == "__main__":
    main()
