"""A sandbox for model-written code: fresh namespaces, chroot into a tmpfs, unprivileged uid, rlimits, timeouts."""
from evalsuite.sandbox.config import (STATUSES, SandboxConfig, SandboxResult, SandboxUnavailable,
                                      calibrate_timeout_scale)
from evalsuite.sandbox.runner import namespaces_available, resolve_isolation, run, run_many

__all__ = ["STATUSES", "SandboxConfig", "SandboxResult", "SandboxUnavailable", "calibrate_timeout_scale",
           "namespaces_available", "resolve_isolation", "run", "run_many"]
