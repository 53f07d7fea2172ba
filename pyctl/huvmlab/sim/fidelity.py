"""How close the simulator's one cost model comes to real measurements (``make calibration``).

    huvmctl sim fidelity            # one line per replication row, a summary, exit 1 if a row is off
    huvmctl sim fidelity --markdown # the same as a table (docs/simulator.md)

Three groups, one model (the preset's costs, :mod:`huvm.sim.measured`), no constant per group or row:

* ``h200``: the project's H200 microbenchmarks (record ``h200-580.159.04``) run on the ``h200`` preset under
  ``stock``: demand-faulted streaming read and page touches of host-resident managed memory, whole-block faults
  at 1..1024 in flight, and the link paths (pinned copy, prefetch, GPU-to-host). Rows marked *derived* are
  tests a constant was derived from (:func:`huvm.sim.measured.derive`): they check the derivation and the link
  model run forward, not the model's reach.
* ``fig6``: the HUVM prototype's Fig 6 (:mod:`huvm.sim.replicate`): per workload, ``Ours`` (HUVM) and
  ``pre-ef-host`` (host only) over ``Base`` (stock), against the artifact's CSVs.
* ``stock``: stock UVM's geomean slowdown at 200 % and 300 % oversubscription on ARIADNE's benchmark mix
  (:mod:`huvm.sim.ariadne`, :func:`huvm.sim.calibrate.ariadne_slowdowns`) against ARIADNE's published 33.2x
  and 60.7x.

A row is ``ok`` when sim / reference is within ±25 % (``TOLERANCE``). A row of a record's test also prints the
range of the record's samples (``measured <min>-<max> over <n>``), and ``sim inside`` when the model's value
lies within it: the reference is a median of a few runs, and a reader judges an off row by their spread. The
verdict is the median's alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .config import CHUNK_BYTES, NodeConfig, node_from_measurement
from .docblock import replace_block
from .errors import SimConfigError
from .measured import H100_RECORD, REFERENCE_RECORD, NodeMeasurement, copy_ns
from .scenario import run_scenario
from .tenants import TenantSpec
from .workloads import make_trace

TOLERANCE = 0.25
GIB = 1 << 30
#: ARIADNE's published stock UVM geomean slowdown over 10 benchmarks on an RTX A5000, driver 535.86
#: (ARIADNE §III-A, Fig 2b; docs/simulator.md, table 1a)
PUBLISHED_STOCK = {2.0: 33.2, 3.0: 60.7}


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.4g}"


@dataclass(frozen=True)
class Row:
    group: str
    name: str
    sim: float
    reference: float
    unit: str
    derived: bool = False
    #: the record's samples behind the reference (empty: the reference is not a measured median)
    samples: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.sim / self.reference

    @property
    def ok(self) -> bool:
        return abs(self.ratio - 1.0) <= TOLERANCE + 1e-9

    @property
    def sim_inside(self) -> bool:
        """The model's value lies within the range of two or more samples."""
        return len(self.samples) >= 2 and min(self.samples) <= self.sim <= max(self.samples)

    @property
    def spread(self) -> str:
        """``measured <min>-<max> over <n>[, sim inside]``, or "" when the reference has fewer than two samples."""
        if len(self.samples) < 2:
            return ""
        inside = ", sim inside" if self.sim_inside else ""
        return f"measured {_num(min(self.samples))}-{_num(max(self.samples))} over {len(self.samples)}{inside}"

    def line(self) -> str:
        tail = f" ({self.spread})" if self.spread else ""
        return (f"replicate {self.group}/{self.name}: sim {self.sim:.4g} reference {self.reference:.4g} "
                f"ratio {self.ratio:.2f} {'ok' if self.ok else 'off'}{tail}")


# ---- h200: the microbenchmarks on the h200 preset ----

def _host_read(node: NodeConfig, n_chunks: int, order: np.ndarray, per_op: int, ns_per_chunk: int) -> int:
    """Runtime (ns) of one pass over n_chunks of host-resident managed memory, per_op chunks per op."""
    ops = [order[i:i + per_op] for i in range(0, len(order), per_op)]
    tr = make_trace("h200-bench", ops, [ns_per_chunk * len(o) for o in ops], n_chunks)
    res = run_scenario(node, [TenantSpec(0, tr, host_resident=True)], "stock", sample_interval_ns=0)
    return res.tenant(0).runtime_ns


def _rate(nbytes: int, ns: int) -> float:
    return nbytes * 1000 / ns   # MB/s


