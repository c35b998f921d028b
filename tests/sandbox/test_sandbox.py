"""The sandbox: correct code passes, wrong code fails, and a hostile corpus is contained with the host untouched."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.sandbox import SandboxConfig, SandboxUnavailable, namespaces_available, run, run_many
from evalsuite.sandbox.runner import classify

MARKER = "Runs inside the sandbox child"  # first line of the bootstrap, visible in the child's command line
MODES = ["auto", "process"]


def cfg(mode: str, **kw) -> SandboxConfig:
    return SandboxConfig(isolation=mode, **{"timeout_s": 5.0, **kw})


def sandbox_processes() -> list[int]:
    """PIDs of sandbox children still alive on the host."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if MARKER.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def assert_no_leftovers() -> None:
    deadline = time.monotonic() + 10
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_processes() == []


@pytest.fixture
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.5)
    yield srv
    srv.close()


def assert_no_connection(srv: socket.socket) -> None:
    with pytest.raises(socket.timeout):
        conn, _ = srv.accept()
        conn.close()


def test_auto_uses_namespaces_where_root_can():
    result = run("pass", SandboxConfig())
    assert result.passed
    assert result.isolation == ("namespace" if namespaces_available() else "process")


@pytest.mark.parametrize("mode", MODES)
def test_correct_wrong_and_broken_code(mode):
    ok, wrong, boom, syntax = run_many([
        "def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('done')",
        "def add(a, b):\n    return a - b\nassert add(2, 3) == 5",
        "def add(a, b):\n    return a + c\nassert add(2, 3) == 5",
        "def add(a, b)\n    return a + b",
    ], cfg(mode))
    assert ok.status == "passed" and ok.stdout == "done\n"
    assert wrong.status == "failed" and "assert add(2, 3) == 5" in wrong.reason and "line 3" in wrong.reason
    assert boom.status == "exception" and boom.reason.startswith("NameError")
    assert syntax.status == "exception" and syntax.reason.startswith("SyntaxError")


@pytest.mark.parametrize("mode", MODES)
def test_early_exit_and_forged_status_do_not_pass(mode):
    exit0, forged = run_many([
        "import sys\nsys.exit(0)\nassert False",
        "import os\nos.write(3, b'{\"nonce\": \"guess\", \"status\": \"passed\", \"reason\": \"\"}\\n')\nos._exit(0)",
    ], cfg(mode))
    assert exit0.status == "exception" and "SystemExit" in exit0.reason
    assert forged.status == "exception" and not forged.passed


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(mode):
    result = run("while True:\n    pass", cfg(mode, timeout_s=1.5))
    assert result.status == "timeout" and "limit" in result.reason
    assert_no_leftovers()


def test_cpu_limit_is_a_timeout():
    result = run("while True:\n    pass", cfg("auto", timeout_s=30.0, cpu_s=1.0))
    assert result.status == "timeout" and "CPU" in result.reason


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_is_contained(mode):
    result = run("import os\nwhile True:\n    os.fork()", cfg(mode, timeout_s=2.0, max_processes=16))
    assert not result.passed
    assert result.status in ("timeout", "exception"), result
    assert_no_leftovers()


@pytest.mark.parametrize("mode", MODES)
def test_huge_allocation_is_a_memory_failure(mode):
    result = run("blob = bytearray(40 * 2**30)\nassert len(blob) > 0", cfg(mode))
    assert result.status == "memory" and "MemoryError" in result.reason


@pytest.mark.parametrize("mode", MODES)
def test_huge_output_is_capped(mode):
    result = run("while True:\n    print('x' * 65536)", cfg(mode, output_limit_bytes=2_000_000))
    assert result.status == "output_limit"
    assert len(result.stdout) <= SandboxConfig().keep_output_bytes
    big_file = run("open('big.bin', 'wb').write(b'0' * (64 * 2**20))", cfg(mode, file_size_mb=4))
    assert big_file.status in ("exception", "output_limit") and not big_file.passed


