"""SimNode: one simulated node (the C model in driver/sim), its tenants and its ioctl entry.

    node = SimNode(NodeConfig.preset("aws-p3.8xlarge"), preset="huvm")
    node.add_tenant(TenantSpec(gpu=0, trace=workloads.streaming(24 * GIB, ...)))
    node.set_roles({0: "harvester", 1: "lender"})
    node.run()
    node.stats()["gpus"][0]["evict_to_peer"]

``ioctl(cmd, params)`` runs one of the ABI's commands through the policy core's ``huvm_dispatch`` exactly
as the kernel module does; ``params`` is a cffi params struct (``huvm.abi.new_params(cmd)``) or a writable
buffer of the struct's size. It returns the NV_STATUS (also left in ``params.rmStatus``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from huvm import abi, errors

from ._native import ffi, lib
from .config import NodeConfig
from .errors import SimConfigError, SimRunError, SimTraceError
from .tenants import TenantSpec

PRESET_IDS: dict[str, int] = {"stock": 0, "huvm-atc22": 1, "atc22": 1, "huvm": 2}
ROLE_IDS: dict[str, int] = {"none": 0, "harvester": 1, "lender": 2, "both": 3}
UNLIMITED = (1 << 64) - 1

_SAMPLE_FIELDS = ("own_bytes", "guest_bytes", "free_bytes", "peer_bytes", "host_bytes")
_SAMPLE_DTYPE = np.dtype([("t_ns", "<u8")] + [(f, "<u8", (16,)) for f in _SAMPLE_FIELDS])


def _cdata_to_py(value: Any) -> Any:
    """cffi struct / array / integer -> plain Python (dicts, lists, ints)."""
    if not isinstance(value, ffi.CData):
        return value
    t = ffi.typeof(value)
    if t.kind == "struct":
        return {name: _cdata_to_py(getattr(value, name)) for name, _ in t.fields}
    if t.kind == "array":
        if t.item.kind == "primitive" and t.item.cname == "char":
            return ffi.string(value).decode(errors="replace")
        return [_cdata_to_py(v) for v in value]
    return value


def _str(raw: Any) -> str:
    return str(ffi.string(raw).decode(errors="replace"))


class SimNode:
    """A simulated node with the policy core in ``preset`` ("stock", "huvm-atc22" or "huvm")."""

    name = "sim"

    def __init__(self, config: NodeConfig | str, preset: str = "huvm", *, unlimited: bool = False,
                 sample_interval_ns: int = 100_000, max_samples: int = 2048) -> None:
        cfg = NodeConfig.preset(config) if isinstance(config, str) else config
        cfg.validate()
        if preset not in PRESET_IDS:
            raise SimConfigError(f"unknown policy preset {preset!r}; known: stock, huvm-atc22, huvm",
                                 field="preset")
        if sample_interval_ns < 0 or max_samples < 2:
            raise SimConfigError("sample_interval_ns must be >= 0 and max_samples >= 2",
                                 field="sample_interval_ns" if sample_interval_ns < 0 else "max_samples")
        self.config = cfg
        self.preset = preset
        self.unlimited = unlimited
        self._ccfg = self._to_c(cfg, unlimited, sample_interval_ns, max_samples)
        err = ffi.new("huvm_sim_error_t *")
        sim = lib.huvm_sim_create(self._ccfg, PRESET_IDS[preset], err)
        if sim == ffi.NULL:
            raise self._error(err, SimConfigError)
        self._sim: Any = ffi.gc(sim, lib.huvm_sim_destroy)
        self.tenants: list[TenantSpec] = []

    # ---- Backend protocol (huvm.backend) ----

    @property
    def description(self) -> str:
        return f"simulated {self.config.name} ({self.preset}{', unlimited memory' if self.unlimited else ''})"

    def ioctl(self, cmd: int, params: Any) -> int:
        """Run cmd on params in place through the core's dispatch; returns the NV_STATUS."""
        self._alive()
        if isinstance(params, ffi.CData):
            size = ffi.sizeof(params[0]) if ffi.typeof(params).kind == "pointer" else ffi.sizeof(params)
            ptr = params
        else:
            view = memoryview(params)
            if view.readonly:
                raise TypeError("params must be writable (a cffi struct, bytearray or writable memoryview)")
            size = view.nbytes
            ptr = ffi.from_buffer(view)
        return int(lib.huvm_sim_ioctl(self._sim, cmd, ptr, size))

    def path_probe(self, path: str, gpu: int, chunks: int) -> int:
        """Calibration: the ns ``chunks`` back-to-back 2 MiB moves of ``path`` ("copy": a pinned host -> GPU
        copy, "prefetch": a host -> GPU migration without a fault, "evict": GPU -> host) take through the link
        model, from time 0. Only on a node that has not run (it occupies the links)."""
        self._alive()
        paths = {"copy": lib.HUVM_SIM_PATH_COPY, "prefetch": lib.HUVM_SIM_PATH_PREFETCH,
                 "evict": lib.HUVM_SIM_PATH_EVICT}
        if path not in paths:
            raise SimConfigError(f"unknown path {path!r}; known: {', '.join(paths)}", field="path")
        if not 0 <= gpu < self.config.gpu_count or chunks < 1:
            raise SimConfigError(f"GPU {gpu} is not in 0..{self.config.gpu_count - 1} or chunks {chunks} < 1",
                                 field="path_probe")
        ns = int(lib.huvm_sim_path_probe(self._sim, paths[path], gpu, chunks))
        if ns == 0:
            raise SimRunError("the node has already run: probe a fresh node", field="path_probe")
        return ns

    def close(self) -> None:
        if self._sim is not None:
            sim, self._sim = self._sim, None
            ffi.release(sim)

    def __enter__(self) -> SimNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- setup ----

    def add_tenant(self, spec: TenantSpec) -> int:
        """Add a tenant (before the first run); returns its index."""
        self._alive()
        idx = len(self.tenants)
        if not 0 <= spec.gpu < self.config.gpu_count:
            raise SimConfigError(f"GPU {spec.gpu} is not in 0..{self.config.gpu_count - 1}",
                                 field=f"tenants[{idx}].gpu")
        c = ffi.new("huvm_sim_tenant_spec_t *")
        name = (spec.name or f"tenant{idx}").encode()[:31]
        ffi.memmove(c.name, name, len(name))
        c.gpu = spec.gpu
        c.managed = 1 if spec.managed else 0
        c.steps = 0 if spec.background else spec.steps
        c.start_ns = spec.start_ns
        c.static_bytes = spec.static_bytes
        c.host_resident = 1 if spec.host_resident else 0
        keep: list[Any] = []
        tr = spec.trace
        if tr is not None:
            arrays = _trace_arrays(tr, idx)
            c.n_ops = len(arrays["op_time_ns"])
            c.n_chunks = len(arrays["chunk_alloc_op"])
            c.n_touches = len(arrays["touch_chunk"])
            for fld, ctype in (("op_time_ns", "uint64_t *"), ("op_first_touch", "uint32_t *"),
                               ("touch_chunk", "uint32_t *"), ("touch_mode", "uint8_t *"),
                               ("chunk_alloc_op", "int32_t *"), ("chunk_free_op", "int32_t *")):
                arr = arrays[fld]
                buf = ffi.cast(ctype, ffi.from_buffer(arr)) if len(arr) else ffi.NULL
                keep.append(arr)
                setattr(c, fld, buf)
            pages = _touch_pages(tr, idx, c.n_touches)
            if pages is not None:
                keep.append(pages)
                c.touch_pages = ffi.cast("uint32_t *", ffi.from_buffer(pages))
            c.record_ops = 1 if spec.record_ops else 0
            if spec.link_send or spec.link_recv:
                link = _link_bytes(tr, idx, len(arrays["op_time_ns"]))
                keep.append(link)
                c.op_link_bytes = ffi.cast("uint64_t *", ffi.from_buffer(link))
                n = self.config.gpu_count
                c.link_send_mask = _gpu_mask(spec.link_send, n, spec.gpu, f"tenants[{idx}].link_send")
                c.link_recv_mask = _gpu_mask(spec.link_recv, n, spec.gpu, f"tenants[{idx}].link_recv")
        elif spec.link_send or spec.link_recv:
            raise SimConfigError("an idle tenant has no collectives", field=f"tenants[{idx}].link_send")
        err = ffi.new("huvm_sim_error_t *")
        got = lib.huvm_sim_add_tenant(self._sim, c, err)
        del keep
        if got < 0:
            raise self._error(err, SimTraceError if "touch" in _str(err.field) or "op" in _str(err.field)
                              else SimConfigError, tenant=spec.name or f"tenant{idx}")
        self.tenants.append(spec)
        return int(got)

    def get_policy(self) -> Any:
        """GET_POLICY: a copy of the current huvm_policy_t (a cffi ``huvm_policy_t *``)."""
        params = abi.new_params(lib.HUVM_IOCTL_GET_POLICY)
        self.ioctl(lib.HUVM_IOCTL_GET_POLICY, params)
        errors.check(lib.HUVM_IOCTL_GET_POLICY, params)
        out = ffi.new("huvm_policy_t *")
        ffi.memmove(out, ffi.addressof(params.policy), ffi.sizeof("huvm_policy_t"))
        return out

    def set_policy(self, roles: Mapping[int, str] | None = None,
                   overrides: Mapping[str, int] | None = None,
                   gpu_overrides: Mapping[int, Mapping[str, int]] | None = None) -> int:
        """SET_POLICY through the dispatch: per-GPU roles, node-wide field overrides (``preevict_chunks``,
        ``fetch_mode``...), per-GPU fields (``lend_reserve_bytes``...). Returns the new generation; a refusal
        raises :class:`huvm.errors.InvalidValue` naming the field."""
        cur = self.get_policy()
        params = abi.new_params(lib.HUVM_IOCTL_SET_POLICY)
        ffi.memmove(ffi.addressof(params.policy), cur, ffi.sizeof("huvm_policy_t"))
        params.policy.generation = 0
        for key, value in (overrides or {}).items():
            if key in ("gpus", "gpu_count", "generation") or not hasattr(params.policy, key):
                raise SimConfigError(f"unknown policy field {key!r}", field=f"policy.{key}")
            setattr(params.policy, key, int(value))
        for gpu, role in (roles or {}).items():
            if role not in ROLE_IDS:
                raise SimConfigError(f"unknown role {role!r}; known: {', '.join(ROLE_IDS)}",
                                     field=f"roles[{gpu}]")
            params.policy.gpus[self._policy_slot(params.policy, gpu)].role = ROLE_IDS[role]
        for gpu, fields in (gpu_overrides or {}).items():
            entry = params.policy.gpus[self._policy_slot(params.policy, gpu)]
            for key, value in fields.items():
                if key in ("uuid",) or not hasattr(entry, key):
                    raise SimConfigError(f"unknown per-GPU policy field {key!r}", field=f"gpus[{gpu}].{key}")
                setattr(entry, key, int(value))
        self.ioctl(lib.HUVM_IOCTL_SET_POLICY, params)
        errors.check(lib.HUVM_IOCTL_SET_POLICY, params)
        return int(params.policy.generation)

    def set_roles(self, roles: Mapping[int, str]) -> int:
        return self.set_policy(roles=roles)

    def _policy_slot(self, policy: Any, gpu: int) -> int:
        if not 0 <= gpu < self.config.gpu_count:
            raise SimConfigError(f"GPU {gpu} is not in 0..{self.config.gpu_count - 1}", field=f"roles[{gpu}]")
        uuid = self._uuid(gpu)
        for i in range(int(policy.gpu_count)):
            if bytes(ffi.buffer(policy.gpus[i].uuid)) == uuid:
                return i
        raise SimConfigError(f"GPU {gpu} has no policy entry", field=f"roles[{gpu}]")  # pragma: no cover

    def _uuid(self, gpu: int) -> bytes:
        info = abi.new_params(lib.HUVM_IOCTL_GET_INFO)
        self.ioctl(lib.HUVM_IOCTL_GET_INFO, info)
        errors.check(lib.HUVM_IOCTL_GET_INFO, info)
        return bytes(ffi.buffer(info.gpus[gpu].uuid))

    # ---- running ----

    def run(self, until_ns: int | None = None) -> bool:
        """Run until every foreground tenant is done (or simulated time ``until_ns``); True when done."""
        self._alive()
        err = ffi.new("huvm_sim_error_t *")
        st = lib.huvm_sim_run(self._sim, UNLIMITED if until_ns is None else until_ns, err)
        if st != 0:
            raise SimRunError(f"simulation stopped: {_str(err.field)}: {_str(err.message)}",
                              field=_str(err.field), status=int(st))
        return bool(lib.huvm_sim_finished(self._sim))

    @property
    def finished(self) -> bool:
        return bool(lib.huvm_sim_finished(self._sim))

    @property
    def now_ns(self) -> int:
        return int(lib.huvm_sim_now(self._sim))

    # ---- results ----

    def stats(self) -> dict[str, Any]:
        """GET_STATS through the dispatch, as a dict shaped like HUVM_GET_STATS_PARAMS (gpus and pairs cut
        to the node's GPU count)."""
        params = abi.new_params(lib.HUVM_IOCTL_GET_STATS)
        self.ioctl(lib.HUVM_IOCTL_GET_STATS, params)
        errors.check(lib.HUVM_IOCTL_GET_STATS, params)
        n = int(params.gpu_count)
        return {
            "timestamp_ns": int(params.timestamp_ns),
            "generation": int(params.generation),
            "gpu_count": n,
            "gpus": [_cdata_to_py(params.gpus[i]) for i in range(n)],
            "pairs": [[_cdata_to_py(params.pairs[a][b]) for b in range(n)] for a in range(n)],
        }

    def tenant_result(self, idx: int) -> dict[str, int]:
        out = ffi.new("huvm_sim_tenant_result_t *")
        if lib.huvm_sim_tenant_result(self._sim, idx, out) != 0:
            raise IndexError(f"no tenant {idx}")
        return {k: int(v) for k, v in _cdata_to_py(out[0]).items() if k != "pad"}

    def step_ends_ns(self, idx: int) -> list[int]:
        n = int(self.tenant_result(idx)["steps_done"])
        buf = ffi.new("uint64_t[]", max(n, 1))
        got = lib.huvm_sim_tenant_steps(self._sim, idx, buf, n)
        return [int(buf[i]) for i in range(got)]

    def op_ends_ns(self, idx: int) -> list[int]:
        """End time of every op of a tenant with ``record_ops``, in order (empty otherwise)."""
        n = min(int(self.tenant_result(idx)["ops_done"]), int(lib.HUVM_SIM_MAX_OP_RECORDS))
        buf = ffi.new("uint64_t[]", max(n, 1))
        got = lib.huvm_sim_tenant_ops(self._sim, idx, buf, n)
        return [int(x) for x in np.frombuffer(ffi.buffer(buf), dtype=np.uint64, count=got)]

    def traffic(self) -> dict[str, Any]:
        out = ffi.new("huvm_sim_traffic_t *")
        lib.huvm_sim_traffic(self._sim, out)
        n = self.config.gpu_count
        d = _cdata_to_py(out[0])
        res: dict[str, Any] = {}
        for k, v in d.items():
            res[k] = [row[:n] for row in v[:n]] if isinstance(v[0], list) else v[:n]
        return res

    def samples(self) -> dict[str, npt.NDArray[np.uint64]]:
        """Memory over time: ``t_ns`` (n,) and per-GPU arrays (n, gpus) of own/guest/free/peer/host bytes."""
        n = int(lib.huvm_sim_sample_count(self._sim))
        g = self.config.gpu_count
        if n == 0:
            out = {"t_ns": np.zeros(0, dtype=np.uint64)}
            out.update({f: np.zeros((0, g), dtype=np.uint64) for f in _SAMPLE_FIELDS})
            return out
        buf = ffi.new("huvm_sim_sample_t[]", n)
        got = lib.huvm_sim_samples(self._sim, buf, n)
        arr = np.frombuffer(ffi.buffer(buf), dtype=_SAMPLE_DTYPE, count=got).copy()
        res = {"t_ns": arr["t_ns"].copy()}
        res.update({f: arr[f][:, :g].copy() for f in _SAMPLE_FIELDS})
        return res

    def chunk_where(self, tenant: int, chunk: int) -> tuple[str, int | None]:
        holder = ffi.new("uint32_t *")
        loc = int(lib.huvm_sim_chunk_where(self._sim, tenant, chunk, holder))
        return ({0: "none", 1: "gpu", 2: "host"}[loc], int(holder[0]) if loc == 1 else None)

    def check(self) -> None:
        """Raise if the model's internal invariants do not hold (a bug, never bad input)."""
        err = ffi.new("huvm_sim_error_t *")
        bad = int(lib.huvm_sim_check(self._sim, err))
        if bad:
            raise AssertionError(f"simulator state inconsistent ({bad}): {_str(err.field)}: {_str(err.message)}")

    # ---- internals ----

    def _alive(self) -> None:
        if self._sim is None:
            raise errors.HuvmError("the simulated node is closed")

    @staticmethod
    def _error(err: Any, cls: type[SimConfigError], tenant: str | None = None) -> SimConfigError:
        field = _str(err.field)
        rec = int(err.record)
        msg = _str(err.message)
        if tenant:
            msg = f"tenant {tenant!r}: {msg}"
        return cls(msg, field=field, record=None if rec < 0 else rec, status=int(err.status))

    @staticmethod
    def _to_c(cfg: NodeConfig, unlimited: bool, sample_interval_ns: int, max_samples: int) -> Any:
        c = ffi.new("huvm_sim_config_t *")
        lib.huvm_sim_config_defaults(c)
        n = cfg.gpu_count
        c.gpu_count = n
        c.flags = (1 if unlimited else 0) | (2 if cfg.nvswitch else 0)
        for i, g in enumerate(cfg.gpus):
            name = g.name.encode()[:31]
            ffi.memmove(c.gpu_name[i], name, len(name))
            c.gpu_memory_bytes[i] = g.memory_bytes
            c.gpu_reserved_bytes[i] = g.reserved_bytes
            c.pcie_mbyte_per_s[i] = g.pcie_mbyte_per_s
            c.pcie_switch[i] = g.pcie_switch
            if g.pcie_switch:
                c.pcie_switch_mbyte_per_s[g.pcie_switch - 1] = cfg.switch_mbyte_per_s(g.pcie_switch)
            c.nvswitch_port_mbyte_per_s[i] = cfg.nvswitch_links * cfg.nvlink_mbyte_per_s_per_link
            for j in range(n):
                if i != j:
                    t, cnt, bw = cfg.link(i, j)
                    c.link_type[i][j] = t
                    c.link_count[i][j] = cnt
                    c.link_mbyte_per_s[i][j] = bw
        c.host_memory_bytes = cfg.host_memory_bytes
        k = cfg.costs
        c.fault_batch_ns = k.fault_batch_ns
        c.fault_service_ns = k.fault_service_ns
        c.populate_ns = k.populate_ns
        c.pcie_latency_ns = k.pcie_latency_ns
        c.nvlink_latency_ns = k.nvlink_latency_ns
        c.fault_batch_max = k.fault_batch_max
        c.faults_per_chunk = k.faults_per_chunk
        c.peer_fault_service_ns = k.peer_fault_service_ns
        c.lend_chunk_ns = k.lend_chunk_ns
        c.migrate_service_ns = k.migrate_service_ns
        c.evict_service_ns = k.evict_service_ns
        c.prefetch_threshold = k.prefetch_threshold
        c.fault_entries_per_group = k.fault_entries_per_group
        c.sample_interval_ns = sample_interval_ns
        c.max_samples = max_samples
        return c


