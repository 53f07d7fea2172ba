"""What a calibration backend is: the :class:`Backend` protocol, the GPU it probes and the plan it runs.

Two backends implement it: :class:`huvmlab.calibration.cuda.CudaBackend` (the project's CUDA C benchmark, built
with nvcc on the target) and the tests' fake (``tests/python/test_calibration.py``: samples from the shipped
H200 record). :mod:`huvmlab.calibration` checks a probe against the safety rules before it asks for a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from huvm.errors import DeviceUnavailable


class CalibrationRefused(DeviceUnavailable):
    """``huvmctl calibrate`` will not measure here; ``reason``: ``no-gpu``, ``no-cuda``, ``gpu-busy``,
    ``no-memory``, ``benchmark-failed``."""


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML lists on the GPU; ``used_bytes`` is None where NVML does not say (containers)."""

    pid: int
    name: str
    used_bytes: int | None


@dataclass(frozen=True)
class GpuState:
    """One GPU as the backend sees it just before measuring."""

    index: int                      # the CUDA device index
    name: str
    memory_total_bytes: int
    memory_free_bytes: int          # cudaMemGetInfo's, with the probe's own CUDA context
    driver: str                     # the NVIDIA driver version (NVML), else CUDA's driver API version
    cuda: str                       # the CUDA runtime version the benchmark was built with
    gpu_count: int
    hbm_mbyte_per_s: int | None     # peak memory bandwidth (NVML or CUDA's attributes); None: unknown
    hbm_source: str = ""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    #: other processes on this GPU (NVML); None where NVML cannot list them
    processes: tuple[GpuProcess, ...] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What to run on one GPU: every buffer ``size_bytes`` or smaller, none above ``max_alloc_bytes``."""

    gpu: int
    size_bytes: int                 # the rate tests' buffer
    repeat: int                     # samples per test (block faults: per mode, reads and writes)
    concurrencies: tuple[int, ...]  # block_fault_us's keys: 2 MiB regions in flight
    block_regions: int              # block_fault_us's buffer: regions faulted in all, at every concurrency
    serial_regions: int             # fault_serial_2m_us: regions touched one at a time
    max_alloc_bytes: int            # the largest single allocation allowed (a share of the free memory)


@dataclass(frozen=True)
class Samples:
    """A run's samples: ``tests`` (name -> values, rates in MB/s, times in us; may hold tests beyond
    :data:`huvmlab.sim.measured.RATE_TESTS`) and ``block_fault_us`` (concurrency -> us per block)."""

    tests: Mapping[str, tuple[float, ...]]
    block_fault_us: Mapping[int, tuple[float, ...]]


class Backend(Protocol):
    """Measures one GPU. Both calls raise :class:`CalibrationRefused` (no GPU, no CUDA, a failed run)."""

    #: one line for the record's method, e.g. "CUDA C microbenchmarks (nvcc 12.4)"
    method: str

    def probe(self, gpu: int) -> GpuState: ...

    def run(self, plan: Plan) -> Samples: ...
