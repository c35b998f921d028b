"""Runs inside the sandbox child (stdlib only; the host passes this file's text to ``python -I -S -c``).

Reads a JSON job from stdin, builds the jail (namespace mode: a tmpfs root with read-only system directories,
chroot; process mode: a host temp dir), forks a worker that drops to an unprivileged uid under rlimits and
runs the program, and reports one JSON line carrying the job's nonce on the status fd. The supervisor (PID 1
of the PID namespace in namespace mode) reaps children and exits with the worker's status (128+signal).
"""
import json
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
DEVICES = ("null", "zero", "urandom", "random")
PREIMPORT = ("math", "re", "json", "collections", "itertools", "functools", "heapq", "bisect", "string",
             "typing", "random", "statistics", "fractions", "decimal", "datetime", "operator", "copy",
             "hashlib", "dataclasses", "enum", "textwrap", "unicodedata", "traceback", "linecache", "shutil",
             "pathlib", "glob", "struct", "array", "io", "time", "tempfile", "contextlib", "abc", "numbers",
             "cmath", "base64", "binascii", "zlib", "calendar", "pprint", "difflib", "queue", "weakref")
FALLBACK_BLOCKED = {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
                    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                    "subprocess.Popen", "os.kill", "os.killpg", "ctypes.dlopen", "ctypes.dlsym",
                    "ctypes.cdata", "os.putenv", "os.chmod", "os.chown", "os.link", "os.symlink"}
FALLBACK_PATH_EVENTS = {"open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree",
                        "os.truncate", "os.utime"}
FALLBACK_BLOCKED_MODULES = {"ctypes", "_ctypes", "socket", "_socket", "subprocess", "_posixsubprocess",
                            "multiprocessing", "signal", "_signal"}


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _mount(libc, src, target, fstype, flags, data=None):
    enc = (lambda s: s.encode() if s is not None else None)
    if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")


