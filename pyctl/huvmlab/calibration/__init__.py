"""``huvmctl calibrate``: measure one GPU of a real node with the tests of :mod:`huvmlab.sim.measured`, and write
the calibration record (``huvm-calibration/1``) and the simulator's node TOML built from it.

Flow (:func:`measure`): the backend probes the GPU; :func:`make_plan` applies the safety rules (below) and
sizes every buffer; the backend runs the plan; :func:`make_record` turns the samples into a record, checked by
:meth:`NodeMeasurement.from_dict`. :func:`write` writes ``NAME.json`` (the record) and ``NAME.toml`` (a
``[node]`` table from :func:`huvmlab.sim.config.node_from_measurement`, which ``--sim-config`` loads:
:func:`write` loads it back through :class:`huvmlab.simbackend.SimBackend` and checks it gives the same node).
:func:`nearest_preset` and :func:`compare` put the node's costs next to the nearest built-in preset's. The costs
come from :func:`huvmlab.sim.measured.derive` only: nothing here derives a cost.

Safety rules (a managed allocation larger than the GPU's free memory oversubscribes it, which can stall a
shared GPU):

* no single allocation is larger than :data:`MAX_FRACTION` of the free memory the probe saw (the benchmark
  itself checks again against ``cudaMemGetInfo`` before each one); ``--size`` above that is refused;
* a GPU on which more than :data:`BUSY_SHARE` of the memory is in use (other processes, by NVML where it can
  list them, else total less free less :data:`CONTEXT_BYTES` for the probe's own context) is refused;
* the block-fault buffer is :data:`BLOCK_REGIONS` regions (2 GiB), fewer where that would not fit; concurrencies
  above its regions are left out (and said so in the notes).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from huvm.errors import HuvmError, UsageError
from huvm.units import format_size, human_bytes

from ..sim.config import PRESETS, NodeConfig, node_from_measurement
from ..sim.measured import CHUNK_BYTES, FORMAT, RATE_TESTS, TIME_TESTS, NodeMeasurement
from .backend import Backend, CalibrationRefused, GpuProcess, GpuState, Plan, Samples

__all__ = ["Backend", "Calibration", "CalibrationRefused", "CompareRow", "GpuProcess", "GpuState", "Plan",
           "Samples", "compare", "default_backend", "default_name", "from_record", "make_plan", "make_record",
           "measure", "nearest_preset", "node_toml", "write"]

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_SIZE = GIB
MIN_SIZE = 64 * MIB
MAX_SIZE = 64 * GIB
DEFAULT_REPEAT = 3
MAX_REPEAT = 32
#: the largest single allocation, as a share of the GPU's free memory
MAX_FRACTION = 0.5
#: a GPU with more than this share of its memory in use (besides the probe's own context) is busy
BUSY_SHARE = 0.10
#: what the probe's own CUDA context and the driver may hold of a free GPU (the simulator's default reserve)
CONTEXT_BYTES = 512 * MIB
#: block_fault_us's concurrencies (2 MiB regions in flight), those of the shipped H200 record
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)
#: block_fault_us's buffer: 2 GiB of regions, faulted with N in flight until all are done (the steady state, as
#: the shipped H200 record's test: one kernel on N regions alone times its first fault's wake-up with them)
BLOCK_REGIONS = 1024
#: fault_serial_2m_us: regions touched one at a time (fewer if --size holds fewer)
SERIAL_REGIONS = 64
#: the constants of the comparison table: key, what, unit
CONSTANTS: tuple[tuple[str, str, str], ...] = (
    ("memory_bytes", "GPU memory", "bytes"),
    ("pcie_mbyte_per_s", "PCIe link (pinned copy)", "MB/s"),
    ("fault_batch_ns", "fault batch (an isolated fault)", "ns"),
    ("fault_service_ns", "fault service per 2 MiB block", "ns"),
    ("migrate_service_ns", "migration service per block", "ns"),
    ("evict_service_ns", "eviction service per block", "ns"),
    ("peer_fault_service_ns", "peer fault service per block", "ns"),
    ("lend_chunk_ns", "lend chunk (2 MiB of HBM time)", "ns"),
)


def default_backend(*, nvcc: str | None = None, build_dir: Path | None = None, timeout_s: float = 1800) -> Backend:
    """The real backend (:class:`huvmlab.calibration.cuda.CudaBackend`); the CLI asks for it here, so the tests
    replace this function with their fake."""
    from .cuda import CudaBackend

    return CudaBackend(nvcc=nvcc, build_dir=build_dir, timeout_s=timeout_s)


# ---- safety and sizing ----

def check_not_busy(state: GpuState, busy_share: float = BUSY_SHARE) -> None:
    """CalibrationRefused (gpu-busy) when more than busy_share of the GPU's memory is in use by others."""
    total = state.memory_total_bytes
    others = [p for p in state.processes or () if p.used_bytes is None or p.used_bytes > 0]
    known = sum(p.used_bytes or 0 for p in others)
    used = max(known, total - state.memory_free_bytes - CONTEXT_BYTES)
    if used <= busy_share * total:
        return
    who = ", ".join(f"pid {p.pid} ({p.name}"
                    + (f", {human_bytes(p.used_bytes)}" if p.used_bytes is not None else "") + ")"
                    for p in sorted(others, key=lambda p: -(p.used_bytes or 0))[:3])
    raise CalibrationRefused(
        f"GPU {state.index} ({state.name}) is busy: {human_bytes(used)} of {human_bytes(total)} in use"
        + (f" by {who}" if who else " by another process") + f"; calibrate needs it (more than "
        f"{1 - busy_share:.0%} free) to itself", reason="gpu-busy")


