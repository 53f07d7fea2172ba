"""TenantSpec: one workload on one GPU of the simulated node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt


class SimTraceLike(Protocol):
    """What the simulator reads from a trace: :class:`huvm.traces.SimTrace` (docs/traces.md) or the synthetic
    ones of :mod:`huvm.sim.workloads`."""

    name: str
    op_time_ns: npt.NDArray[np.uint64]
    op_first_touch: npt.NDArray[np.uint32]
    touch_chunk: npt.NDArray[np.uint32]
    touch_mode: npt.NDArray[np.uint8]
    chunk_alloc_op: npt.NDArray[np.int32]
    chunk_free_op: npt.NDArray[np.int32]


@dataclass(frozen=True)
class TenantSpec:
    """A workload on GPU ``gpu``.

    * ``trace`` None: an idle tenant holding ``static_bytes`` (cudaMalloc) and nothing else.
    * ``managed`` True: its trace's memory is UVM managed (demand paged, evictable: harvesters and UVM
      lenders); False: cudaMalloc (resident from its allocation op, never evicted; making room for it
      takes back lent memory first -- the give-back path).
    * ``steps``: repetitions of the trace; ``background`` True: it loops until every foreground tenant is
      done (co-runners whose own time is not the measured one).
    * ``role``: the GPU's huvm role ("harvester", "lender", "both", "none"); None keeps the preset's
      default (both for huvm and huvm-atc22). Ignored under stock and ideal.
    * ``lend_reserve_bytes`` / ``lend_limit_bytes``: the GPU's lending policy (None: preset default).
    """

    gpu: int
    trace: Any = None
    name: str = ""
    steps: int = 1
    managed: bool = True
    background: bool = False
    static_bytes: int = 0
    start_ns: int = 0
    role: str | None = None
    lend_reserve_bytes: int | None = None
    lend_limit_bytes: int | None = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.trace is not None:
            return str(getattr(self.trace, "name", "trace"))
        return "idle"
