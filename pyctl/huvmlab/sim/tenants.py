"""TenantSpec: one workload on one GPU of the simulated node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..traces.trace import SimTrace

#: What the simulator reads from a trace: a recorded one's :meth:`huvmlab.traces.Trace.to_sim_events` or a
#: synthetic one of :mod:`huvmlab.sim.workloads`; both are :class:`huvmlab.traces.SimTrace` (docs/traces.md).
SimTraceLike = SimTrace


@dataclass(frozen=True)
class TenantSpec:
    """A workload on GPU ``gpu``.

    * ``trace`` None: an idle tenant holding ``static_bytes`` (cudaMalloc) and nothing else.
    * ``managed`` True: its trace's memory is UVM managed (demand paged, evictable: harvesters and UVM
      lenders); False: cudaMalloc (resident from its allocation op, never evicted; making room for it
      takes back lent memory first -- the give-back path).
    * ``steps``: repetitions of the trace; ``background`` True: it loops until every foreground tenant is
      done (co-runners whose own time is not the measured one).
    * ``role``: the GPU's huvm role ("harvester", "lender", "both", "none"); None keeps the preset's
      default (both for huvm and huvm-atc22). Ignored under stock and ideal.
    * ``lend_reserve_bytes`` / ``lend_limit_bytes``: the GPU's lending policy (None: preset default).
    * ``lend_traffic_mbyte_per_s``: the GPU's guest-traffic budget (None: preset default, no budget).
    * ``host_resident`` True (managed only): the trace's chunks live before its first op start in host
      memory, as a buffer the CPU wrote before the kernels run (calibration microbenchmarks).
    * ``link_send`` / ``link_recv``: the GPUs its collectives send to / receive from; each op moves its trace's
      ``op_link_bytes[op]`` to / from each of them over the links peer eviction uses (ring all-reduce: the
      ring's next / previous GPU; all-to-all: every peer both ways). Needs a trace with ``op_link_bytes``.
    * ``record_ops`` True: keep every op's end time (:attr:`TenantResult.op_end_ns`: per-token latency).
    """

    gpu: int
    trace: Any = None
    name: str = ""
    steps: int = 1
    managed: bool = True
    background: bool = False
    static_bytes: int = 0
    start_ns: int = 0
    role: str | None = None
    lend_reserve_bytes: int | None = None
    lend_limit_bytes: int | None = None
    lend_traffic_mbyte_per_s: int | None = None
    host_resident: bool = False
    link_send: tuple[int, ...] = ()
    link_recv: tuple[int, ...] = ()
    record_ops: bool = False

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.trace is not None:
            return str(getattr(self.trace, "name", "trace"))
        return "idle"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, gpu_preset: str = "v100", base_dir: Path | str | None = None,
                  where: str = "tenant") -> TenantSpec:
        """Build from a mapping (a TOML table). ``trace``: a trace directory (relative to ``base_dir``) or a
        bundled trace name (:data:`huvm.traces.BUNDLED`); or ``workload = {kind = "streaming", ...}``: a
        synthetic one from :mod:`huvm.sim.workloads` with its keyword arguments. Other keys are the
        dataclass fields. Errors name ``where.key``."""
        from . import workloads
        from .errors import SimConfigError

        d = dict(d)
        known = {f.name for f in fields(cls)} | {"workload"}
        for k in d:
            if k not in known:
                raise SimConfigError(f"unknown tenant key {k!r}", field=f"{where}.{k}")
        trace: Any = None
        src = d.pop("trace", None)
        wl = d.pop("workload", None)
        if src is not None and wl is not None:
            raise SimConfigError("give either trace or workload", field=f"{where}.workload")
        if src is not None:
            from .. import traces

            p = Path(str(src))
            if not p.is_absolute() and base_dir is not None and (Path(base_dir) / p).exists():
                p = Path(base_dir) / p
            try:
                if not p.exists() and str(src) in {g.name for g in traces.BUNDLED}:
                    p = Path(traces.bundled(str(src)))
                trace = traces.load(p).to_sim_events(gpu_preset)
            except (OSError, ValueError, KeyError) as exc:
                raise SimConfigError(f"cannot load trace {src!r}: {exc}", field=f"{where}.trace") from None
        elif wl is not None:
            if not isinstance(wl, Mapping) or "kind" not in wl:
                raise SimConfigError("workload needs a kind (streaming, random_access, hot_cold, pagerank, "
                                     "training_step, llama7b_step, rising, kv_serving, moe_expert_parallel, "
                                     "allreduce_training)", field=f"{where}.workload")
            kw = dict(wl)
            kind = str(kw.pop("kind"))
            fn = getattr(workloads, kind, None)
            if kind.startswith("_") or kind in ("make_trace",) or not callable(fn):
                raise SimConfigError(f"unknown workload kind {kind!r}", field=f"{where}.workload.kind")
            try:
                trace = fn(**kw)
            except TypeError as exc:
                raise SimConfigError(str(exc), field=f"{where}.workload") from None
        try:
            spec = cls(trace=trace, **d)
        except TypeError as exc:
            raise SimConfigError(str(exc), field=where) from None
        if not isinstance(spec.gpu, int) or spec.gpu < 0:
            raise SimConfigError(f"gpu {spec.gpu!r} must be a GPU index", field=f"{where}.gpu")
        if not isinstance(spec.steps, int) or spec.steps < 0:
            raise SimConfigError(f"steps {spec.steps!r} must be >= 0", field=f"{where}.steps")
        if not isinstance(spec.static_bytes, int) or spec.static_bytes < 0:
            raise SimConfigError(f"static_bytes {spec.static_bytes!r} must be >= 0", field=f"{where}.static_bytes")
        if spec.role is not None and spec.role not in ("none", "harvester", "lender", "both"):
            raise SimConfigError(f"unknown role {spec.role!r}", field=f"{where}.role")
        return spec
