"""The source adapter: what the app asks of whatever feeds it (harlequin/dolphie style).

Every method may block (an ioctl, a simulator step, a bcc read); the app calls them from thread workers
only, never from the event loop. A source is used by one worker at a time.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from huvm_top.model import FieldError, NodeInfo, PolicyState, Snapshot, TraceEvent


@runtime_checkable
class StatsSource(Protocol):
    """Counters and policy of one node (kernel module, simulated node, fake)."""

    def open(self) -> NodeInfo:
        """Attach; raises :class:`~huvm_top.model.SourceError` with a one-line reason."""
        ...

    def snapshot(self) -> Snapshot:
        """The counters now."""
        ...

    def get_policy(self) -> PolicyState:
        ...

    def check_policy(self, policy: PolicyState) -> list[FieldError]:
        """The backend library's own checks (beyond :mod:`huvm_top.policy_rules`); empty when fine."""
        ...

    def set_policy(self, policy: PolicyState) -> PolicyState:
        """Send; returns the policy now in force. Raises :class:`~huvm_top.model.PolicyRefused` (field named)
        when the core refuses; nothing is applied then."""
        ...

    def preset(self, name: str) -> PolicyState:
        """The policy a preset would give on this node (not applied)."""
        ...

    def wait(self, timeout: float) -> None:
        """After :class:`~huvm_top.model.NodeAbsent`: block until the node may have come (the module or its
        device changed), at most timeout seconds."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class EventSource(Protocol):
    """Trace events (bcc on tracepoints or USDT probes, or a fake)."""

    description: str

    def start(self) -> None:
        """Attach; raises :class:`~huvm_top.model.SourceError`."""
        ...

    def poll(self, timeout_ms: int) -> list[TraceEvent]:
        """Events since the last call (waits up to ``timeout_ms`` for the first)."""
        ...

    def counts(self) -> dict[str, int]:
        """Events seen per event name since start."""
        ...

    def histograms(self) -> dict[str, list[int]]:
        """log2 histogram of ``bytes`` per event name: slot i counts values in [2**(i-1), 2**i)."""
        ...

    def lost(self) -> int:
        """Events that did not reach :meth:`poll` (buffer overflow); counts and histograms include them."""
        ...

    def close(self) -> None:
        ...
