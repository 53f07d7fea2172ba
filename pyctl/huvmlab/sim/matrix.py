"""The scenario matrix: how the policies are judged (``make eval``, docs/evaluation.md).

Scenarios cross node presets (p3.8xlarge's mixed NV1/NV2 links, the DGX-1 cube-mesh with pairs that have no
peer path, NVSwitch nodes), oversubscription from a job that nearly fits (0-64 MiB to spare) to 3x, lenders
that are idle, steady, rising or spiky (cudaMalloc or managed memory), and DNN, LLM, graph and synthetic
harvesters. GPU memory is scaled to each harvester's footprint, so a run takes a fraction of a second.

Each scenario is run under ``stock``, ``huvm-atc22``, ``huvm`` and ``huvm+budget`` (``huvm`` with a
guest-traffic budget on every GPU whose lender has work, sized for :data:`LENDER_TARGET`; and any variant
asked for), and each of its lenders with work alone on the node. Per scenario and policy:

* **harvester speedup**: the harvesters' makespan under stock / under the policy (> 1: faster);
* **lender slowdown**: for the lender hurt most, its runtime under the policy / alone, or for a lender that
  runs until the harvesters finish, its throughput alone / under the policy (1.0: lending cost nothing).

The matrix is split in two halves, stratified by harvester family: the preset's constants are chosen on the
``tuning`` half; ``make eval`` reports the ``evaluation`` half, which nothing was tuned on.

    huvmctl sim matrix                      # the evaluation half's table
    huvmctl sim matrix --half tuning --variant ps=peer_select:fewest-lent
    huvmctl sim matrix --seed 1             # the random parts (Scenario.random_parts) re-drawn
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from huvm.budget import lend_traffic_for

from .config import CHUNK_BYTES, MIB, NodeConfig
from .docblock import replace_block
from .errors import SimConfigError
from .scenario import SimResult, TenantResult, run_scenario
from .tenants import SimTraceLike, TenantSpec

HALVES: tuple[str, ...] = ("tuning", "evaluation")
POLICIES: tuple[str, ...] = ("stock", "huvm-atc22", "huvm")
#: GPU memory not usable by UVM in the scaled-down nodes (the presets' 512 MiB is a full-size GPU's)
RESERVED_BYTES = 256 * MIB
#: relative difference under which two runtimes count as equal (the simulator is deterministic; this is the
#: tolerance of "not slower", for rounding of a scenario's many interleavings, not measurement noise)
NOISE = 0.01
#: the issue's lender target: no lender slowed by more than this (``huvm+budget`` is sized for it)
LENDER_TARGET = 0.02
#: the range of ``--lender-timing``: a factor on the working lenders' op time (their period and phase)
LENDER_TIMING_RANGE = (0.5, 2.0)
#: the range of ``--spike-period`` (ms): the spiky lenders' cadence, from milliseconds to a minute
SPIKE_PERIOD_MS_RANGE = (1.0, 60_000.0)
#: ``--seed`` k > 0 re-draws every random part of a scenario with its seed + k * SEED_STRIDE (0: the matrix's
#: seeds); the stride keeps the parts' seed sets apart (the matrix's own seeds are 3..12)
SEED_STRIDE = 1000
SEED_RANGE = (0, 999)


@dataclass(frozen=True)
class Scenario:
    name: str
    half: str
    node: NodeConfig
    tenants: tuple[TenantSpec, ...]
    harvesters: tuple[int, ...]     # tenant indices whose speedup is measured
    lenders: tuple[int, ...]        # tenant indices of lenders with work, whose slowdown is measured
    tags: tuple[tuple[str, str], ...] = ()
    #: what in it is drawn at random (a seeded generator), in words; empty: deterministic (recorded traces,
    #: the lender shapes), so another seed gives the same scenario
    random_parts: tuple[str, ...] = ()

    def tag(self, key: str) -> str:
        return dict(self.tags).get(key, "")


# ---- building the matrix ----

_NODES: dict[str, tuple[str, int, tuple[int, ...]]] = {
    # key: (preset, GPUs taken, the lender GPUs in order: the harvester is GPU 0)
    "p3": ("aws-p3.8xlarge", 4, (1, 2, 3)),
    "dgx1": ("dgx-1", 8, (1, 2, 3, 4, 5)),          # 5 has no path to 0: its lender never lends to it
    "a100": ("dgx-a100", 4, (1, 2, 3)),
    "h100": ("hgx-h100", 4, (1, 2, 3)),
    # the asymmetric topologies of the workload kinds (docs/simulator.md, "Node presets")
    "l40s": ("l40s-pcie", 4, (1, 2, 3)),        # PCIe only: 1 through the switch, 2 and 3 no peer path
    "h100nvl": ("h100-nvl", 4, (1, 2, 3)),      # NVLink pairs: 1 bridged, 2 and 3 no peer path
    "gh200": ("gh200-nvl2", 2, (1,)),           # host over C2C faster than the peer over NVLink
    "mixed": ("mixed-a100-h100", 4, (1, 2, 3)),  # 1 an A100 bridged, 2 and 3 H100s (twice the memory) over PCIe
}
#: the nodes the base matrix rotates through (the workload kinds' nodes are added by kind)
_ROTATION: tuple[str, ...] = ("p3", "dgx1", "a100", "h100")
#: a node's GPUs with more memory than the harvester's: GPU -> factor (the mixed node's H100s, 80 vs 40 GB)
_MEMORY_FACTOR: dict[str, dict[int, int]] = {"mixed": {2: 2, 3: 2}}
_LENDER_MIXES: dict[str, tuple[str, ...]] = {
    "idle": ("idle", "idle", "idle"),
    "steady": ("steady", "idle", "steady"),
    "rising": ("rising", "steady", "idle"),
    "spiky": ("spiky", "idle", "spiky"),
    "mixed": ("idle", "rising", "spiky", "steady", "steady"),
}
# harvesters: (family, name, how to build the trace); bundled traces are loaded lazily.
_HARVESTERS: tuple[tuple[str, str], ...] = (
    ("dnn", "bert-base"), ("dnn", "resnet-small"), ("llm", "llama-tiny"), ("llm", "gpt2-small"),
    ("graph", "pagerank-twitter"), ("graph", "bfs-twitter"), ("graph", "wcc-twitter"),
    ("synthetic", "random"), ("synthetic", "hot-cold"), ("synthetic", "streaming"),
)
#: oversubscription: "fit-S" = fits with S MiB to spare; a number = footprint / usable memory
_LEVELS: tuple[str, ...] = ("fit-0", "fit-32", "fit-64", "1.05", "1.25", "1.5", "2", "3")


@cache
def _bundled(name: str, gpu_preset: str) -> SimTraceLike:
    from .. import traces

    return traces.load(traces.bundled(name)).to_sim_events(gpu_preset)


def _seed(base: int, seed: int) -> int:
    """A random part's seed: the matrix's ``base`` for seed set 0, else moved by :data:`SEED_STRIDE` per set."""
    return base + seed * SEED_STRIDE


#: the random parts of the generated traces (:attr:`Scenario.random_parts`): trace -> what is drawn at random
_RANDOM_PARTS: dict[str, str] = {
    "random": "the harvester's random access stream",
    "hot-cold": "the harvester's hot/cold access stream",
    "moe": "the experts' popularity drift and token routing",
    "kv-serve": "the serving lender's request arrivals and lengths",
    "fig9": "the PageRank harvester's power-law gathers",
}


@cache
def _synthetic(name: str, seed: int = 0) -> SimTraceLike:
    from . import workloads

    ws = 1536 * MIB
    if name == "random":
        return workloads.random_access(ws, 2400, seed=_seed(11, seed), name="random")
    if name == "hot-cold":
        return workloads.hot_cold(ws, 2400, seed=_seed(12, seed), name="hot-cold")
    if name == "streaming":
        return workloads.streaming(ws, passes=3, name="streaming")
    raise SimConfigError(f"unknown synthetic harvester {name!r}", field="harvester")


@cache
def _moe(seed: int = 0) -> SimTraceLike:
    from . import workloads

    return workloads.moe_expert_parallel(ep_ranks=4, seed=_seed(5, seed))


def _harvester_trace(name: str, gpu_preset: str, seed: int = 0) -> SimTraceLike:
    """A harvester's trace; ``seed``: the seed set of a generated one's random draws (the bundled traces are
    recorded: the same for every seed)."""
    if name in ("random", "hot-cold", "streaming"):
        return _synthetic(name, seed if name in _RANDOM_PARTS else 0)
    if name == "moe":
        return _moe(seed)
    return _bundled(name, gpu_preset)


def footprint_bytes(trace: SimTraceLike) -> int:
    """Peak managed footprint of a trace in whole chunks (every chunk it ever makes live; traces without
    frees keep all of them)."""
    import numpy as np

    alloc, free = trace.chunk_alloc_op, trace.chunk_free_op
    n_ops = len(trace.op_time_ns)
    if not (free >= 0).any():
        return int(len(alloc)) * CHUNK_BYTES
    delta = np.zeros(n_ops + 2, dtype=np.int64)
    np.add.at(delta, np.where(alloc < 0, 0, alloc), 1)
    fr = free >= 0
    np.add.at(delta, free[fr] + 1, -1)
    return int(np.cumsum(delta).max()) * CHUNK_BYTES


def _usable_for(fp: int, level: str) -> int:
    if level.startswith("fit-"):
        return fp + int(level[4:]) * MIB
    usable = int(fp / float(level))
    return max(CHUNK_BYTES * 8, usable // CHUNK_BYTES * CHUNK_BYTES)


def _compute_ns(trace: SimTraceLike, steps: int) -> int:
    return int(trace.op_time_ns.sum()) * steps


def _build(node_key: str, family: str, harvester: str, level: str, mix: str, managed_lenders: bool,
           half: str, steps: int = 3, two_harvesters: bool = False, lender_timing: float = 1.0,
           spike_period_ms: float | None = None, part: str = "base", seed: int = 0) -> Scenario:
    from . import workloads

    preset, ngpu, lender_gpus = _NODES[node_key]
    base = NodeConfig.preset(preset)
    if base.gpu_count > ngpu:
        base = base.subset(ngpu)
    trace = _harvester_trace(harvester, base.gpu_preset, seed)
    randoms = [_RANDOM_PARTS[harvester]] if harvester in _RANDOM_PARTS else []
    many = mix == "many"
    usable = _usable_for(footprint_bytes(trace) * (2 if many else 1), level)
    node = base.with_gpu_memory(usable + RESERVED_BYTES, RESERVED_BYTES)
    for factor, gpus in _by_factor(_MEMORY_FACTOR.get(node_key, {})).items():
        node = node.with_gpu_memory(usable * factor + RESERVED_BYTES, RESERVED_BYTES, gpus=gpus)
    # the lenders' shapes are timed on the harvester's compute time (its ideal run, roughly)
    horizon = max(20_000_000, _compute_ns(trace, steps))
    op_ns = max(100_000, horizon // 200)
    # an expert-parallel harvester's all-to-all goes to the other ranks: the lender GPUs
    peers = tuple(lender_gpus) if harvester == "moe" else ()
    tenants: list[TenantSpec] = [TenantSpec(0, trace, name=f"{harvester}@0", steps=steps, role="harvester",
                                            link_send=peers, link_recv=peers)]
    harvesters = [0]
    if many:
        # several processes per GPU: a second harvester process beside the first, three small lenders a GPU
        tenants.append(TenantSpec(0, trace, name=f"{harvester}@0#2", steps=steps, role="harvester"))
        harvesters.append(1)
    kinds = list((_LENDER_MIXES | _KIND_MIXES)[mix])
    gpus = list(lender_gpus)
    if two_harvesters:
        tenants.append(TenantSpec(gpus[0], trace, name=f"{harvester}@{gpus[0]}", steps=steps, role="both"))
        harvesters.append(1)
        gpus = gpus[1:]
    lenders: list[int] = []
    ring = [g for g, k in zip(gpus, kinds, strict=False) if k == "allreduce"]
    for gpu, kind in zip(gpus, kinds, strict=False):
        if kind in _SMALL:
            # many small tenants: each process a third of its shape's size (idle, steady and spiky)
            for j, small in enumerate(_SMALL[kind]):
                if small == "idle":
                    tenants.append(TenantSpec(gpu, static_bytes=int(usable // 3 * workloads.LENDER_SHAPES["idle"][0]),
                                              name=f"idle@{gpu}#{j}", role="lender"))
                    continue
                st = workloads.lender(small, usable // 3, int(horizon * lender_timing),
                                      op_time_ns=int(op_ns * lender_timing))
                lenders.append(len(tenants))
                tenants.append(TenantSpec(gpu, st, name=f"{small}@{gpu}#{j}", background=True,
                                          managed=managed_lenders, role="lender"))
            continue
        if kind == "kv-serve":
            # vAttention-style serving: the KV cache is cudaMalloc'd (mapped) as it grows: never evicted
            lenders.append(len(tenants))
            tenants.append(TenantSpec(gpu, _kv_lender(usable, int(horizon * lender_timing), int(op_ns * lender_timing),
                                                      seed),
                                      name=f"kv-serve@{gpu}", background=True, managed=False, role="lender",
                                      record_ops=True))
            randoms.append(_RANDOM_PARTS["kv-serve"])
            continue
        if kind == "allreduce":
            i = ring.index(gpu)
            ar = _allreduce_lender(usable, int(horizon * lender_timing), int(op_ns * lender_timing), len(ring))
            lenders.append(len(tenants))
            # every rank is a tenant: each sends to the next; what it receives is its predecessor's send
            tenants.append(TenantSpec(gpu, ar, name=f"allreduce@{gpu}", background=True, managed=managed_lenders,
                                      role="lender", link_send=(ring[(i + 1) % len(ring)],)))
            continue
        if kind == "idle":
            tenants.append(TenantSpec(gpu, static_bytes=int(usable * workloads.LENDER_SHAPES["idle"][0]),
                                      name=f"idle@{gpu}", role="lender"))
            continue
        # lender_timing stretches a lender's clock (same ops, each longer): its spikes' period and phase
        # spike_period_ms: the spiky lenders' cadence (ms to seconds) instead of a tenth of the horizon
        period_ns = None if spike_period_ms is None else int(spike_period_ms * 1_000_000 * lender_timing)
        lt = workloads.lender(kind, usable, int(horizon * lender_timing), op_time_ns=int(op_ns * lender_timing),
                              spike_period_ns=period_ns)
        lenders.append(len(tenants))
        tenants.append(TenantSpec(gpu, lt, name=f"{kind}@{gpu}", background=True, managed=managed_lenders,
                                  role="lender"))
    name = f"{node_key}/{harvester}/{level}/{mix}" + ("/uvm" if managed_lenders else "") + \
        ("/2h" if two_harvesters else "")
    tags: tuple[tuple[str, str], ...] = (
        ("node", node_key), ("family", family), ("harvester", harvester), ("level", level),
        ("lenders", mix), ("lender_memory", "managed" if managed_lenders else "cudaMalloc"),
        ("harvesters", str(len(harvesters))), ("kind", part))
    if lender_timing != 1.0:
        tags += (("lender_timing", f"{lender_timing:g}"),)
    if seed and randoms:
        tags += (("seed", str(seed)),)
    if spike_period_ms is not None and "spiky" in kinds:
        name += f"/every-{spike_period_ms:g}ms"
        tags += (("spike_period_ms", f"{spike_period_ms:g}"),)
    return Scenario(name, half, node, tuple(tenants), tuple(harvesters), tuple(lenders), tags, tuple(randoms))


def _by_factor(factors: dict[int, int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for g, f in factors.items():
        out.setdefault(f, []).append(g)
    return out


# ---- the workload kinds (issue 28 item 4; docs/evaluation.md, "Workload kinds") ----

#: lender mixes of the workload kinds (the base matrix's are :data:`_LENDER_MIXES`)
_KIND_MIXES: dict[str, tuple[str, ...]] = {
    "kv-serve": ("kv-serve", "steady", "idle"),
    "allreduce": ("allreduce", "allreduce", "allreduce"),
    "many": ("many", "many", "many"),
}
#: a "many" lender GPU's processes
_SMALL: dict[str, tuple[str, ...]] = {"many": ("steady", "spiky", "idle")}
#: serving lender: weights and the most KV it may hold, as shares of the lender GPU's memory (the others'
#: shapes are :data:`huvm.sim.workloads.LENDER_SHAPES`): 15 % weights (a 7B model in bf16 is 13.5 GB of an
#: 80 GB GPU, 17 %) and 45 % KV at most (what the rising and spiky lenders add)
KV_WEIGHTS_SHARE = 0.15
KV_CAPACITY_SHARE = 0.45
#: the serving lender's mean running batch as a share of what its KV capacity holds (Little's law sets the
#: Poisson arrival rate from it: an assumption, a server loaded at 60 %)
KV_LOAD = 0.6
#: ShareGPT's lengths scaled so that a mean request's output spans a tenth of the lender's ops (one op = one
#: decode iteration; the matrix's lenders run ~200 ops over the harvester's run)
KV_OUTPUT_OPS_SHARE = 0.1
#: the data-parallel lenders' gradients: 16 B of AdamW state per parameter of which 2 B are bf16 gradients
#: (mixed precision, as Megatron/DeepSpeed keep them): an eighth of the steady state
ALLREDUCE_GRAD_SHARE = 1 / 8


def _kv_lender(usable: int, horizon_ns: int, op_ns: int, seed: int = 0) -> SimTraceLike:
    from . import workloads

    ops = max(20, horizon_ns // op_ns)
    scale = ops * KV_OUTPUT_OPS_SHARE / workloads.SHAREGPT_OUTPUT_MEAN
    prompt, output = workloads.SHAREGPT_PROMPT_MEAN * scale, workloads.SHAREGPT_OUTPUT_MEAN * scale
    cap = int(usable * KV_CAPACITY_SHARE)
    weights = int(usable * KV_WEIGHTS_SHARE)
    # Llama-2-7B's KV per token on an 80 GB GPU, scaled with the GPU's memory (the matrix scales memory only)
    kvpt = max(1, workloads.LLAMA2_7B_KV_BYTES_PER_TOKEN * usable // (80 << 30))
    # a mean request's KV, then the batch the capacity holds, then the arrival rate for KV_LOAD of it
    per_req = -(-int((prompt + output) * kvpt) // CHUNK_BYTES) * CHUNK_BYTES
    batch = max(1.0, cap / per_req * KV_LOAD)
    ns_per_chunk = max(1, op_ns * 2 // max(1, (weights + cap // 2) // CHUNK_BYTES))
    return workloads.kv_serving(weights, cap, ops, kv_bytes_per_token=kvpt,
                                arrivals_per_op=batch / output, prompt_mean=prompt,
                                output_mean=output, ns_per_chunk=ns_per_chunk,
                                seed=_seed(7, seed), name="lender-kv-serve")


def _allreduce_lender(usable: int, horizon_ns: int, op_ns: int, ranks: int) -> SimTraceLike:
    from . import workloads

    state = int(usable * workloads.LENDER_SHAPES["steady"][0])
    ops = max(4, horizon_ns // op_ns)
    # buckets scaled like the memory: DDP's 25 MiB of an 80 GB GPU
    bucket = max(CHUNK_BYTES, workloads.DDP_BUCKET_BYTES * usable // (80 << 30))
    return workloads.allreduce_training(state, int(state * ALLREDUCE_GRAD_SHARE), ops, ranks,
                                        op_time_ns=op_ns, ops_per_step=20,
                                        bucket_bytes=bucket, name="lender-allreduce")


#: the workload kinds: name -> (node, family, harvester, lender mix). Each runs at two consecutive
#: oversubscription levels (:data:`KIND_LEVELS`; every level with ``all_levels``), assigned to the halves by
#: the base matrix's rule.
KINDS: dict[str, tuple[str, str, str, str]] = {
    "kv-serve": ("h100", "llm", "llama-tiny", "kv-serve"),
    "moe": ("a100", "moe", "moe", "spiky"),
    "allreduce": ("h100", "dnn", "bert-base", "allreduce"),
    "many": ("a100", "dnn", "resnet-small", "many"),
    "l40s": ("l40s", "llm", "gpt2-small", "steady"),
    "h100nvl": ("h100nvl", "graph", "pagerank-twitter", "spiky"),
    "gh200": ("gh200", "llm", "llama-tiny", "steady"),
    "mixed": ("mixed", "dnn", "bert-base", "rising"),
}
#: the first of each kind's two levels in the default matrix (index into the levels)
KIND_LEVELS: dict[str, int] = {"kv-serve": 3, "moe": 4, "allreduce": 5, "many": 3, "l40s": 4, "h100nvl": 5,
                               "gh200": 3, "mixed": 4}


def _kind_scenarios(half: str | None, kinds: Sequence[str], all_levels: bool, lender_timing: float,
                    spike_period_ms: float | None, seed: int = 0) -> list[Scenario]:
    """The workload kinds' scenarios. Split as the base matrix is: kind k counts as harvester
    ``len(_HARVESTERS) + k``, its levels alternate between the halves from ``(hi + li) % 2``, and its lenders
    are on managed memory where ``(hi + li) % 5 == 0`` (a serving lender's KV is always cudaMalloc'd)."""
    out: list[Scenario] = []
    for k, name in enumerate(KINDS):
        if name not in kinds:
            continue
        node_key, family, harvester, mix = KINDS[name]
        hi = len(_HARVESTERS) + k
        first = KIND_LEVELS[name]
        for li, level in enumerate(_LEVELS):
            if not all_levels and li not in (first, first + 1):
                continue
            which = HALVES[(hi + li) % 2]
            managed = (hi + li) % 5 == 0
            if half is None or which == half:
                out.append(_build(node_key, family, harvester, level, mix, managed, which,
                                  lender_timing=lender_timing, spike_period_ms=spike_period_ms, part=name,
                                  seed=seed))
    return out


#: the prototype's Fig 9 setup at full size (huvm.sim.calibrate): spare memory % -> half
_FIG9_HALVES: tuple[tuple[int, str], ...] = ((5, "tuning"), (10, "evaluation"), (20, "evaluation"),
                                               (40, "tuning"), (60, "evaluation"))


def _fig9(spare_pct: int, half: str, seed: int = 0) -> Scenario:
    """HUVM ATC'22 Fig 9: GPUs 1-2 of a p3.8xlarge (NV2), a 19 GiB PageRank harvester, the neighbour
    cudaMallocs the artifact's size (MiB) for this much spare memory (an idle lender)."""
    from . import calibrate
    from .replicate import fig9_node

    node = fig9_node()
    alloc_mib = dict(calibrate.FIG9_SPARE)[spare_pct]
    tenants = (TenantSpec(0, _fig9_trace(seed), name="pagerank@1", role="harvester"),
               TenantSpec(1, static_bytes=alloc_mib * MIB, name="idle@2", role="lender"))
    tags: tuple[tuple[str, str], ...] = (
        ("node", "p3"), ("family", "graph"), ("harvester", "pagerank-fig9"), ("level", f"{spare_pct}%-spare"),
        ("lenders", "idle"), ("lender_memory", "cudaMalloc"), ("harvesters", "1"), ("kind", "base"))
    if seed:
        tags += (("seed", str(seed)),)
    return Scenario(f"fig9/pagerank/{spare_pct}%-spare", half, node, tenants, (0,), (), tags,
                    (_RANDOM_PARTS["fig9"],))


