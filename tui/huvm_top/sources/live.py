"""LiveSource: a huvm node through the huvm library (``huvm.open``): the kernel module, or a simulated
node that stays still unless something drives it (see :mod:`huvm_top.sources.sim` for one that moves).

Snapshots are GET_STATS (:meth:`huvm.Node.stats`) plus GET_INFO for free memory; policy changes go through
huvm's own checks (contradictions, then the policy core on a local mirror) before SET_POLICY, and the
core's refusal comes back with the field it names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

from huvm import errors as herr
from huvm import policy as hp
from huvm.attach import WAITABLE, Attachment, attach
from huvm.client import Node
from huvm.info import NodeInfo as HuvmNodeInfo
from huvm.mirror import Mirror
from huvm.stats import StatsSnapshot

from huvm_top.metrics import pair_metrics
from huvm_top.model import (
    Counters,
    FieldError,
    GpuInfo,
    GpuPolicy,
    NodeAbsent,
    NodeInfo,
    PolicyRefused,
    PolicyState,
    Snapshot,
    SourceError,
    VaSpace,
)

T = TypeVar("T")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hint = getattr(exc, "hint", None)
    return f"{text} (hint: {hint})" if hint else text


def node_info(info: HuvmNodeInfo, description: str) -> NodeInfo:
    gpus = tuple(GpuInfo(g.index, g.name, g.uuid, g.memory_bytes, g.present) for g in info.gpus)
    return NodeInfo(info.backend_name.lower(), description, gpus)


def flatten(values: Any) -> Counters:
    """huvm counters (arrays as tuples) -> flat keys (``host_reason[4]``)."""
    out: Counters = {}
    for k, v in values.items():
        if isinstance(v, tuple):
            for i, x in enumerate(v):
                out[f"{k}[{i}]"] = int(x)
        else:
            out[k] = int(v)
    return out


def va_space(v: Any) -> VaSpace:
    return VaSpace(int(v.id), int(v.pid), str(v.comm), int(v.registered_gpus), flatten(v.counters))


def snapshot(stats: StatsSnapshot, info: HuvmNodeInfo | None, va_spaces: tuple[VaSpace, ...] = ()) -> Snapshot:
    n = len(stats.gpus)
    keys = [m.key for m in pair_metrics()]
    pairs = tuple(
        tuple({k: int(stats.pair(o, h).values.get(k, 0)) for k in keys} for h in range(n)) for o in range(n)
    )
    free = tuple(g.free_bytes for g in info.gpus) if info is not None else ()
    return Snapshot(stats.timestamp_ns, stats.generation, tuple(flatten(g.values) for g in stats.gpus), pairs, free,
                    va_spaces)


def to_state(p: hp.Policy) -> PolicyState:
    node = {"preset": p.preset, **{hp.KEYS[k].field: int(getattr(p, hp.KEYS[k].field)) for k in hp.NODE_KEYS}}
    gpus = [GpuPolicy(g.uuid, **{k: int(getattr(g, k)) for k in hp.GPU_KEYS}) for g in p.gpus]
    return PolicyState(p.generation, node, gpus)


def to_policy(s: PolicyState, base: hp.Policy | None = None) -> hp.Policy:
    gpus = tuple(hp.GpuPolicy(g.uuid, **{k: int(getattr(g, k)) for k in hp.GPU_KEYS}) for g in s.gpus)
    fields = {hp.KEYS[k].field: s.node[hp.KEYS[k].field] for k in hp.NODE_KEYS if hp.KEYS[k].field in s.node}
    return hp.Policy(s.generation, s.node.get("preset", 0), gpus=gpus, **fields)


class LiveSource:
    """A StatsSource over :func:`huvm.attach.attach` (or a given :class:`huvm.Node`, for tests).

    On the kernel backend every read opens the device and closes it again (:mod:`huvm.attach`): huvm-top
    never keeps the module from being unloaded, and reads it again when it is back. While it is not there,
    reads raise :class:`~huvm_top.model.NodeAbsent` and :meth:`wait` blocks until udev or inotify report
    the module or its device node changing."""

    def __init__(
        self,
        backend: str = "auto",
        device: str | None = None,
        sim_config: str | None = None,
        node: Node | None = None,
        attachment: Attachment | None = None,
    ) -> None:
        self.backend = backend
        self.device = device
        self.sim_config = sim_config
        self.node = node  # a node held for every call (given, or SimSource's); else sessions of attachment
        self.attachment = attachment
        self.info: HuvmNodeInfo | None = None
        self.label: str | None = None  # what the status line calls the node (default: the backend's words)
        self.va_spaces = True  # also list the processes (LIST_VA_SPACES) with each snapshot
        self._lock = threading.RLock()  # one ioctl at a time: workers of the app and of the editor

    @contextmanager
    def _session(self) -> Iterator[Node]:
        with self._lock:
            if self.node is not None:
                yield self.node
                return
            if self.attachment is None:
                raise SourceError("not open")
            try:
                with self.attachment.session() as node:
                    yield node
            except herr.DeviceUnavailable as exc:
                if exc.reason in WAITABLE:
                    raise NodeAbsent(_one_line(exc), exc.reason) from exc
                raise SourceError(_one_line(exc)) from exc

    def _call(self, what: str, fn: Callable[[Node], T]) -> T:
        try:
            with self._session() as node:
                return fn(node)
        except SourceError:
            raise
        except herr.HuvmError as exc:
            raise SourceError(f"{what}: {_one_line(exc)}") from exc

    def open(self) -> NodeInfo:
        """Attach (the node may be absent: :class:`~huvm_top.model.NodeAbsent`, and :meth:`wait`)."""
        if self.node is None and self.attachment is None:
            try:
                self.attachment = attach(self.backend, self.device, sim_config=self.sim_config)
            except herr.HuvmError as exc:
                raise SourceError(_one_line(exc)) from exc
            except OSError as exc:
                raise SourceError(f"{exc.filename or 'open'}: {exc.strerror}") from exc
        self.info = self._call("GET_INFO", lambda n: n.info())
        desc = self.label or (self.node.backend.description if self.node is not None else
                              self.attachment.description if self.attachment is not None else "huvm node")
        return node_info(self.info, f"{desc} ({len(self.info.gpus)} GPUs)")

    def wait(self, timeout: float) -> None:
        """Block until the module or its device may have changed, at most timeout seconds."""
        if self.attachment is not None:
            self.attachment.wait(timeout)
        else:
            threading.Event().wait(timeout)

    def snapshot(self) -> Snapshot:
        def read(node: Node) -> tuple[StatsSnapshot, HuvmNodeInfo, tuple[VaSpace, ...]]:
            stats, info = node.stats(), node.info()
            vas: tuple[VaSpace, ...] = ()
            if self.va_spaces:
                try:
                    vas = tuple(va_space(v) for v in node.va_spaces())
                except herr.DeviceUnavailable:
                    raise
                except herr.HuvmError:
                    self.va_spaces = False  # not offered by this backend: stop asking
            return stats, info, vas

        stats, self.info, vas = self._call("GET_STATS", read)
        return snapshot(stats, self.info, vas)

    def get_policy(self) -> PolicyState:
        return to_state(self._call("GET_POLICY", lambda n: n.get_policy()))

    def _field(self, key: str | None, policy: PolicyState) -> str:
        """huvm's key (``gpu.2.lend_reserve_bytes``, GPU index) -> the editor's field (``gpus[i].lend_reserve_bytes``,
        entry index)."""
        if not key:
            return "policy"
        sel, name = hp.split_key(key)
        name = hp.KEYS[name].field if name in hp.KEYS else name
        if sel is None:
            return name
        uuid = next((g.uuid for g in (self.info.gpus if self.info else ()) if str(g.index) == sel), sel)
        for i, g in enumerate(policy.gpus):
            if g.uuid.lower() == uuid.lower():
                return f"gpus[{i}].{name}"
        return key

    def check_policy(self, policy: PolicyState) -> list[FieldError]:
        """The policy core's validation on a mirror of the node (the one validator; it words its answer)."""
        if self.info is None:
            return []
        info = self.info
        try:
            current = self._call("GET_POLICY", lambda n: n.get_policy())
            p = to_policy(policy, current)
            Mirror(info, current).validate(p)
        except herr.PolicyError as exc:
            msg = str(exc)
            key = exc.key or ""
            if key and msg.startswith(key + ": "):
                msg = msg[len(key) + 2:]
            elif key and msg.startswith(key + "=") and ": " in msg:
                msg = msg.split(": ", 1)[1]  # "KEY=VALUE: must be ...": the field is named by the editor
            return [FieldError(self._field(exc.key, policy), msg)]
        return []

    def set_policy(self, policy: PolicyState) -> PolicyState:
        try:
            with self._session() as node:
                current = node.get_policy()
                new = node.set_policy(to_policy(policy, current))
        except SourceError:
            raise
        except herr.Conflict as exc:
            raise PolicyRefused("generation", f"{_one_line(exc)}: ctrl+r reloads") from exc
        except herr.InvalidValue as exc:
            raise PolicyRefused(exc.field or "policy", _one_line(exc)) from exc
        except herr.HuvmError as exc:
            raise SourceError(f"SET_POLICY: {_one_line(exc)}") from exc
        return to_state(new)

    def preset(self, name: str) -> PolicyState:
        try:
            value = hp.preset_value(name)
        except herr.PolicyError as exc:
            raise SourceError(_one_line(exc)) from exc
        current = self._call("GET_POLICY", lambda n: n.get_policy())
        info = self.info if self.info is not None else self._call("GET_INFO", lambda n: n.info())
        p = Mirror(info, current).preset(value)
        return to_state(replace(p, generation=current.generation))

    def close(self) -> None:
        node, self.node = self.node, None
        att, self.attachment = self.attachment, None
        with self._lock:
            if node is not None:
                node.close()
            if att is not None:
                att.close()
