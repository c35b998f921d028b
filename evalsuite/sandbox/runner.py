"""Host side of the sandbox: start the jailed child, feed it the job, watch time and output, classify the end."""
from __future__ import annotations

import functools
import json
import os
import pwd
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

from evalsuite.sandbox.config import SandboxConfig, SandboxResult, SandboxUnavailable

NAMESPACE_FLAGS = ("--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


@functools.lru_cache(maxsize=1)
def _bootstrap_source() -> str:
    from importlib.resources import files

    return files("evalsuite.sandbox").joinpath("_bootstrap.py").read_text(encoding="utf-8")


def interpreter() -> tuple[str, str]:
    """The base interpreter (not the venv wrapper: the child needs only the stdlib) and its prefix."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe), os.path.realpath(sys.base_prefix)


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether this host can build the namespace jail (root, unshare(1), mounts allowed): probed by running
    a trivial program through it once per process."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        return _run("pass", SandboxConfig(timeout_s=30.0), "namespace").passed
    except SandboxUnavailable:
        return False


def resolve_isolation(config: SandboxConfig) -> str:
    """``namespace`` or ``process`` for this config on this host."""
    if config.isolation == "process":
        return "process"
    if namespaces_available():
        return "namespace"
    if config.isolation == "namespace":
        raise SandboxUnavailable("sandbox: namespace isolation requested but unavailable (needs root and unshare)")
    return "process"


def _ids(user: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(user)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


@dataclass
class _Capture:
    """Bounded capture of the child's streams."""

    limit: int
    keep: int
    total: int = 0
    parts: dict[int, bytearray] = field(default_factory=dict)

    def add(self, fd: int, data: bytes, keep: int | None = None) -> None:
        buf = self.parts.setdefault(fd, bytearray())
        room = (self.keep if keep is None else keep) - len(buf)
        if room > 0:
            buf += data[:room]

    def text(self, fd: int) -> str:
        return bytes(self.parts.get(fd, b"")).decode("utf-8", "replace")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(proc: subprocess.Popen, fds: dict[int, str], cap: _Capture, wall_s: float) -> str | None:
    """Read streams until EOF or a limit; return 'timeout' / 'output_limit' when the host killed the child."""
    sel = selectors.DefaultSelector()
    for fd in fds:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + wall_s
    exited_at: float | None = None
    verdict = None
    while sel.get_map():
        now = time.monotonic()
        if now >= deadline and verdict is None:
            verdict = "timeout"
            _kill(proc)
            deadline = now + 2.0  # drain what is left, briefly
        elif now >= deadline:
            break
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 1.0:
            break  # a leftover process holds a pipe (process mode only)
        for key, _ in sel.select(timeout=0.1):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
                continue
            if fds[key.fd] == "status":
                cap.add(key.fd, data, keep=65536)
                continue
            cap.total += len(data)
            cap.add(key.fd, data)
            if cap.total > cap.limit and verdict is None:
                verdict = "output_limit"
                _kill(proc)
    sel.close()
    return verdict


def _command(mode: str, exe: str) -> list[str]:
    py = [exe, "-I", "-S", "-c", _bootstrap_source()]
    if mode == "namespace":
        return [shutil.which("unshare") or "unshare", *NAMESPACE_FLAGS, "--", *py]
    return py


def _job(program: str, config: SandboxConfig, mode: str, workdir: str | None, status_fd: int) -> dict:
    uid, gid = _ids(config.user)
    return {"program": program, "nonce": secrets.token_hex(16), "mode": mode, "workdir": workdir,
            "status_fd": status_fd, "uid": uid, "gid": gid, "prefix": interpreter()[1],
            "cpu_s": config.cpu_limit_s(), "memory_mb": config.memory_mb, "file_size_mb": config.file_size_mb,
            "disk_mb": config.disk_mb, "max_processes": config.max_processes,
            "max_open_files": config.max_open_files}


def _process_workdir(config: SandboxConfig) -> str:
    path = tempfile.mkdtemp(prefix="evalsuite-sandbox-")
    if os.geteuid() == 0:
        os.chown(path, *_ids(config.user))
    return path


def run(program: str, config: SandboxConfig | None = None) -> SandboxResult:
    """Run a Python program (candidate + tests) in a fresh sandbox and classify how it ended."""
    config = config or SandboxConfig()
    return _run(program, config, resolve_isolation(config))


def _run(program: str, config: SandboxConfig, mode: str) -> SandboxResult:
    workdir = _process_workdir(config) if mode == "process" else None
    status_r, status_w = os.pipe()
    job = _job(program, config, mode, workdir, status_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(_command(mode, interpreter()[0]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(status_w,), cwd=workdir or "/",
                                env=dict(ENV, HOME=workdir or "/work"), start_new_session=True)
    except OSError as exc:
        os.close(status_r)
        os.close(status_w)
        raise SandboxUnavailable(f"sandbox: cannot start the child: {exc}") from None
    os.close(status_w)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    try:
        _feed(proc, job)
        cap = _Capture(limit=config.output_limit_bytes, keep=config.keep_output_bytes)
        fds = {out_fd: "stdout", err_fd: "stderr", status_r: "status"}
        verdict = _pump(proc, fds, cap, config.wall_s())
        _kill(proc)
        rc = proc.wait()
    finally:
        os.close(status_r)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report = _status_record(cap.text(status_r), job["nonce"])
    status, reason = classify(verdict, report, rc, config)
    return SandboxResult(status=status, reason=reason, stdout=cap.text(out_fd), stderr=cap.text(err_fd),
                         duration_s=round(time.monotonic() - start, 4), returncode=rc, isolation=mode)


def _feed(proc: subprocess.Popen, job: dict) -> None:
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass


def _status_record(text: str, nonce: str) -> dict | None:
    """The child's report, if it carries the job's nonce (or reports a setup error)."""
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and ("setup_error" in record or record.get("nonce") == nonce):
            return record
    return None


def classify(verdict: str | None, report: dict | None, rc: int, config: SandboxConfig) -> tuple[str, str]:
    """(status, one-line reason) from the host's verdict, the child's report and the exit code."""
    if report and "setup_error" in report:
        raise SandboxUnavailable(f"sandbox setup failed: {report['setup_error']}")
    if verdict == "output_limit":
        return "output_limit", f"output exceeded {config.output_limit_bytes} bytes"
    if report is not None:
        return str(report.get("status", "exception")), str(report.get("reason", ""))[:300]
    if verdict == "timeout":
        return "timeout", f"wall-clock limit of {config.wall_s():.1f}s exceeded"
    sig = rc - 128 if rc > 128 else (-rc if rc < 0 else 0)
    if sig == signal.SIGXCPU:
        return "timeout", f"CPU time limit of {config.cpu_limit_s()}s exceeded"
    if sig == signal.SIGXFSZ:
        return "output_limit", f"a file exceeded {config.file_size_mb} MiB"
    if sig:
        return "killed", f"killed by {signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal {sig}"
    return "exception", f"exited with code {rc} before reporting a result"


def run_many(programs: Sequence[str], config: SandboxConfig | None = None, workers: int = 2) -> list[SandboxResult]:
    """Run several programs, ``workers`` at a time, in order of the input."""
    config = config or SandboxConfig()
    if len(programs) <= 1 or workers <= 1:
        return [run(p, config) for p in programs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda p: run(p, config), programs))
