"""Replications of the HUVM prototype's evaluation (USENIX ATC'22) on the simulated node, next to the artifact.

    huvmctl sim replicate                 # Fig 6, Fig 8 and Fig 9 tables
    huvmctl sim replicate --update-doc docs/simulator.md
    huvmctl sim replicate --sensitivity   # Fig 6's harvesters under the model's sensitivity variants
    huvmctl sim replicate --sensitivity --seeds --scales   # ... on other draws and sizes of the graphs

* **Fig 6** (three consolidation cases on a p3.8xlarge): the artifact's result CSVs (``casys-kaist/HUVM``,
  added in commit ``ecd4acb`` and deleted in ``f498084``; ``huvm/data/replication/huvm-atc22-fig6.csv``) per
  workload: Base (stock UVM), pre-ef-host (pre-eviction and prefetch to host only) and Ours (HUVM), next to
  the simulator's ``stock``, ``pre-ef-host`` (``huvm-atc22`` with the peer tier off and local prefetch) and
  ``huvm-atc22``; speedups over Base for harvesters, slowdowns over Base for lenders.
* **Fig 8** (prefetch size, on Fig 6 case 1 as the artifact's ``scripts/fig8/case1_pagerank.sh``):
  ``prefetch_chunks`` 0, 1, 2, 4, 8, 16 at stride 2 (0-32 MB in the artifact's labels); chunks brought back
  from peers ahead of their faults count in ``fetch_from_peer`` without a fault.
* **Fig 9** (spare memory, as ``scripts/fig9/pagerank.sh``): the harvester on GPU 1, the neighbour on GPU 2
  (NV2) cudaMallocs 15052/14244/12628/9396/6164 MiB (``manual_occupy.run`` counts MiB); Base: stock, 1000 MiB.

How each case is modelled and what differs from the prototype's runs is in docs/simulator.md ("Replications").
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from .config import CHUNK_BYTES, MIB, Costs, NodeConfig
from .docblock import replace_block
from .errors import SimConfigError
from .scenario import SimResult, run_scenario
from .tenants import SimTraceLike, TenantSpec
from .traversal import GRAPH_SEED

#: the artifact's policies and ours: (artifact column, simulator policy, node-wide overrides)
POLICY_COLUMNS: tuple[tuple[str, str, str, tuple[tuple[str, int], ...]], ...] = (
    ("Base", "base_s", "stock", ()),
    ("pre-ef-host", "pre_ef_host_s", "huvm-atc22", (("peer_usage_max_pct", 1), ("prefetch_mode", 1))),
    ("Ours", "ours_s", "huvm-atc22", ()),
)
#: the prototype's driver (the artifact's ``driver/``, loaded for pre-ef-host and Ours) sets the default of
#: uvm_perf_prefetch_threshold to 1 % (``uvm_perf_prefetch.c``, UVM_PREFETCH_THRESHOLD_DEFAULT; its
#: ``driver_base/``, loaded for Base, keeps upstream's 51): a fault brings its whole 2 MiB block. Every
#: ``huvm-atc22`` run here runs on that driver.
PROTOTYPE_PREFETCH_THRESHOLD = 1
#: upstream's default (and huvm's, which leaves the density prefetcher alone)
HUVM_PREFETCH_THRESHOLD = Costs().prefetch_threshold
FIG8_CHUNKS: tuple[int, ...] = (0, 1, 2, 4, 8, 16)
FIG9_SPARE_MIB: tuple[tuple[int, int], ...] = ((5, 15052), (10, 14244), (20, 12628), (40, 9396), (60, 6164))
FIG9_BASE_MIB = 1000
#: PageRank's stand-in: the calibration's PageRank-like kernel (an edge array streamed in order, skewed
#: gathers) at 6 sweeps; its footprint (19 GiB, ~1.25x a V100's usable memory) is every graph job's
_PAGERANK_ITERATIONS = 6
#: the datasets the artifact's scripts give each traversal (scripts/fig6/case2_bfs.sh, case3_wcc.sh)
TRAVERSAL_DATASETS: dict[tuple[int, str], str] = {
    (2, "bfs"): "web-uk-2005", (3, "bfs"): "soc-twitter-2010", (3, "wcc"): "soc-twitter-2010"}


@dataclass(frozen=True)
class ArtifactRow:
    case: int
    workload: str
    role: str
    base_s: float
    pre_ef_host_s: float
    ours_s: float
    csv_path: str


def artifact_fig6() -> list[ArtifactRow]:
    """The artifact's Fig 6 numbers, as committed in its history."""
    text = resources.files("huvm.data").joinpath("replication/huvm-atc22-fig6.csv").read_text(encoding="utf-8")
    rows = csv.DictReader(ln for ln in text.splitlines() if not ln.startswith("#"))
    return [ArtifactRow(int(r["case"]), r["workload"], r["role"], float(r["base_s"]), float(r["pre_ef_host_s"]),
                        float(r["ours_s"]), r["csv_path"]) for r in rows]


