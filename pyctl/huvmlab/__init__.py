"""huvmlab: the lab of huvm -- the simulated node, workload traces, experiments and calibration -- built on the
control plane :mod:`huvm` (never the reverse: docs/architecture.md, "Packages").

    import huvm, huvmlab
    with huvm.open(backend="sim", sim_config="dgx-a100") as node:   # the lab's simulated node, by registry
        print(node.info().gpus)
    spec = huvmlab.load_experiment("pyctl/huvm/examples/consolidation.toml")

Subpackages: :mod:`huvmlab.sim` (the simulated node), :mod:`huvmlab.traces`, :mod:`huvmlab.experiment`,
:mod:`huvmlab.calibration`; :mod:`huvmlab.cli` holds the lab's huvmctl subcommands (added to huvmctl by entry
point). The public objects below are what other packages (the TUI, huvm_top) use; imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, tuple[str, str | None]] = {
    "SimBackend": ("simbackend", "SimBackend"),
    "open_backend": ("simbackend", "open_backend"),
    "SimNode": ("sim", "SimNode"),
    "NodeConfig": ("sim", "NodeConfig"),
    "TenantSpec": ("sim", "TenantSpec"),
    "workloads": ("sim.workloads", None),
    "load_experiment": ("experiment", "load"),
    "parse_experiment": ("experiment.spec", "parse"),
    "ExperimentSpec": ("experiment", "ExperimentSpec"),
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(f"{__name__}.{module}")
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'huvmlab' has no attribute {name!r}")
