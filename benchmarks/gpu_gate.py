"""Gate the embedded model end to end on a GPU, with both engines, a needle at 16k tokens, and the CUDA tests.

Steps (each with its own timeout, so the whole script stays within ``BUDGET_S``):

1. **model**: the embedded SmolLM2-135M converted to an HF folder (``evalsuite.models.embedded``), then a
   long-context copy: its window is 8192 tokens, so the copy's ``config.json`` sets YaRN RoPE scaling (factor 2 over
   the original 8192 positions) and ``max_position_embeddings`` 16384, and its tokenizer's ``model_max_length``
   16384. The weights are the same file (linked). Both engines read the override (transformers' and vLLM's YaRN).
   Whether this 135M model still finds a needle at 16k this way has not been measured: the gate compares each
   variant with the baseline on the same prompts, so the pairs are valid either way, but a baseline that misses
   most 16k needles leaves few pairs that can flip.
2. **in-process**: ``evalsuite run --device cuda`` on the copy: ``w4g64`` and ``kv4g32`` against bf16 on
   reasoning and a needle at 2,048 and 16,000 tokens.
3. **vllm**: ``evalsuite run --engine vllm`` on the copy: vLLM's FP8 KV cache (``vkvf8``) against vLLM bf16 on
   the same tasks (servers eager, ``--enforce-eager``, to keep start-up short). Skipped, with the reason, when no
   Python with vLLM is found (``--vllm-python``, ``$EVALSUITE_VLLM_PYTHON``, this Python, ``./.venv-vllm``).
4. **cuda-tests**: pytest on the tests with CUDA branches (``benchmarks/cuda_tests.txt``).

Last, a table: each step's verdicts, wall time and peak GPU memory (``nvidia-smi``, sampled every 0.5 s, over what
was used before the step; on the CPU the peak resident memory of the step's processes). ``--tiny``: the CPU, a few
samples, short needles, in-process only unless ``--vllm-python`` is given; the CUDA tests are skipped.

    python benchmarks/gpu_gate.py                   # on a CUDA machine (benchmarks/gpu_gate.sh sets it up)
    python benchmarks/gpu_gate.py --tiny --no-vllm  # the CPU check the tests run
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 450  #: the steps' timeouts together (7.5 min; the wheel install and start-up fit in the 8 minutes)
LONG_WINDOW = 16384
NEEDLE = {"gpu": "[2048,16000]", "tiny": "[256]"}


@dataclass
class Step:
    """One step's outcome: status (ok / failed / skipped / timeout), verdicts, seconds and peak memory."""

    name: str
    status: str = "skipped"
    detail: str = ""
    verdicts: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    peak_mib: float | None = None


class GpuMemory:
    """Peak GPU memory used (MiB, all GPUs) while a step runs, over the use before it, from ``nvidia-smi``."""

    def __init__(self) -> None:
        self.base = self._used()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @staticmethod
    def _used() -> float | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        values = [float(v) for v in out.stdout.split() if v.replace(".", "", 1).isdigit()]
        return sum(values) if out.returncode == 0 and values else None

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            used = self._used()
            if used is not None and (self.peak is None or used > self.peak):
                self.peak = used

    def __enter__(self) -> "GpuMemory":
        if self.base is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def increase(self) -> float | None:
        return None if self.base is None or self.peak is None else self.peak - self.base


def run_step(step: Step, cmd: list[str], timeout_s: float, env: dict[str, str], ok_codes: tuple[int, ...]) -> None:
    """Run ``cmd`` (its output streamed), timing it and sampling memory; exit codes in ``ok_codes`` are ok."""
    print(f"\n== {step.name}: {' '.join(cmd)}", flush=True)
    rss_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.monotonic()
    with GpuMemory() as mem:
        try:
            code = subprocess.run(cmd, env=env, timeout=timeout_s).returncode
            step.status = "ok" if code in ok_codes else "failed"
            step.detail = f"exit {code}"
        except subprocess.TimeoutExpired:
            step.status, step.detail = "timeout", f"over {timeout_s:.0f} s"
    step.seconds = time.monotonic() - t0
    step.peak_mib = mem.increase()
    if step.peak_mib is None:  # no GPU: the peak resident memory of the step's processes (Linux: KiB)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        step.peak_mib = rss / 1024 if rss > rss_before else None


