"""Allocator emulation and expansion of byte-range accesses into a 2 MiB chunk touch stream.

The allocator is a simplified PyTorch ``CUDACachingAllocator`` (c10/cuda/CUDACachingAllocator.cpp):

* request sizes round up to 512 B (``kMinBlockSize``);
* requests of at most 1 MiB (``kSmallSize``) come from the small pool, whose segments are 2 MiB
  (``kSmallBuffer``); larger ones from the large pool, whose segments are 20 MiB (``kLargeBuffer``)
  for requests under 10 MiB (``kMinLargeAlloc``) and the request rounded up to 2 MiB (``kRoundLarge``)
  otherwise;
* best fit (smallest free block that fits, lowest address on ties), split when the remainder is at
  least 512 B (small pool) or more than 1 MiB (large pool), coalesce neighbours on free;
* segments are released only by an explicit ``empty_cache`` (the op numbers listed in the trace's
  ``meta["empty_cache_ops"]``: after the frees of such an op, every wholly free segment goes back to the
  device, ``torch.cuda.empty_cache()``); a steady-state training loop never releases one. A released
  segment's address range is not reused: later segments are placed above the highest ever.

Segments are laid out from address 0 upwards, 2 MiB aligned, so chunk ``c`` covers
``[c * 2 MiB, (c + 1) * 2 MiB)`` of the tenant's address space. Storages live before the traced
window (``alloc_op == -1``) are placed first, in sid order; then allocations and frees replay in op
order (allocations of op k before it runs, frees of op k after it).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .schema import CHUNK_SHIFT, MODE_READ, MODE_RMW, MODE_WRITE_NEW, Tables

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


@dataclass(eq=False)
class _Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class CachingAllocator:
    """Deterministic emulation of PyTorch's caching allocator (see module doc)."""

    top: int = 0
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # (base, nbytes, alloc_op)
    released: dict[int, int] = field(default_factory=dict)  # segment base -> the op after which it was freed
    #: bytes of the blocks handed out (PyTorch's ``allocated_bytes`` stat, ``torch.cuda.memory_allocated``):
    #: each block's size, rounded to 512 B, and the whole block where a large-pool remainder of at most
    #: 1 MiB was too small to split off
    allocated: int = 0
    _free: dict[bool, list[tuple[int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _by_addr: dict[int, _Block] = field(default_factory=dict)

    @staticmethod
    def round_size(n: int) -> int:
        return max(MIN_BLOCK, (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK)

    @staticmethod
    def segment_size(n: int) -> int:
        if n <= SMALL_SIZE:
            return SMALL_BUFFER
        if n < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return (n + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE

    def _insert_free(self, b: _Block) -> None:
        b.free = True
        bisect.insort(self._free[b.small], (b.size, b.addr))

    def _remove_free(self, b: _Block) -> None:
        lst = self._free[b.small]
        i = bisect.bisect_left(lst, (b.size, b.addr))
        del lst[i]
        b.free = False

    def malloc(self, nbytes: int, op: int) -> int:
        size = self.round_size(nbytes)
        small = size <= SMALL_SIZE
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1))
        if i < len(lst):
            b = self._by_addr[lst[i][1]]
            self._remove_free(b)
        else:
            seg = self.segment_size(size)
            b = _Block(self.top, seg, small, free=False)
            self.segments.append((self.top, seg, op))
            self.top += seg
        rest = b.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            r = _Block(b.addr + size, rest, small, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = size
            self._by_addr[r.addr] = r
            self._insert_free(r)
        self._by_addr[b.addr] = b
        self.allocated += b.size
        return b.addr

    def _absorb_next(self, b: _Block) -> None:
        """Coalesce: b takes over its successor's bytes, and the successor block is gone."""
        nb = b.next
        assert nb is not None
        del self._by_addr[nb.addr]
        b.size += nb.size
        b.next = nb.next
        if nb.next is not None:
            nb.next.prev = b

    def empty_cache(self, op: int) -> None:
        """Release every wholly free segment (a free block spanning its whole segment) after op."""
        sizes = {base: n for base, n, _ in self.segments}
        for base, n in sizes.items():
            b = self._by_addr.get(base)
            if b is not None and b.free and b.size == n and base not in self.released:
                self._remove_free(b)
                del self._by_addr[base]
                self.released[base] = op

    def free(self, addr: int) -> None:
        b = self._by_addr[addr]
        assert not b.free, f"double free at {addr:#x}"
        self.allocated -= b.size
        nb = b.next
        if nb is not None and nb.free:
            self._remove_free(nb)
            self._absorb_next(b)
        pb = b.prev
        if pb is not None and pb.free:
            self._remove_free(pb)
            self._absorb_next(pb)
            b = pb
        self._insert_free(b)


def place(nbytes: npt.NDArray[np.int64], alloc_op: npt.NDArray[np.int32], free_op: npt.NDArray[np.int32],
          n_ops: int, empty_cache_ops: tuple[int, ...] = (), allocated: list[int] | None = None
          ) -> tuple[npt.NDArray[np.int64], list[tuple[int, int, int]], dict[int, int]]:
    """Run the allocator over the storages' lifetimes. Returns (addr per storage, segments, released
    segments: base -> the op after which it was freed). ``allocated``, if given, receives the allocator's
    allocated bytes while each op runs (its outputs allocated, nothing of it freed yet)."""
    release = set(empty_cache_ops)
    n = len(nbytes)
    addr = np.full(n, -1, dtype=np.int64)
    alloc = CachingAllocator()
    static = np.flatnonzero(alloc_op < 0)
    for si in static.tolist():
        addr[si] = alloc.malloc(int(nbytes[si]), -1)
    dyn = np.flatnonzero(alloc_op >= 0)
    dyn = dyn[np.argsort(alloc_op[dyn], kind="stable")]
    fr = np.flatnonzero(free_op >= 0)
    fr = fr[np.argsort(free_op[fr], kind="stable")]
    ai = fi = 0
    nb = [int(x) for x in nbytes]
    aop = alloc_op[dyn].tolist()
    fop = free_op[fr].tolist()
    dl, fl = dyn.tolist(), fr.tolist()
    for k in range(n_ops):
        while ai < len(dl) and aop[ai] == k:
            s = dl[ai]
            addr[s] = alloc.malloc(nb[s], k)
            ai += 1
        if allocated is not None:
            allocated.append(alloc.allocated)
        while fi < len(fl) and fop[fi] == k:
            alloc.free(int(addr[fl[fi]]))
            fi += 1
        if k in release:
            alloc.empty_cache(k)
    return addr, alloc.segments, alloc.released


def expand(t: Tables) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int8]]:
    """Accesses -> per-op chunk touches (op, chunk, mode), deduplicated per op in first-touch order.

    A chunk touched several times by one op gets mode 0 if every touch reads, 1 if every touch
    writes new data, 2 (read-modify-write) otherwise.
    """
    keep = t.a_nbytes > 0
    op = t.a_op[keep].astype(np.int64)
    start = t.s_addr[t.a_sid[keep]] + t.a_offset[keep]
    end = start + t.a_nbytes[keep]
    c0 = start >> CHUNK_SHIFT
    c1 = (end - 1) >> CHUNK_SHIFT
    cnt = c1 - c0 + 1
    total = int(cnt.sum())
    if total == 0:
        e32 = np.zeros(0, dtype=np.int32)
        return e32, e32.copy(), np.zeros(0, dtype=np.int8)
    row = np.repeat(np.arange(len(cnt)), cnt)
    first = np.cumsum(cnt) - cnt
    chunk = c0[row] + (np.arange(total) - first[row])
    top = int(chunk.max()) + 1
    key = op[row] * top + chunk
    bits = np.array([1, 2, 4], dtype=np.uint8)[t.a_mode[keep][row]]
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
    mbits = np.bitwise_or.reduceat(bits[order], starts)
    first_pos = order[starts]  # stable sort: first occurrence of each key
    mode = np.where(mbits == 1, MODE_READ, np.where(mbits == 2, MODE_WRITE_NEW, MODE_RMW)).astype(np.int8)
    uk = ks[starts]
    seq = np.argsort(first_pos, kind="stable")
    return (
        (uk[seq] // top).astype(np.int32),
        (uk[seq] % top).astype(np.int32),
        mode[seq],
    )


def live_bytes(t: Tables) -> npt.NDArray[np.int64]:
    """Bytes of live storages while each op runs (its new outputs included, its last reads too)."""
    n = t.n_ops
    delta = np.zeros(n + 1, dtype=np.int64)
    static = int(t.s_nbytes[t.s_alloc_op < 0].sum())
    dyn = t.s_alloc_op >= 0
    np.add.at(delta, t.s_alloc_op[dyn], t.s_nbytes[dyn])
    fr = t.s_free_op >= 0
    np.add.at(delta, t.s_free_op[fr] + 1, -t.s_nbytes[fr])
    return static + np.cumsum(delta[:n])


def allocated_bytes(t: Tables) -> npt.NDArray[np.int64]:
    """The allocator's allocated bytes while each op runs (:attr:`CachingAllocator.allocated`): what
    ``torch.cuda.max_memory_allocated`` reports is their maximum, where ``live_bytes`` sums the storages'
    exact sizes."""
    out: list[int] = []
    ec = tuple(int(k) for k in t.meta.get("empty_cache_ops", ()))
    place(t.s_nbytes, t.s_alloc_op, t.s_free_op, t.n_ops, ec, allocated=out)
    return np.array(out, dtype=np.int64)


def finalize(t: Tables) -> Tables:
    """Fill the derived columns in place: addr, segments, chunks, ops.bytes, ops.live_bytes."""
    ec = tuple(int(k) for k in t.meta.get("empty_cache_ops", ()))
    addr, segs, released = place(t.s_nbytes, t.s_alloc_op, t.s_free_op, t.n_ops, ec)
    t.s_addr = addr
    t.g_base = np.array([s[0] for s in segs], dtype=np.int64)
    t.g_nbytes = np.array([s[1] for s in segs], dtype=np.int64)
    t.g_alloc_op = np.array([s[2] for s in segs], dtype=np.int32)
    t.g_free_op = np.array([released.get(s[0], -1) for s in segs], dtype=np.int32)
    t.c_op, t.c_chunk, t.c_mode = expand(t)
    ob = np.zeros(t.n_ops, dtype=np.int64)
    np.add.at(ob, t.a_op, t.a_nbytes)
    t.o_bytes = ob
    t.o_live_bytes = live_bytes(t)
    return t