@dataclass(frozen=True)
class Variant:
    """One way of running the Fig 6 model (:func:`fig6`): the replication is the defaults."""

    label: str = "as modelled"
    shared_switches: bool = True                           # the preset's assumed PCIe switch pairs 0-1, 2-3
    prototype_threshold: int = PROTOTYPE_PREFETCH_THRESHOLD  # uvm_perf_prefetch_threshold of huvm-atc22's runs
    graph_seed: int = GRAPH_SEED                            # the traversals' scaled graph
    graph_finer: int = 1                                    # the traversals' graphs this many times larger
    fault_entries_per_group: int = 0                        # a fault batch filled by 4 KiB pages (16), not blocks


#: sensitivity variants of the Fig 6 model (:func:`fig6_sensitivity`; measurements, not the replication):
#: "as modelled"; "no shared switch" (every GPU its own PCIe uplink, against the preset's assumed switch pairs
#: 0-1 and 2-3); the prototype's runs at upstream's density-prefetch threshold instead of its driver's; a fault
#: batch filled by 256 fault-buffer entries, one per 4 KiB page a fault brings, as upstream counts
#: ``uvm_perf_fault_batch_count``, instead of 256 faulted blocks (:func:`page_batches`).
SENSITIVITY: tuple[Variant, ...] = (
    Variant(),
    Variant("no shared switch", shared_switches=False),
    Variant("prototype at upstream's prefetch threshold", prototype_threshold=HUVM_PREFETCH_THRESHOLD),
    Variant("fault batches of 4 KiB-page entries", fault_entries_per_group=16),
)
#: the traversals on other draws of their scaled graphs (``--seeds``: how much of a BFS or WCC row is the one
#: graph drawn; a minute of trace generation each, so not part of :data:`SENSITIVITY`)
SEED_VARIANTS: tuple[Variant, ...] = tuple(Variant(f"graph seed {k}", graph_seed=k) for k in (1, 2, 3))
#: the traversals on larger scaled graphs (``--scales``: each chunk holds 2, 4, 8 times more elements, closer
#: to the real job's; minutes of trace generation)
SCALE_VARIANTS: tuple[Variant, ...] = tuple(Variant(f"graphs {k}x larger", graph_finer=k) for k in (2, 4, 8))


@cache
def _pagerank() -> SimTraceLike:
    from . import workloads

    return workloads.pagerank(vertices=41_652_230, edges=4_900_000_000,
                              iterations=_PAGERANK_ITERATIONS, edge_chunks_per_op=32,
                              gathers_per_op=32, name="pagerank-twitter-like")


def graph_footprint_bytes() -> int:
    """Every graph job's footprint: the PageRank stand-in's (cuGraph's real one is not published)."""
    return int(_pagerank().chunk_alloc_op.shape[0]) * CHUNK_BYTES


