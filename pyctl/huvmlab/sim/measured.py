"""Measurements of a real GPU node, and the simulator's UVM costs derived from them.

A *calibration record* (JSON, format ``huvm-calibration/1``) holds what ``huvmctl calibrate`` measures on one
GPU of a real node (or what the project measured by hand with the same method): the node's identity and one
list of samples per test. :func:`derive` turns it into the simulator's cost model, one rule per constant, the
same rules for every record; :func:`huvm.sim.config.node_from_measurement` into a one-GPU node.

Tests (rates in MB/s = 10^6 B/s, times in us):

========================  =================================================================================
``pinned_h2d/_d2h``       cudaMemcpy from/to pinned host memory, 1 GiB: the PCIe link's copy rate
``prefetch_h2d``          cudaMemPrefetchAsync of host-resident managed memory to the GPU (UVM's migration
                          path without faults)
``prefetch_d2h``          the same buffer prefetched back to the host (UVM's GPU-to-host path, as eviction)
``fault_stream_read``     a coalesced GPU read of host-resident managed memory (demand faults)
``fault_touch_seq``       one GPU write per 4 KiB page, all pages at once, in order (demand faults)
``fault_touch_random``    the same in a random page order
``resident_stream_read``  the same read once the buffer is resident (the GPU's memory bandwidth as a kernel sees it)
``hbm_d2d_copy``          cudaMemcpy device to device, half the buffer onto its other half: bytes read plus written
                          per second (the HBM's bandwidth for copies; optional: records before issue 28 lack it)
``fault_serial_2m_us``    one GPU thread, one byte per 2 MiB region, one fault at a time (an isolated fault)
``block_fault_us``        whole 2 MiB regions demand-faulted, N regions in flight (key: N)
========================  =================================================================================

Derivation (docs/simulator.md, "Cost model by path"): a 2 MiB block costs a *service* (the driver's work:
fault handling, page tables, host pages) plus its *copy* at the link's rate; the link's rate is the pinned
copy's. So each path's service is what its measured per-block time leaves after the copy.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import SimConfigError

FORMAT = "huvm-calibration/1"
CHUNK_BYTES = 2 << 20
#: the rate tests of a record (MB/s) and its time tests (us); block_fault_us is keyed by concurrency
RATE_TESTS = ("pinned_h2d", "pinned_d2h", "prefetch_h2d", "prefetch_d2h", "fault_stream_read", "fault_touch_seq",
              "fault_touch_random", "resident_stream_read")
TIME_TESTS = ("fault_serial_2m_us",)
#: the records the built-in single-GPU ``h200`` preset and the model's default costs come from: the project's
#: H200, measured on two days (2026-11-27 by hand, 2026-11-28 by ``huvmctl calibrate``), pooled
#: (:meth:`NodeMeasurement.pooled`: every test's samples together)
REFERENCE_RECORDS = ("h200-580.159.04", "h200-580.159.04-2026-11-28")
#: the project's H100 (SXM5 80 GB HBM3, ``huvmctl calibrate`` 2026-11-28): the ``hgx-h100`` preset's costs
H100_RECORDS = ("h100-80gb-hbm3-580.159.04-2026-11-28",)
#: PCIe transfer setup, G10's ``PCIe_latency_us`` (https://github.com/platformxlab/G10); no test here isolates it
PCIE_LATENCY_NS = 5_000
#: a fault on a block a peer holds also unmaps it on the holder and invalidates its TLB: taken as one more PCIe
#: transfer setup (assumption: no published or stored measurement)
PEER_UNMAP_NS = 5_000


class CalibrationRecordError(SimConfigError):
    """A calibration record is refused (missing test, wrong unit, not a record); ``field`` names the key."""


@dataclass(frozen=True)
class NodeMeasurement:
    """One calibration record: the node it came from and its samples."""

    gpu_name: str
    driver: str
    memory_total_bytes: int
    memory_free_bytes: int
    hbm_mbyte_per_s: int
    tests: Mapping[str, tuple[float, ...]]
    block_fault_us: Mapping[int, tuple[float, ...]]
    info: Mapping[str, Any]

    # ---- reading and writing ----

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "record") -> NodeMeasurement:
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise CalibrationRecordError(f"{where} is not a calibration record (format {FORMAT!r})", field="format")
        node = d.get("node")
        if not isinstance(node, Mapping):
            raise CalibrationRecordError("missing table", field="node")
        for key, kind in (("gpu_name", str), ("driver", str), ("memory_total_bytes", int),
                          ("memory_free_bytes", int), ("hbm_mbyte_per_s", int)):
            if not isinstance(node.get(key), kind) or isinstance(node.get(key), bool):
                raise CalibrationRecordError(f"missing or not a {kind.__name__}", field=f"node.{key}")
        if not 0 < node["memory_free_bytes"] <= node["memory_total_bytes"]:
            raise CalibrationRecordError("free memory must be in 1..memory_total_bytes",
                                         field="node.memory_free_bytes")
        if node["hbm_mbyte_per_s"] <= 0:
            raise CalibrationRecordError("must be positive", field="node.hbm_mbyte_per_s")
        raw = d.get("tests")
        if not isinstance(raw, Mapping):
            raise CalibrationRecordError("missing table", field="tests")
        tests = {name: _samples(raw.get(name), f"tests.{name}") for name in RATE_TESTS + TIME_TESTS}
        blocks_raw = d.get("block_fault_us")
        if not isinstance(blocks_raw, Mapping) or not blocks_raw:
            raise CalibrationRecordError("missing table", field="block_fault_us")
        blocks: dict[int, tuple[float, ...]] = {}
        for k, v in blocks_raw.items():
            if not str(k).isdigit() or int(k) < 1:
                raise CalibrationRecordError(f"concurrency {k!r} is not a positive integer", field="block_fault_us")
            blocks[int(k)] = _samples(v, f"block_fault_us.{k}")
        return cls(gpu_name=node["gpu_name"], driver=node["driver"],
                   memory_total_bytes=node["memory_total_bytes"], memory_free_bytes=node["memory_free_bytes"],
                   hbm_mbyte_per_s=node["hbm_mbyte_per_s"], tests=tests, block_fault_us=dict(sorted(blocks.items())),
                   info={k: v for k, v in node.items()})

    def to_dict(self) -> dict[str, Any]:
        node = dict(self.info)
        node.update(gpu_name=self.gpu_name, driver=self.driver, memory_total_bytes=self.memory_total_bytes,
                    memory_free_bytes=self.memory_free_bytes, hbm_mbyte_per_s=self.hbm_mbyte_per_s)
        return {"format": FORMAT, "node": node, "tests": {k: list(v) for k, v in self.tests.items()},
                "block_fault_us": {str(k): list(v) for k, v in self.block_fault_us.items()}}

    @classmethod
    def load(cls, path: str | Path) -> NodeMeasurement:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CalibrationRecordError(f"{p}: no such file", field="record") from None
        except OSError as exc:
            raise CalibrationRecordError(f"{p}: {exc.strerror}", field="record") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CalibrationRecordError(f"{p}: not JSON ({exc.msg}, line {exc.lineno})", field="record") from None
        return cls.from_dict(data, where=str(p))

    @classmethod
    def builtin(cls, name: str) -> NodeMeasurement:
        """A record shipped in ``huvm/data/calibration/`` (``h200-580.159.04``: the project's H200)."""
        f = resources.files("huvm.data").joinpath(f"calibration/{name}.json")
        if not f.is_file():
            raise CalibrationRecordError(f"no built-in calibration record {name!r}", field="record")
        return cls.from_dict(json.loads(f.read_text(encoding="utf-8")), where=name)

    @classmethod
    def pooled(cls, records: Sequence[NodeMeasurement], names: Sequence[str] = ()) -> NodeMeasurement:
        """One measurement of several records of one GPU model and driver: every test's samples together (each
        median is then over all of them), the memory of the first, the HBM rate the median of the records'
        measured copy rates (``hbm_source`` ``measured-d2d``) where any has one, else the first's."""
        if not records:
            raise CalibrationRecordError("no records to pool", field="record")
        first = records[0]
        for r in records[1:]:
            if (r.gpu_name, r.driver, r.memory_total_bytes) != (first.gpu_name, first.driver,
                                                                first.memory_total_bytes):
                raise CalibrationRecordError(
                    f"cannot pool {r.gpu_name} (driver {r.driver}) with {first.gpu_name} (driver {first.driver}): "
                    f"one GPU model, driver and memory size only", field="record")
        if len(records) == 1:
            return first
        d2d = [r.hbm_mbyte_per_s for r in records if r.info.get("hbm_source") == "measured-d2d"]
        hbm = round(statistics.median(d2d)) if d2d else first.hbm_mbyte_per_s
        tests = {k: tuple(x for r in records for x in r.tests[k]) for k in first.tests}
        keys = sorted({c for r in records for c in r.block_fault_us})
        blocks = {c: tuple(x for r in records for x in r.block_fault_us.get(c, ())) for c in keys}
        info = dict(first.info)
        info.update(hbm_mbyte_per_s=hbm, hbm_source="measured-d2d" if d2d else first.info.get("hbm_source", ""),
                    date=", ".join(dict.fromkeys(str(r.info.get("date", "?")) for r in records)),
                    host=" | ".join(dict.fromkeys(str(r.info.get("host", "?")) for r in records)),
                    method=f"{len(records)} records pooled, each test's samples together: " + " | ".join(
                        dict.fromkeys(str(r.info.get("method", "?")) for r in records)),
                    pooled_from=list(names) or [str(r.info.get("date", "?")) for r in records])
        return cls(gpu_name=first.gpu_name, driver=first.driver, memory_total_bytes=first.memory_total_bytes,
                   memory_free_bytes=first.memory_free_bytes, hbm_mbyte_per_s=hbm, tests=tests,
                   block_fault_us=blocks, info=info)

    @classmethod
    def builtin_pooled(cls, names: Sequence[str]) -> NodeMeasurement:
        """The shipped records ``names`` pooled (:meth:`pooled`)."""
        return cls.pooled([cls.builtin(n) for n in names], names)

    # ---- medians ----

    def median(self, test: str) -> float:
        return statistics.median(self.tests[test])

    def block_fault_median_us(self) -> float:
        """The median over every whole-block fault sample, all concurrencies together (the per-block cost
        does not change with the faults in flight: docs/simulator.md)."""
        return statistics.median(x for v in self.block_fault_us.values() for x in v)


def _samples(v: object, field: str) -> tuple[float, ...]:
    if not isinstance(v, Sequence) or isinstance(v, str) or not v:
        raise CalibrationRecordError("needs a non-empty list of samples", field=field)
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= 0:
            raise CalibrationRecordError(f"sample {x!r} is not a positive number", field=field)
        out.append(float(x))
    return tuple(out)


def copy_ns(mbyte_per_s: float) -> int:
    """A 2 MiB block's time at a rate in MB/s (ns, rounded up)."""
    return math.ceil(CHUNK_BYTES * 1000 / mbyte_per_s)


def derive(m: NodeMeasurement) -> dict[str, int]:
    """The simulator's per-path costs from a record (ns, and the link in MB/s). One rule per constant:

    * ``pcie_mbyte_per_s``: the pinned copy's rate, the slower direction.
    * ``fault_batch_ns``: an isolated fault (``fault_serial_2m_us``): what a fault costs besides its block's
      migration (the fault it serves moves one small page, not the block).
    * ``fault_service_ns``: a demand-faulted 2 MiB block (``block_fault_us``, median over every concurrency)
      less its copy at the link's rate and one transfer setup.
    * ``migrate_service_ns``: a prefetched block (``prefetch_h2d``) less its copy: what the driver adds per
      block when no fault is involved.
    * ``evict_service_ns``: a block moved to the host (``prefetch_d2h``) less its copy.
    * ``peer_fault_service_ns``: ``fault_service_ns`` plus the holder's unmap (:data:`PEER_UNMAP_NS`).
    * ``lend_chunk_ns``: 2 MiB of the GPU's HBM time at ``hbm_mbyte_per_s``.
    """
    link = min(m.median("pinned_h2d"), m.median("pinned_d2h"))
    link_copy = copy_ns(link)
    fault_service = round(m.block_fault_median_us() * 1000) - link_copy - PCIE_LATENCY_NS
    return {
        "pcie_mbyte_per_s": math.floor(link),
        "fault_batch_ns": round(m.median("fault_serial_2m_us") * 1000),
        "fault_service_ns": max(0, fault_service),
        "migrate_service_ns": max(0, copy_ns(m.median("prefetch_h2d")) - copy_ns(m.median("pinned_h2d"))),
        "evict_service_ns": max(0, copy_ns(m.median("prefetch_d2h")) - copy_ns(m.median("pinned_d2h"))),
        "peer_fault_service_ns": max(0, fault_service) + PEER_UNMAP_NS,
        "lend_chunk_ns": copy_ns(m.hbm_mbyte_per_s),
        "pcie_latency_ns": PCIE_LATENCY_NS,
    }


#: the reference measurement (the project's H200 records, pooled) and its costs: the model's defaults for every
#: preset whose GPU was not measured
REFERENCE_RECORD: NodeMeasurement = NodeMeasurement.builtin_pooled(REFERENCE_RECORDS)
REFERENCE_COSTS: dict[str, int] = derive(REFERENCE_RECORD)
#: the project's H100 measurement and its costs (``hgx-h100``, ``h100-nvl``)
H100_RECORD: NodeMeasurement = NodeMeasurement.builtin_pooled(H100_RECORDS)
H100_COSTS: dict[str, int] = derive(H100_RECORD)

#: cost keys of :func:`derive` that are :class:`~huvm.sim.config.Costs` fields (the rest are the GPU's)
COST_KEYS = ("fault_batch_ns", "fault_service_ns", "migrate_service_ns", "evict_service_ns",
             "peer_fault_service_ns", "lend_chunk_ns", "pcie_latency_ns")


def slug(m: NodeMeasurement) -> str:
    """A node name from the record's GPU name (\"NVIDIA H200\" -> \"h200\")."""
    return "-".join(m.gpu_name.lower().replace("nvidia", "").split()) or "gpu"
