"""Wall time of evalsuite's whole gate vs lm-eval HFLM doing the same comparison, on the same samples, in one run.

Sides (issue 22, item 6):

* **evalsuite**: ``evalsuite run`` as a fresh process, cold (a new run folder, no stored baseline: the baselines
  folder points at an empty path), baseline + variants with generation, teacher-forced KLD, speed probes, the gate
  and the report; ``--verify on`` is passed when ``evalsuite run --help`` lists ``--verify``. ``--verify-off`` also
  times a ``--verify off`` run (a third side) and compares its answers with the verified ones.
* **lm-eval**: ``simple_evaluate`` with HFLM at ``--lm-eval-batch`` (16), one ``generate_until`` run per model over
  every task, no KLD. Each evalsuite task is exported as a local lm-eval task (``benchmarks/throughput/throughput.py``'s
  lm-eval side): prompts rendered as evalsuite renders them, the same ``max_new_tokens`` and stop strings. The
  variants are evalsuite's own builds (same weights and kernels); a KV variant's HFLM gets a fresh evalsuite cache
  per ``generate`` call. Its wall time counts loading the model, building each variant and generating.

Both sides compute in the same dtype (the lm-eval side takes the dtype the evalsuite run recorded). From the
evalsuite store it prints, per variant and task, the share of samples stored with ``decode = "verified"`` (no
decoding needed), ``diverged@t``, ``regenerated`` and ``generated``; stores without that field say so. With
``--verify-off`` it prints, per variant and decode path, how often the verify-on answer is identical to the
``--verify off`` one, and always how often evalsuite's and lm-eval's answers are identical (in bf16 they differ
by rounding: evalsuite prefills a task's shared prompt prefix once, HFLM whole rows). Both sides run under one
OpenMP wait policy (``same_wait_policy``: evalsuite's choice for the machine's load when the benchmark starts).

    .venv/bin/python -m benchmarks.throughput.gate_time --tasks reasoning --n 4
    .venv/bin/python -m benchmarks.throughput.gate_time --n 32 --verify-off --keep runs-gate-time
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = "bf16,w4g64,kv4g32,w4g64+kv4g32"
TASKS = "json,reasoning,needle"


def evalsuite_cmd() -> list[str]:
    """The ``evalsuite`` entry point of this interpreter's environment (falls back to ``python -m``)."""
    exe = Path(sys.executable).with_name("evalsuite")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from evalsuite.cli import main; main()"]


def has_verify_flag() -> bool:
    """Whether this evalsuite's ``run`` takes ``--verify on|off`` (issue 22, items 1-5)."""
    out = subprocess.run([*evalsuite_cmd(), "run", "--help"], capture_output=True, text=True, check=False)
    return re.search(r"--verify(?![-\w])", out.stdout) is not None


