"""The GPU check's steps (``benchmarks/gpu/gpu_gate.py`` says what each checks): running one, timing it, sampling its
memory, and the table. Each step returns a ``Step`` whose status is ``ok`` only when it ran and passed."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LONG_WINDOW = 16384
NEEDLE = {"gpu": "[2048,16000]", "tiny": "[256]"}
IMPORTS = ("torch", "transformers", "accelerate", "optimum.quanto", "gguf", "jsonschema", "evalsuite.cli.run_cmd")


@dataclass
class Step:
    """One step's outcome: status (ok / failed / skipped / timeout), verdicts, seconds and peak memory; ``required``:
    whether it counts towards the exit status."""

    name: str
    status: str = "skipped"
    detail: str = ""
    verdicts: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    peak_mib: float | None = None
    required: bool = True


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


def run_step(step: Step, cmd: list[str], timeout_s: float, env: dict[str, str], ok_codes: tuple[int, ...],
             capture: bool = False) -> str:
    """Run ``cmd`` (streamed, or ``capture``d and returned), timing it and sampling memory; exit codes in
    ``ok_codes`` are ok."""
    print(f"\n== {step.name}: {' '.join(cmd)}", flush=True)
    rss_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0, text = time.monotonic(), ""
    with GpuMemory() as mem:
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout_s, capture_output=capture, text=True, cwd=ROOT)
            text = (proc.stdout or "") + (proc.stderr or "")
            step.status = "ok" if proc.returncode in ok_codes else "failed"
            step.detail = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            step.status, step.detail = "timeout", f"over {timeout_s:.0f} s"
    step.seconds = time.monotonic() - t0
    step.peak_mib = mem.increase()
    if step.peak_mib is None:  # no GPU: the peak resident memory of the step's processes (Linux: KiB)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        step.peak_mib = rss / 1024 if rss > rss_before else None
    if capture:
        print(text[-3000:], flush=True)
    return text


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
    from evalsuite.store.sqlite import Store
    from evalsuite.gate.store_gate import gate_store

    if not (run_dir / Store.FILENAME).exists():
        return {}
    store = Store.open(run_dir)
    try:
        return dict(gate_store(store, None).gate.variant_verdicts)
    finally:
        store.close()


def gate_cmd(model: Path, out: Path, run_id: str, tiny: bool, device: str, extra: list[str]) -> list[str]:
    """``evalsuite run`` on reasoning, json and a needle (2k and 16k tokens; reasoning and 256 with ``tiny``)."""
    return [sys.executable, "-m", "evalsuite", "run", "--model", str(model), "--device", device,
            "--tasks", "reasoning,needle" if tiny else "reasoning,json,needle", "--limit", "4" if tiny else "16",
            "--param", "needle.kinds=[single]", "--param", f"needle.context_lens={NEEDLE['tiny' if tiny else 'gpu']}",
            "--param", "needle.depths=[0.5]" if tiny else "needle.depths=[0.1,0.5,0.9]",
            "--out", str(out), "--run-id", run_id, "--quiet", *extra]


def cuda_tests() -> list[str]:
    """The test files of ``benchmarks/gpu/cuda_tests.txt`` (``#`` starts a comment)."""
    lines = (ROOT / "benchmarks" / "gpu" / "cuda_tests.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def junit_outcome(path: Path) -> tuple[str, str]:
    """(status, detail) of a pytest run from its JUnit XML: failed when a test failed or errored, none ran, or a
    test was skipped for want of CUDA (on the CUDA machine it was meant for)."""
    if not path.exists():
        return "failed", "no test report"
    cases = ET.parse(path).getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    cuda_skips = []
    for case in cases:
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
        elif "skipped" in kinds:
            counts["skipped"] += 1
            reason = next(c for c in case if c.tag == "skipped").get("message", "")
            if "needs CUDA" in reason:
                cuda_skips.append(case.get("name", "?"))
        else:
            counts["passed"] += 1
    detail = ", ".join(f"{n} {k}" for k, n in counts.items())
    if counts["failed"] or not counts["passed"] or cuda_skips:
        why = f"; skipped for want of CUDA: {cuda_skips[0]}" if cuda_skips else ""
        return "failed", detail + why
    return "ok", detail


def summary(steps: list[Step]) -> str:
    rows = ["| step | status | verdicts | wall s | peak memory (MiB) |", "|---|---|---|---|---|"]
    for s in steps:
        v = ", ".join(f"{k} {x}" for k, x in s.verdicts.items()) or "—"
        peak = f"{s.peak_mib:,.0f}" if s.peak_mib is not None else "—"
        status = s.status + (f" ({s.detail})" if s.detail else "") + ("" if s.required else " [not required]")
        rows.append(f"| {s.name} | {status} | {v} | {s.seconds:.1f} | {peak} |")
    return "\n".join(rows)


class Check:
    """The steps over one working folder: ``run(name)`` runs one (later steps use what earlier ones made)."""

    def __init__(self, args: Any, work: Path, gguf: Path | None, timeouts: dict[str, int]) -> None:
        import torch

        self.args, self.work, self.gguf, self.timeouts = args, work, gguf, timeouts
        self.cuda = torch.cuda.is_available() and not args.tiny
        self.device = "cuda" if self.cuda else "cpu"
        self.model: Path | None = None
        self.env = {**os.environ, "EVALSUITE_HOME": str(work), "EVALSUITE_CACHE": str(work / "cache"),
                    "PYTHONUNBUFFERED": "1"}
        self.baselines = work / "baselines"
        print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device {self.device}"
              f"{' (' + torch.cuda.get_device_name(0) + ')' if self.cuda else ''}, work {work}", flush=True)

    def run(self, name: str) -> Step:
        step = Step(name)
        t0 = time.monotonic()
        try:
            getattr(self, "step_" + name.replace("-", "_"))(step)
        except Exception as exc:  # noqa: BLE001 - the step broke: failed, and the check goes on to the table
            step.status, step.detail = "failed", f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        step.seconds = step.seconds or time.monotonic() - t0
        print(f"== {name}: {step.status} {step.detail}", flush=True)
        return step

    def step_env(self, step: Step) -> None:
        code = "import importlib, torch; [importlib.import_module(m) for m in %r]; " \
               "print(torch.__version__, torch.version.cuda, torch.cuda.is_available())" % (IMPORTS,)
        text = run_step(step, [sys.executable, "-c", code], self.timeouts["env"], self.env, (0,), capture=True)
        if step.status == "ok" and not self.cuda and not self.args.tiny:
            step.status, step.detail = "failed", "no CUDA device"
        elif step.status == "failed":
            step.detail = (text.strip().splitlines() or ["?"])[-1][:160]

    def step_model(self, step: Step) -> None:
        from evalsuite.models.embedded import converted_folder, embedded_gguf

        os.environ["EVALSUITE_CACHE"] = self.env["EVALSUITE_CACHE"]
        try:
            source = self.gguf or embedded_gguf()
            self.env["EVALSUITE_TEST_GGUF"] = str(source)  # the tests' tokenizer: the same as the embedded one
            self.model = long_context_copy(converted_folder(source), self.work / "model-16k")
        except Exception as exc:  # noqa: BLE001 - no model: the step did not run
            step.status, step.detail = "failed", f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            return
        step.status, step.detail = "ok", f"{source.name}, window {LONG_WINDOW}"

    def _need(self, step: Step, cuda: bool = False) -> bool:
        """Whether the step can run (a model; a GPU when ``cuda``); else it is marked skipped with the reason."""
        if self.model is None:
            step.detail = "no model (the model step did not run or failed)"
        elif cuda and not self.cuda:
            step.detail = "no CUDA device"
        return not step.detail

    def step_refusal(self, step: Step) -> None:
        if not self._need(step, cuda=True):
            return
        cmd = gate_cmd(self.model, self.work / "runs", "refusal", False, "cuda",
                       ["--variants", "w4g64", "--weight-kernels", "quanto"])
        text = run_step(step, cmd, self.timeouts["refusal"], self.env, (2,), capture=True)
        lines = [x for x in text.strip().splitlines() if x.strip()]
        if step.status == "ok" and not (lines and "quanto_cuda" in lines[-1]):
            step.status, step.detail = "failed", "exit 2 without the one-line refusal"
        if (self.work / "runs" / "refusal").exists():
            step.status, step.detail = "failed", "a run folder was written"

    def step_in_process(self, step: Step) -> None:
        if not self._need(step):
            return
        variants = "kv4g32" if self.args.tiny else "w4g64,kv4g32"
        cmd = gate_cmd(self.model, self.work / "runs", "inprocess", self.args.tiny, self.device,
                       ["--variants", variants, "--store-baseline", str(self.baselines)])
        run_step(step, cmd, self.timeouts["in-process"], self.env, (0, 1))
        step.verdicts = verdicts(self.work / "runs" / "inprocess")

    def step_spill(self, step: Step) -> None:
        if not self._need(step):
            return
        stored = list(self.baselines.glob("*/prompt_kv/*/*.safetensors"))
        if not stored:
            step.detail = "no stored prompt K/V (the in-process step did not store its baseline)"
            return
        cmd = gate_cmd(self.model, self.work / "runs", "spill", self.args.tiny, self.device,
                       ["--variants", "kv8", "--store-baseline", str(self.baselines)])
        run_step(step, cmd, self.timeouts["spill"], self.env, (0, 1))
        step.verdicts = verdicts(self.work / "runs" / "spill")
        step.detail += f", {len(stored)} prompt K/V files stored"

    def step_cuda_tests(self, step: Step) -> None:
        if not self._need(step, cuda=True):
            return
        report = self.work / "cuda-tests.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               f"--junitxml={report}", *[str(ROOT / t) for t in cuda_tests()]]
        run_step(step, cmd, self.timeouts["cuda-tests"], self.env, (0,))
        if step.status != "timeout":
            step.status, step.detail = junit_outcome(report)

    def step_decode(self, step: Step) -> None:
        size = ["--tiny", "--device", "cpu"] if self.args.tiny else ["--device", "cuda", "--contexts", "4096,16384"]
        if not self.cuda and not self.args.tiny:
            step.detail = "no CUDA device"
            return
        run_step(step, [sys.executable, str(ROOT / "benchmarks" / "gpu" / "gpu_decode.py"), *size],
                 self.timeouts["decode"], self.env, (0,))

    def step_vllm(self, step: Step) -> None:
        from evalsuite.errors import EvalsuiteError
        from evalsuite.backends.served.vllm.server import vllm_python

        try:
            python = vllm_python(self.args.vllm_python)
        except EvalsuiteError as exc:
            step.detail = str(exc)[:120]
            return
        if not self._need(step):
            return
        extra = ["--engine", "vllm", "--vllm-python", python, "--variants", "vkvf8", "--vllm-arg=--enforce-eager"]
        run_step(step, gate_cmd(self.model, self.work / "runs", "vllm", self.args.tiny, self.device, extra),
                 self.timeouts["vllm"], self.env, (0, 1))
        step.verdicts = verdicts(self.work / "runs" / "vllm")