def long_context_copy(source: Path, target: Path) -> Path:
    """``source``'s model with a 16k window: YaRN RoPE scaling (factor 2 over 8192) in ``config.json``, the
    tokenizer's ``model_max_length`` raised; every other file linked."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for f in source.iterdir():
        if f.name not in ("config.json", "tokenizer_config.json") and not f.name.startswith("."):
            (target / f.name).symlink_to(f.resolve())
    cfg = json.loads((source / "config.json").read_text())
    original = int(cfg.get("max_position_embeddings") or 8192)
    rope = dict(cfg.get("rope_parameters") or {"rope_theta": cfg.get("rope_theta", 10000.0)})
    rope.update(rope_type="yarn", factor=LONG_WINDOW / original, original_max_position_embeddings=original)
    cfg.update(rope_parameters=rope, max_position_embeddings=LONG_WINDOW)
    cfg.pop("rope_scaling", None)
    (target / "config.json").write_text(json.dumps(cfg, indent=1))
    tok_path = source / "tokenizer_config.json"
    tok = json.loads(tok_path.read_text()) if tok_path.exists() else {}
    tok["model_max_length"] = LONG_WINDOW
    (target / "tokenizer_config.json").write_text(json.dumps(tok, indent=1))
    return target


def verdicts(run_dir: Path) -> dict[str, str]:
    """The stored run's verdict per variant (the default policy), or {} when it holds none."""
    from evalsuite.core.store import Store
    from evalsuite.gate.store_gate import gate_store

    if not (run_dir / Store.FILENAME).exists():
        return {}
    store = Store.open(run_dir)
    try:
        return dict(gate_store(store, None).gate.variant_verdicts)
    finally:
        store.close()


def gate_cmd(model: Path, out: Path, run_id: str, tiny: bool, device: str, extra: list[str]) -> list[str]:
    """``evalsuite run`` on reasoning and a needle (2k and 16k tokens; 256 with ``--tiny``)."""
    limit = "4" if tiny else "16"
    return [sys.executable, "-m", "evalsuite", "run", "--model", str(model), "--device", device,
            "--tasks", "reasoning,needle", "--limit", limit, "--param", "needle.kinds=[single]",
            "--param", f"needle.context_lens={NEEDLE['tiny' if tiny else 'gpu']}",
            "--param", "needle.depths=[0.5]" if tiny else "needle.depths=[0.1,0.5,0.9]",
            "--out", str(out), "--run-id", run_id, "--quiet", *extra]


def find_vllm(explicit: str | None) -> tuple[str | None, str]:
    """(vLLM's Python or None, why not) in evalsuite's own order."""
    from evalsuite.errors import EvalsuiteError
    from evalsuite.served.vllm.server import vllm_python

    try:
        return vllm_python(explicit), ""
    except EvalsuiteError as exc:
        return None, str(exc)


def summary(steps: list[Step]) -> str:
    rows = ["| step | status | verdicts | wall s | peak memory (MiB) |", "|---|---|---|---|---|"]
    for s in steps:
        v = ", ".join(f"{k} {x}" for k, x in s.verdicts.items()) or "—"
        peak = f"{s.peak_mib:,.0f}" if s.peak_mib is not None else "—"
        rows.append(f"| {s.name} | {s.status}{f' ({s.detail})' if s.detail else ''} | {v} | {s.seconds:.1f} | "
                    f"{peak} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the CPU, a few samples, short needles")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM step")
    ap.add_argument("--vllm-python", help="Python with vLLM (else evalsuite's order)")
    ap.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    args = ap.parse_args(argv)
    import torch

    from evalsuite.models.embedded import converted_folder, embedded_gguf

    cuda = torch.cuda.is_available() and not args.tiny
    device = "cuda" if cuda else "cpu"
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-gate-"))
    env = {**os.environ, "EVALSUITE_HOME": str(work), "PYTHONUNBUFFERED": "1"}
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device {device}"
          f"{' (' + torch.cuda.get_device_name(0) + ')' if cuda else ''}, work {work}", flush=True)
    steps = [Step("model"), Step("in-process"), Step("vllm"), Step("cuda-tests")]
    t0 = time.monotonic()
    model = long_context_copy(converted_folder(embedded_gguf()), work / "model-16k")
    steps[0].status, steps[0].seconds, steps[0].detail = "ok", time.monotonic() - t0, f"window {LONG_WINDOW}"
    variants = ["--variants", "kv8" if args.tiny else "w4g64,kv4g32"]
    run_step(steps[1], gate_cmd(model, work / "runs", "inprocess", args.tiny, device, variants), 90, env, (0, 1))
    steps[1].verdicts = verdicts(work / "runs" / "inprocess")
    python, why = (None, "--no-vllm") if args.no_vllm else find_vllm(args.vllm_python)
    if python is None:
        steps[2].detail = why[:120]
    else:
        extra = ["--engine", "vllm", "--vllm-python", python, "--variants", "vkvf8", "--vllm-arg=--enforce-eager"]
        run_step(steps[2], gate_cmd(model, work / "runs", "vllm", args.tiny, device, extra), 210, env, (0, 1))
        steps[2].verdicts = verdicts(work / "runs" / "vllm")
    missing = subprocess.run([sys.executable, "-c", "import pytest, lm_eval"], capture_output=True, env=env)
    if not cuda:
        steps[3].detail = "no CUDA device"
    elif missing.returncode != 0:
        steps[3].detail = "the CUDA tests need pytest and lm_eval"
    else:
        tests = (ROOT / "benchmarks" / "cuda_tests.txt").read_text().split()
        run_step(steps[3], [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                            *[str(ROOT / t) for t in tests]], 90, env, (0,))
    table = summary(steps)
    print("\n" + table, flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_gate.md").write_text(table + "\n")
    return 1 if any(s.status in ("failed", "timeout") for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
