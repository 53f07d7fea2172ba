"""The data the TUI shows, independent of where it comes from (kernel, simulator, fake).

Sources (``huvm_top.sources``) turn their backend's objects into these plain, immutable records, so the
widgets and the tests need nothing but this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

# Counters of one GPU or one pair, by metric name; array fields are flattened as ``host_reason[4]``.
Counters = dict[str, int]


@dataclass(frozen=True)
class GpuInfo:
    """Static facts about one GPU (GET_INFO)."""

    index: int
    name: str
    uuid: str
    memory_bytes: int
    present: bool = True


@dataclass(frozen=True)
class NodeInfo:
    """What the source is attached to."""

    backend: str  # "kernel", "sim", "fake", ...
    description: str  # one line for the status bar, e.g. "sim: consolidation (4 GPUs)"
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True)
class VaSpace:
    """One process's address space (LIST_VA_SPACES): who it is and its counters."""

    id: int
    pid: int
    comm: str
    registered_gpus: int  # bit i: GPU i
    counters: Counters


@dataclass(frozen=True)
class Snapshot:
    """One GET_STATS snapshot, plus the free memory of GET_INFO and the LIST_VA_SPACES taken with it."""

    timestamp_ns: int
    generation: int
    gpus: tuple[Counters, ...]
    pairs: tuple[tuple[Counters, ...], ...]  # pairs[owner][holder]
    free_bytes: tuple[int, ...] = ()
    va_spaces: tuple[VaSpace, ...] = ()


@dataclass
class GpuPolicy:
    """One per-GPU policy entry (huvm_gpu_policy_t), keyed by UUID; its fields are the header table's GPU fields
    (huvm.policy.GPU_KEYS; tests/python/test_policy_fields.py holds them equal)."""

    uuid: str
    role: int
    lend_limit_bytes: int
    lend_reserve_bytes: int
    flags: int = 0  # HUVM_GPU_POLICY_* (set by presets; not edited here)
    lend_traffic_mbyte_per_s: int = 0  # guests' traffic budget, MB/s; 0: none
    lend_slowdown_max_pct: int = 0  # the lender's slowdown bound T, %; 0: none


@dataclass
class PolicyState:
    """A whole policy (huvm_policy_t): node-wide fields by name, and the GPU entries."""

    generation: int
    node: dict[str, int]
    gpus: list[GpuPolicy] = field(default_factory=list)

    def copy(self) -> PolicyState:
        return PolicyState(
            self.generation,
            dict(self.node),
            [replace(g) for g in self.gpus],
        )


@dataclass(frozen=True)
class FieldError:
    """One refused field: ``field`` is ``prefetch_chunks`` or ``gpus[1].lend_reserve_bytes``."""

    field: str
    message: str


class PolicyRefused(Exception):
    """The policy was refused, by the local checks or by the core (``by`` says which)."""

    def __init__(self, field: str, message: str, by: Literal["check", "core"] = "core") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.by = by


class SourceError(Exception):
    """The source cannot be opened or read (device gone, no permission, ...): one line for the user."""


class NodeAbsent(SourceError):
    """The node is not there now but may come (the module is not loaded, or the stock module is): huvm-top
    says so and waits for it instead of exiting. ``reason`` is huvm's (``no-device``, ``stock-module``)."""

    def __init__(self, message: str, reason: str = "no-device") -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def headline(self) -> str:
        """What the screen says while it waits."""
        if self.reason == "stock-module":
            return "stock nvidia-uvm loaded, waiting for the patched module"
        return "module not loaded, waiting"


@dataclass(frozen=True)
class TraceEvent:
    """One huvm tracepoint / USDT probe hit (driver/core/huvm_events.h: gpu, peer, reason, bytes, va)."""

    ts_ns: int
    name: str
    gpu: int
    peer: int
    reason: int
    bytes: int
    va: int
