"""Starting and stopping vLLM OpenAI servers that evalsuite owns (``--engine vllm``).

Each server is ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL`` on a free loopback port, in its own
process group, its output in a log file. ``start`` waits for ``/health`` with a timeout; a server that exits or never
gets healthy is a one-line EvalsuiteError carrying its log's root cause (``failure_line``). Every started server is
stopped (SIGTERM to its process group, then SIGKILL) by ``stop``, at interpreter exit, and on SIGTERM/SIGHUP; Ctrl-C
raises KeyboardInterrupt, whose unwinding reaches the same ``stop``.

Which Python has vLLM (``vllm_python``): ``--vllm-python``, else ``$EVALSUITE_VLLM_PYTHON``, else this interpreter
when it has vLLM, else ``./.venv-vllm/bin/python`` (what ``make vllm`` builds in a checkout). Nothing is looked up
relative to where evalsuite is installed.

Sleep mode (``backends.served.vllm.memory``: servers that do not fit the GPU together run one at a time): a server
started with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1`` (which exposes ``/sleep`` and ``/wake_up``) is put
to sleep at level 1 (weights to host memory, KV cache dropped) and woken by ``sleep`` / ``wake``.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import requests

from evalsuite.errors import EvalsuiteError

#: common flags of every server: exact log-probs over HTTP (``--max-logprobs -1``), bf16 compute (each server's
#: context, memory share and parallelism come from ``backends.served.vllm.memory``)
ENGINE_FLAGS = ("--dtype", "bfloat16", "--max-logprobs", "-1")
KV_SPACE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE at least, unless set by the user
LOCAL_VENV = Path(".venv-vllm")  #: what ``make vllm`` builds, looked for in the working directory
_LIVE: dict[int, "VllmServer"] = {}


def vllm_python(explicit: str | None = None) -> str:
    """The Python interpreter that has vLLM: ``explicit`` (``--vllm-python``), ``$EVALSUITE_VLLM_PYTHON``, this
    interpreter when it has vLLM, ``./.venv-vllm/bin/python``; none of them is one line saying how to get one."""
    import sys
    from importlib.util import find_spec

    chosen = explicit or os.environ.get("EVALSUITE_VLLM_PYTHON")
    if chosen:
        if not Path(chosen).is_file():
            raise EvalsuiteError(f"no Python at {chosen} (--vllm-python / EVALSUITE_VLLM_PYTHON)")
        return chosen
    if find_spec("vllm") is not None:
        return sys.executable
    local = LOCAL_VENV / "bin" / "python"
    if local.is_file():
        return str(local.absolute())
    raise EvalsuiteError("no vLLM found (not in --vllm-python, $EVALSUITE_VLLM_PYTHON, this Python, or "
                         "./.venv-vllm): install vLLM (pip install vllm) and pass its python with --vllm-python, "
                         "or run `make vllm` in an evalsuite checkout")


def _ask(python: str, code: str, what: str) -> list[str]:
    """The output lines of ``code`` run by ``python`` (180 s at most); a failure is one line naming ``what``."""
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EvalsuiteError(f"cannot run {python} for {what} ({exc}): give --vllm-python a Python that has "
                             f"vLLM") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise EvalsuiteError(f"{python} has no working {what} ({last[:160]}): give --vllm-python a Python that "
                             f"has vLLM, or run `make vllm` in an evalsuite checkout")
    return [ln for ln in out.stdout.splitlines() if ln.strip()]


@functools.lru_cache(maxsize=None)
def vllm_devices(python: str) -> tuple[tuple[int, int], ...]:
    """(free, total) bytes of every GPU ``python``'s torch sees (empty without CUDA), asked once per interpreter
    in a subprocess (this process holds no CUDA context)."""
    code = ("import torch\nif torch.cuda.is_available():\n"
            "    for i in range(torch.cuda.device_count()): print(*torch.cuda.mem_get_info(i))")
    return tuple((int(a), int(b)) for a, b in (ln.split() for ln in _ask(python, code, "CUDA torch")))


#: the libraries of vLLM's interpreter that change its outputs (keyed with a stored vLLM baseline)
VLLM_LIBRARIES = ("torch", "transformers", "vllm")


@functools.lru_cache(maxsize=None)
def _probe(python: str) -> tuple[str, str, str]:
    """(vLLM's version, its device type, the JSON of ``VLLM_LIBRARIES``' versions) in ``python``, asked once per
    interpreter and process (importing vLLM takes seconds); version and device on the last line, below whatever
    vLLM prints on import."""
    code = ("import json, vllm, importlib.metadata as m; from vllm.platforms import current_platform as p\n"
            f"print('libraries', json.dumps({{n: m.version(n) for n in {VLLM_LIBRARIES[:2]!r}}}))\n"
            "print(vllm.__version__, p.device_type or 'unknown')")
    lines = _ask(python, code, "vLLM") or [""]
    version, _, device = lines[-1].partition(" ")
    return version, device, next((ln[10:] for ln in lines if ln.startswith("libraries ")), "{}")


def vllm_version(python: str) -> tuple[str, str]:
    """(vLLM's version, its platform's device type: cpu, cuda ...) in ``python`` (one line when it has none)."""
    return _probe(python)[:2]


def vllm_libraries(python: str) -> dict[str, str]:
    """The versions of ``VLLM_LIBRARIES`` in vLLM's interpreter (not this process's: vLLM pins its own torch and
    transformers); torch and transformers empty when the interpreter did not say."""
    version, _, libs = _probe(python)
    try:
        found = {str(k): str(v) for k, v in dict(json.loads(libs)).items()}
    except (ValueError, TypeError):
        found = {}
    return {name: found.get(name, "") for name in VLLM_LIBRARIES[:2]} | {"vllm": version}


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Error|Exception): .+)$")


def failure_line(path: Path) -> str:
    """What a failed start is explained by: the first exception line after the log's first traceback (vLLM's
    root cause, e.g. ``NotImplementedError: FP8 KV cache on CPU requires ...``, logged before the engine's own
    "initialization failed" errors and shutdown warnings), else the last non-empty line (e.g. argparse's)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    start = next((i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln), len(lines))
    root = next((m.group(1) for ln in lines[start:] if (m := _EXCEPTION.search(ln))), None)
    return (root or (lines[-1] if lines else "empty log"))[:300]


@dataclass
class VllmServer:
    """One vLLM OpenAI server process serving ``model`` with the variant's ``flags``; ``sizing`` are the engine
    flags of this run (context, memory share, parallelism, sleep mode, the user's ``--vllm-arg``s), placed between
    ``ENGINE_FLAGS`` and the variant's own so that the variant's raw flags win."""

    python: str
    model: str
    flags: Sequence[str]
    log_path: Path
    name: str = "vllm"
    served_name: str = "evalsuite"
    port: int = 0
    proc: subprocess.Popen | None = None
    started_s: float | None = None  # seconds from spawn to healthy
    env: dict[str, str] = field(default_factory=dict)
    sizing: Sequence[str] = ()
    asleep: bool = False
    switches: list[float] = field(default_factory=list)  # seconds of every sleep and wake-up
    _t0: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def sleep_mode(self) -> bool:
        return "--enable-sleep-mode" in self.sizing

    def command(self) -> list[str]:
        # the OpenAI api_server module, not `vllm serve`: vllm-cpu's CLI looks up package metadata named "vllm"
        return [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model, "--host", "127.0.0.1",
                "--port", str(self.port), "--served-model-name", self.served_name, *ENGINE_FLAGS, *self.sizing,
                *self.flags]

    def start(self, timeout_s: float = 600.0) -> "VllmServer":
        """Spawn and wait until healthy; a server that exits or times out is a one-line EvalsuiteError."""
        return self.spawn().ready(timeout_s)

    def spawn(self) -> "VllmServer":
        """Start the process (not waiting): several servers then warm up side by side."""
        self.port = self.port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(KV_SPACE_GIB)),
               **self.env, **({"VLLM_SERVER_DEV_MODE": "1"} if self.sleep_mode else {})}
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        _LIVE[self.proc.pid] = self
        _install_handlers()
        self._t0 = t0
        return self

    def ready(self, timeout_s: float = 600.0) -> "VllmServer":
        """Wait until the spawned server is healthy (start-up time measured from the spawn)."""
        if self.started_s is None:
            self._wait(self._t0, timeout_s)
            self.started_s = time.monotonic() - self._t0
        return self

    def _wait(self, t0: float, timeout_s: float) -> None:
        while True:
            code = self.proc.poll() if self.proc else 1
            if code is not None:
                self.stop()
                raise EvalsuiteError(f"vLLM server {self.name!r} exited ({code}) before it was healthy: "
                                     f"{failure_line(self.log_path)} (log: {self.log_path})")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() - t0 > timeout_s:
                self.stop()
                raise EvalsuiteError(f"vLLM server {self.name!r} not healthy after {timeout_s:.0f} s: "
                                     f"{failure_line(self.log_path)} (log: {self.log_path})")
            time.sleep(1.0)

    def sleep(self) -> None:
        """Level-1 sleep (weights to host memory, KV cache dropped): frees this server's GPU memory for another."""
        self._switch("/sleep?level=1", True)

    def wake(self) -> None:
        """Wake a sleeping server (weights back on the GPU, a fresh KV cache)."""
        self._switch("/wake_up", False)

    def _switch(self, path: str, asleep: bool) -> None:
        if self.asleep == asleep:
            return
        t0 = time.monotonic()
        try:
            r = requests.post(f"http://127.0.0.1:{self.port}{path}", timeout=600)
            r.raise_for_status()
        except requests.RequestException as exc:
            raise EvalsuiteError(f"vLLM server {self.name!r}: {path} failed ({exc}); it runs with "
                                 f"--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 (log: {self.log_path})") from None
        self.asleep = asleep
        self.switches.append(time.monotonic() - t0)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM the process group without waiting (``stop`` then waits): several servers shut down at once."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace_s``; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        _LIVE.pop(proc.pid, None)
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
        try:  # workers left in the group after the API server exited
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def facts(self) -> dict[str, Any]:
        """What the run stores about this server (to reproduce it)."""
        return {"command": self.command()[1:], "model": self.model,
                "flags": [*ENGINE_FLAGS, *self.sizing, *self.flags],
                "startup_s": round(self.started_s, 1) if self.started_s is not None else None,
                "sleep_wake": {"count": len(self.switches), "seconds": round(sum(self.switches), 1)},
                "log": str(self.log_path)}


def stop_all() -> None:
    """Stop every server this process started (at exit and on SIGTERM/SIGHUP)."""
    for server in list(_LIVE.values()):
        server.terminate()
    for server in list(_LIVE.values()):
        server.stop(grace_s=5.0)


_HANDLED = False


def _install_handlers() -> None:
    """atexit + SIGTERM/SIGHUP handlers that stop the servers, once per process (main thread only)."""
    global _HANDLED
    if _HANDLED:
        return
    _HANDLED = True
    atexit.register(stop_all)

    def on_signal(signum: int, frame: Any) -> None:
        stop_all()
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, on_signal)
        except ValueError:  # not the main thread
            pass
