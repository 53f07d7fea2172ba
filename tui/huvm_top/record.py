"""Recording and replaying what huvm-top saw (dolphie's replay, as JSON lines).

A record file is JSON lines: a header ``{"format": "huvm-top-record", "version": 1, "node": ..., "policy":
...}``, then one line per snapshot (``t`` timestamp_ns, ``gen``, ``gpus``, ``pairs``, ``free``, ``va``) and,
with ``--bcc``, one line per batch of trace events (``ev``: lists of ts_ns, name, gpu, peer, reason, bytes,
va; a replay skips them).
``huvm-top --record FILE`` writes one while it runs; ``huvm-top --replay FILE`` plays it back in the same
screens, one snapshot per refresh (``--interval`` sets the pace; space pauses). A replay is read-only.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from huvm_top.model import (
    FieldError,
    GpuInfo,
    GpuPolicy,
    NodeInfo,
    PolicyRefused,
    PolicyState,
    Snapshot,
    SourceError,
    TraceEvent,
    VaSpace,
)

FORMAT = "huvm-top-record"
VERSION = 1


def _node(info: NodeInfo) -> dict[str, Any]:
    return {"backend": info.backend, "description": info.description,
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "memory_bytes": g.memory_bytes,
                      "present": g.present} for g in info.gpus]}


def _policy(p: PolicyState) -> dict[str, Any]:
    return {"generation": p.generation, "node": p.node,
            "gpus": [dataclasses.asdict(g) for g in p.gpus]}   # uuid and the header table's GPU fields


def _snap(s: Snapshot) -> dict[str, Any]:
    return {"t": s.timestamp_ns, "gen": s.generation, "gpus": list(s.gpus), "pairs": [list(r) for r in s.pairs],
            "free": list(s.free_bytes),
            "va": [{"id": v.id, "pid": v.pid, "comm": v.comm, "gpus": v.registered_gpus, "c": v.counters}
                   for v in s.va_spaces]}


class Recorder:
    """Appends snapshots to a record file; thread-safe (the poll worker writes, the app closes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._f: IO[str] | None = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise SourceError(f"{path}: cannot write the record: {exc.strerror}") from None
        self._lock = threading.Lock()
        self.count = 0
        self.events = 0

    def header(self, info: NodeInfo, policy: PolicyState) -> None:
        self._write({"format": FORMAT, "version": VERSION, "node": _node(info), "policy": _policy(policy)})

    def add(self, snap: Snapshot) -> None:
        self._write(_snap(snap))
        self.count += 1

    def add_events(self, events: list[TraceEvent]) -> None:
        if events:
            self._write({"ev": [[e.ts_ns, e.name, e.gpu, e.peer, e.reason, e.bytes, e.va] for e in events]})
            self.events += len(events)

    def _write(self, obj: dict[str, Any]) -> None:
        with self._lock:
            if self._f is not None:
                self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
                self._f.flush()

    def close(self) -> None:
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SourceError(f"{path}:{n}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(f"{path}:{n}: not JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise SourceError(f"{path}:{n}: expected an object")
                yield n, obj


class ReplaySource:
    """A StatsSource over a record file: one recorded snapshot per call, then the last one again."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.info: NodeInfo | None = None
        self.policy: PolicyState | None = None
        self.snapshots: list[Snapshot] = []
        self.position = 0

    def open(self) -> NodeInfo:
        if self.info is not None:
            return self.info
        try:
            lines = list(_lines(self.path))
        except OSError as exc:
            raise SourceError(f"{self.path}: {exc.strerror}") from None
        if not lines or lines[0][1].get("format") != FORMAT:
            raise SourceError(f"{self.path}:1: not a huvm-top record (no {FORMAT!r} header)")
        head = lines[0][1]
        if head.get("version") != VERSION:
            raise SourceError(f"{self.path}:1: record version {head.get('version')}, this huvm-top reads {VERSION}")
        try:
            node, pol = head["node"], head["policy"]
            gpus = tuple(GpuInfo(g["index"], g["name"], g["uuid"], g["memory_bytes"], g["present"])
                         for g in node["gpus"])
            self.info = NodeInfo(node["backend"], f"replay of {self.path.name}: {node['description']}", gpus)
            self.policy = PolicyState(pol["generation"], dict(pol["node"]),
                                      [GpuPolicy(**g) for g in pol["gpus"]])
            for n, d in lines[1:]:
                if "ev" not in d:  # trace events: recorded, not replayed
                    self.snapshots.append(self._parse(n, d))
        except (KeyError, TypeError) as exc:
            raise SourceError(f"{self.path}: malformed record ({exc})") from None
        if not self.snapshots:
            raise SourceError(f"{self.path}: the record has no snapshots")
        return self.info

    def _parse(self, n: int, d: dict[str, Any]) -> Snapshot:
        try:
            return Snapshot(int(d["t"]), int(d["gen"]), tuple(d["gpus"]), tuple(tuple(r) for r in d["pairs"]),
                            tuple(d["free"]),
                            tuple(VaSpace(v["id"], v["pid"], v["comm"], v["gpus"], v["c"]) for v in d["va"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"{self.path}:{n}: malformed snapshot ({exc})") from None

    def snapshot(self) -> Snapshot:
        snap = self.snapshots[min(self.position, len(self.snapshots) - 1)]
        self.position += 1
        return snap

    @property
    def finished(self) -> bool:
        return self.position >= len(self.snapshots)

    def get_policy(self) -> PolicyState:
        if self.policy is None:
            raise SourceError("not open")
        return self.policy.copy()

    def check_policy(self, policy: PolicyState) -> list[FieldError]:
        return [FieldError("policy", "a replay is read-only")]

    def set_policy(self, policy: PolicyState) -> PolicyState:
        raise PolicyRefused("policy", "a replay is read-only", by="check")

    def preset(self, name: str) -> PolicyState:
        raise SourceError("a replay is read-only")

    def wait(self, timeout: float) -> None:
        threading.Event().wait(timeout)

    def close(self) -> None:
        pass
