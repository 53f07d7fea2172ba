"""Graph traversals as traversals: BFS and WCC traces at the simulator's chunk granularity (issue 24).

The HUVM prototype's Fig 6 runs cuGraph 21.12's BFS and WCC (``casys-kaist/HUVM`` ``bench/cugraph/bfs.py``,
``wcc.py``; the scripts of ``scripts/fig6``). Their memory traffic is not a sweep: BFS reads, level by level,
the edge lists of the frontier's vertices (scattered through the edge array, in frontier order) and checks
each neighbour's distance (a gather); WCC propagates labels from the vertices whose label changed in the
last round, so its active set, and the part of the edge array it reads, shrinks round by round. This module
runs both algorithms for real on a synthetic power-law graph and records which chunks each op touches.

**The graph.** :func:`huvmlab.traces.graph.make_graph` (Chung-Lu power-law, out/in exponents 0.6/0.75:
hubs of 1e5 out and 1e6 in at soc-twitter-2010 scale) with the dataset's published vertex and edge counts
divided by a scale ``s`` (the same average degree): soc-twitter-2010 21,297,772 vertices and 265,025,809
edges (https://networkrepository.com/soc-twitter-2010.php), web-uk-2005 39,459,925 and 936,364,282
(LAW's uk-2005, https://law.di.unimi.it/webdata/uk-2005; the artifact downloads networkrepository.com's
``web-uk-2005-all``, built from that crawl, in ``scripts/download_graph_dataset.sh``; the same exponents for
it: an assumption).

**Scaling (chunk granularity).** The arrays (cuGraph's layout: int32 vertex ids, 8-byte offsets as the
PageRank stand-in has them, one array per vertex property) keep their byte shares of the graph; together
they fill ``footprint_bytes``, and element ``i`` of an array of ``n`` elements spread over ``C`` chunks lives
in chunk ``i * C // n``. So a chunk of the scaled graph holds ``s`` times fewer elements than the real one
would, and a frontier of ``k`` scaled vertices touches what ``k * s`` real ones touch in chunks only while
``k`` is below the array's chunk count (small frontiers touch fewer chunks than the real job's: a stated
distortion, smaller with a smaller ``s``). The footprint (what cuGraph's edge list, renumbering and CSR
take on a GPU) is not published; the replication keeps its stand-ins' (about 1.25x a V100's usable memory).

**Compute.** An op's time is its bytes at the synthetic kernels' rate (2 MiB per ``ns_per_chunk``): every
element it reads or writes, a gathered element as ``GATHER_BYTES`` (one 32 B sector, half of them L2 hits:
:mod:`huvmlab.traces.graph`'s assumption), all scaled by the bytes one scaled element stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..traces.graph import GATHER_BYTES, Csr, GraphSpec, make_graph
from ..traces.trace import SimTrace
from .config import CHUNK_BYTES
from .errors import SimConfigError
from .workloads import DEFAULT_NS_PER_CHUNK, make_trace

I64 = npt.NDArray[np.int64]

#: 64 KiB groups per 2 MiB chunk (the simulator's touch_pages bits)
GROUPS = CHUNK_BYTES // (64 * 1024)

#: published dataset sizes (vertices, edges) of the prototype's graphs (module docstring for the sources)
DATASETS: dict[str, tuple[int, int]] = {
    "soc-twitter-2010": (21_297_772, 265_025_809),
    "web-uk-2005": (39_459_925, 936_364_282),
}


@dataclass(frozen=True)
class Array:
    name: str
    elems: int
    elem_bytes: int
    base: int      # first chunk
    chunks: int

    def chunk_of(self, idx: I64) -> I64:
        return self.base + (np.asarray(idx, dtype=np.int64) * self.chunks) // max(1, self.elems)

    def group_of(self, idx: I64) -> I64:
        """The 64 KiB group (global index: chunk x 32 + group in the chunk) holding each element: a gathered
        element touches its one group."""
        return self.base * GROUPS + (np.asarray(idx, dtype=np.int64) * self.chunks * GROUPS) // max(1, self.elems)

    def run_groups(self, lo: I64, hi: I64) -> I64:
        """Every group the contiguous element runs ``[lo, hi)`` cover (an edge list, a queue slice): a run's
        first to last element's groups and all between."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        keep = hi > lo
        g0, g1 = self.group_of(lo[keep]), self.group_of(hi[keep] - 1)
        cnt = g1 - g0 + 1
        if not cnt.size:
            return np.zeros(0, dtype=np.int64)
        return np.repeat(g0 - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()), dtype=np.int64)

    def all_groups(self) -> I64:
        return np.arange(self.base * GROUPS, (self.base + self.chunks) * GROUPS, dtype=np.int64)