@pytest.mark.parametrize("mode", MODES)
def test_files_outside_the_workdir_are_untouched(mode, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("alive")
    escape = Path(f"/tmp/evalsuite-escape-{os.getpid()}-{mode}")
    programs = [
        f"open({str(canary)!r}, 'w').write('owned')",
        f"import os\nos.remove({str(canary)!r})",
        f"open({str(outside / 'new.txt')!r}, 'w').write('new')",
        f"open({str(escape)!r}, 'w').write('x')\nimport os\nos.remove({str(canary)!r})",
        "import shutil\nshutil.rmtree('/usr/share')",
        "open('inside.txt', 'w').write('fine')\nassert open('inside.txt').read() == 'fine'",
    ]
    *hostile, inside = run_many(programs, cfg(mode))
    for result in hostile:
        assert result.status == "exception", result
        assert any(word in result.reason for word in ("FileNotFoundError", "PermissionError", "OSError")), result
    assert inside.passed, inside
    assert canary.read_text() == "alive"
    assert sorted(p.name for p in outside.iterdir()) == ["canary.txt"]
    assert not escape.exists()
    assert Path("/usr/share").is_dir()


@pytest.mark.parametrize("mode", MODES)
def test_no_network_to_the_host(mode, listener):
    port = listener.getsockname()[1]
    result = run(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                 "s.sendall(b'hello')", cfg(mode))
    assert result.status == "exception" and not result.passed
    assert any(w in result.reason for w in ("unreachable", "not allowed", "refused")), result
    assert_no_connection(listener)


@pytest.mark.parametrize("mode", MODES)
def test_host_secret_cannot_be_read_or_sent(mode, tmp_path, listener, monkeypatch):
    secret = tmp_path / "secret.txt"
    token = f"TOPSECRET-{os.getpid()}-{mode}"
    secret.write_text(token)
    secret.chmod(0o600)
    monkeypatch.setenv("EVALSUITE_TEST_SECRET", token)
    port = listener.getsockname()[1]
    program = (f"import os, socket\nprint(os.environ)\ndata = open({str(secret)!r}).read()\nprint(data)\n"
               f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(data.encode())")
    result = run(program, cfg(mode))
    assert not result.passed
    assert token not in result.stdout + result.stderr + result.reason
    assert_no_connection(listener)
    env_dump = run("import os\nprint(sorted(os.environ))", cfg(mode))
    assert "EVALSUITE_TEST_SECRET" not in env_dump.stdout and "PATH" in env_dump.stdout


@pytest.mark.parametrize("mode", MODES)
def test_killing_the_parent_leaves_the_host_alive(mode):
    programs = ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)",
                "import os, signal\nos.killpg(0, signal.SIGKILL)"]
    for result in run_many(programs, cfg(mode)):
        assert not result.passed
        assert result.status in ("exception", "killed"), result
    assert run("assert 1 + 1 == 2", cfg(mode)).passed  # the host (this test) is still here and working
    assert_no_leftovers()


def test_run_many_keeps_input_order():
    programs = [f"assert {i} % 2 == 0" for i in range(6)]
    results = run_many(programs, SandboxConfig(), workers=3)
    assert [r.passed for r in results] == [i % 2 == 0 for i in range(6)]


def test_setup_errors_raise_and_bad_config_is_rejected():
    with pytest.raises(SandboxUnavailable):
        classify(None, {"setup_error": "OSError: mount failed"}, 3, SandboxConfig())
    with pytest.raises(EvalsuiteError):
        SandboxConfig(isolation="none")  # type: ignore[arg-type]
    with pytest.raises(EvalsuiteError):
        SandboxConfig(timeout_s=0)


def test_timeout_scale_multiplies_limits(monkeypatch):
    monkeypatch.setenv("EVALSUITE_SANDBOX_TIMEOUT_SCALE", "3")
    config = SandboxConfig(timeout_s=2.0)
    assert config.wall_s() == 6.0 and config.cpu_limit_s() == 6
    assert SandboxConfig(timeout_s=2.0, timeout_scale=1.5).wall_s() == 3.0
    monkeypatch.setenv("EVALSUITE_SANDBOX_TIMEOUT_SCALE", "auto")
    assert SandboxConfig().scale() >= 1.0
    monkeypatch.setenv("EVALSUITE_SANDBOX_TIMEOUT_SCALE", "fast")
    with pytest.raises(EvalsuiteError):
        SandboxConfig().wall_s()
