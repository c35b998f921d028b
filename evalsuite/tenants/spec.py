"""``tenants.yaml``: per tenant a workload (what it asks of its GPUs, the runtime that serves it, what "best" means to
it) and a quality policy (docs/tenants.md)::

    tenants:
      chat:
        context: 2048                  # prompt tokens; or {typical: 2048, max: 8192}
        concurrency: 64                # requests in flight at once
        gpu_memory: 80GiB              # per GPU; gpus: 2 for more (default 1); gpu: H100 names it
        reserve: 10%                   # kept for the runtime on each GPU (default 10%; or e.g. 6GiB)
        runtime: vllm                  # vllm | llama.cpp | transformers | any
        objective: requests_per_gpu    # gpus (default) | requests_per_gpu | decode_speed
        decode_speedup: 1.3            # optional: the least predicted decode speed-up over bf16
        policy: {defaults: {max_drop: 0.10, on_inconclusive: pass}}   # or a path, relative to this file

A tenant's policy is read as a ``--policy`` file is (``gate.policy.parse_policy``): its ``defaults`` inherit the
shipped policy's for every key they do not set; its ``tasks`` do not inherit the shipped policy's tasks (a tenant
that wants reasoning at 0.10 says so). No ``policy:``: the shipped policy itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.policy import Policy, PolicyParser, load_policy, parse_policy
from evalsuite.capacity.capacity import parse_reserve, parse_size
from evalsuite.capacity.serve import Workload
from evalsuite.tenants.runtimes import ANY, RUNTIMES

OBJECTIVES = ("gpus", "requests_per_gpu", "decode_speed")
KEYS = ["description", "context", "concurrency", "gpu_memory", "gpus", "gpu", "reserve", "runtime", "objective",
        "decode_speedup", "policy"]
DEFAULT_RESERVE = "10%"
MIGRATE = ("the cost:/preference: form (a ranking by bytes) is gone: a tenant is a workload now; give context, "
           "concurrency, gpu_memory, runtime and objective (docs/tenants.md)")


@dataclass(frozen=True)
class Tenant:
    """One tenant: its workload, runtime, objective and policy; ``doc`` is its entry with the policy inlined (what a
    run stores, so that its report and ``evalsuite tenants RUN`` need not find the file again)."""

    name: str
    workload: Workload
    runtime: str
    objective: str
    policy: Policy
    decode_speedup: float | None = None
    gpu: str | None = None
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False)


def _int(p: PolicyParser, where: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise p.fail(where, f"must be an integer >= {low}, got {value!r}")
    return value


def _context(p: PolicyParser, where: str, value: Any) -> tuple[int, int]:
    """(typical, max) prompt tokens from ``2048`` or ``{typical: 2048, max: 8192}``."""
    if isinstance(value, Mapping):
        value = p.check_keys(where, value, ["typical", "max"])
        typical = _int(p, f"{where}.typical", value.get("typical"))
        top = _int(p, f"{where}.max", value.get("max", typical))
        if top < typical:
            raise p.fail(f"{where}.max", f"{top} is below the typical context {typical}")
        return typical, top
    n = _int(p, where, value)
    return n, n


def _size(p: PolicyParser, where: str, value: Any, gpu_mem: int | None = None) -> int:
    try:
        return parse_reserve(str(value), gpu_mem) if gpu_mem is not None else parse_size(str(value))
    except EvalsuiteError as exc:
        raise p.fail(where, str(exc)) from None


def _policy(p: PolicyParser, where: str, value: Any, base_dir: Path) -> tuple[Policy, Any]:
    """The tenant's policy and its YAML data (a path is read here and inlined)."""
    if value is None:
        return load_policy(None), None
    if isinstance(value, str):
        path = base_dir / value
        return load_policy(path), yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return parse_policy(value, f"{p.source}:{where}"), value


def _tenant(p: PolicyParser, name: str, data: Any, base_dir: Path) -> Tenant:
    where = f"tenants.{name}"
    if isinstance(data, Mapping) and ("cost" in data or "preference" in data):
        raise p.fail(where, MIGRATE)
    data = p.check_keys(where, data, KEYS)
    for key in ("context", "concurrency", "gpu_memory", "runtime"):
        if key not in data:
            raise p.fail(where, f"{key} is required ({', '.join(KEYS[1:-1])}, policy)")
    typical, top = _context(p, f"{where}.context", data["context"])
    gpu_mem = _size(p, f"{where}.gpu_memory", data["gpu_memory"])
    reserve = _size(p, f"{where}.reserve", data.get("reserve", DEFAULT_RESERVE), gpu_mem)
    work = Workload(typical, top, _int(p, f"{where}.concurrency", data["concurrency"]), gpu_mem,
                    _int(p, f"{where}.gpus", data.get("gpus", 1)), reserve)
    runtime = p.choice(f"{where}.runtime", data["runtime"], (*RUNTIMES, ANY))
    objective = p.choice(f"{where}.objective", data.get("objective", OBJECTIVES[0]), OBJECTIVES)
    target = data.get("decode_speedup")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float)) or target <= 0):
        raise p.fail(f"{where}.decode_speedup", f"must be a number > 0 (a speed-up over bf16), got {target!r}")
    policy, policy_doc = _policy(p, f"{where}.policy", data.get("policy"), base_dir)
    doc = {k: v for k, v in data.items() if k != "policy"} | ({"policy": policy_doc} if "policy" in data else {})
    return Tenant(name, work, runtime, objective, policy, None if target is None else float(target),
                  None if data.get("gpu") is None else str(data["gpu"]), doc)


def parse_tenants(data: Any, source: str = "<inline>", base_dir: Path | str = ".") -> list[Tenant]:
    """Tenants from already-loaded YAML data; policy paths resolve against ``base_dir``."""
    p = PolicyParser(source, "tenants")
    data = p.check_keys("top level", data, ["tenants", "description"])
    tenants = p.check_keys("tenants", data.get("tenants"), None)
    if not tenants:
        raise p.fail("tenants", "required: a mapping of tenant name -> its workload and policy")
    return [_tenant(p, str(name), cfg, Path(base_dir)) for name, cfg in tenants.items()]


def load_tenants(path: str | Path) -> list[Tenant]:
    """Parse a tenants.yaml file (a policy file it names that does not parse is an error too)."""
    path = Path(path)
    if not path.is_file():
        raise EvalsuiteError(f"tenants file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EvalsuiteError(f"tenants {path}: not valid YAML ({' '.join(str(exc).split())})") from None
    return parse_tenants(data, str(path), path.parent)


def stored(tenants: list[Tenant], source: str) -> dict[str, Any]:
    """What a run keeps of its tenants (``RunState.tenants``); ``from_stored`` reads it back."""
    return {"source": source, "tenants": {t.name: dict(t.doc) for t in tenants}}


def from_stored(doc: Mapping[str, Any]) -> list[Tenant]:
    """The tenants a run stored."""
    return parse_tenants({"tenants": doc.get("tenants")}, str(doc.get("source", "<stored>")))