def _bind_ro(libc, src, target):
    _mount(libc, src, target, None, MS_BIND)
    _mount(libc, None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def setup_namespace(job):
    """Build a tmpfs root (read-only system dirs, the interpreter prefix, a few devices, /work, /tmp); chroot."""
    libc = _libc()
    root = "/tmp"  # mounted over, in this mount namespace only
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={job['disk_mb']}m,nr_inodes=4096,mode=755")
    for path in SYSTEM_DIRS:
        inside = root + path
        if os.path.islink(path):
            os.symlink(os.readlink(path), inside)
        elif os.path.isdir(path):
            os.mkdir(inside)
            _bind_ro(libc, path, inside)
    prefix = job["prefix"]
    if not any(prefix == d or prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        os.makedirs(root + prefix, 0o755)  # same path inside, so loaded modules' paths stay valid
        _bind_ro(libc, prefix, root + prefix)
    os.mkdir(root + "/dev")
    for dev in DEVICES:
        if os.path.exists("/dev/" + dev):
            open(f"{root}/dev/{dev}", "w").close()
            _mount(libc, "/dev/" + dev, f"{root}/dev/{dev}", None, MS_BIND)
    os.mkdir(root + "/tmp", 0o1777)
    os.chmod(root + "/tmp", 0o1777)
    os.mkdir(root + "/work", 0o700)
    os.chown(root + "/work", job["uid"], job["gid"])
    os.chroot(root)
    os.chdir("/work")


def setup_process(job):
    """Fallback: work in the host temp dir the host made; pre-import modules the uid may not be able to read."""
    os.chdir(job["workdir"])
    for name in PREIMPORT:
        try:
            __import__(name)
        except ImportError:
            pass


def _inside(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _fallback_hook(workdir, prefix):
    """Audit hook for process mode: no sockets, processes, signals or ctypes; reads only under the system dirs,
    the interpreter prefix and the workdir; writes only in the workdir."""
    read_roots = (workdir, prefix, "/dev/null", "/dev/urandom", "/proc/self") + SYSTEM_DIRS

    def hook(event, args):
        if event in FALLBACK_BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args and str(args[0]).split(".")[0] in FALLBACK_BLOCKED_MODULES:
            raise ImportError(f"sandbox: import of {args[0]} is not allowed")
        if event not in FALLBACK_PATH_EVENTS and event not in ("os.listdir", "os.scandir"):
            return
        if not args or not isinstance(args[0], (str, bytes)):
            return
        path = os.path.realpath(os.fsdecode(args[0]) or ".")
        reading = event in ("os.listdir", "os.scandir") or (
            event == "open" and (len(args) < 2 or args[1] is None or
                                 (isinstance(args[1], str) and not set(args[1]) & set("wax+"))))
        if not _inside(path, (workdir,) if not reading else read_roots):
            raise PermissionError(f"sandbox: {event} of {path} is not allowed")
    return hook


def _limits(job):
    import resource

    mb = 1 << 20
    cpu = job["cpu_s"]
    for name, soft, hard in (("RLIMIT_CPU", cpu, cpu + 1), ("RLIMIT_AS", job["memory_mb"] * mb, None),
                             ("RLIMIT_FSIZE", job["file_size_mb"] * mb, None),
                             ("RLIMIT_NPROC", job["max_processes"], None),
                             ("RLIMIT_NOFILE", job["max_open_files"], None), ("RLIMIT_CORE", 0, None)):
        resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))


def _drop_privileges(job):
    try:
        import ctypes

        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    except (ImportError, OSError, AttributeError):
        pass
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(job["gid"])
        os.setuid(job["uid"])


def _describe(exc, program):
    """``Type: message (line N: source)`` for the deepest frame in the program."""
    import traceback

    lineno = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "solution.py":
            lineno = frame.lineno
    if isinstance(exc, SyntaxError) and exc.filename == "solution.py":
        lineno = exc.lineno
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    lines = program.splitlines()
    if lineno and 0 < lineno <= len(lines):
        text += f" (line {lineno}: {lines[lineno - 1].strip()})"
    return " ".join(text.split())[:300]


def run_program(program):
    """Execute the program; return (status, reason)."""
    import builtins

    scope = {"__name__": "solution", "__builtins__": builtins}  # `if __name__ == "__main__":` demos do not run
    try:
        exec(compile(program, "solution.py", "exec"), scope)
        return "passed", "all tests passed"
    except AssertionError as exc:
        return "failed", _describe(exc, program)
    except MemoryError as exc:
        return "memory", _describe(exc, program) + " (memory limit)"
    except SystemExit as exc:
        return "exception", f"SystemExit({exc.code!r}) before the tests finished"
    except RecursionError as exc:
        return "exception", _describe(exc, program)
    except BaseException as exc:  # noqa: BLE001 - everything the program raises is a result
        return "exception", _describe(exc, program)


def worker(job, status):
    """Child: limits, unprivileged uid, run, report. Never returns."""
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _limits(job)
    _drop_privileges(job)
    if job["mode"] == "process":
        sys.addaudithook(_fallback_hook(os.path.realpath(job["workdir"]), job["prefix"]))
    nonce, program = job.pop("nonce"), job.pop("program")
    status_value, reason = run_program(program)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    status.write(json.dumps({"nonce": nonce, "status": status_value, "reason": reason}) + "\n")
    status.flush()
    os._exit(0)


def supervise(pid):
    """Reap every child (PID 1 duty) until the worker ends; exit with its status."""
    while True:
        try:
            done, code = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(70)
        except InterruptedError:
            continue
        if done == pid:
            os._exit(128 + os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code))


def main():
    job = json.loads(sys.stdin.buffer.read())
    status = os.fdopen(job["status_fd"], "w")
    try:
        (setup_namespace if job["mode"] == "namespace" else setup_process)(job)
        pid = os.fork()
    except BaseException as exc:  # noqa: BLE001
        status.write(json.dumps({"setup_error": f"{type(exc).__name__}: {exc}"}) + "\n")
        status.flush()
        os._exit(3)
    if pid == 0:
        try:
            worker(job, status)
        except BaseException as exc:  # noqa: BLE001 - a harness failure, shown on stderr
            os.write(2, f"sandbox harness error: {type(exc).__name__}: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(71)
    status.close()
    supervise(pid)


if __name__ == "__main__":
    main()
