"""A lender's guest-traffic budget from a slowdown target: ``huvmctl policy lender-budget``.

The per-GPU policy key ``lend_traffic_mbyte_per_s`` (docs/policy.md "Admission") caps the
guests' copies into and out of a lender. Sizing it: a memory-bound lender slowed by the share s of its HBM time
runs 1 / (1 - s) times slower, so a target slowdown t allows s = 1 - 1 / (1 + t) (1.96 % for 2 %) of the HBM
bandwidth. The bandwidth comes from NVML (:attr:`huvm.topology.GpuTopology.hbm_mbyte_per_s`) or the caller.
The simulator's evaluation (``huvmlab.sim.matrix``, ``huvm+budget``) sizes its budgets with the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from . import abi
from .errors import PolicyError
from .info import NodeInfo
from .policy import Setting, gpu_indices, parse_setting
from .topology import Topology
from .units import format_rate, parse_rate


@dataclass(frozen=True)
class LenderBudget:
    """One GPU's budget: its HBM bandwidth (and where it came from) and the ``lend_traffic_mbyte_per_s`` it gets."""

    gpu: int
    uuid: str
    hbm_mbyte_per_s: int
    hbm_source: Literal["nvml", "given"]   # from NVML, or given (--hbm)
    share: float                    # of the HBM bandwidth guests' copies may take
    lend_traffic_mbyte_per_s: int


def parse_slowdown(text: str) -> float:
    """``"2%"`` or ``"0.02"`` -> 0.02; PolicyError (one line) unless 0 < value < 1 (0 % < target < 100 %)."""
    s = text.strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise PolicyError(f"--max-slowdown {text!r}: expected a share such as 2% or 0.02",
                          key="max_slowdown") from None
    if not 0 < value < 1:
        raise PolicyError(f"--max-slowdown {text!r}: must be above 0 % and below 100 %", key="max_slowdown")
    return value


def traffic_share(max_slowdown: float) -> float:
    """The share of a memory-bound lender's HBM time guests' copies may take for a target slowdown:
    1 / (1 - s) = 1 + max_slowdown."""
    if not 0 < max_slowdown < 1:
        raise PolicyError(f"max_slowdown {max_slowdown!r}: must be above 0 and below 1", key="max_slowdown")
    return 1 - 1 / (1 + max_slowdown)


def lend_traffic_for(hbm_mbyte_per_s: int, max_slowdown: float) -> int:
    """The guest-traffic budget (``lend_traffic_mbyte_per_s``) that keeps a memory-bound lender within
    ``max_slowdown`` (0.02: 2 %): :func:`traffic_share` of the HBM's MB/s, within the ABI's range
    (``HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S``..``HUVM_MAX_MBYTE_PER_S``)."""
    if hbm_mbyte_per_s <= 0:
        raise PolicyError(f"HBM bandwidth {hbm_mbyte_per_s} MB/s: must be positive", key="hbm")
    lo = int(abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S)
    hi = int(abi.lib.HUVM_MAX_MBYTE_PER_S)
    return min(max(int(hbm_mbyte_per_s * traffic_share(max_slowdown)), lo), hi)


def parse_hbm(text: str) -> int:
    """``--hbm``: a rate (``900GB/s``, ``900000``) in MB/s; PolicyError (one line) otherwise."""
    try:
        value = parse_rate(text)
    except ValueError as exc:
        raise PolicyError(f"--hbm: {exc}", key="hbm") from None
    if value <= 0:
        raise PolicyError(f"--hbm {text!r}: must be positive", key="hbm")
    return value


def plan(info: NodeInfo, selectors: Sequence[str], max_slowdown: float, *, hbm_mbyte_per_s: int | None = None,
         topology: Topology | None = None) -> list[LenderBudget]:
    """The budget of each selected GPU (an index, a UUID or a unique prefix, ``all``), in node order. The HBM
    bandwidth is ``hbm_mbyte_per_s`` when given, else NVML's from ``topology``; a GPU with neither is refused
    (PolicyError naming it), so that nothing is applied for a part of the selection."""
    share = traffic_share(max_slowdown)
    picked = sorted({i for sel in selectors for i in gpu_indices(sel, info, "gpu")})
    if not picked:
        raise PolicyError("no GPU selected (GPU: an index, a UUID or all)", key="gpu")
    nvml = {g.index: g.hbm_mbyte_per_s for g in topology.gpus} if topology is not None else {}
    out: list[LenderBudget] = []
    source: Literal["nvml", "given"]
    for i in picked:
        uuid = info.gpu(i).uuid
        if hbm_mbyte_per_s is not None:
            hbm, source = hbm_mbyte_per_s, "given"
        elif nvml.get(i):
            hbm, source = int(nvml[i] or 0), "nvml"
        else:
            why = "NVML did not answer" if topology is None or not topology.nvml else "NVML gave no memory clock"
            raise PolicyError(f"GPU {i} ({uuid}): its HBM bandwidth is unknown ({why}): pass --hbm, e.g. "
                              f"--hbm 900GB/s", key="hbm")
        out.append(LenderBudget(i, uuid, hbm, source, share, lend_traffic_for(hbm, max_slowdown)))
    return out


def settings(budgets: Sequence[LenderBudget], info: NodeInfo) -> list[Setting]:
    """The ``gpu.N.lend_traffic_mbyte_per_s`` settings that apply the budgets (one policy change)."""
    return [s for b in budgets
            for s in parse_setting(f"gpu.{b.gpu}.lend_traffic_mbyte_per_s", format_rate(b.lend_traffic_mbyte_per_s),
                                   info)]