def _gpu_mask(gpus: Sequence[int], gpu_count: int, own: int, where: str) -> int:
    mask = 0
    for g in gpus:
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < gpu_count or g == own:
            raise SimConfigError(f"collective peer {g!r} is not another GPU of the node (0..{gpu_count - 1}, "
                                 f"not {own})", field=where)
        mask |= 1 << g
    return mask


def _link_bytes(tr: Any, idx: int, n_ops: int) -> npt.NDArray[np.uint64]:
    """The trace's per-op collective bytes (``op_link_bytes``), checked against its op count."""
    a = getattr(tr, "op_link_bytes", None)
    where = f"tenants[{idx}].op_link_bytes"
    if a is None:
        raise SimTraceError("collective peers given, but the trace has no op_link_bytes", field=where)
    arr = np.asarray(a)
    if arr.shape != (n_ops,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise SimTraceError(f"op_link_bytes must hold one integer per op ({n_ops})", field=where)
    if arr.size and int(arr.min()) < 0:
        raise SimTraceError("op_link_bytes must not be negative", field=where, record=int(np.argmax(arr < 0)))
    return np.ascontiguousarray(arr, dtype=np.uint64)


def _touch_pages(tr: Any, idx: int, n_touches: int) -> npt.NDArray[np.uint32] | None:
    """The trace's per-touch 64 KiB group masks (``touch_pages``), checked; None: whole blocks."""
    a = getattr(tr, "touch_pages", None)
    if a is None or n_touches == 0:
        return None
    where = f"tenants[{idx}].touch_pages"
    arr = np.asarray(a)
    if arr.shape != (n_touches,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise SimTraceError(f"touch_pages must hold one integer mask per touch ({n_touches})", field=where)
    if int(arr.min()) <= 0 or int(arr.max()) > 0xFFFFFFFF:
        bad = int(np.argmax((arr <= 0) | (arr > 0xFFFFFFFF)))
        raise SimTraceError(f"touch_pages[{bad}] = {int(arr[bad])} is not a nonzero 32-bit mask", field=where,
                            record=bad)
    return np.ascontiguousarray(arr, dtype=np.uint32)


def _trace_arrays(tr: Any, idx: int) -> dict[str, npt.NDArray[Any]]:
    """The six SimTrace arrays as contiguous arrays of the C types; shapes checked, fields named."""
    want: dict[str, np.dtype[Any]] = {
        "op_time_ns": np.dtype(np.uint64), "op_first_touch": np.dtype(np.uint32),
        "touch_chunk": np.dtype(np.uint32), "touch_mode": np.dtype(np.uint8),
        "chunk_alloc_op": np.dtype(np.int32), "chunk_free_op": np.dtype(np.int32)}
    out: dict[str, npt.NDArray[Any]] = {}
    for fld, dt in want.items():
        if not hasattr(tr, fld):
            raise SimTraceError(f"the trace has no {fld}", field=f"tenants[{idx}].{fld}")
        a = np.asarray(getattr(tr, fld))
        if a.ndim != 1:
            raise SimTraceError(f"{fld} must be one-dimensional", field=f"tenants[{idx}].{fld}")
        if a.size and np.issubdtype(a.dtype, np.signedinteger) and dt.kind == "u" and int(a.min()) < 0:
            bad = int(np.argmax(a < 0))
            raise SimTraceError(f"{fld}[{bad}] = {int(a[bad])} is negative", field=f"tenants[{idx}].{fld}",
                                record=bad)
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise SimTraceError(f"{fld} must hold integers, not {a.dtype}", field=f"tenants[{idx}].{fld}")
        top = int(np.iinfo(dt).max)
        if a.size and dt.kind == "u" and int(a.max()) > top:
            bad = int(np.argmax(a > top))
            raise SimTraceError(f"{fld}[{bad}] = {int(a[bad])} is out of range", field=f"tenants[{idx}].{fld}",
                                record=bad)
        out[fld] = np.ascontiguousarray(a, dtype=dt)
    n_ops = len(out["op_time_ns"])
    if len(out["op_first_touch"]) != n_ops + 1:
        raise SimTraceError(f"op_first_touch has {len(out['op_first_touch'])} entries, expected n_ops + 1 = "
                            f"{n_ops + 1}", field=f"tenants[{idx}].op_first_touch")
    if len(out["touch_mode"]) != len(out["touch_chunk"]):
        raise SimTraceError("touch_mode and touch_chunk differ in length", field=f"tenants[{idx}].touch_mode")
    if len(out["chunk_free_op"]) != len(out["chunk_alloc_op"]):
        raise SimTraceError("chunk_free_op and chunk_alloc_op differ in length",
                            field=f"tenants[{idx}].chunk_free_op")
    if n_ops == 0:
        raise SimTraceError("the trace has no ops", field=f"tenants[{idx}].op_time_ns")
    return out
