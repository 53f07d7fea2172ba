"""Messages from the worker threads to the app (toolong style: dataclasses; bursts coalesce)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from huvm_top.model import NodeInfo, PolicyState, TraceEvent
from huvm_top.rates import Rates


@dataclass
class SourceOpened(Message):
    info: NodeInfo


@dataclass
class SourceFailed(Message):
    """The source could not be opened or read: ``error`` is one line for the user."""

    error: str
    fatal: bool


@dataclass
class SourceWaiting(Message):
    """The node is not there (yet): ``headline`` says so, ``detail`` why (one line each)."""

    headline: str
    detail: str


@dataclass
class StatsUpdated(Message):
    """A new snapshot and its rates. A newer one replaces one still queued (only the latest is drawn)."""

    rates: Rates
    latency_ms: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StatsUpdated)


@dataclass
class EventsArrived(Message):
    """A batch of trace events, with the per-event counts and histograms after them."""

    events: list[TraceEvent]
    counts: dict[str, int]
    histograms: dict[str, list[int]]
    lost: int = 0


@dataclass
class PolicyLoaded(Message):
    policy: PolicyState
