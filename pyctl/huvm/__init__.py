"""huvm: the control plane of the peer-GPU eviction tier of nvidia-uvm (binding, backends, policy, stats,
topology, exporter, huvmctl). The lab (simulated node, traces, experiments, calibration) is :mod:`huvmlab`,
built on this package, never the reverse (docs/architecture.md).

    import huvm
    with huvm.open(backend="sim") as node:          # or "kernel" / "auto"
        print(node.info().gpus)
        node.set(["prefetch_chunks=16", "gpu.1.role=lender"])
        print(node.stats().total("evict_to_peer"))

Public API (imported lazily, so ``huvm.metrics`` works without the C extension):
``open``, ``Node``, ``Policy``, ``GpuPolicy``, ``NodeInfo``, ``StatsSnapshot``, ``StatsDelta``, ``Topology``,
``discover_topology``, ``Watcher``, and the exceptions of :mod:`huvm.errors`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "open": ("client", "open"),
    "Node": ("client", "Node"),
    "Policy": ("policy", "Policy"),
    "GpuPolicy": ("policy", "GpuPolicy"),
    "NodeInfo": ("info", "NodeInfo"),
    "StatsSnapshot": ("stats", "StatsSnapshot"),
    "StatsDelta": ("stats", "StatsDelta"),
    "Topology": ("topology", "Topology"),
    "discover_topology": ("topology", "discover"),
    "Watcher": ("watch", "Watcher"),
    "HuvmError": ("errors", "HuvmError"),
    "PermissionDenied": ("errors", "PermissionDenied"),
    "AbiMismatch": ("errors", "AbiMismatch"),
    "InvalidValue": ("errors", "InvalidValue"),
    "UnknownGpu": ("errors", "UnknownGpu"),
    "Conflict": ("errors", "Conflict"),
    "NotSupported": ("errors", "NotSupported"),
    "DeviceUnavailable": ("errors", "DeviceUnavailable"),
    "UsageError": ("errors", "UsageError"),
    "PolicyError": ("errors", "PolicyError"),
    "PolicyFileError": ("errors", "PolicyFileError"),
    "ConfigError": ("errors", "ConfigError"),
}

__all__ = ["__version__", *_LAZY]

# The lab's old names (huvm.sim, huvm.experiment, ...) stay importable, deprecated, for one release.
from . import moved as _moved  # noqa: E402

_moved.install()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'huvm' has no attribute {name!r}")
