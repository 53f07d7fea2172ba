"""The per-GPU rates a lender's slowdown bound T weighs (``SET_GPU_RATES`` / ``GET_GPU_RATES``, ABI 2.3).

Two facts about each GPU that the admin's tooling measures and the core cannot: its HBM bandwidth (T clamps the
GPU's guest-traffic budget to ``hbm x T / (100 + T)``) and its give-back rate, the rate at which it evicts guests'
chunks to the host (T sizes what a ``LEND_ABOVE_PEAK`` lender lends above its recent peak; without it the core
assumes the host link's line rate). Both in MB/s (10^6 B/s); 0 = unknown.

:func:`from_node_file` reads them from the node TOML ``huvmctl calibrate`` writes, with the simulator's rule
(``huvm_sim.c``'s ``sim_set_gpu_rates``): HBM = a 2 MiB chunk over ``lend_chunk_ns``; give-back = a 2 MiB chunk
over ``evict_service_ns + pcie_latency_ns`` plus its copy at the GPU's ``pcie_mbyte_per_s``. A simulated node
loaded from the same file reports the same rates (tests/python/test_gpu_rates.py checks it).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import abi
from .errors import ConfigError, PolicyError
from .units import parse_rate

#: bytes of one chunk times 1000: a chunk's time in ns -> a rate in MB/s (bytes per us)
_US_BYTES = int(abi.lib.HUVM_CHUNK_SIZE) * 1000


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


def _int(table: Any, key: str, where: str, file: str) -> int:
    v = table.get(key) if isinstance(table, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError("missing or not a non-negative integer", file=file, key=f"{where}{key}")
    return v


def rates_from_costs(lend_chunk_ns: int, evict_service_ns: int, pcie_latency_ns: int,
                     pcie_mbyte_per_s: int) -> tuple[int, int]:
    """(HBM, give-back) in MB/s from a node model's costs: the simulator's rule (``sim_set_gpu_rates``)."""
    hbm = _US_BYTES // lend_chunk_ns if lend_chunk_ns else 0
    copy_ns = _US_BYTES // pcie_mbyte_per_s if pcie_mbyte_per_s else 0
    chunk_ns = evict_service_ns + pcie_latency_ns + copy_ns
    giveback = _US_BYTES // chunk_ns if chunk_ns and pcie_mbyte_per_s else 0
    return min(hbm, max_rate()), min(giveback, max_rate())


def from_node_file(path: str | Path) -> list[tuple[int, int]]:
    """(HBM, give-back) in MB/s of each GPU of a node TOML (``huvmctl calibrate``'s ``NAME.toml``: a ``[node]``
    table with ``[node.costs]`` and ``[[node.gpus]]``); ConfigError (one line, naming file and key) otherwise."""
    file = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("no such file", file=file) from None
    except OSError as exc:
        raise ConfigError(exc.strerror or str(exc), file=file) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not TOML ({str(exc).splitlines()[0]})", file=file) from None
    node = data.get("node")
    if not isinstance(node, dict):
        raise ConfigError("no [node] table (huvmctl calibrate's node TOML)", file=file, key="node")
    costs = node.get("costs")
    if not isinstance(costs, dict):
        raise ConfigError("no [node.costs] table", file=file, key="node.costs")
    gpus = node.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, dict) for g in gpus):
        raise ConfigError("no [[node.gpus]] entries", file=file, key="node.gpus")
    lend = _int(costs, "lend_chunk_ns", "node.costs.", file)
    evict = _int(costs, "evict_service_ns", "node.costs.", file)
    latency = _int(costs, "pcie_latency_ns", "node.costs.", file)
    if lend == 0:
        raise ConfigError("must be positive", file=file, key="node.costs.lend_chunk_ns")
    out = []
    for i, g in enumerate(gpus):
        pcie = _int(g, "pcie_mbyte_per_s", f"node.gpus[{i}].", file)
        if pcie == 0:
            raise ConfigError("must be positive", file=file, key=f"node.gpus[{i}].pcie_mbyte_per_s")
        out.append(rates_from_costs(lend, evict, latency, pcie))
    return out
