"""A simulated node as a backend of :class:`huvm.node.Node`: ioctls go in-process to a
:class:`huvm.sim.node.SimNode` (the core's own dispatch). :mod:`huvm.simbackend` opens one from a preset, a
node file or an experiment file."""

from __future__ import annotations

from typing import Any


class SimBackend:
    name = "sim"

    def __init__(self, node: Any) -> None:
        self.node = node
        #: the experiment (an ExperimentSpec) the node was built from, if any (huvmctl stats shows its tenants)
        self.experiment: Any = None

    @property
    def description(self) -> str:
        return str(self.node.description)

    def ioctl(self, cmd: int, params: Any) -> object:
        return self.node.ioctl(cmd, params)

    def close(self) -> None:
        self.node.close()

    @property
    def has_workload(self) -> bool:
        """Whether the node has tenants to run: a preset or a node file has none, and its counters never move."""
        return bool(getattr(self.node, "tenants", None))

    def advance(self, seconds: float) -> None:
        """Run the node's workload for seconds of simulated time (no-op once it is done, or without one)."""
        if hasattr(self.node, "run") and not self.node.finished:
            self.node.run(until_ns=self.node.now_ns + max(int(seconds * 1e9), 1))