def h200_rows(m: NodeMeasurement = REFERENCE_RECORD, node: NodeConfig | None = None, group: str = "h200") -> list[Row]:
    """The microbenchmarks of record m (the project's H200 records, pooled) run on node (the h200 preset)."""
    node = node or NodeConfig.preset("h200")
    resident = copy_ns(m.median("resident_stream_read"))   # the read's own time once resident
    n4 = 4 * GIB // CHUNK_BYTES
    n1 = GIB // CHUNK_BYTES
    seq = np.arange(n4, dtype=np.int64)
    rnd = np.random.default_rng(7).permutation(n1).astype(np.int64)
    rows = [
        Row(group, "stream_read", _rate(4 * GIB, _host_read(node, n4, seq, 8, resident)),
            m.median("fault_stream_read"), "MB/s", samples=m.tests["fault_stream_read"]),
        Row(group, "touch_seq", _rate(4 * GIB, _host_read(node, n4, seq, n4, 0)), m.median("fault_touch_seq"),
            "MB/s", samples=m.tests["fault_touch_seq"]),
        Row(group, "touch_random", _rate(GIB, _host_read(node, n1, rnd, n1, 0)), m.median("fault_touch_random"),
            "MB/s", samples=m.tests["fault_touch_random"]),
    ]
    # whole 2 MiB regions, c in flight: one op touches c regions (2 GiB in all, as the benchmark)
    n2 = 2 * GIB // CHUNK_BYTES
    per_block = {c: _host_read(node, n2, np.arange(n2, dtype=np.int64), c, 0) / n2 / 1000
                 for c in sorted(m.block_fault_us)}
    rows.append(Row(group, "block_fault", statistics.median(per_block.values()), m.block_fault_median_us(), "us",
                    derived=True, samples=tuple(x for v in m.block_fault_us.values() for x in v)))
    lo, hi = min(per_block), max(per_block)
    if lo != hi:
        ref = statistics.median(m.block_fault_us[hi]) / statistics.median(m.block_fault_us[lo])
        rows.append(Row(group, f"block_fault_{hi}_over_{lo}", per_block[hi] / per_block[lo], ref, "x"))
    from .node import SimNode

    for path, test in (("copy", "pinned_h2d"), ("prefetch", "prefetch_h2d"), ("evict", "prefetch_d2h")):
        with SimNode(node, "stock", sample_interval_ns=0) as sim:
            ns = sim.path_probe(path, 0, n4)
        rows.append(Row(group, f"{path}_{test.split('_')[1]}", _rate(4 * GIB, ns), m.median(test), "MB/s",
                        derived=True, samples=m.tests[test]))
    return rows


# ---- fig6: the prototype's consolidation cases ----

def fig6_rows() -> list[Row]:
    from .replicate import fig6

    rows = []
    for r in fig6():
        a, s = r["artifact"], r["sim"]
        for col, label in (("Ours", "huvm"), ("pre-ef-host", "host")):
            rows.append(Row("fig6", f"case{r['case']}-{r['workload']}-{r['role']}-{label}",
                            s["Base"] / s[col], a["Base"] / a[col], "x over Base"))
    return rows


# ---- stock: slowdown against oversubscription ----

def stock_rows() -> list[Row]:
    from .calibrate import ariadne_slowdowns

    ratios = sorted(PUBLISHED_STOCK)
    return [Row("stock", f"{round(ratio * 100)}pct", float(str(r["geomean"])), PUBLISHED_STOCK[ratio], "x")
            for ratio, r in zip(ratios, ariadne_slowdowns(ratios), strict=True)]


def h100_rows() -> list[Row]:
    """The same microbenchmarks on the project's H100 (its record on its own one-GPU node)."""
    return h200_rows(H100_RECORD, node_from_measurement(H100_RECORD, name="h100"), group="h100")


def all_rows() -> list[Row]:
    return h200_rows() + h100_rows() + fig6_rows() + stock_rows()


def summary(rows: Sequence[Row]) -> str:
    groups = sorted({r.group for r in rows}, key=[r.group for r in rows].index)
    per = ", ".join(f"{g} {sum(r.ok for r in rows if r.group == g)}/{sum(r.group == g for r in rows)}"
                    for g in groups)
    derived = sum(r.derived for r in rows)
    ok = sum(r.ok for r in rows)
    inside = [f"{r.group}/{r.name}" for r in rows if not r.ok and r.sim_inside]
    noise = f"; off but inside the measured range: {', '.join(inside)}" if inside else ""
    return (f"calibration: {ok} of {len(rows)} rows within ±{TOLERANCE:.0%} ({per}); {derived} rows are tests a "
            f"constant was derived from{noise}")


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| group | row | sim | reference | unit | ratio | verdict | measured range |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.group} | {r.name}{' (derived)' if r.derived else ''} | {r.sim:.4g} | "
                     f"{r.reference:.4g} | {r.unit} | {r.ratio:.2f} | {'ok' if r.ok else 'off'} | "
                     f"{r.spread.removeprefix('measured ')} |")
    return "\n".join(lines)


DOC_BEGIN = "<!-- calibration: begin (generated by huvmctl sim fidelity --update-doc; do not edit) -->"
DOC_END = "<!-- calibration: end -->"


def doc_block(rows: Sequence[Row]) -> str:
    return "\n" + markdown(rows) + "\n\n" + summary(rows) + "\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl sim fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="a markdown table instead of lines")
    ap.add_argument("--update-doc", metavar="FILE", help="write the table between FILE's calibration markers")
    args = ap.parse_args(argv)
    rows = all_rows()
    if args.update_doc:
        try:
            changed = replace_block(args.update_doc, DOC_BEGIN, DOC_END, doc_block(rows))
        except (OSError, SimConfigError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{args.update_doc}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
        return 0
    if args.markdown:
        print(markdown(rows))
    else:
        for r in rows:
            print(r.line())
    print(summary(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