@cache
def _traversal(kind: str, dataset: str, seed: int = GRAPH_SEED, finer: int = 1) -> SimTraceLike:
    """BFS or WCC run for real on the dataset's scaled graph (:mod:`huvm.sim.traversal`), ``finer`` times as
    many vertices and edges as by default."""
    from . import traversal

    gen = {"bfs": traversal.bfs_trace, "wcc": traversal.wcc_trace}[kind]
    scale = max(1, traversal.default_scale(dataset) // finer)
    return gen(dataset, graph_footprint_bytes(), scale=scale, name=f"{kind}-{dataset}", seed=seed)


def _graph(kind: str, case: int, seed: int = GRAPH_SEED, finer: int = 1) -> SimTraceLike:
    if kind == "pagerank":
        return _pagerank()
    return _traversal(kind, TRAVERSAL_DATASETS[(case, kind)], seed, finer)


def _node(shared_switches: bool = True) -> NodeConfig:
    node = NodeConfig.preset("aws-p3.8xlarge")
    if shared_switches:
        return node
    return replace(node, name="aws-p3.8xlarge[no-switch]", gpus=tuple(replace(g, pcie_switch=0) for g in node.gpus))


def _dnn_lender(gpu: int, name: str, horizon_ns: int) -> TenantSpec:
    """A PyTorch training job as a lender: the caching allocator's steady cudaMalloc footprint."""
    from . import workloads

    usable = _node().usable_bytes(gpu)
    return TenantSpec(gpu, workloads.lender("steady", usable, horizon_ns), name=name, background=True,
                      managed=False, role="lender")


def _graph_lender(gpu: int, name: str, horizon_ns: int) -> TenantSpec:
    """A graph job that loops (cuGraph on managed memory) as a lender: a steady managed footprint."""
    from . import workloads

    usable = _node().usable_bytes(gpu)
    return TenantSpec(gpu, workloads.lender("steady", usable, horizon_ns), name=name, background=True,
                      managed=True, role="lender")


def fig6_case(case: int, *, shared_switches: bool = True, graph_seed: int = GRAPH_SEED,
              graph_finer: int = 1) -> tuple[NodeConfig, list[TenantSpec], dict[str, list[int]]]:
    """The node, tenants, and per artifact workload the simulator tenants that stand for it (the keywords: the
    sensitivity variants, :class:`Variant`)."""
    horizon = 20 * 10**9
    node = _node(shared_switches)

    def graph(kind: str) -> SimTraceLike:
        return _graph(kind, case, graph_seed, graph_finer)

    if case == 1:
        tenants = [TenantSpec(0, graph("pagerank"), name="pagerank@0", role="harvester"),
                   _graph_lender(3, "wcc@3", horizon),
                   _dnn_lender(1, "vgg16@1", horizon), _dnn_lender(2, "vgg16@2", horizon)]
        return node, tenants, {"pagerank": [0], "wcc": [1], "vgg": [2, 3]}
    if case == 2:
        tenants = [TenantSpec(0, graph("bfs"), name="bfs@0", role="harvester"),
                   TenantSpec(1, graph("bfs"), name="bfs@1", role="harvester"),
                   _dnn_lender(2, "mobilenet@2", horizon), _dnn_lender(3, "resnet101@3", horizon)]
        return node, tenants, {"bfs": [0, 1], "mobilenet": [2], "resnet": [3]}
    if case == 3:
        tenants = [TenantSpec(0, graph("wcc"), name="wcc@0", role="harvester"),
                   TenantSpec(1, graph("bfs"), name="bfs@1", background=True, role="harvester"),
                   _graph_lender(2, "pagerank@2", horizon), _graph_lender(3, "pagerank@3", horizon)]
        return node, tenants, {"wcc": [0], "bfs": [1], "pagerank": [2, 3]}
    raise SimConfigError(f"Fig 6 case {case} is not 1..3 (the artifact's case 4 CSVs are incomplete)",
                         field="case")


def page_batches(node: NodeConfig, entries_per_group: int) -> NodeConfig:
    """The node with fault batches filled by ``entries_per_group`` entries per 64 KiB group a fault brings.
    A whole-block fault (512 entries) then is a batch of its own, so its block service no longer includes a
    share of a batch: the measured whole-block fault less one batch's cost (the same rule that derives
    ``fault_service_ns``, with the batch charged to every block)."""
    if not entries_per_group:
        return node
    k = node.costs
    return node.with_costs(fault_entries_per_group=entries_per_group,
                           fault_service_ns=max(0, k.fault_service_ns - k.fault_batch_ns),
                           peer_fault_service_ns=max(0, k.peer_fault_service_ns - k.fault_batch_ns))


def _run(node: NodeConfig, tenants: Sequence[TenantSpec], policy: str,
         overrides: tuple[tuple[str, int], ...] = (), prototype_threshold: int = PROTOTYPE_PREFETCH_THRESHOLD
         ) -> SimResult:
    """One run; ``huvm-atc22`` (the prototype) on its driver's density-prefetch threshold."""
    if policy == "huvm-atc22":
        node = node.with_costs(prefetch_threshold=prototype_threshold)
    return run_scenario(node, list(tenants), policy, policy_overrides=dict(overrides) or None,
                        sample_interval_ns=0)


def _measure(res: SimResult, idx: Sequence[int], role: str = "harvester") -> float:
    """A workload's time: a harvester's makespan (a looping one: its first run, as the artifact's case 3 reads
    its first "Out:"); a lender's time per op (a looping job's iteration time: what the artifact's DNN and
    graph lenders report)."""
    ts = [res.tenants[i] for i in idx]
    if role == "harvester":
        return max(t.runtime_ns if not t.background else
                   (t.step_end_ns[0] if t.step_end_ns else res.sim_time_ns) for t in ts) / 1e9
    return max(t.runtime_ns / t.ops_done if t.ops_done else float("inf") for t in ts) / 1e9


def fig6(variant: Variant = Variant()) -> list[dict[str, Any]]:
    """Per case and workload: the artifact's times and the simulator's, each relative to its Base."""
    out: list[dict[str, Any]] = []
    arts = artifact_fig6()
    for case in (1, 2, 3):
        node, tenants, which = fig6_case(case, shared_switches=variant.shared_switches,
                                         graph_seed=variant.graph_seed, graph_finer=variant.graph_finer)
        node = page_batches(node, variant.fault_entries_per_group)
        results = {col: _run(node, tenants, pol, ov, variant.prototype_threshold)
                   for col, _, pol, ov in POLICY_COLUMNS}
        for a in (r for r in arts if r.case == case):
            sim = {col: _measure(results[col], which[a.workload], a.role) for col, *_ in POLICY_COLUMNS}
            art = {col: getattr(a, key) for col, key, *_ in POLICY_COLUMNS}
            out.append({"case": case, "workload": a.workload, "role": a.role, "artifact": art, "sim": sim,
                        "tenants": [tenants[i].label for i in which[a.workload]]})
    return out


def fig6_sensitivity(variants: Sequence[Variant] = SENSITIVITY) -> list[dict[str, Any]]:
    """Fig 6's harvester speedups under each variant (default :data:`SENSITIVITY`: a measurement of which
    modelling choices the rows still off depend on; the replication itself is the first variant)."""
    rows: list[dict[str, Any]] = []
    for v in variants:
        for r in fig6(v):
            if r["role"] != "harvester":
                continue
            a, s = r["artifact"], r["sim"]
            rows.append({"variant": v.label, "case": r["case"], "workload": r["workload"],
                         "huvm": s["Base"] / s["Ours"], "huvm_artifact": a["Base"] / a["Ours"],
                         "host": s["Base"] / s["pre-ef-host"], "host_artifact": a["Base"] / a["pre-ef-host"],
                         "base_s": s["Base"]})
    return rows


def fig8() -> list[dict[str, Any]]:
    """huvm-atc22 on Fig 6 case 1 with prefetch_chunks swept (stride 2), the harvester's time."""
    node, tenants, which = fig6_case(1)
    base = _measure(_run(node, tenants, "stock"), which["pagerank"])
    rows = []
    for n in FIG8_CHUNKS:
        over = (("prefetch_chunks", n), ("prefetch_stride", 2)) if n else (("prefetch_mode", 0),)
        res = _run(node, tenants, "huvm-atc22", over)
        t = _measure(res, which["pagerank"])
        g0 = res.stats["gpus"][0]
        rows.append({"prefetch": f"{n * 2} MiB ({n} chunks)", "runtime_s": t, "speedup_vs_base": base / t,
                     "faults": g0["faults"], "fetch_from_peer": g0["fetch_from_peer"],
                     "prefetch_to_peer": g0["prefetch_to_peer"]})
    return rows


def fig9_node() -> NodeConfig:
    """GPUs 1 and 2 of the p3.8xlarge (NV2, each behind its own PCIe switch), as the artifact's script."""
    p3 = _node()
    return replace(p3, name="aws-p3.8xlarge[1,2]", gpus=(p3.gpus[1], p3.gpus[2]),
                   topology=(("X", p3.topology[1][2]), (p3.topology[2][1], "X")))


def fig9() -> list[dict[str, Any]]:
    node = fig9_node()
    h = TenantSpec(0, _pagerank(), name="pagerank@1", role="harvester")
    base = _run(node, [h, TenantSpec(1, static_bytes=FIG9_BASE_MIB * MIB, role="lender")], "stock")
    t_base = base.tenant(0).runtime_ns
    rows: list[dict[str, Any]] = [{"spare": f"Base (stock, {FIG9_BASE_MIB} MiB)", "policy": "stock",
                                   "runtime_s": t_base / 1e9, "speedup_vs_base": 1.0, "evict_to_peer": 0}]
    for pct, mib in FIG9_SPARE_MIB:
        for pol in ("huvm-atc22", "huvm"):
            res = _run(node, [h, TenantSpec(1, static_bytes=mib * MIB, role="lender")], pol)
            t = res.tenant(0).runtime_ns
            rows.append({"spare": f"{pct} % ({mib} MiB taken)", "policy": pol, "runtime_s": t / 1e9,
                         "speedup_vs_base": t_base / t, "evict_to_peer": res.counter_total("evict_to_peer")})
    return rows


# ---- tables ----

def _rel(role: str, base: float, t: float) -> str:
    """Harvesters: speedup over Base (Base / t); lenders: slowdown over Base (t / Base - 1)."""
    if role == "harvester":
        return f"{base / t:.2f}x"
    return f"{(t / base - 1) * 100:+.1f}%"


def fig6_markdown(rows: list[dict[str, Any]]) -> str:
    cols = [c for c, *_ in POLICY_COLUMNS]
    head = ["case", "workload", "role"] + [f"artifact {c} (s)" for c in cols] + \
        [f"artifact {c}" for c in cols[1:]] + [f"sim {c}" for c in cols[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        a, s = r["artifact"], r["sim"]
        cells = [str(r["case"]), r["workload"], r["role"]] + [f"{a[c]:.3g}" for c in cols] + \
            [_rel(r["role"], a["Base"], a[c]) for c in cols[1:]] + [_rel(r["role"], s["Base"], s[c]) for c in cols[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plain_markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return "\n".join(lines)


DOC_BEGIN = "<!-- replicate: begin (generated by huvmctl sim replicate --update-doc; do not edit) -->"
DOC_END = "<!-- replicate: end -->"


def doc_block() -> str:
    return ("\n#### Fig 6: consolidation cases (harvesters: speedup over Base; lenders: slowdown over Base)\n\n"
            + fig6_markdown(fig6()) +
            "\n\n#### Fig 8: prefetch size on Fig 6 case 1 (`huvm-atc22`, stride 2; the artifact's Fig 8 results "
            "were never committed)\n\n" + _plain_markdown(fig8()) +
            "\n\n#### Fig 9: spare memory, GPUs 1-2 (NV2)\n\n" + _plain_markdown(fig9()) + "\n\n")


def update_doc(path: str) -> bool:
    return replace_block(path, DOC_BEGIN, DOC_END, doc_block())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl sim replicate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--update-doc", metavar="FILE", help="replace the generated tables between FILE's markers")
    ap.add_argument("--sensitivity", action="store_true",
                    help="Fig 6's harvester speedups under the model's sensitivity variants (a markdown table)")
    ap.add_argument("--seeds", action="store_true",
                    help="with --sensitivity: the traversals on three other draws of their graphs (minutes)")
    ap.add_argument("--scales", action="store_true",
                    help="with --sensitivity: the traversals on 2, 4 and 8 times larger graphs (about 10 minutes)")
    args = ap.parse_args(argv)
    try:
        if (args.seeds or args.scales) and not args.sensitivity:
            print("error: --seeds and --scales need --sensitivity", file=sys.stderr)
            return 2
        if args.sensitivity:
            variants = SENSITIVITY[:1] + (SEED_VARIANTS if args.seeds else ()) + (SCALE_VARIANTS if args.scales else ())
            print(_plain_markdown(fig6_sensitivity(SENSITIVITY if len(variants) == 1 else variants)))
        elif args.update_doc:
            changed = update_doc(args.update_doc)
            print(f"{args.update_doc}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
        else:
            print(doc_block())
    except (OSError, SimConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
