"""SimSource: a simulated node that moves, for ``huvm-top --sim`` on a machine without a GPU.

A background thread drives the node while the app reads it like any live node (GET_STATS, GET_INFO and the
policy commands go through the same dispatch as the kernel's), all under the LiveSource's one lock: a
scenario (:mod:`huvm_top.sources.scenario`) runs on huvm's simulator (:mod:`huvmlab.sim`) in slices of simulated
time paced to the wall clock (``speed`` simulated seconds per second); when it ends it starts again on a fresh
node with the policy then in force (counters restart from zero).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from huvm import errors as herr
from huvm.client import Node

from huvm_top.model import NodeInfo, Snapshot, SourceError
from huvm_top.sources.live import LiveSource

TICK_S = 0.05  # wall time between two slices


class SimSource(LiveSource):
    """A LiveSource over a simulated node, driven by a background thread until :meth:`close`."""

    def __init__(self, sim_config: str | None = None, speed: float = 1.0) -> None:
        super().__init__(backend="sim", sim_config=sim_config)
        self.speed = speed
        self.restarts = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._scenario: Any = None
        self._sim: Any = None
        self._target_ns = 0

    # building the node

    def open(self) -> NodeInfo:
        if self.node is None:
            self.node = self._make_node()
        info = super().open()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="huvm-top-sim", daemon=True)
            self._thread.start()
        return info

    def _make_node(self) -> Node:
        from huvm_top.sources import scenario

        try:
            self._scenario = scenario.load(self.sim_config)
            node = self._fresh_node(None)
        except herr.HuvmError as exc:
            raise SourceError(str(exc).splitlines()[0]) from exc
        self.label = f"sim: {self._scenario.name}"
        return node

    def _fresh_node(self, policy: Any) -> Node:
        """A new simulated node with the scenario's tenants, and ``policy`` (a huvm Policy), else the
        scenario's policy or settings."""
        from huvm import policy as hp
        from huvmlab import SimBackend, SimNode

        sc = self._scenario
        sim = SimNode(sc.config, preset=sc.policy_preset)
        for t in sc.tenants:
            sim.add_tenant(replace(t, role=None))  # roles go through the policy below
        node = Node(SimBackend(sim))
        policy = policy if policy is not None else sc.policy
        if policy is not None:
            node.set_policy(replace(policy, generation=0))
        elif sc.settings:
            node.apply(hp.parse_assignments(sc.settings, node.info()))
        self._sim = sim
        return node

    # the driving thread

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            dt_ns = int((now - last) * self.speed * 1e9)
            last = now
            try:
                with self._lock:
                    if self.node is None:
                        return
                    self._advance_sim(dt_ns)
            except Exception as exc:  # noqa: BLE001 - reported by the next snapshot; the thread stops
                self.error = f"simulation stopped: {str(exc).splitlines()[0] if str(exc) else exc!r}"
                return

    def _advance_sim(self, dt_ns: int) -> None:
        assert self.node is not None
        if self._sim.finished:  # start over, keeping the policy the user set
            policy = self.node.get_policy()
            old = self.node
            self.node = self._fresh_node(policy)
            old.close()
            self.restarts += 1
            self._target_ns = 0
            return
        # The model moves in whole events (an op can be long): pace against our own target clock.
        self._target_ns += dt_ns
        if self._sim.now_ns < self._target_ns:
            self._sim.run(self._target_ns)

    def snapshot(self) -> Snapshot:
        if self.error:
            raise SourceError(self.error)
        return super().snapshot()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        super().close()
