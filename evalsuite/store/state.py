"""A run's state: one typed field per key of the store's meta table (``Store.state`` / ``Store.update_state``).

The table stays key -> JSON value, one row per field under the field's name, so a store written here is read by
older code as before. ``STATE_VERSION`` is stored as ``state_version``; a store without it (written before this
module) is version 0 and migrates on reading: absent keys take their defaults, keys this version does not know
are kept in ``extra`` (written back unchanged), so nothing stored is lost. Values are taken as stored (a broken
store is not repaired here: its readers fail as they did).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: 2: ``task_sources`` (a store of version 1 has none: its resolved ``task_params`` are compared without them);
#: 1: the meta table described by RunState (0: written before it, same keys)
STATE_VERSION = 2


@dataclass
class RunState:
    """What a run stored about itself, as it runs (see the writers named per group)."""

    # the store (store.sqlite)
    schema_version: int | None = None
    state_version: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # RunConfig.to_dict()
    created: float | None = None
    # the model and the tasks (run.runner.check_compatible, run.identity)
    fingerprint: str | None = None
    model_name: str | None = None
    dtype: str | None = None
    task_versions: dict[str, str] = field(default_factory=dict)
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # every parameter, resolved
    #: task -> parameter -> where its value came from (``run.prepare.resolve_params``); compared on resume
    task_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    gen_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    artifact_fingerprints: dict[str, str] = field(default_factory=dict)  # variant -> its ckpt: artifact's bytes
    # the variants (run.runner)
    baseline: str = "bf16"  # a run stored before it was recorded: bf16
    variant_order: list[str] = field(default_factory=list)
    kld_method: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # the backend's settings
    same_as_baseline: list[str] = field(default_factory=list)  # variants whose answers are the baseline's
    unverified: dict[str, dict[str, str]] = field(default_factory=dict)  # variant -> task -> why regenerated
    verify: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # run.verified.VerifyTally
    verify_audit: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # run.verified.audit
    # a sequential run (run.rounds)
    rounds: int = 0
    drawn: dict[str, int] = field(default_factory=dict)  # task -> samples drawn
    stop_reason: str = ""
    capped: dict[str, str] = field(default_factory=dict)  # task -> why it could not draw more
    out_of_reach: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> task -> pairs still needed
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)  # variant -> task -> why it stopped drawing
    round_costs: dict[str, list[float]] = field(default_factory=dict)  # "variant/task" -> [seconds, pairs]
    seconds_per_pair: dict[str, float] = field(default_factory=dict)
    #: task -> [samples a stored baseline held, its recorded seconds per sample] (``core.costs.StoredBaseline``)
    baseline_stored: dict[str, list[float]] = field(default_factory=dict)
    # the end (run.pipeline)
    finished: float | None = None
    #: the machine the run ran on (``cpu.machine.machine_info``: cpu, flags, cores, gflops, speed_class); empty in
    #: a run stored before it was recorded
    machine: dict[str, Any] = field(default_factory=dict)
    #: lines the report shows as they are (a run built by ``evalsuite compare``: where its samples came from and
    #: how they were paired)
    notes: list[str] = field(default_factory=list)
    # the serving side (cli.run_cmd)
    #: ``evalsuite run --tenants``: the tenants with their policies inlined (``tenants.spec.stored``)
    tenants: dict[str, Any] = field(default_factory=dict)
    #: the run's model's config.json (the planner's shape for ``evalsuite tenants``); empty when not recorded
    model_config: dict[str, Any] = field(default_factory=dict)
    #: keys this version does not know (a newer writer's, or a caller's own), kept as stored
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "RunState":
        """The state of a meta table of any version: absent keys default, unknown keys go to ``extra``."""
        known = field_names()
        return cls(**{k: v for k, v in meta.items() if k in known},
                   extra={k: v for k, v in meta.items() if k not in known})

    def to_meta(self, only: set[str] | None = None) -> dict[str, Any]:
        """The meta table's rows: every field (or those named in ``only``) under its name, ``extra`` as is."""
        out = {k: getattr(self, k) for k in field_names() if only is None or k in only}
        if only is None:
            out.update(self.extra)
        return out


def field_names() -> set[str]:
    """The meta keys RunState types (every field but ``extra``)."""
    return {f.name for f in dataclasses.fields(RunState)} - {"extra"}


def check_fields(names: set[str]) -> None:
    """Refuse a field RunState does not have (a typo would otherwise land silently in ``extra``)."""
    unknown = names - field_names()
    if unknown:
        raise TypeError(f"RunState has no field(s) {', '.join(sorted(unknown))}")