def make_plan(state: GpuState, *, size_bytes: int = DEFAULT_SIZE, repeat: int = DEFAULT_REPEAT,
              fraction: float = MAX_FRACTION) -> tuple[Plan, list[str]]:
    """The plan for a probed GPU (every allocation at most fraction of its free memory) and notes on what was
    left out; CalibrationRefused when the GPU is busy or too full for size_bytes."""
    if not MIN_SIZE <= size_bytes <= MAX_SIZE or size_bytes % CHUNK_BYTES:
        raise UsageError(f"--size {size_bytes}: must be a multiple of 2MiB in {format_size(MIN_SIZE)}.."
                         f"{format_size(MAX_SIZE)}")
    if not 1 <= repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat {repeat}: must be 1..{MAX_REPEAT}")
    check_not_busy(state)
    budget = int(state.memory_free_bytes * fraction) // CHUNK_BYTES * CHUNK_BYTES
    if size_bytes > budget:
        raise CalibrationRefused(
            f"GPU {state.index} ({state.name}) has {human_bytes(state.memory_free_bytes)} free: a "
            f"{human_bytes(size_bytes)} buffer is more than {fraction:.0%} of it (lower --size)", reason="no-memory")
    regions = min(BLOCK_REGIONS, budget // CHUNK_BYTES)
    conc = tuple(n for n in CONCURRENCIES if n <= regions)
    notes = []
    if len(conc) < len(CONCURRENCIES):
        left = [n for n in CONCURRENCIES if n not in conc]
        notes.append(f"block faults with {', '.join(map(str, left))} regions in flight left out: the block-fault "
                     f"buffer is {regions} regions ({format_size(regions * CHUNK_BYTES)}), as more would be more "
                     f"than {fraction:.0%} of the free memory")
    serial = min(SERIAL_REGIONS, size_bytes // CHUNK_BYTES)
    return Plan(state.index, size_bytes, repeat, conc, regions, serial, budget), notes


# ---- the record ----

@dataclass(frozen=True)
class Calibration:
    """A record (``data``, as written; ``measurement``, as read back) and notes on how it was made."""

    data: dict[str, Any]
    measurement: NodeMeasurement
    notes: list[str] = field(default_factory=list)
    source: str = "measured"          # "measured", or the record file it was read from

    def node(self, name: str | None = None) -> NodeConfig:
        """The simulator's one-GPU node (:func:`huvmlab.sim.config.node_from_measurement`), named name."""
        m = self.measurement
        return node_from_measurement(m, name=name or default_name(m.gpu_name, m.driver))


def default_name(gpu_name: str, driver: str) -> str:
    """``<gpu>-<driver>`` (``h200-580.159.04``): the shipped records' names."""
    slug = "-".join(gpu_name.lower().replace("nvidia", "").split()) or "gpu"
    return "-".join(filter(None, (slug, "".join(c if c.isalnum() or c in ".-_" else "-" for c in driver))))


def _rounded(name: str, values: Sequence[float]) -> list[float | int]:
    if name.endswith("_us"):
        return [round(v, 3) for v in values]
    return [round(v) for v in values]


def make_record(state: GpuState, samples: Samples, plan: Plan, *, method: str, note: str | None = None,
                date: datetime.date | None = None) -> dict[str, Any]:
    """The ``huvm-calibration/1`` record of a run (checked: CalibrationRecordError if a test is missing)."""
    hbm, hbm_source = state.hbm_mbyte_per_s, state.hbm_source
    peak = hbm
    if samples.tests.get("hbm_d2d_copy"):
        # measured beats the datasheet: what a copy (a guest's chunk) really takes of the HBM, the rate the
        # lender bound T weighs (huvmctl rates load); NVML's peak stays in the record beside it
        hbm, hbm_source = round(statistics.median(samples.tests["hbm_d2d_copy"])), "measured-d2d"
    elif not hbm and samples.tests.get("resident_stream_read"):
        hbm, hbm_source = round(statistics.median(samples.tests["resident_stream_read"])), "measured"
    if not hbm:
        raise CalibrationRefused("the GPU's memory bandwidth is unknown (no NVML, no CUDA attribute, no "
                                 "resident_stream_read test)", reason="benchmark-failed")
    host = f"{platform.node() or 'unknown host'}, {platform.system()} {platform.release()}, GPU {state.index} of " \
           f"{state.gpu_count}" + (f"; {note}" if note else "")
    node: dict[str, Any] = {
        "gpu_name": state.name, "gpu_count": state.gpu_count, "driver": state.driver, "cuda": state.cuda,
        "memory_total_bytes": state.memory_total_bytes, "memory_free_bytes": state.memory_free_bytes,
        "hbm_mbyte_per_s": int(hbm), "hbm_source": hbm_source,
    }
    if peak and hbm_source == "measured-d2d":
        node["hbm_peak_mbyte_per_s"] = int(peak)
    if state.pcie_gen:
        node["pcie_gen"] = state.pcie_gen
    if state.pcie_width:
        node["pcie_width"] = state.pcie_width
    node.update({
        "topology": [["X"]], "host": host, "date": (date or datetime.datetime.now(datetime.UTC).date()).isoformat(),
        "method": f"{method}, by huvmctl calibrate: every managed buffer freshly allocated and first written by the "
                  f"CPU; rates in MB/s (10^6 B/s), times in us; {plan.repeat} repetitions (block faults: "
                  f"{plan.repeat} per concurrency, reads and writes, over "
                  f"{format_size(plan.block_regions * CHUNK_BYTES)} of regions); buffers of "
                  f"{format_size(plan.size_bytes)}, none above {format_size(plan.max_alloc_bytes)}",
        "block_fault_regions": plan.block_regions,
    })
    node.update({k: v for k, v in state.info.items() if v is not None and k not in node})
    tests = {k: _rounded(k, v) for k, v in samples.tests.items()}
    record = {"format": FORMAT, "node": node,
              "tests": {k: tests[k] for k in (*RATE_TESTS, *TIME_TESTS, *sorted(tests)) if k in tests},
              "block_fault_us": {str(k): _rounded("_us", v) for k, v in sorted(samples.block_fault_us.items())}}
    NodeMeasurement.from_dict(record, where="the measured record")
    return record


def measure(backend: Backend, gpu: int = 0, *, size_bytes: int = DEFAULT_SIZE, repeat: int = DEFAULT_REPEAT,
            note: str | None = None, date: datetime.date | None = None, state: GpuState | None = None,
            on_start: Callable[[GpuState, Plan], None] | None = None) -> Calibration:
    """Probe (unless state is the probe's), check, plan, run and record one GPU; on_start is called once the
    plan is accepted, before anything is allocated."""
    if gpu < 0:
        raise UsageError(f"--gpu {gpu}: must be a CUDA device index (0, 1, ...)")
    state = state or backend.probe(gpu)
    plan, notes = make_plan(state, size_bytes=size_bytes, repeat=repeat)
    if on_start is not None:
        on_start(state, plan)
    samples = backend.run(plan)
    data = make_record(state, samples, plan, method=backend.method, note=note, date=date)
    if state.processes:
        notes.append(f"{len(state.processes)} other process(es) on the GPU while measuring: timings may be off")
    return Calibration(data, NodeMeasurement.from_dict(data), notes)


def from_record(path: str | Path) -> Calibration:
    """A record already measured (``--record FILE``)."""
    m = NodeMeasurement.load(path)
    return Calibration(m.to_dict(), m, [], source=str(path))


def from_records(paths: Sequence[str | Path]) -> Calibration:
    """Records already measured, pooled (``--record A --record B``: one GPU model and driver, each test's samples
    together, :meth:`NodeMeasurement.pooled`); one path: :func:`from_record`. A run moves from day to day (the
    project's H200: up to 27 % on one constant), so several runs pooled give the steadier node."""
    if len(paths) == 1:
        return from_record(paths[0])
    seen: set[str] = set()
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise UsageError(f"--record {p}: given twice (its samples would count double)")
        seen.add(key)
    records = [NodeMeasurement.load(p) for p in paths]
    m = NodeMeasurement.pooled(records, [Path(p).name for p in paths])
    return Calibration(m.to_dict(), NodeMeasurement.from_dict(m.to_dict(), where="the pooled record"),
                       [f"pooled {len(paths)} records: every test's samples together"],
                       source=" + ".join(str(p) for p in paths))


# ---- the comparison ----

@dataclass(frozen=True)
class CompareRow:
    key: str
    what: str
    unit: str
    node: int
    preset: int
    ratio: float | None      # node / preset; None where the preset's is 0


def _node_values(cfg: NodeConfig) -> dict[str, int]:
    g = cfg.gpus[0]
    costs = vars(cfg.costs)
    return {k: (g.memory_bytes if k == "memory_bytes" else g.pcie_mbyte_per_s if k == "pcie_mbyte_per_s"
                else int(costs[k])) for k, _, _ in CONSTANTS}


def nearest_preset(cfg: NodeConfig) -> str:
    """The built-in preset nearest to cfg's first GPU: the least |ln(memory ratio)| + |ln(PCIe rate ratio)|
    (each preset by its first GPU; ties by name)."""
    g = cfg.gpus[0]

    def distance(name: str) -> tuple[float, str]:
        p = PRESETS[name].gpus[0]
        return (abs(math.log(p.memory_bytes / g.memory_bytes)) + abs(math.log(p.pcie_mbyte_per_s
                                                                              / g.pcie_mbyte_per_s)), name)

    return min(PRESETS, key=distance)


def compare(cfg: NodeConfig, preset: str) -> list[CompareRow]:
    """cfg's constants next to the preset's, with node / preset."""
    mine, theirs = _node_values(cfg), _node_values(PRESETS[preset])
    return [CompareRow(k, what, unit, mine[k], theirs[k], mine[k] / theirs[k] if theirs[k] else None)
            for k, what, unit in CONSTANTS]


# ---- files ----

def node_toml(cfg: NodeConfig, *, record_name: str) -> str:
    """The ``[node]`` table of cfg (a whole node: every field), which ``--sim-config FILE`` loads."""
    header = (f"# huvm simulator node from the calibration record {record_name}.json (huvmctl calibrate).\n"
              f"# One GPU: for more, add [[node.gpus]] entries and grow the topology (docs/simulator.md).\n"
              f"# huvmctl --sim --sim-config {record_name}.toml status\n")
    return header + tomli_w.dumps({"node": cfg.to_dict()})


def output_paths(out_dir: str | Path, name: str) -> tuple[Path, Path]:
    return Path(out_dir) / f"{name}.json", Path(out_dir) / f"{name}.toml"


def check_output(out_dir: str | Path, name: str | None, *, force: bool = False, record: bool = True) -> None:
    """Refuse (UsageError) before measuring: a name that is not a plain file name, an output folder that cannot
    be made or written, files there already (without force). name None: the folder only."""
    if name is not None and (not name or name in (".", "..") or "/" in name or os.sep in name
                             or name.startswith("-")):
        raise UsageError(f"--name {name!r}: must be a plain file name (no folder)")
    folder = Path(out_dir)
    there = folder  # the folder, or the nearest one above it that exists: write() makes the rest
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise UsageError(f"--out {folder}: {there} is not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        raise UsageError(f"--out {folder}: {there} is not writable")
    if name is None:
        return
    rec, toml = output_paths(folder, name)
    for p in (rec, toml) if record else (toml,):
        if p.exists() and not force:
            raise UsageError(f"{p} exists (--force overwrites it)")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise HuvmError(f"{path}: {exc.strerror or exc}") from None


def load_node(path: str | Path) -> NodeConfig:
    """A node TOML as ``huvmctl --sim-config FILE`` loads it."""
    from ..simbackend import SimBackend

    cfg: NodeConfig = SimBackend.from_config(str(path)).node.config
    return cfg


def write(cal: Calibration, out_dir: str | Path, name: str, *, record: bool = True) -> tuple[Path | None, Path]:
    """Write NAME.json (the record; not with record=False) and NAME.toml into out_dir, and check that the TOML
    loads back as the node it was written from."""
    rec, toml = output_paths(out_dir, name)
    cfg = cal.node(name)
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HuvmError(f"{out_dir}: {exc.strerror or exc}") from None
    if record:
        _write_text(rec, json.dumps(cal.data, indent=1) + "\n")
    _write_text(toml, node_toml(cfg, record_name=name))
    back = load_node(toml)
    if back != cfg:
        raise HuvmError(f"{toml} does not load back as the node it was written from (a huvm bug: please report it)")
    return (rec if record else None), toml
