"""The UVM asserts NVIDIA's built-in tests provoke on purpose, and a check of a kernel log against them.

Nowhere else is a UVM assert tolerated, and these only inside their own tests (test_builtin.py checks each
built-in's window of the kernel log): CHANNEL_SANITY's test_unexpected_completed_values sets a channel's
semaphore past its queued value (uvm_channel_test.c), and GPU_SEMAPHORE_SANITY's test_invalid_jumps sets
tracking-semaphore payloads beyond UVM_GPU_SEMAPHORE_MAX_JUMP (uvm_gpu_semaphore_test.c); both expect the global
error these asserts raise. The same text on 535 and 580.

``python3 provoked.py LOG``: prints the log's UVM assert lines that are none of these and exits 1 if there are
any (the qemu bed's run-guest.sh fails the variant then). No imports beyond the standard library: it runs in
the guest after the modules' tests.
"""

from __future__ import annotations

import re
import sys

PROVOKED_ASSERTS: dict[str, re.Pattern[str]] = {
    "CHANNEL_SANITY": re.compile(r"nvidia-uvm: uvm_channel\.c:\d+ uvm_channel_update_progress_with_max\[.*Assert "
                                 r"failed, condition completed_value <= channel->tracking_sem\.queued_value not true"),
    "GPU_SEMAPHORE_SANITY": re.compile(r"nvidia-uvm: uvm_gpu_semaphore\.c:\d+ update_completed_value_locked\[.*"
                                       r"Assert failed, condition new_value - old_value <= "
                                       r"UVM_GPU_SEMAPHORE_MAX_JUMP not true: .* unexpected semaphore "),
}
UVM_ASSERT = re.compile(r"nvidia-uvm: .*Assert failed")


def unexpected(lines: list[str]) -> list[str]:
    """UVM assert lines that no built-in provokes on purpose."""
    return [ln for ln in lines if UVM_ASSERT.search(ln) and not any(p.search(ln) for p in PROVOKED_ASSERTS.values())]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: provoked.py KERNEL_LOG", file=sys.stderr)
        return 2
    with open(argv[0], errors="replace") as f:
        bad = unexpected(f.read().splitlines())
    for ln in bad:
        print(ln)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