def layout(arrays: list[tuple[str, int, int]], footprint_bytes: int) -> tuple[dict[str, Array], float]:
    """Arrays (name, elements, bytes per element) laid out one after another over ``footprint_bytes`` in their
    byte shares (at least one chunk each); returns them and the bytes one scaled element-byte stands for."""
    raw = sum(n * b for _, n, b in arrays)
    if raw <= 0 or footprint_bytes < CHUNK_BYTES * len(arrays):
        raise SimConfigError(f"a footprint of {footprint_bytes} bytes cannot hold {len(arrays)} arrays",
                             field="footprint_bytes")
    total = footprint_bytes // CHUNK_BYTES
    out: dict[str, Array] = {}
    base = 0
    for name, n, b in arrays:
        c = max(1, round(total * n * b / raw))
        out[name] = Array(name, n, b, base, c)
        base += c
    return out, footprint_bytes / raw


#: the seed of the scaled graphs' draw (``huvmctl sim replicate --sensitivity --seeds`` measures others)
GRAPH_SEED = 2010

#: edges of a scaled graph when no scale is given: the dataset's edges over ``ceil(E / SCALED_EDGES)``
SCALED_EDGES = 1 << 23


def default_scale(dataset: str) -> int:
    if dataset not in DATASETS:
        raise SimConfigError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}", field="dataset")
    return -(-DATASETS[dataset][1] // SCALED_EDGES)


def scaled_graph(dataset: str, scale: int | None = None, seed: int = GRAPH_SEED) -> Csr:
    """The dataset's published vertex and edge counts divided by ``scale`` (default: about
    :data:`SCALED_EDGES` edges), as a power-law CSR graph."""
    scale = default_scale(dataset) if scale is None else scale
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise SimConfigError(f"scale must be a whole number >= 1, not {scale!r}", field="scale")
    v, e = DATASETS[dataset]
    return make_graph(GraphSpec(f"{dataset}/{scale}", max(2, v // scale), max(1, e // scale), seed=seed))


# ---- the algorithms, run for real ----

def bfs_levels(offsets: I64, indices: npt.NDArray[np.int32], source: int) -> list[I64]:
    """Top-down BFS from ``source``: the frontier of each level (sorted vertex ids, as a vertex bucket)."""
    v = len(offsets) - 1
    visited = np.zeros(v, dtype=bool)
    visited[source] = True
    frontier = np.array([source], dtype=np.int64)
    levels = []
    while frontier.size:
        levels.append(frontier)
        nbrs = _neighbours(offsets, indices, frontier)
        new = np.unique(nbrs[~visited[nbrs]]).astype(np.int64)
        visited[new] = True
        frontier = new
    return levels


def symmetrize(g: Csr) -> tuple[I64, npt.NDArray[np.int32]]:
    """The undirected CSR of a directed graph (every edge both ways), as WCC reads it."""
    v = g.v
    src = np.repeat(np.arange(v, dtype=np.int32), np.diff(g.offsets))
    a = np.concatenate([src, g.indices])
    b = np.concatenate([g.indices, src])
    order = np.argsort(a, kind="stable")
    offsets = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=v), out=offsets[1:])
    return offsets, b[order].astype(np.int32)


def wcc_rounds(offsets: I64, indices: npt.NDArray[np.int32]) -> tuple[I64, list[I64]]:
    """Min-label propagation over an undirected CSR: every vertex active at first, then only those whose label
    changed in the last round push theirs to their neighbours, until none changes. Returns the labels (the
    smallest vertex id of each component) and each round's active set (sorted)."""
    v = len(offsets) - 1
    labels = np.arange(v, dtype=np.int64)
    active = np.arange(v, dtype=np.int64)
    rounds = []
    while active.size:
        rounds.append(active)
        cnt = offsets[active + 1] - offsets[active]
        nbrs = _neighbours(offsets, indices, active)
        new = labels.copy()
        np.minimum.at(new, nbrs, np.repeat(labels[active], cnt))
        active = np.flatnonzero(new != labels).astype(np.int64)
        labels = new
    return labels, rounds


def _edge_positions(offsets: I64, verts: I64) -> I64:
    st, en = offsets[verts], offsets[verts + 1]
    cnt = en - st
    total = int(cnt.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(st - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64)


def _neighbours(offsets: I64, indices: npt.NDArray[np.int32], verts: I64) -> I64:
    return indices[_edge_positions(offsets, verts)].astype(np.int64)


# ---- traces ----

class _Ops:
    def __init__(self, w: float, ns_per_chunk: int, arrs: dict[str, Array]) -> None:
        self.rows: list[I64] = []
        self.modes: list[npt.NDArray[np.uint8]] = []
        self.pages: list[npt.NDArray[np.uint32]] = []
        self.times: list[int] = []
        self.level: list[int] = []
        self.ns_per_byte = ns_per_chunk / CHUNK_BYTES
        self.w = w
        n_chunks = max(a.base + a.chunks for a in arrs.values())
        # scratch, all clear between ops: the groups an op touches; per chunk, 1 + its highest mode
        self._seen = np.zeros(n_chunks * GROUPS, dtype=bool)
        self._mode = np.zeros(n_chunks, dtype=np.uint8)

    def add(self, parts: list[tuple[I64, int]], nbytes: float, level: int) -> None:
        """One op: (groups, mode) parts, groups as global 64 KiB group indices (:meth:`Array.group_of`,
        :meth:`Array.run_groups`); a chunk in several parts is touched once, at the union of its groups,
        written if any part writes. Chunks in ascending order (marked in dense scratch arrays, not sorted:
        an op's parts hold every gathered element's group, millions in a WCC round)."""
        seen, md = self._seen, self._mode
        for groups, m in parts:
            seen[groups] = True
            c = groups // GROUPS
            md[c] = np.maximum(md[c], m + 1)
        gidx = np.flatnonzero(seen)
        seen[gidx] = False
        chunk = gidx // GROUPS
        first = np.ones(chunk.size, dtype=bool)
        first[1:] = chunk[1:] != chunk[:-1]
        uniq = chunk[first]
        bits = np.left_shift(np.uint64(1), (gidx % GROUPS).astype(np.uint64))
        mask = np.bitwise_or.reduceat(bits, np.flatnonzero(first)) if uniq.size else np.zeros(0, dtype=np.uint64)
        mode = md[uniq] - 1
        md[uniq] = 0
        self.rows.append(uniq.astype(np.int64))
        self.modes.append(mode.astype(np.uint8))
        self.pages.append(mask.astype(np.uint32))
        self.times.append(max(1, int(nbytes * self.w * self.ns_per_byte)))
        self.level.append(level)


def _groups(edge_chunk: I64, starts: I64, cnt: I64, per_op: int) -> I64:
    """Op index of each frontier vertex (its edges ``[starts, starts + cnt)`` in ``edge_chunk``): cut where
    the edge chunks read so far reach ``per_op`` distinct ones (edge chunks are non-decreasing along a sorted
    frontier)."""
    group_of_vert = np.zeros(cnt.size, dtype=np.int64)
    if edge_chunk.size:
        change = np.flatnonzero(edge_chunk[1:] != edge_chunk[:-1]) + 1
        has = cnt > 0
        # the distinct chunks before a vertex's first edge's, counted along the frontier
        group_of_vert[has] = np.searchsorted(change, starts[has], side="right") // per_op
        # vertices without edges go with the op before them
        group_of_vert = np.maximum.accumulate(group_of_vert)
    return group_of_vert


def _slices(gid: I64, edge_start: I64) -> list[tuple[int, int, int, int]]:
    """Per op: its frontier slice [a, b) and edge slice [ea, eb) (groups are runs along the frontier;
    ``edge_start[k]``: vertex k's first edge, one more entry for the end)."""
    if not gid.size:
        return []
    cuts = np.searchsorted(gid, np.arange(int(gid[-1]) + 2), side="left")
    ecuts = edge_start[cuts]
    return [(int(cuts[k]), int(cuts[k + 1]), int(ecuts[k]), int(ecuts[k + 1])) for k in range(len(cuts) - 1)
            if cuts[k + 1] > cuts[k]]


def _level_ops(offsets: I64, verts: I64, indices_arr: Array,
               per_op: int) -> tuple[I64, list[tuple[int, int, int, int]]]:
    """A level's (or round's) edge positions in frontier order, and its ops' slices (:func:`_slices`)."""
    pos = _edge_positions(offsets, verts)
    cnt = offsets[verts + 1] - offsets[verts]
    edge_start = np.zeros(cnt.size + 1, dtype=np.int64)
    np.cumsum(cnt, out=edge_start[1:])
    gid = _groups(indices_arr.chunk_of(pos), edge_start[:-1], cnt, per_op)
    return pos, _slices(gid, edge_start)


def bfs_trace(dataset: str, footprint_bytes: int, scale: int | None = None, edge_chunks_per_op: int = 32,
              ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, name: str | None = None, seed: int = GRAPH_SEED) -> SimTrace:
    """cuGraph's BFS on the scaled dataset graph: per level, ops of about ``edge_chunks_per_op`` edge chunks in
    frontier order, each reading its frontier slice (queue), the slice's offsets and edge lists, checking every
    neighbour's distance (read-modify-write: the visited test and the update), writing the new vertices'
    predecessors and appending them to the next queue. Source: the first vertex id with an out-edge (the
    scripts start at vertex 1 of the edge list)."""
    g = scaled_graph(dataset, scale, seed)
    v, e = g.v, g.e
    arrs, w = layout([("offsets", v + 1, 8), ("indices", e, 4), ("distances", v, 4), ("predecessors", v, 4),
                      ("queue0", v, 4), ("queue1", v, 4)], footprint_bytes)
    source = int(np.flatnonzero(np.diff(g.offsets) > 0)[0])
    ops = _Ops(w, ns_per_chunk, arrs)
    dist = arrs["distances"]
    ops.add([(dist.all_groups(), 1)], v * 4, -1)   # "unvisited"
    visited = np.zeros(v, dtype=bool)
    visited[source] = True
    for level, frontier in enumerate(bfs_levels(g.offsets, g.indices, source)):
        qin, qout = (arrs["queue0"], arrs["queue1"]) if level % 2 == 0 else (arrs["queue1"], arrs["queue0"])
        pos, slices = _level_ops(g.offsets, frontier, arrs["indices"], edge_chunks_per_op)
        written = 0
        for a, b, ea, eb in slices:
            fv = frontier[a:b]
            ep = pos[ea:eb]
            nbrs = g.indices[ep].astype(np.int64)
            new = np.unique(nbrs[~visited[nbrs]])
            visited[new] = True
            qpos = np.arange(written, written + new.size, dtype=np.int64)
            written += new.size
            parts = [(qin.run_groups(np.array([a]), np.array([b])), 0),
                     (arrs["offsets"].group_of(np.concatenate([fv, fv + 1])), 0),
                     (arrs["indices"].run_groups(g.offsets[fv], g.offsets[fv + 1]), 0), (dist.group_of(nbrs), 2),
                     (arrs["predecessors"].group_of(new), 2),
                     (qout.run_groups(qpos[:1], qpos[-1:] + 1), 1)]
            nbytes = (b - a) * (4 + 16) + ep.size * (4 + GATHER_BYTES) + new.size * (GATHER_BYTES + 4)
            ops.add(parts, nbytes, level)
    return _finish(name or f"bfs-{dataset}", ops, arrs)


def wcc_trace(dataset: str, footprint_bytes: int, scale: int | None = None, edge_chunks_per_op: int = 32,
              ns_per_chunk: int = DEFAULT_NS_PER_CHUNK, name: str | None = None, seed: int = GRAPH_SEED) -> SimTrace:
    """WCC as label propagation on the symmetrized graph (cuGraph's WCC reads the directed graph both ways):
    per round, ops of about ``edge_chunks_per_op`` edge chunks over the active vertices in id order, each
    reading its active slice, their offsets, edge lists and labels, lowering the neighbours' labels
    (read-modify-write gathers) and appending the vertices it changed first to the next round's active set;
    rounds until no label changes (:func:`wcc_rounds`, the same algorithm)."""
    g = scaled_graph(dataset, scale, seed)
    off, idx = symmetrize(g)
    v, e2 = g.v, int(idx.shape[0])
    arrs, w = layout([("offsets", v + 1, 8), ("indices", e2, 4), ("labels", v, 4), ("active0", v, 4),
                      ("active1", v, 4)], footprint_bytes)
    ops = _Ops(w, ns_per_chunk, arrs)
    lab = arrs["labels"]
    ops.add([(lab.all_groups(), 1)], v * 4, -1)   # labels = ids
    labels = np.arange(v, dtype=np.int64)
    active = np.arange(v, dtype=np.int64)
    r = 0
    while active.size:
        qin, qout = (arrs["active0"], arrs["active1"]) if r % 2 == 0 else (arrs["active1"], arrs["active0"])
        pos, slices = _level_ops(off, active, arrs["indices"], edge_chunks_per_op)
        new = labels.copy()
        marked = np.zeros(v, dtype=bool)
        written = 0
        for a, b, ea, eb in slices:
            av = active[a:b]
            ep = pos[ea:eb]
            nbrs = idx[ep].astype(np.int64)
            cnt = off[av + 1] - off[av]
            np.minimum.at(new, nbrs, np.repeat(labels[av], cnt))
            changed = np.unique(nbrs[(new[nbrs] < labels[nbrs]) & ~marked[nbrs]])
            marked[changed] = True
            qpos = np.arange(written, written + changed.size, dtype=np.int64)
            written += changed.size
            parts = [(qin.run_groups(np.array([a]), np.array([b])), 0),
                     (arrs["offsets"].group_of(np.concatenate([av, av + 1])), 0),
                     (arrs["indices"].run_groups(off[av], off[av + 1]), 0), (lab.group_of(av), 0),
                     (lab.group_of(nbrs), 2), (qout.run_groups(qpos[:1], qpos[-1:] + 1), 1)]
            nbytes = (b - a) * (4 + 16 + 4) + ep.size * (4 + GATHER_BYTES) + changed.size * 4
            ops.add(parts, nbytes, r)
        active = np.flatnonzero(marked).astype(np.int64)
        labels = new
        r += 1
    return _finish(name or f"wcc-{dataset}", ops, arrs)


def _finish(name: str, ops: _Ops, arrs: dict[str, Array]) -> SimTrace:
    n_chunks = max(a.base + a.chunks for a in arrs.values())
    tr = make_trace(name, ops.rows, np.array(ops.times, dtype=np.uint64), n_chunks,
                    modes=np.concatenate(ops.modes), pages=np.concatenate(ops.pages))
    _OP_LEVELS[id(tr)] = (tr, np.array(ops.level, dtype=np.int64), arrs)
    while len(_OP_LEVELS) > _OP_LEVELS_KEPT:   # the oldest first (dicts keep insertion order)
        del _OP_LEVELS[next(iter(_OP_LEVELS))]
    return tr


#: the op levels of the last traces built (kept with their trace, so an id is never reused while kept)
_OP_LEVELS: dict[int, tuple[SimTrace, I64, dict[str, Array]]] = {}
_OP_LEVELS_KEPT = 16


def op_levels(trace: SimTrace) -> tuple[I64, dict[str, Array]]:
    """For a trace this module built in this process: each op's BFS level or WCC round (-1: the initialising
    op) and the arrays' layout (tests and inspection)."""
    tr, levels, arrs = _OP_LEVELS.get(id(trace), (None, np.zeros(0, dtype=np.int64), {}))
    if tr is not trace:
        raise SimConfigError("not one of the last traces huvm.sim.traversal built", field="trace")
    return levels, arrs


#: Rodinia BFS's inputs (graph1MW_6: "W_6"): about six out-edges per vertex to uniformly random vertices;
#: degrees uniform in 1..11 (mean 6) -- an assumption for the generator's exact spread
RODINIA_DEGREE = (1, 11)


def rodinia_graph(footprint_bytes: int, scaled_edges: int = SCALED_EDGES, seed: int = 6) -> tuple[Csr, int]:
    """Rodinia's uniform random graph filling ``footprint_bytes`` in its layout (Node 8 B, mask, updating mask
    and visited 1 B each, cost 4 B per vertex; 4 B per edge), scaled to about ``scaled_edges`` edges; returns
    the graph and the scale."""
    mean = (RODINIA_DEGREE[0] + RODINIA_DEGREE[1]) / 2
    v_real = int(footprint_bytes / (15 + 4 * mean))
    scale = max(1, -(-int(v_real * mean) // scaled_edges))
    v = max(2, v_real // scale)
    rng = np.random.default_rng(seed)
    deg = rng.integers(RODINIA_DEGREE[0], RODINIA_DEGREE[1] + 1, v).astype(np.int64)
    offsets = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(deg, out=offsets[1:])
    indices = rng.integers(0, v, int(offsets[-1])).astype(np.int32)
    return Csr(GraphSpec(f"rodinia-uniform/{scale}", v, int(offsets[-1])), offsets, indices), scale


def rodinia_bfs_trace(footprint_bytes: int, edge_chunks_per_op: int = 32,
                      ns_per_chunk: int = DEFAULT_NS_PER_CHUNK) -> SimTrace:
    """Rodinia's BFS from vertex 0, per level its two kernels: ``Kernel`` (a thread per vertex reads the mask;
    the frontier's vertices read their Node and edge lists, test each neighbour's visited flag and write its
    cost and updating flag) and ``Kernel2`` (a thread per vertex reads the updating flags; the updated set
    their mask and visited flags)."""
    g, _ = rodinia_graph(footprint_bytes)
    v, e = g.v, g.e
    arrs, w = layout([("nodes", v, 8), ("edges", e, 4), ("mask", v, 1), ("updating", v, 1), ("visited", v, 1),
                      ("cost", v, 4)], footprint_bytes)
    ops = _Ops(w, ns_per_chunk, arrs)

    def whole(name: str) -> I64:
        return arrs[name].all_groups()

    visited = np.zeros(v, dtype=bool)
    visited[0] = True
    for level, frontier in enumerate(bfs_levels(g.offsets, g.indices, 0)):
        ops.add([(whole("mask"), 0)], v, level)
        pos, slices = _level_ops(g.offsets, frontier, arrs["edges"], edge_chunks_per_op)
        found = []
        for a, b, ea, eb in slices:
            fv = frontier[a:b]
            ep = pos[ea:eb]
            nbrs = g.indices[ep].astype(np.int64)
            new = np.unique(nbrs[~visited[nbrs]])
            visited[new] = True
            found.append(new)
            parts = [(arrs["nodes"].group_of(fv), 0), (arrs["edges"].run_groups(g.offsets[fv], g.offsets[fv + 1]), 0),
                     (arrs["visited"].group_of(nbrs), 0), (arrs["cost"].group_of(fv), 0),
                     (arrs["cost"].group_of(new), 2), (arrs["updating"].group_of(new), 2)]
            ops.add(parts, (b - a) * 12 + ep.size * (4 + GATHER_BYTES) + new.size * 2 * GATHER_BYTES, level)
        ops.add([(whole("updating"), 2), (whole("mask"), 2), (whole("visited"), 2)], 3 * v, level)
    return _finish("rodinia-bfs", ops, arrs)
