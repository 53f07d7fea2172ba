"""BFS and WCC as traversals (huvm.sim.traversal; docs/simulator.md, "Replications"): the algorithms are the
real ones, their levels and rounds are what the traces touch, and the layout fills the footprint."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from huvmlab.sim import traversal
from huvmlab.sim.config import CHUNK_BYTES
from huvmlab.sim.errors import SimConfigError

SCALE = 8192   # soc-twitter-2010 / 8192: 2,599 vertices, 32,351 edges
FOOT = 64 * CHUNK_BYTES


def _ref_bfs(off: np.ndarray, idx: np.ndarray, s: int) -> dict[int, int]:
    dist = {s: 0}
    q = deque([s])
    while q:
        u = q.popleft()
        for w in idx[off[u]:off[u + 1]]:
            if int(w) not in dist:
                dist[int(w)] = dist[u] + 1
                q.append(int(w))
    return dist


def _ref_components(off: np.ndarray, idx: np.ndarray) -> np.ndarray:
    v = len(off) - 1
    parent = list(range(v))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u in range(v):
        for w in idx[off[u]:off[u + 1]]:
            a, b = find(u), find(int(w))
            if a != b:
                parent[max(a, b)] = min(a, b)
    return np.array([find(u) for u in range(v)], dtype=np.int64)


def test_bfs_levels_are_the_frontiers() -> None:
    g = traversal.scaled_graph("soc-twitter-2010", SCALE)
    src = int(np.flatnonzero(np.diff(g.offsets) > 0)[0])
    levels = traversal.bfs_levels(g.offsets, g.indices, src)
    ref = _ref_bfs(g.offsets, g.indices, src)
    seen = np.concatenate(levels)
    assert len(seen) == len(set(seen.tolist())) == len(ref)          # each reachable vertex once
    for d, frontier in enumerate(levels):
        assert sorted(frontier.tolist()) == sorted(u for u, k in ref.items() if k == d)
    assert len(levels) >= 3 and len(ref) > g.v // 2


def test_wcc_converges_to_the_components() -> None:
    g = traversal.scaled_graph("soc-twitter-2010", SCALE)
    off, idx = traversal.symmetrize(g)
    assert idx.shape[0] == 2 * g.e
    labels, rounds = traversal.wcc_rounds(off, idx)
    assert np.array_equal(labels, _ref_components(off, idx))        # the smallest id of each component
    assert rounds[0].size == g.v and rounds[-1].size < rounds[0].size / 10   # the active set shrinks
    # two components by hand: 0-1-2 and 3-4
    o = np.array([0, 1, 3, 4, 5, 6], dtype=np.int64)
    i = np.array([1, 0, 2, 1, 4, 3], dtype=np.int32)
    lab, _ = traversal.wcc_rounds(o, i)
    assert lab.tolist() == [0, 0, 0, 3, 3]


def test_bfs_trace_touches_each_levels_edges_and_neighbours() -> None:
    tr = traversal.bfs_trace("soc-twitter-2010", FOOT, scale=SCALE, edge_chunks_per_op=4)
    levels, arrs = traversal.op_levels(tr)
    g = traversal.scaled_graph("soc-twitter-2010", SCALE)
    src = int(np.flatnonzero(np.diff(g.offsets) > 0)[0])
    frontiers = traversal.bfs_levels(g.offsets, g.indices, src)
    assert levels[0] == -1 and sorted(set(levels.tolist()) - {-1}) == list(range(len(frontiers)))
    first = np.asarray(tr.op_first_touch, dtype=np.int64)
    touch = np.asarray(tr.touch_chunk, dtype=np.int64)
    mode = np.asarray(tr.touch_mode)
    ind, dist = arrs["indices"], arrs["distances"]
    for lvl, frontier in enumerate(frontiers):
        ops = np.flatnonzero(levels == lvl)
        got = np.concatenate([touch[first[k]:first[k + 1]] for k in ops])
        gm = np.concatenate([mode[first[k]:first[k + 1]] for k in ops])
        st, en = g.offsets[frontier], g.offsets[frontier + 1]
        pos = np.concatenate([np.arange(a, b) for a, b in zip(st, en, strict=True)]).astype(np.int64)
        in_ind = (got >= ind.base) & (got < ind.base + ind.chunks)
        assert set(got[in_ind].tolist()) == set(ind.chunk_of(pos).tolist())
        in_dist = (got >= dist.base) & (got < dist.base + dist.chunks)
        assert set(got[in_dist].tolist()) == set(dist.chunk_of(g.indices[pos].astype(np.int64)).tolist())
        assert (gm[in_dist] == 2).all() and (gm[in_ind] == 0).all()
    assert abs(tr.chunk_alloc_op.shape[0] - FOOT // CHUNK_BYTES) <= len(arrs)   # rounding: < 1 chunk per array


def test_wcc_trace_rounds_shrink() -> None:
    tr = traversal.wcc_trace("soc-twitter-2010", FOOT, scale=SCALE, edge_chunks_per_op=4)
    levels, arrs = traversal.op_levels(tr)
    g = traversal.scaled_graph("soc-twitter-2010", SCALE)
    off, idx = traversal.symmetrize(g)
    _, rounds = traversal.wcc_rounds(off, idx)
    assert int(levels.max()) + 1 == len(rounds)
    first = np.asarray(tr.op_first_touch, dtype=np.int64)
    touch = np.asarray(tr.touch_chunk, dtype=np.int64)
    ind = arrs["indices"]

    def edge_chunks(r: int) -> set[int]:
        got = np.concatenate([touch[first[k]:first[k + 1]] for k in np.flatnonzero(levels == r)])
        return set(got[(got >= ind.base) & (got < ind.base + ind.chunks)].tolist())

    assert edge_chunks(0) == set(range(ind.base, ind.base + ind.chunks))   # round 0: every edge
    assert len(edge_chunks(len(rounds) - 1)) < ind.chunks                  # the last: not all
    assert all(edge_chunks(r) == set(ind.chunk_of(np.concatenate([np.arange(off[u], off[u + 1]) for u in a])
                                                  .astype(np.int64)).tolist()) for r, a in enumerate(rounds))


def test_layout_fills_the_footprint_in_byte_shares() -> None:
    arrs, w = traversal.layout([("a", 1000, 4), ("b", 3000, 4)], 40 * CHUNK_BYTES)
    assert (arrs["a"].chunks, arrs["b"].chunks) == (10, 30) and arrs["b"].base == 10
    assert w == pytest.approx(40 * CHUNK_BYTES / 16000)
    assert arrs["b"].chunk_of(np.array([0, 2999])).tolist() == [10, 39]
    with pytest.raises(SimConfigError):
        traversal.layout([("a", 10, 4), ("b", 10, 4)], CHUNK_BYTES)
    with pytest.raises(SimConfigError):
        traversal.scaled_graph("no-such-graph")
    with pytest.raises(SimConfigError):
        traversal.scaled_graph("web-uk-2005", 0)
    assert traversal.default_scale("web-uk-2005") == 112 and traversal.default_scale("soc-twitter-2010") == 32


def test_op_levels_only_for_its_own_traces() -> None:
    from huvmlab.sim import workloads

    with pytest.raises(SimConfigError):
        traversal.op_levels(workloads.streaming(4 * CHUNK_BYTES))


def _contiguous(m: int) -> bool:
    m >>= (m & -m).bit_length() - 1
    return (m & (m + 1)) == 0


def test_extents_gathers_touch_single_groups_and_edge_lists_their_runs() -> None:
    """touch_pages (docs/simulator.md "Partial-block migration"): the initialising op writes whole blocks; the
    source's op reads its edge list as one contiguous run of 64 KiB groups per block and gathers each
    neighbour's distance from its own group (at most one group per neighbour)."""
    tr = traversal.bfs_trace("soc-twitter-2010", FOOT, scale=SCALE)
    levels, arrs = traversal.op_levels(tr)
    first = np.asarray(tr.op_first_touch, dtype=np.int64)
    chunk = np.asarray(tr.touch_chunk, dtype=np.int64)
    pages = np.asarray(tr.touch_pages, dtype=np.int64)
    assert levels[0] == -1 and (pages[first[0]:first[1]] == 0xFFFFFFFF).all()
    k = int(np.flatnonzero(levels == 0)[0])
    sl = slice(int(first[k]), int(first[k + 1]))
    g = traversal.scaled_graph("soc-twitter-2010", SCALE)
    src = int(np.flatnonzero(np.diff(g.offsets) > 0)[0])
    deg = int(g.offsets[src + 1] - g.offsets[src])
    ind, dist = arrs["indices"], arrs["distances"]
    in_ind = (chunk[sl] >= ind.base) & (chunk[sl] < ind.base + ind.chunks)
    in_dist = (chunk[sl] >= dist.base) & (chunk[sl] < dist.base + dist.chunks)
    assert in_ind.any() and all(_contiguous(int(m)) for m in pages[sl][in_ind])
    gathered = sum(int(m).bit_count() for m in pages[sl][in_dist])
    assert 1 <= gathered <= deg
    assert gathered < 32 * int(in_dist.sum())        # a gather is not the whole block
    # a whole-array pass and every touch name at least one group
    assert (pages != 0).all()