@cache
def _fig9_trace(seed: int = 0) -> SimTraceLike:
    from . import workloads

    return workloads.pagerank(vertices=41_652_230, edges=4_900_000_000, iterations=6,
                              edge_chunks_per_op=32, gathers_per_op=32, seed=_seed(3, seed),
                              name="pagerank-twitter-like")


#: what ``kinds`` selects: the base matrix and each workload kind
KIND_NAMES: tuple[str, ...] = ("base", *KINDS)


def scenarios(half: str | None = None, lender_timing: float = 1.0,
              spike_period_ms: float | None = None, kinds: Sequence[str] | None = None,
              all_levels: bool = False, seed: int = 0) -> list[Scenario]:
    """The matrix, in a fixed order; ``half`` selects ``tuning`` or ``evaluation`` (None: both).
    ``lender_timing`` (default 1) multiplies the working lenders' op time: how much a result depends on when
    the lenders' spikes fall (``--lender-timing``; the Fig 9 scenarios have idle lenders only).
    ``spike_period_ms``: the spiky lenders spike at this cadence (``--spike-period``; None: every tenth of the
    harvester's run, 3.5-17.6 ms), a dimension of the lender scenarios from ms to seconds.

    Every harvester runs at every oversubscription level, on a node and with a lender mix that rotate with
    the level, so that each half sees every node, level, lender shape and harvester family. Within each
    harvester the levels alternate between the halves (starting with the other half for every other
    harvester), so that both halves hold near-fit and 3x cases of each family.

    ``kinds``: which parts (:data:`KIND_NAMES`: ``base``, the matrix above with the Fig 9 scenarios, and the
    workload kinds of :data:`KINDS`; None: all); ``all_levels``: the workload kinds at every level, not two.
    ``seed``: the seed set of every random part (:attr:`Scenario.random_parts`; ``--seed``): 0 the matrix's
    seeds, k > 0 each part's seed moved by k * :data:`SEED_STRIDE` (a scenario without random parts is the same
    at every seed)."""
    if half is not None and half not in HALVES:
        raise SimConfigError(f"unknown half {half!r}; known: {', '.join(HALVES)}", field="half")
    lo, hi = LENDER_TIMING_RANGE
    if not lo <= lender_timing <= hi:
        raise SimConfigError(f"lender timing {lender_timing:g}: must be within {lo:g}..{hi:g}",
                             field="lender_timing")
    if spike_period_ms is not None and not SPIKE_PERIOD_MS_RANGE[0] <= spike_period_ms <= SPIKE_PERIOD_MS_RANGE[1]:
        raise SimConfigError(f"spike period {spike_period_ms:g} ms: must be within "
                             f"{SPIKE_PERIOD_MS_RANGE[0]:g}..{SPIKE_PERIOD_MS_RANGE[1]:g} ms", field="spike_period")
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise SimConfigError(f"seed {seed}: must be within {SEED_RANGE[0]}..{SEED_RANGE[1]}", field="seed")
    sel = list(KIND_NAMES) if kinds is None else list(kinds)
    for k in sel:
        if k not in KIND_NAMES:
            raise SimConfigError(f"unknown scenario kind {k!r}; known: {', '.join(KIND_NAMES)}", field="kind")
    nodes = list(_ROTATION)
    mixes = list(_LENDER_MIXES)
    out: list[Scenario] = []
    for hi, (family, harvester) in enumerate(_HARVESTERS if "base" in sel else ()):
        for li, level in enumerate(_LEVELS):
            node_key = nodes[(hi + li // 2) % len(nodes)]     # consecutive levels: same node, both halves
            mix = mixes[(hi * 3 + li) % len(mixes)]
            if node_key != "dgx1" and mix == "mixed":
                mix = "spiky"
            which = HALVES[(hi + li) % 2]
            managed = (hi + li) % 5 == 0      # (hi + 2 li) paired managed memory with idle lenders only
            two = family in ("dnn", "synthetic") and level in ("1.5", "2") and node_key != "dgx1"
            if half is None or which == half:
                out.append(_build(node_key, family, harvester, level, mix, managed, which, two_harvesters=two,
                                  lender_timing=lender_timing, spike_period_ms=spike_period_ms, seed=seed))
    if "base" in sel:
        out += [_fig9(pct, h, seed) for pct, h in _FIG9_HALVES if half is None or h == half]
    out += _kind_scenarios(half, sel, all_levels, lender_timing, spike_period_ms, seed)
    return out


# ---- running it ----

@dataclass(frozen=True)
class Variant:
    """A policy to run: a preset, optionally with node-wide fields replaced (``peer_select`` = 1 ...);
    ``lender_slowdown``: give every GPU whose lender has work the guest-traffic budget for that slowdown
    (:func:`lend_traffic_for`, from the node's HBM bandwidth)."""

    name: str
    preset: str
    overrides: tuple[tuple[str, int], ...] = ()
    lender_slowdown: float | None = None
    #: the lending keys of the lenders at work only (``lender.FIELD``): (field, value, value is a % of the
    #: lender GPU's memory)
    lender_overrides: tuple[tuple[str, int, bool], ...] = ()


#: per-GPU fields a ``lender.`` variant key may set on the lenders at work (the tenants' lending keys)
LENDER_FIELDS: tuple[str, ...] = ("lend_reserve_bytes", "lend_limit_bytes", "lend_traffic_mbyte_per_s")


def _hbm_mbyte_per_s(node: NodeConfig) -> int:
    """The node's HBM bandwidth in MB/s, from its lender cost (lend_chunk_ns: one chunk's HBM time)."""
    return CHUNK_BYTES * 1000 // node.costs.lend_chunk_ns


#: the policies ``make eval`` runs: the presets, and ``huvm`` with its lenders budgeted for LENDER_TARGET
EVAL_VARIANTS: tuple[Variant, ...] = tuple(Variant(p, p) for p in POLICIES) + (
    Variant("huvm+budget", "huvm", lender_slowdown=LENDER_TARGET),)


def parse_variant(text: str) -> Variant:
    """``NAME=FIELD:VALUE[,FIELD:VALUE...]`` on the huvm preset, or ``NAME=PRESET/FIELD:VALUE,...``;
    ``gpu.FIELD`` sets a per-GPU field on every GPU, ``lender.FIELD`` one of :data:`LENDER_FIELDS` on the GPUs
    of the lenders at work only (a ``*_bytes`` value may be ``N%`` of the GPU's memory); values are integers
    or the ABI's enum names (``fewest-lent``)."""
    from huvm import abi

    if "=" not in text:
        raise SimConfigError(f"variant {text!r}: expected NAME=FIELD:VALUE,...", field="variant")
    name, spec = text.split("=", 1)
    preset = "huvm"
    if "/" in spec:
        preset, spec = spec.split("/", 1)
    over: list[tuple[str, int]] = []
    lender: list[tuple[str, int, bool]] = []
    for item in filter(None, spec.split(",")):
        if ":" not in item:
            raise SimConfigError(f"variant {text!r}: {item!r} is not FIELD:VALUE", field="variant")
        f, v = item.split(":", 1)
        if f.startswith("lender."):
            lender.append(_lender_item(text, f[7:], v))
            continue
        try:
            value = int(v, 0)
        except ValueError:
            enum = abi.enum_names(f"HUVM_{f.upper()}_") or abi.enum_names(f"HUVM_{f.upper().removesuffix('_MODE')}_")
            names = {n.replace("_", "-"): k for k, n in enum.items()}
            if v not in names:
                raise SimConfigError(f"variant {text!r}: {v!r} is not a value of {f}", field="variant") from None
            value = names[v]
        over.append((f, value))
    return Variant(name.strip(), preset.strip(), tuple(over), lender_overrides=tuple(lender))


def _lender_item(text: str, f: str, v: str) -> tuple[str, int, bool]:
    if f not in LENDER_FIELDS:
        raise SimConfigError(f"variant {text!r}: lender.{f}: a lender key is one of {', '.join(LENDER_FIELDS)}",
                             field="variant")
    pct = v.endswith("%") and f.endswith("_bytes")
    try:
        value = int(v[:-1] if pct else v, 0)
    except ValueError:
        raise SimConfigError(f"variant {text!r}: {v!r} is not a value of lender.{f}", field="variant") from None
    if value < 0 or (pct and value > 100):
        raise SimConfigError(f"variant {text!r}: lender.{f}: {v!r} is out of range", field="variant")
    return f, value, pct


@dataclass(frozen=True)
class TenantOutcome:
    name: str
    role: str                       # harvester | lender
    background: bool
    runtime_ns: int
    ops_per_s: float
    stall_ns: int
    alloc_stall_ns: int
    slowdown_vs_alone: float | None     # lenders: runtime ratio (foreground) or throughput ratio (background);
    #                                     a serving lender: its p99 per-token latency ratio
    lend_stall_ns: int = 0          # of its stalls: the HBM time guests' copies took from it (lend_chunk_ns)
    token_mean_slowdown: float | None = None    # a serving lender: mean per-token latency / alone
    token_p99_slowdown: float | None = None     # a serving lender: p99 per-token latency / alone
    link_stall_ns: int = 0          # time its ops waited for their collectives beyond compute


@dataclass(frozen=True)
class Outcome:
    """One scenario under one policy."""

    scenario: str
    policy: str
    harvest_makespan_ns: int
    harvester_speedup: float        # stock makespan / this makespan
    lender_slowdown: float | None   # worst lender, vs alone (None: no lender with work)
    evict_to_peer: int
    evict_to_host: int
    giveback: int
    tenants: tuple[TenantOutcome, ...]

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["tenants"] = [dict(vars(t)) for t in self.tenants]
        return d


@dataclass
class Evaluation:
    half: str
    policies: list[str]
    scenarios: list[Scenario] = field(default_factory=list)
    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    wall_s: float = 0.0

    def outcome(self, scenario: str, policy: str) -> Outcome:
        return self.outcomes[(scenario, policy)]

    def summary(self, policy: str) -> dict[str, float]:
        """Geomean and worst case over the scenarios: harvester speedup (worst = lowest), lender slowdown
        (worst = highest; only scenarios with a lender at work)."""
        sp = [self.outcome(s.name, policy).harvester_speedup for s in self.scenarios]
        ls = [x for s in self.scenarios if (x := self.outcome(s.name, policy).lender_slowdown) is not None]
        out = {"speedup_geomean": _geomean(sp), "speedup_worst": min(sp) if sp else math.nan,
               "lender_slowdown_geomean": _geomean(ls) if ls else 1.0,
               "lender_slowdown_worst": max(ls) if ls else 1.0}
        if "huvm-atc22" in self.policies and policy != "huvm-atc22":
            rel = [self.outcome(s.name, "huvm-atc22").harvest_makespan_ns /
                   self.outcome(s.name, policy).harvest_makespan_ns for s in self.scenarios]
            out["vs_atc22_geomean"] = _geomean(rel)
            out["vs_atc22_worst"] = min(rel) if rel else math.nan
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "half": self.half, "policies": self.policies, "noise": NOISE,
            "scenarios": [{"name": s.name, "tags": dict(s.tags),
                           "outcomes": {p: self.outcome(s.name, p).to_dict() for p in self.policies}}
                          for s in self.scenarios],
            "summary": {p: self.summary(p) for p in self.policies if p != "stock"},
        }


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def token_latencies(t: TenantResult, op_tokens: Sequence[int]) -> tuple[list[int], list[int]]:
    """A serving tenant's per-token latencies: each op after its first (the first carries its start-up) took
    ``end - previous end`` and produced ``op_tokens[op % n]`` tokens (one per running request, the decode
    iteration's time per output token). Returns (latencies, token counts), ops without tokens left out."""
    n = len(op_tokens)
    ends = t.op_end_ns
    lat, cnt = [], []
    for i in range(1, len(ends)):
        k = int(op_tokens[i % n]) if n else 0
        if k:
            lat.append(ends[i] - ends[i - 1])
            cnt.append(k)
    return lat, cnt


def token_stats(lat: Sequence[int], cnt: Sequence[int]) -> tuple[float, float]:
    """(mean, p99) of per-token latencies weighted by tokens (p99: the least latency that at least 99 % of the
    tokens took no longer than)."""
    total = sum(cnt)
    if not total:
        return math.nan, math.nan
    mean = sum(x * k for x, k in zip(lat, cnt, strict=True)) / total
    acc = 0
    for x, k in sorted(zip(lat, cnt, strict=True)):
        acc += k
        if acc >= 0.99 * total:
            return mean, float(x)
    return mean, float(max(lat))  # pragma: no cover - the loop reaches the total


def _token_slowdowns(spec: TenantSpec, t: TenantResult, alone: TenantResult) -> tuple[float, float] | None:
    """A serving lender's (mean, p99) per-token latency under the policy / alone; None for other tenants."""
    toks = getattr(spec.trace, "op_tokens", None)
    if not spec.record_ops or toks is None:
        return None
    m, p = token_stats(*token_latencies(t, toks))
    m0, p0 = token_stats(*token_latencies(alone, toks))
    return (m / m0 if m0 else math.nan), (p / p0 if p0 else math.nan)


def _lender_metric(t: TenantResult) -> float:
    """Runtime for a foreground lender, inverse throughput for one that runs until the others finish:
    larger is worse either way."""
    if t.background:
        return 1 / t.work_rate if t.work_rate else math.inf
    return float(t.runtime_ns)


def _alone(sc: Scenario, idx: int, horizon_ns: int) -> TenantResult:
    """Lender idx alone on the node, stock: its own speed (with the other ranks of its job, :func:`_job`). A
    background lender runs until the foreground is done, so a clock of empty ops stands in for the harvesters:
    the same window as the run it is compared with (its throughput depends on the window: a lender that
    rises a third of the way in)."""
    from . import workloads

    spec = sc.tenants[idx]
    group = _job(sc, idx)
    tenants = [replace(sc.tenants[i], role=None) for i in group]
    if spec.background:
        tenants.append(TenantSpec(spec.gpu, workloads.horizon_trace(horizon_ns), name="horizon"))
    return run_scenario(sc.node, tenants, "stock", sample_interval_ns=0).tenants[0]


def _job(sc: Scenario, idx: int) -> list[int]:
    """Tenant idx and the lenders its collectives join, directly or through others (the ranks of a
    data-parallel ring: a multi-GPU job is alone when all its ranks are), idx first."""
    def joined(a: TenantSpec, b: TenantSpec) -> bool:
        return b.gpu in a.link_send or a.gpu in b.link_send

    group = [idx]
    todo = [idx]
    while todo:
        a = sc.tenants[todo.pop()]
        for i in sc.lenders:
            if i not in group and joined(a, sc.tenants[i]):
                group.append(i)
                todo.append(i)
    return group


def _lender_tenants(sc: Scenario, v: Variant) -> tuple[TenantSpec, ...]:
    """The scenario's tenants with the variant's lending keys on the lenders at work (the budget of
    ``lender_slowdown``, then ``lender.FIELD`` values); the others as they are."""
    keys: dict[str, int] = {}
    if v.lender_slowdown is not None:
        # an operator budgets the GPUs whose tenants' speed matters: the lenders with work, not idle ones
        keys["lend_traffic_mbyte_per_s"] = lend_traffic_for(_hbm_mbyte_per_s(sc.node), v.lender_slowdown)
    if not keys and not v.lender_overrides:
        return sc.tenants

    def lending(t: TenantSpec) -> TenantSpec:
        spec = sc.node.gpus[t.gpu]
        mem = spec.memory_bytes - spec.reserved_bytes       # what the GPU gives UVM: the core's memory
        k = keys | {f: (mem * x // 100 // CHUNK_BYTES * CHUNK_BYTES if pct else x)
                    for f, x, pct in v.lender_overrides}
        return replace(t, lend_reserve_bytes=k.get("lend_reserve_bytes", t.lend_reserve_bytes),
                       lend_limit_bytes=k.get("lend_limit_bytes", t.lend_limit_bytes),
                       lend_traffic_mbyte_per_s=k.get("lend_traffic_mbyte_per_s", t.lend_traffic_mbyte_per_s))

    return tuple(lending(t) if i in sc.lenders else t for i, t in enumerate(sc.tenants))


def _run(sc: Scenario, v: Variant) -> SimResult:
    node = {k: x for k, x in v.overrides if not k.startswith("gpu.")}
    gpu = {k[4:]: x for k, x in v.overrides if k.startswith("gpu.")}
    return run_scenario(sc.node, _lender_tenants(sc, v), v.preset, policy_overrides=node or None,
                        gpu_policy_overrides=gpu or None, sample_interval_ns=0)


def evaluate(scs: Sequence[Scenario], variants: Sequence[Variant] | None = None, *, half: str = "",
             progress: Callable[[str], None] | None = None) -> Evaluation:
    """Run every scenario under stock and every variant (default: :data:`EVAL_VARIANTS`)."""
    vs = list(variants) if variants is not None else list(EVAL_VARIANTS)
    if not any(v.name == "stock" for v in vs):
        vs.insert(0, Variant("stock", "stock"))
    ev = Evaluation(half, [v.name for v in vs], list(scs))
    t0 = time.perf_counter()
    for sc in scs:
        if progress:
            progress(sc.name)
        results = {v.name: _run(sc, v) for v in vs}
        stock_ms = _makespan(results["stock"], sc)
        windows: dict[tuple[int, int], TenantResult] = {}
        for v in vs:
            res = results[v.name]
            ms = _makespan(res, sc)
            touts: list[TenantOutcome] = []
            worst: float | None = None
            for i, t in enumerate(res.tenants):
                role = "harvester" if i in sc.harvesters else "lender"
                slow = None
                tok: tuple[float, float] | None = None
                if i in sc.lenders:
                    if (i, ms) not in windows:
                        windows[(i, ms)] = _alone(sc, i, ms)
                    tok = _token_slowdowns(sc.tenants[i], t, windows[(i, ms)])
                    # a serving lender is scored on its p99 per-token latency, the others on their speed
                    slow = tok[1] if tok is not None else _lender_metric(t) / _lender_metric(windows[(i, ms)])
                    worst = slow if worst is None else max(worst, slow)
                touts.append(TenantOutcome(t.name, role, t.background, t.runtime_ns, t.ops_per_s, t.stall_ns,
                                           t.alloc_stall_ns, slow, t.lend_stall_ns,
                                           tok[0] if tok else None, tok[1] if tok else None, t.link_stall_ns))
            ev.outcomes[(sc.name, v.name)] = Outcome(
                sc.name, v.name, ms, stock_ms / ms if ms else math.nan, worst,
                res.counter_total("evict_to_peer"), res.counter_total("evict_to_host"),
                res.counter_total("giveback"), tuple(touts))
    ev.wall_s = time.perf_counter() - t0
    return ev


def _makespan(res: SimResult, sc: Scenario) -> int:
    return max(res.tenants[i].runtime_ns for i in sc.harvesters)


# ---- the table ----

def table_rows(ev: Evaluation, policies: Sequence[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Per scenario: harvester speedup vs stock per policy, each policy against ``huvm-atc22`` (harvester
    makespan ratio, > 1: faster), and the worst lender's slowdown vs running alone (%); then the geomean and
    worst-case rows."""
    pols = [p for p in (policies or ev.policies) if p != "stock"]
    rel = [p for p in pols if p != "huvm-atc22" and "huvm-atc22" in ev.policies]
    header = (["scenario"] + [f"{p} speedup" for p in pols] + [f"{p} vs huvm-atc22" for p in rel] +
              [f"{p} lender slowdown" for p in pols])
    rows: list[list[str]] = []
    for sc in ev.scenarios:
        row = [f"`{sc.name}`"]
        row += [f"{ev.outcome(sc.name, p).harvester_speedup:.2f}x" for p in pols]
        row += [f"{_vs_atc22(ev, sc.name, p):.2f}x" for p in rel]
        row += [_pct(ev.outcome(sc.name, p).lender_slowdown) for p in pols]
        rows.append(row)
    sums = {p: ev.summary(p) for p in pols}
    rows.append(["**geomean**"] + [f"{sums[p]['speedup_geomean']:.2f}x" for p in pols] +
                [f"{sums[p]['vs_atc22_geomean']:.2f}x" for p in rel] +
                [_pct(sums[p]["lender_slowdown_geomean"]) for p in pols])
    rows.append(["**worst**"] + [f"{sums[p]['speedup_worst']:.2f}x" for p in pols] +
                [f"{sums[p]['vs_atc22_worst']:.2f}x" for p in rel] +
                [_pct(sums[p]["lender_slowdown_worst"]) for p in pols])
    return header, rows


def _vs_atc22(ev: Evaluation, scenario: str, policy: str) -> float:
    return (ev.outcome(scenario, "huvm-atc22").harvest_makespan_ns /
            ev.outcome(scenario, policy).harvest_makespan_ns)


def _pct(slowdown: float | None) -> str:
    if slowdown is None:
        return "-"
    return f"{round((slowdown - 1) * 100, 1) + 0.0:+.1f}%"


def markdown(ev: Evaluation) -> str:
    header, rows = table_rows(ev)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n" + "\n".join(verdict(ev)) + "\n"


def serving_lines(ev: Evaluation) -> list[str]:
    """Per scenario with a serving lender: its per-token latency under each policy vs alone (mean, p99)."""
    out: list[str] = []
    for sc in ev.scenarios:
        for p in (x for x in ev.policies if x != "stock"):
            for t in ev.outcome(sc.name, p).tenants:
                if t.token_p99_slowdown is not None:
                    out.append(f"`{sc.name}` `{p}`: {t.name} per-token latency vs alone: mean "
                               f"{_pct(t.token_mean_slowdown)}, p99 {_pct(t.token_p99_slowdown)}")
    return out


def verdict(ev: Evaluation) -> list[str]:
    """The issue's criteria, checked: never slower than stock, never slower than huvm-atc22 by more than
    :data:`NOISE` unless that policy's lender paid for the difference, lender slowdown at most 2 %."""
    out: list[str] = []
    tok = serving_lines(ev)
    if tok:
        out.append("\nServing lenders (scored on p99 per-token latency):\n\n" + "\n".join(f"- {x}" for x in tok))
    for p in (x for x in ev.policies if x not in ("stock", "huvm-atc22")):
        slower = [s.name for s in ev.scenarios if ev.outcome(s.name, p).harvester_speedup < 1 - NOISE]
        behind = [s.name for s in ev.scenarios
                  if "huvm-atc22" in ev.policies and _vs_atc22(ev, s.name, p) < 1 - NOISE]
        paid = [n for n in behind if (ev.outcome(n, "huvm-atc22").lender_slowdown or 1.0) > 1 + LENDER_TARGET]
        costly = [s.name for s in ev.scenarios if (ev.outcome(s.name, p).lender_slowdown or 1.0) > 1 + LENDER_TARGET]
        out.append(f"\n`{p}`: slower than stock in {len(slower)} of {len(ev.scenarios)} scenarios"
                   + (f" ({', '.join(f'`{n}`' for n in slower)})" if slower else "")
                   + f"; behind `huvm-atc22` by more than {NOISE:.0%} in {len(behind)}"
                   + (f" ({', '.join(f'`{n}`' for n in behind)}; in {len(paid)} of them `huvm-atc22`'s lender "
                      "paid more than 2 % for its lead)" if behind else "")
                   + f"; a lender slowed by more than 2 % in {len(costly)}"
                   + (f" ({', '.join(f'`{n}`' for n in costly)})" if costly else "") + ".")
    return out


DOC_BEGIN = "<!-- make eval: begin (generated by huvmctl sim matrix --update-doc; do not edit) -->"
DOC_END = "<!-- make eval: end -->"


def update_doc(path: str, ev: Evaluation) -> bool:
    """Replace the text between :data:`DOC_BEGIN` and :data:`DOC_END` in ``path`` with this table; returns
    whether the file changed. A file without the markers is an error."""
    return replace_block(path, DOC_BEGIN, DOC_END, doc_block(ev))


def doc_block(ev: Evaluation) -> str:
    """What goes between the markers: the table and the verdict (no wall times: it must be reproducible)."""
    return (f"\n{ev.half.capitalize()} half: {len(ev.scenarios)} scenarios (`huvmctl sim matrix --half "
            f"{ev.half}`).\n\n" + markdown(ev) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl sim matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=(*HALVES, "all"), default="evaluation")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=[PRESET/]FIELD:VALUE,...",
                    help="an extra policy to run (e.g. ps=peer_select:fewest-lent)")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="only the scenarios whose name contains it (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="write every outcome as JSON")
    ap.add_argument("--update-doc", metavar="FILE",
                    help="replace the generated table between the make-eval markers of FILE (docs/evaluation.md)")
    ap.add_argument("--lender-timing", type=float, default=1.0, metavar="FACTOR",
                    help="stretch the working lenders' op time by FACTOR (0.5..2): when their spikes fall")
    ap.add_argument("--spike-period", type=float, default=None, metavar="MS",
                    help="the spiky lenders spike every MS ms (1..60000; default: a tenth of the harvester's run)")
    ap.add_argument("--kind", action="append", default=[], choices=KIND_NAMES,
                    help="only this part of the matrix (repeatable): base, or a workload kind")
    ap.add_argument("--all-levels", action="store_true",
                    help="the workload kinds at every oversubscription level (8 each, not 2: a larger matrix)")
    ap.add_argument("--seed", type=int, default=0, metavar="K",
                    help="re-draw the scenarios' random parts with seed set K (0..999; 0: the matrix's seeds)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        scs = scenarios(None if args.half == "all" else args.half, lender_timing=args.lender_timing,
                        spike_period_ms=args.spike_period, kinds=args.kind or None, all_levels=args.all_levels,
                        seed=args.seed)
        if args.only:
            scs = [s for s in scs if any(o in s.name for o in args.only)]
        variants = list(EVAL_VARIANTS) + [parse_variant(v) for v in args.variant]
    except SimConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for s in scs:
            print(f"{s.half:10s} {s.name}")
        return 0

    def progress(name: str) -> None:
        if not args.quiet:
            print(f"  {name}", file=sys.stderr, flush=True)

    ev = evaluate(scs, variants, half=args.half, progress=progress)
    print(f"{args.half} half: {len(scs)} scenarios, {len(ev.policies)} policies, {ev.wall_s:.1f} s\n")
    print(markdown(ev))
    try:
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(ev.to_dict(), f, indent=1, sort_keys=True)
        if args.update_doc:
            if args.variant or args.only or args.half == "all" or args.lender_timing != 1.0 or \
                    args.spike_period is not None or args.kind or args.all_levels or args.seed:
                raise SimConfigError("--update-doc takes one whole half (every kind, two levels each), the "
                                     "presets only, at lender timing 1, the default spike cadence and seed 0",
                                     field="update_doc")
            changed = update_doc(args.update_doc, ev)
            print(f"{args.update_doc}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
    except (OSError, SimConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