def run_evalsuite(args: argparse.Namespace, work: Path, run_id: str, verify: str | None) -> tuple[float, Path]:
    """Time one cold ``evalsuite run``; returns (seconds, run folder). Exit 0/1 (gate verdicts) are fine."""
    cmd = [*evalsuite_cmd(), "run", "--model", args.model, "--dtype", args.dtype, "--variants", args.variants,
           "--tasks", args.tasks, "--limit", str(args.n), "--seed", str(args.seed), "--batch-size",
           str(args.batch_size), "--weight-kernels", args.weight_kernels, "--out", str(work / "runs"),
           "--run-id", run_id, "--quiet"]
    if verify is not None:
        cmd += ["--verify", verify]
    env = {**os.environ, "EVALSUITE_BASELINES": str(work / "no-baselines"),
           "EVALSUITE_REPORTS": str(work / "reports")}
    log = work / f"{run_id}.log"
    shutil.rmtree(work / "runs" / run_id, ignore_errors=True)  # cold, also when --keep names an old folder
    print(f"[evalsuite] {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False).returncode
    elapsed = time.perf_counter() - start
    if rc not in (0, 1):
        sys.exit(f"evalsuite run exited {rc}; log {log}:\n" + "\n".join(log.read_text().splitlines()[-30:]))
    print(f"[evalsuite] {run_id}: {elapsed:.1f} s (exit {rc}: gate verdicts)", flush=True)
    return elapsed, work / "runs" / run_id


def read_rows(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The store's meta and every sample row as a dict (JSON columns decoded; unknown columns kept)."""
    conn = sqlite3.connect(run_dir / "store.sqlite")
    try:
        meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        cur = conn.execute("SELECT * FROM samples")
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur]
    finally:
        conn.close()
    for row in rows:
        for col in ("metadata", "metrics"):
            if isinstance(row.get(col), str):
                row[col] = json.loads(row[col])
    return meta, rows


def decode_of(row: dict[str, Any]) -> str | None:
    """The row's decode path (``verified``, ``diverged@t``, ``regenerated``): a column, or a metadata/metrics key."""
    for value in (row.get("decode"), (row.get("metadata") or {}).get("decode"),
                  (row.get("metrics") or {}).get("decode")):
        if value:
            return str(value)
    return None


PATHS = ("verified", "diverged", "regenerated", "generated")  # known decode paths, in table order


def decode_table(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Per (variant, task): samples and the share stored under each decode path (``diverged@t`` counted as
    ``diverged``); the baseline, its noise-floor rerun and variants copied from it are left out."""
    baseline = meta.get("baseline", "bf16")
    copied = set(meta.get("same_as_baseline") or [])
    counts: dict[tuple[str, str], Counter] = {}
    for row in rows:
        if row["variant"] == baseline or row["variant"] in copied or "@" in row["variant"]:
            continue
        path = decode_of(row)
        counts.setdefault((row["variant"], row["task"]), Counter())["no field" if path is None
                                                                     else path.split("@")[0]] += 1
    if all(c["no field"] == sum(c.values()) for c in counts.values()):
        return ["decode paths: this store's rows have no `decode` field (evalsuite without verification): "
                "every variant answer was generated"]
    seen = {k for c in counts.values() for k in c}
    cols = [p for p in PATHS if p in seen or p != "generated"] + sorted(seen - set(PATHS))
    lines = ["| variant | task | n | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    totals: dict[str, Counter] = {}
    for (variant, task), c in sorted(counts.items()):
        totals.setdefault(variant, Counter()).update(c)
        lines.append(_decode_line(variant, task, c, cols))
    lines += [_decode_line(variant, "**all**", c, cols) for variant, c in sorted(totals.items())]
    return lines


def _decode_line(variant: str, task: str, c: Counter, cols: list[str]) -> str:
    n = sum(c.values())
    return f"| {variant} | {task} | {n} | " + " | ".join(f"{100 * c[k] / n:.0f}%" for k in cols) + " |"


def identical_table(on_rows: list[dict[str, Any]], off_rows: list[dict[str, Any]]) -> list[str]:
    """Identical-output rate of the verify-on answers (by decode path) against the same samples regenerated."""
    off = {(r["variant"], r["task"], r["sample_id"]): r["output"] for r in off_rows}
    counts: dict[tuple[str, str], list[int]] = {}
    for row in on_rows:
        key = (row["variant"], row["task"], row["sample_id"])
        path = decode_of(row)
        if key not in off or path is None:
            continue
        same = counts.setdefault((row["variant"], path.split("@")[0]), [0, 0])
        same[0] += row["output"] == off[key]
        same[1] += 1
    if not counts:
        return ["identical outputs: no verify-on rows with a `decode` field to compare"]
    lines = ["| variant | decode path (verify on) | n | identical to --verify off |", "|---|---|---|---|"]
    lines += [f"| {v} | {p} | {n} | {s}/{n} ({100 * s / n:.1f}%) |" for (v, p), (s, n) in sorted(counts.items())]
    return lines


def export_all(args: argparse.Namespace, tokenizer: Any, folder: Path) -> tuple[list[str], dict[str, Any]]:
    """Export every task (same samples as ``evalsuite run --limit n --seed s``); lm-eval names and gen settings."""
    from evalsuite.lmeval.export import export_task
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    config = RunConfig(tasks=args.tasks.split(","), seed=args.seed, limit=args.n)
    names, gens = [], {}
    for task in prepare_tasks(config, default_registry()):
        names.append(export_task(task, tokenizer, folder, args.seed).task_name)
        gens[task.name] = task.gen.to_dict()
    return names, gens


def run_lm_eval_side(args: argparse.Namespace, work: Path, dtype: str | None
                     ) -> tuple[float, float, dict[str, dict[str, dict[str, str]]], dict[str, Any]]:
    """Load, build and generate every model with lm-eval HFLM: (total s, generate_until s, outputs by variant and
    evalsuite task, the exported tasks' generation settings)."""
    import torch

    from evalsuite.models import load_model, offline
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    from benchmarks.throughput.throughput import lm_eval_generate

    offline()
    start = time.perf_counter()
    base = load_model(args.model, args.dtype)
    if dtype and dtype != base.dtype:  # compute in the dtype the evalsuite run recorded (exact: bf16-valued weights)
        base.model.to(getattr(torch, dtype))
        base.dtype = dtype
    folder = work / "lm-eval-tasks"
    names, gens = export_all(args, base.tokenizer, folder)
    generate_s, outputs = 0.0, {}
    for item in args.variants.split(","):
        spec = parse_variant(item)
        built = None if spec.name == "bf16" else build_variant(base, spec, kernels=args.weight_kernels)
        model = base.model if built is None else built.model
        secs, outs = lm_eval_generate(model, base.tokenizer, folder, names, args.lm_eval_batch,
                                      None if built is None else built.make_cache, keep_outputs=True)
        generate_s += secs
        outputs[spec.name] = {task: outs.get(lm, {}) for task, lm in zip(gens, names)}
        print(f"[lm-eval] {spec.name}: generate_until {secs:.1f} s", flush=True)
        del built, model
    total = time.perf_counter() - start
    print(f"[lm-eval] {base.dtype}: {total:.1f} s in all", flush=True)
    (work / "lm-eval-outputs.json").write_text(json.dumps(outputs, indent=1))
    return total, generate_s, outputs, gens


def fairness_lines(meta: dict[str, Any], rows: list[dict[str, Any]], gens: dict[str, Any],
                   lm_outputs: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    """Same max_new_tokens / stop strings on both sides, and how often their answers are identical."""
    lines = []
    for task, gen in gens.items():
        stored = (meta.get("gen_settings") or {}).get(task, {})
        same = all(stored.get(k) == gen.get(k) for k in ("max_new_tokens", "stop", "temperature"))
        lines.append(f"- {task}: max_new_tokens {gen.get('max_new_tokens')}, stop {gen.get('stop')}: "
                     f"{'same on both sides' if same else f'DIFFERENT (evalsuite stored {stored})'}")
    for variant, by_task in lm_outputs.items():
        pairs = [(r["task"], r["sample_id"], r["output"].strip(), by_task[r["task"]][r["sample_id"]].strip())
                 for r in rows
                 if r["variant"] == variant and r["sample_id"] in by_task.get(r["task"], {})]
        differ = [f"{task}/{sid}" for task, sid, a, b in pairs if a != b]
        lines.append(f"- {variant}: evalsuite and lm-eval answers identical on {len(pairs) - len(differ)}/"
                     f"{len(pairs)}" + (f" (differ: {', '.join(differ[:4])})" if differ else ""))
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=TASKS, help=f"comma-separated tasks [{TASKS}]")
    ap.add_argument("--n", type=int, default=16, help="samples per task (evalsuite run --limit N)")
    ap.add_argument("--variants", default=VARIANTS, help=f"baseline first [{VARIANTS}]")
    ap.add_argument("--model", default="default")
    ap.add_argument("--dtype", default="auto", help="auto, bfloat16 or float32 (both sides compute in the same)")
    ap.add_argument("--batch-size", type=int, default=16, help="evalsuite's --batch-size")
    ap.add_argument("--lm-eval-batch", type=int, default=16, help="HFLM batch size")
    ap.add_argument("--weight-kernels", default="dequantized", choices=["dequantized", "quanto"],
                    help="how both sides run quantized weights (evalsuite's default: dequantized)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--verify-off", action="store_true", help="also time `evalsuite run --verify off`")
    ap.add_argument("--keep", type=Path, help="keep run folders, logs and exported tasks here")
    return ap.parse_args(argv)


def report(args: argparse.Namespace, times: dict[str, float], lm: tuple[float, float], lines: list[str]) -> None:
    """Print the wall-time table, the ratio and the collected sections."""
    first = next(iter(times.values()))
    print(f"\n## gate_time: {args.n} samples per task of {args.tasks}; {args.variants}; "
          f"evalsuite batch {args.batch_size}, lm-eval batch {args.lm_eval_batch}\n")
    print("| side | wall s | lm-eval / side |\n|---|---|---|")
    for label, secs in times.items():
        print(f"| {label} | {secs:.1f} | {lm[0] / secs:.2f}x |")
    print(f"| lm-eval HFLM (load + build + generate_until) | {lm[0]:.1f} | 1.00x |")
    print(f"| (of which generate_until) | {lm[1]:.1f} | |")
    print(f"\nratio lm-eval / evalsuite: {lm[0] / first:.2f}x "
          f"({'evalsuite faster' if lm[0] > first else 'lm-eval faster'})")
    print("\n" + "\n".join(lines))


def same_wait_policy() -> str:
    """One OpenMP wait policy for both sides (``evalsuite.cpu.threads``): decided here, before either side runs, and
    pinned in the environment the evalsuite subprocess inherits and this process's torch reads on import."""
    import evalsuite  # noqa: F401  (importing it decides, from the machine's load now)

    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "300000")  # libgomp's default spin, made explicit
    return os.environ.get("OMP_WAIT_POLICY") or f"spin (GOMP_SPINCOUNT={os.environ['GOMP_SPINCOUNT']})"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    policy = same_wait_policy()
    verify = has_verify_flag()
    if not verify:
        print("note: `evalsuite run --help` lists no --verify: timing its default (the decode table shows whether "
              "variants were verified or generated)")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        times, stores = {}, {}
        label = "evalsuite run --verify on" if verify else "evalsuite run"
        times[label], stores["on"] = run_evalsuite(args, work, "verify-on", "on" if verify else None)
        if args.verify_off and verify:
            times["evalsuite run --verify off"], stores["off"] = run_evalsuite(args, work, "verify-off", "off")
        elif args.verify_off:
            print("note: --verify-off skipped: nothing to compare without verification")
        meta, rows = read_rows(stores["on"])
        lm_total, lm_gen, lm_outputs, gens = run_lm_eval_side(args, work, meta.get("dtype"))
        lines = [f"dtype {meta.get('dtype')} on both sides; OpenMP wait policy {policy} on both sides", "",
                 "### decode paths (evalsuite store)", "", *decode_table(meta, rows)]
        if "off" in stores:
            lines += ["", "### verified vs regenerated", "", *identical_table(rows, read_rows(stores["off"])[1])]
        lines += ["", "### fairness", "", *fairness_lines(meta, rows, gens, lm_outputs)]
        report(args, times, (lm_total, lm_gen), lines)


if __name__ == "__main__":
    main()
