"""Graph-analytics traces: PageRank, BFS and WCC over synthetic power-law CSR graphs (numpy only).

**Graphs.** Chung-Lu style directed multigraphs built directly in CSR form (no sort): out-degrees are a
multinomial draw over power-law weights ``w_i ~ i^-b_out``; each edge's other end is drawn from the
power law ``i^-b_in`` by inverse CDF. Both weight orders are scattered over vertex ids by seeded
random permutations, so hubs are not clustered at low ids. ``b_out = 0.6`` and ``b_in = 0.75`` put the
largest degrees of the twitter-scale graph near 1e5 (out) and 1e6 (in), the orders of magnitude of
soc-twitter-2010 (21,297,772 vertices, 265,025,809 edges: https://networkrepository.com/soc-twitter-2010.php).
Self loops and parallel edges are kept (as in the crawled data set, they are rare).

**Algorithms** follow cuGraph's data layout (int32 vertex ids and offsets, one array per vertex
property) and are run for real on the generated graph to get the access streams:

* PageRank: pull over in-edges (the CSR is read as the in-adjacency), damping 0.85, L1 tolerance 1e-5,
  at most 100 iterations. Each iteration is split into SpMV segments of about ``SEG_EDGES`` edges
  (ops), then a norm op.
* BFS: top-down, frontier queue, distances double as the visited set, from the highest out-degree
  vertex. Each level is split into segments of about ``SEG_EDGES`` frontier edges.
* WCC: min-label propagation over both edge directions (hooking) followed by pointer jumping, until no
  label changes.

Access streams are exact at ``BLOCK`` (64 KiB) granularity: a gather touches the blocks holding the
gathered elements. Iteration counts of PageRank and WCC come from running them on the graph itself
when it has at most ``EXACT_EDGES`` edges, else on a down-scaled graph of the same generator and
average degree (noted in the trace metadata); BFS always runs on the full graph.

Roofline traffic per op: sequential bytes, plus ``GATHER_BYTES`` per randomly gathered or scattered
element (a 32 B sector, half of which is assumed to hit in L2 for power-law hubs -- an assumption).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .builder import Builder
from .schema import MODE_READ, MODE_RMW, MODE_WRITE_NEW, Tables

BLOCK = 64 << 10
BLOCK_SHIFT = 14  # log2(BLOCK / 4): 4-byte elements per block
SEG_EDGES = 16 << 20
EXACT_EDGES = 32 << 20
GATHER_BYTES = 16
DAMPING = 0.85
PR_TOL = 1e-5
PR_MAX_ITER = 100

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GraphSpec:
    name: str
    vertices: int
    edges: int
    b_out: float = 0.6
    b_in: float = 0.75
    seed: int = 2010


GRAPHS: dict[str, GraphSpec] = {
    "tiny": GraphSpec("tiny", 4096, 65536),
    "small": GraphSpec("small", 1 << 20, 16 << 20),
    "twitter": GraphSpec("soc-twitter-2010", 21_297_772, 265_025_809),
}


@dataclass(frozen=True)
class Csr:
    spec: GraphSpec
    offsets: npt.NDArray[np.int64]  # V + 1
    indices: npt.NDArray[np.int32]  # E

    @property
    def v(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def e(self) -> int:
        return int(self.indices.shape[0])


def _powerlaw_ranks(rng: np.random.Generator, n: int, v: int, b: float) -> npt.NDArray[np.int64]:
    """``n`` draws of ranks 0..v-1 with P(rank i) ~ (i+1)^-b (continuous inverse CDF, 0 < b < 1)."""
    a = 1.0 - b
    top = float(v) ** a - 1.0
    out = np.empty(n, dtype=np.int64)
    step = 1 << 23
    for i in range(0, n, step):
        u = rng.random(min(step, n - i))
        x = np.power(1.0 + u * top, 1.0 / a)
        out[i:i + len(u)] = np.minimum(x.astype(np.int64) - 1, v - 1)
    return out


@functools.lru_cache(maxsize=2)
def make_graph(spec: GraphSpec) -> Csr:
    """Generate the CSR graph of ``spec`` (deterministic in ``spec.seed``)."""
    rng = np.random.default_rng(spec.seed)
    v, e = spec.vertices, spec.edges
    w = np.power(np.arange(1, v + 1, dtype=np.float64), -spec.b_out)
    deg_sorted = rng.multinomial(e, w / w.sum())
    perm_out = rng.permutation(v)
    deg = np.empty(v, dtype=np.int64)
    deg[perm_out] = deg_sorted
    offsets = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(deg, out=offsets[1:])
    perm_in = rng.permutation(v).astype(np.int32)
    indices = np.empty(e, dtype=np.int32)
    step = 1 << 24
    for i in range(0, e, step):
        n = min(step, e - i)
        indices[i:i + n] = perm_in[_powerlaw_ranks(rng, n, v, spec.b_in)]
    return Csr(spec, offsets, indices)


def _scaled(spec: GraphSpec) -> tuple[GraphSpec, int]:
    if spec.edges <= EXACT_EDGES:
        return spec, 1
    s = math.ceil(spec.edges / EXACT_EDGES)
    return GraphSpec(f"{spec.name}/{s}", spec.vertices // s, spec.edges // s, spec.b_out, spec.b_in, spec.seed), s


def _iteration_count(alg: str, spec: GraphSpec, g: Csr, count: Callable[[Csr], int],
                     progress: Progress | None) -> tuple[int, GraphSpec]:
    """Iterations to convergence of ``alg``, counted on ``g`` itself or, above EXACT_EDGES edges, on the
    scaled-down graph; returns (iterations, the spec they were counted on)."""
    sspec, scale = _scaled(spec)
    if progress:
        progress(f"{alg}: iteration count")
    return count(g if scale == 1 else make_graph(sspec)), sspec


def _blocks(ids: npt.NDArray[np.int32] | npt.NDArray[np.int64], nblocks: int) -> npt.NDArray[np.bool_]:
    return np.bincount(ids >> BLOCK_SHIFT, minlength=nblocks).astype(bool)


def _range_blocks(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], nblocks: int) -> npt.NDArray[np.bool_]:
    """Blocks (of 4-byte elements) covered by the half-open element ranges [starts, ends)."""
    keep = ends > starts
    s, e = starts[keep] >> BLOCK_SHIFT, (ends[keep] - 1) >> BLOCK_SHIFT
    diff = np.zeros(nblocks + 1, dtype=np.int64)
    np.add.at(diff, s, 1)
    np.add.at(diff, e + 1, -1)
    return np.cumsum(diff[:-1]) > 0


def _nblocks(n_elems: int) -> int:
    return max(1, -(-n_elems // (BLOCK // 4)))


def _segments(offsets: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """Split vertices 0..V-1 into ranges of about SEG_EDGES edges."""
    v = len(offsets) - 1
    cuts = np.searchsorted(offsets, np.arange(SEG_EDGES, int(offsets[-1]), SEG_EDGES), side="left")
    bounds = sorted({0, v, *[int(c) for c in cuts if 0 < c < v]})
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def pagerank_iterations(g: Csr) -> int:
    """Run PageRank (pull, damping 0.85, L1 tol 1e-5) and return the iteration count."""
    v = g.v
    outdeg = np.bincount(g.indices, minlength=v).astype(np.float64)
    dangling = outdeg == 0
    inv = np.where(dangling, 0.0, 1.0 / np.maximum(outdeg, 1.0))
    pr = np.full(v, 1.0 / v)
    for it in range(1, PR_MAX_ITER + 1):
        cs = np.zeros(g.e + 1)
        np.cumsum((pr * inv)[g.indices], out=cs[1:])
        new = (1 - DAMPING) / v + DAMPING * (cs[g.offsets[1:]] - cs[g.offsets[:-1]] + pr[dangling].sum() / v)
        diff = float(np.abs(new - pr).sum())
        pr = new
        if diff < PR_TOL:
            return it
    return PR_MAX_ITER


def wcc_iterations(g: Csr) -> int:
    """Min-label propagation (both directions) + pointer jumping; returns sweeps until stable."""
    v = g.v
    lab = np.arange(v, dtype=np.int32)
    deg = np.diff(g.offsets)
    src = np.repeat(np.arange(v, dtype=np.int32), deg)
    for it in range(1, 1000):
        old = lab.copy()
        m = np.minimum(lab[src], lab[g.indices])
        np.minimum.at(lab, g.indices, m)
        np.minimum.at(lab, src, m)
        while True:  # pointer jumping
            nxt = lab[lab]
            if np.array_equal(nxt, lab):
                break
            lab = nxt
        if np.array_equal(old, lab):
            return it
    return 1000


def _graph_storages(b: Builder, g: Csr) -> tuple[int, int]:
    so = b.storage((g.v + 1) * 4, "graph", "int32", f"({g.v + 1},)", before_op=-1)
    si = b.storage(g.e * 4, "graph", "int32", f"({g.e},)", before_op=-1)
    return so, si


def _meta(alg: str, g: Csr, **kw: object) -> dict[str, object]:
    return {"kind": "graph", "model": alg, "name": f"{alg}-{g.spec.name}", "graph": g.spec.name,
            "vertices": g.v, "edges": g.e, "b_out": g.spec.b_out, "b_in": g.spec.b_in, "seed": g.spec.seed,
            "block_bytes": BLOCK, **kw}


def pagerank_trace(spec: GraphSpec, progress: Progress | None = None) -> Tables:
    g = make_graph(spec)
    iters, sspec = _iteration_count("pagerank", spec, g, pagerank_iterations, progress)
    v, nvb = g.v, _nblocks(g.v)
    b = Builder()
    so, si = _graph_storages(b, g)
    outw = b.storage(v * 4, "vertex", "float32", f"({v},)", before_op=-1)
    pr = [b.storage(v * 4, "vertex", "float32", f"({v},)", before_op=-1) for _ in range(2)]
    b.op("pagerank.out_degree", "init", traffic=g.e * 4 + g.e * GATHER_BYTES)
    b.access_all(si, MODE_READ)
    b.access_blocks(outw, _blocks(g.indices, nvb), BLOCK, MODE_RMW)
    b.op("pagerank.init", "init", traffic=v * 4)
    b.access_all(pr[0], MODE_WRITE_NEW)
    segs = _segments(g.offsets)
    gathers = [_blocks(g.indices[g.offsets[lo]:g.offsets[hi]], nvb) for lo, hi in segs]
    for it in range(iters):
        if progress:
            progress(f"pagerank: iteration {it + 1}/{iters}")
        cur, nxt = pr[it % 2], pr[(it + 1) % 2]
        for (lo, hi), gb in zip(segs, gathers, strict=True):
            ne = int(g.offsets[hi] - g.offsets[lo])
            b.op("pagerank.spmv", f"iter{it}", traffic=(hi - lo + 1) * 4 + ne * 4 + 2 * ne * GATHER_BYTES
                 + (hi - lo) * 4)
            b.access(so, lo * 4, (hi - lo + 1) * 4, MODE_READ)
            b.access(si, int(g.offsets[lo]) * 4, ne * 4, MODE_READ)
            b.access_blocks(cur, gb, BLOCK, MODE_READ)
            b.access_blocks(outw, gb, BLOCK, MODE_READ)
            b.access(nxt, lo * 4, (hi - lo) * 4, MODE_WRITE_NEW)
        b.op("pagerank.l1_norm", f"iter{it}", traffic=2 * v * 4)
        b.access_all(nxt, MODE_READ)
        b.access_all(cur, MODE_READ)
    return b.tables(_meta("pagerank", g, iterations=iters, iterations_from=sspec.name, damping=DAMPING,
                          tol=PR_TOL))


def bfs_trace(spec: GraphSpec, progress: Progress | None = None) -> Tables:
    g = make_graph(spec)
    v, nvb, neb = g.v, _nblocks(g.v), _nblocks(g.e)
    deg = np.diff(g.offsets)
    source = int(np.argmax(deg))
    b = Builder()
    so, si = _graph_storages(b, g)
    dist = b.storage(v * 4, "vertex", "int32", f"({v},)", before_op=-1)
    queue = [b.storage(v * 4, "vertex", "int32", f"({v},)", before_op=-1) for _ in range(2)]
    b.op("bfs.init", "init", traffic=v * 4)
    b.access_all(dist, MODE_WRITE_NEW)
    visited = np.zeros(v, dtype=bool)
    visited[source] = True
    frontier = np.array([source], dtype=np.int64)
    level = 0
    reached = 1
    while frontier.size:
        if progress:
            progress(f"bfs: level {level}, frontier {frontier.size}")
        qin, qout = queue[level % 2], queue[(level + 1) % 2]
        fstart, fend = g.offsets[frontier], g.offsets[frontier + 1]
        cum = np.cumsum(fend - fstart)
        cuts = np.searchsorted(cum, np.arange(SEG_EDGES, int(cum[-1]) if cum.size else 0, SEG_EDGES))
        bounds = sorted({0, frontier.size, *[int(c) + 1 for c in cuts if 0 < c + 1 < frontier.size]})
        written = 0
        found: list[npt.NDArray[np.int32]] = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            st, en = fstart[lo:hi], fend[lo:hi]
            cnt = en - st
            total = int(cnt.sum())
            if total:
                rel = np.repeat(st - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
                nbrs = g.indices[rel]
            else:
                nbrs = np.zeros(0, dtype=np.int32)
            new = nbrs[~visited[nbrs]]
            new = np.unique(new)
            visited[new] = True
            b.op("bfs.expand", f"level{level}",
                 traffic=(hi - lo) * 4 + (hi - lo) * 2 * GATHER_BYTES + total * 4 + total * GATHER_BYTES
                 + new.size * 4)
            b.access(qin, lo * 4, (hi - lo) * 4, MODE_READ)
            b.access_blocks(so, _range_blocks(frontier[lo:hi], frontier[lo:hi] + 2, _nblocks(v + 1)), BLOCK,
                            MODE_READ)
            b.access_blocks(si, _range_blocks(st, en, neb), BLOCK, MODE_READ)
            b.access_blocks(dist, _blocks(nbrs, nvb), BLOCK, MODE_RMW)
            b.access(qout, written * 4, new.size * 4, MODE_WRITE_NEW)
            written += new.size
            found.append(new)
        frontier = np.sort(np.concatenate(found)).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
        level += 1
        reached += written
    return b.tables(_meta("bfs", g, source=source, levels=level, reached=reached))


def wcc_trace(spec: GraphSpec, progress: Progress | None = None) -> Tables:
    g = make_graph(spec)
    iters, sspec = _iteration_count("wcc", spec, g, wcc_iterations, progress)
    v, nvb = g.v, _nblocks(g.v)
    b = Builder()
    so, si = _graph_storages(b, g)
    lab = b.storage(v * 4, "vertex", "int32", f"({v},)", before_op=-1)
    b.op("wcc.init", "init", traffic=v * 4)
    b.access_all(lab, MODE_WRITE_NEW)
    segs = _segments(g.offsets)
    gathers = [_blocks(g.indices[g.offsets[lo]:g.offsets[hi]], nvb) for lo, hi in segs]
    for it in range(iters):
        if progress:
            progress(f"wcc: iteration {it + 1}/{iters}")
        for (lo, hi), gb in zip(segs, gathers, strict=True):
            ne = int(g.offsets[hi] - g.offsets[lo])
            b.op("wcc.hook", f"iter{it}", traffic=(hi - lo + 1) * 4 + ne * 4 + 2 * ne * GATHER_BYTES + ne * 4)
            b.access(so, lo * 4, (hi - lo + 1) * 4, MODE_READ)
            b.access(si, int(g.offsets[lo]) * 4, ne * 4, MODE_READ)
            b.access(lab, lo * 4, (hi - lo) * 4, MODE_RMW)
            b.access_blocks(lab, gb, BLOCK, MODE_RMW)
        b.op("wcc.pointer_jump", f"iter{it}", traffic=v * 4 + v * GATHER_BYTES)
        b.access_all(lab, MODE_RMW)
    return b.tables(_meta("wcc", g, iterations=iters, iterations_from=sspec.name))


ALGORITHMS: dict[str, Callable[[GraphSpec, Progress | None], Tables]] = {
    "pagerank": pagerank_trace,
    "bfs": bfs_trace,
    "wcc": wcc_trace,
}
