"""The per-GPU rates a lender's slowdown bound T weighs (``SET_GPU_RATES`` / ``GET_GPU_RATES``, ABI 2.3).

Two facts about each GPU that the admin's tooling measures and the core cannot: its HBM bandwidth (T clamps the
GPU's guest-traffic budget to ``hbm x T / (100 + T)``) and its give-back rate, the rate at which it evicts guests'
chunks to the host (T sizes what a ``LEND_ABOVE_PEAK`` lender lends above its recent peak; without it the core
assumes the host link's line rate). Both in MB/s (10^6 B/s); 0 = unknown.

:func:`from_node_file` reads them from the node TOML ``huvmctl calibrate`` writes, with the simulator's rule
(``huvm_sim.c``'s ``sim_set_gpu_rates``, the one definition): HBM = a 2 MiB chunk over ``lend_chunk_ns``;
give-back = a 2 MiB chunk over ``evict_service_ns + pcie_latency_ns`` plus twice its copy at the GPU's
``pcie_mbyte_per_s`` (a demand copy at half the link, the worst case): it builds the simulated node the file
describes and reads the rates back from its core.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import abi
from .errors import ConfigError, PolicyError
from .units import parse_rate


@dataclass(frozen=True)
class GpuRates:
    """One GPU's rates (MB/s; 0 = unknown)."""

    gpu: int
    uuid: str
    hbm_mbyte_per_s: int
    giveback_mbyte_per_s: int


def max_rate() -> int:
    return int(abi.lib.HUVM_MAX_MBYTE_PER_S)


def check_rate(value: int, what: str) -> int:
    """value if it is a rate the ABI takes (0..HUVM_MAX_MBYTE_PER_S), else PolicyError naming what."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{what} {value!r}: must be a whole number of MB/s", key=what)
    if not 0 <= value <= max_rate():
        raise PolicyError(f"{what} {value} MB/s: must be 0 (unknown) .. {max_rate()}", key=what)
    return value


def parse_rate_arg(text: str, what: str) -> int:
    """A command-line rate (``900GB/s``, ``12000``, ``0`` = unknown) in MB/s; PolicyError (one line) otherwise."""
    try:
        value = parse_rate(text)
    except ValueError as exc:
        raise PolicyError(f"{what}: {exc}", key=what) from None
    return check_rate(value, what)


def from_node_file(path: str | Path) -> list[tuple[int, int]]:
    """(HBM, give-back) in MB/s of each GPU of a node TOML (``huvmctl calibrate``'s ``NAME.toml``), as a simulated
    node built from that file reports them: the rule is the simulator's (``sim_set_gpu_rates``), defined once,
    and the file is checked by the simulator's node loader; ConfigError (one line, naming file and key)
    otherwise."""
    from . import errors, registry  # the simulated backend is a plug-in of the registry (huvm.registry)

    file = str(path)
    if not Path(path).is_file():
        raise ConfigError("no such file", file=file)
    backend = registry.open_backend("sim", file)
    try:
        p = abi.new_params(abi.lib.HUVM_IOCTL_GET_GPU_RATES)
        backend.ioctl(abi.lib.HUVM_IOCTL_GET_GPU_RATES, p)
        errors.check(abi.lib.HUVM_IOCTL_GET_GPU_RATES, p)
        return [(int(p.hbm_mbyte_per_s[i]), int(p.giveback_mbyte_per_s[i])) for i in range(int(p.gpu_count))]
    finally:
        backend.close()
