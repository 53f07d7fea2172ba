"""SimSource: a simulated node that moves, for ``huvm-top --sim`` on a machine without a GPU.

A background thread drives the node while the app reads it like any live node (GET_STATS, GET_INFO,
policy commands), all under the LiveSource's one lock:

- with the simulator (:mod:`huvm.sim`), a scenario is run in slices of simulated time, paced to the wall
  clock (``speed`` simulated seconds per second);
- without it, a synthetic load is fed through the real policy core's test events (evictions, fault
  fetch-backs, prefetches, pre-eviction and give-backs on a 4-GPU node: huvm.testing.CoreNode), so every
  figure is still the core's own decision and accounting.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from huvm import abi as habi
from huvm import errors as herr
from huvm.client import Node

from huvm_top.model import NodeInfo, SourceError
from huvm_top.sources.live import LiveSource

TICK_S = 0.05  # wall time between two slices of load


class SyntheticLoad:
    """A deterministic load on a bare core node: GPUs 0 and 1 under memory pressure, 2 and 3 lending."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.step = 0
        self.clock_ns = 0

    def _event(self, event: int, gpu: int, count: int, flags: int = 0) -> None:
        lib = habi.lib
        p = habi.new_params(lib.HUVM_IOCTL_TEST_EVENT)
        p.event, p.gpu, p.count, p.flags = event, gpu, count, flags
        p.va = (gpu + 1) << 40 | (self.step % 4096) * 2097152
        try:
            self.node.call(lib.HUVM_IOCTL_TEST_EVENT, p)
        except herr.HuvmError:
            pass  # a refused event (e.g. nothing to give back) is part of the load

    def advance(self, dt_ns: int) -> None:
        lib = habi.lib
        self.step += 1
        self.clock_ns += dt_ns
        s = self.step
        wave = (s // 40) % 4  # load changes every ~2 s
        for gpu in (0, 1):
            self._event(lib.HUVM_TEST_EVENT_EVICT, gpu, 1 + (s + gpu) % (2 + wave))
            if s % 3 == gpu:
                self._event(lib.HUVM_TEST_EVENT_FAULT, gpu, 1 + wave)
            if s % 5 == 0:
                self._event(lib.HUVM_TEST_EVENT_PREFETCH, gpu, 2)
            if s % 7 == 0:
                self._event(lib.HUVM_TEST_EVENT_PREEVICT, gpu, 1)
            if s % 11 == 0:
                self._event(lib.HUVM_TEST_EVENT_EVICT, gpu, 1, flags=1)  # PMA context: to host
        if wave == 3 and s % 2 == 0:
            for lender in (2, 3):
                self._event(lib.HUVM_TEST_EVENT_GIVEBACK, lender, 1)


class SimSource(LiveSource):
    """A LiveSource over a simulated node, driven by a background thread until :meth:`close`."""

    def __init__(self, sim_config: str | None = None, speed: float = 1.0, node: Node | None = None) -> None:
        super().__init__(backend="sim", sim_config=sim_config, node=node)
        self.speed = speed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._load: Any = None
        self.error: str | None = None

    def open(self) -> NodeInfo:
        if self.node is None:
            self.node = self._make_node()
        info = super().open()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="huvm-top-sim", daemon=True)
            self._thread.start()
        return info

    def _make_node(self) -> Node:
        from huvm.testing import CoreNode

        if self.sim_config:
            raise SourceError("--sim-config needs the simulator (huvm.sim), which this huvm does not have")
        core = CoreNode(4)
        self._core = core
        self.label = "sim: synthetic load on the policy core"
        return Node(core)

    def _clock(self) -> int:
        return int(getattr(self._load, "clock_ns", 0))

    def _run(self) -> None:
        assert self.node is not None
        self._load = SyntheticLoad(self.node)
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            dt_ns = int((now - last) * self.speed * 1e9)
            last = now
            try:
                with self._lock:
                    self._advance_clock(dt_ns)
                    self._load.advance(dt_ns)
            except Exception as exc:  # noqa: BLE001 - reported in the status line, the thread stops
                self.error = f"simulation stopped: {exc}"
                return

    def _advance_clock(self, dt_ns: int) -> None:
        core = getattr(self, "_core", None)
        if core is not None:  # the bare core has no clock of its own: stamp the caller's time
            core.caller.now_ns = self._clock() + dt_ns

    def snapshot(self) -> Any:
        if self.error:
            raise SourceError(self.error)
        snap = super().snapshot()
        if snap.timestamp_ns == 0:  # the bare core does not stamp snapshots: use the load's clock
            from dataclasses import replace

            with self._lock:
                snap = replace(snap, timestamp_ns=self._clock())
        return snap

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        super().close()
