"""A UVM process that the lifecycle scenarios (test_huvm_lifecycle.py) start, watch and kill.

Runs in the qemu guest as ``python sgchild.py MODE SEED``, with its own softgpu client and UVM VA space (every
emulated GPU registered, a GPU VA space and a channel each). The huvm preset is the parent's business (it is
node-wide). Every line it prints is flushed at once; the parent reads them.

  loop   fill a region 1.5x GPU0's PMA region with the pattern, print ``ready``, then forever: migrate it onto
         GPU0 in 16 MiB pieces (GPU0 runs out and evicts: under the huvm preset to the peers), then back to
         the CPU (the peers' chunks are released), printing ``round N`` after each. Meant to be SIGKILLed.
  hold   the same region onto GPU0 once, print ``harvested {residency as JSON}``, then wait for stdin to
         close and leave with os._exit(0): the kernel tears the VA space down with chunks still on peers.
  evict  4 blocks onto GPU0, UVM_TEST_EVICT_CHUNK of each (with no VA space lock held, as PMM evicts),
         print ``evicted {residency}``, read the data back, print ``data {mismatching words}``, close
         everything, exit 0.

Exit status 2 with one line on stderr for a bad command line, 1 with one line for a failed UVM or softgpu call.
"""

from __future__ import annotations

import json
import os
import sys

import sglib
from huvm import errors, softgpu

MODES = ("loop", "hold", "evict")
PIECE = 16 * sglib.MIB


def say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in MODES:
        print(f"usage: {os.path.basename(argv[0])} {{{'|'.join(MODES)}}} SEED", file=sys.stderr)
        return 2
    mode = argv[1]
    try:
        seed = int(argv[2], 0)
    except ValueError:
        print(f"sgchild: SEED must be an integer, not {argv[2]!r}", file=sys.stderr)
        return 2

    try:
        return run(mode, seed)
    except errors.HuvmError as exc:
        print(f"sgchild {mode}: {exc}", file=sys.stderr)
        return 1


def run(mode: str, seed: int) -> int:
    sg = softgpu.SoftGpu.open()
    s = sglib.open_session(sg, va_spaces=True)
    g0 = s.gpus[0]
    if mode == "evict":
        r = s.uvm.alloc_managed(4 * sglib.CHUNK)
        sglib.fill_pattern(r, seed)
        r.migrate(g0)
        evicted = sum(int(s.uvm.evict_chunk(g0, r.base + off).evicted) for off in range(0, r.size, sglib.CHUNK))
        counts, odd = sglib.blocks_by_place(s, r.base, r.size)
        say("evicted " + json.dumps({"evicted": evicted, "counts": counts, "odd": odd}))
        bad, _ = sglib.pattern_mismatches(r, seed)
        say(f"data {bad}")
        r.close()
        sglib.close_session(s)
        sg.close()
        return 0

    size = -(-g0.pma_bytes * 3 // 2 // sglib.CHUNK) * sglib.CHUNK
    r = s.uvm.alloc_managed(size)
    sglib.fill_pattern(r, seed)
    say(f"ready {r.base:#x} {size}")
    rounds = 0
    while True:
        for off in range(0, size, PIECE):
            r.migrate(g0, off, min(PIECE, size - off))
        if mode == "hold":
            counts, odd = sglib.blocks_by_place(s, r.base, size)
            say("harvested " + json.dumps({"counts": counts, "odd": odd}))
            sys.stdin.read()
            os._exit(0)
        r.migrate("cpu")
        rounds += 1
        say(f"round {rounds}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
