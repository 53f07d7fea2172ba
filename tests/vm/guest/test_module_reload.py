"""Load/unload of the test module 20 times leaks nothing; allow_test=0 turns the test commands off.

The Debian kernel has no kmemleak (CONFIG_DEBUG_KMEMLEAK is not set), so leaks are measured: every slab
cache is shrunk (per-CPU slabs flushed) before /proc/slabinfo is read, and /proc/vmallocinfo is counted;
a leak of one object per load would grow some cache by >= 20 objects.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import guestlib
import huvm
import pytest
from huvm import abi

lib = abi.lib
KO = os.environ.get("HUVM_KO", "")
CYCLES = 20


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def loaded() -> bool:
    return any(line.startswith("huvm_ktest ") for line in Path("/proc/modules").read_text().splitlines())


def quiesce() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    for cache in Path("/sys/kernel/slab").iterdir():
        try:
            (cache / "shrink").write_text("1")
        except OSError:
            pass


def slabs() -> dict[str, int]:
    quiesce()
    out: dict[str, int] = {}
    for line in Path("/proc/slabinfo").read_text().splitlines()[2:]:
        f = line.split()
        out[f[0]] = int(f[1])
    return out


def vmalloc_areas() -> int:
    return sum(1 for _ in Path("/proc/vmallocinfo").read_text().splitlines())


@pytest.fixture
def module_reloadable() -> Iterator[None]:
    assert KO and os.path.exists(KO), "HUVM_KO must name the module file"
    assert loaded()
    run("rmmod", "huvm_ktest")
    try:
        yield
    finally:
        if loaded():
            run("rmmod", "huvm_ktest")
        run("insmod", KO, "allow_test=1")


def cycle(args: str = "allow_test=1") -> None:
    run("insmod", KO, args)
    with guestlib.open_node() as node:
        guestlib.set_node(node)
        guestlib.event(node, lib.HUVM_TEST_EVENT_EVICT, 0, 4)
        node.call(lib.HUVM_IOCTL_SET_POLICY, guestlib.base_policy(node))
        assert guestlib.counter_sum(node.call(lib.HUVM_IOCTL_GET_STATS), "evict_to_peer") == 4
    run("rmmod", "huvm_ktest")


def grown_caches() -> tuple[dict[str, int], int]:
    """Run CYCLES load/unload cycles; return the caches that grew by >= CYCLES objects, and the growth in
    vmalloc areas."""
    before, vm_before = slabs(), vmalloc_areas()
    for _ in range(CYCLES):
        cycle()
    after, vm_after = slabs(), vmalloc_areas()
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) >= CYCLES}, \
        vm_after - vm_before


def test_reload_20_times_leaks_nothing(module_reloadable: None, capsys: pytest.CaptureFixture[str]) -> None:
    cycle()                                   # warm up caches that grow once (sysfs, kernfs, dentries)
    suspects, vm_growth = grown_caches()
    leaks: dict[str, tuple[int, ...]] = {k: (v,) for k, v in suspects.items()}
    if suspects or vm_growth >= CYCLES:
        # A leak grows every time; a one-off (a dentry of a file Python opened the first time) does not.
        again, vm_growth = grown_caches()
        leaks = {k: (v, again[k]) for k, v in suspects.items() if k in again}
    with capsys.disabled():
        print(f"\n    {CYCLES} load/unload cycles: caches grown by >= {CYCLES} objects: {suspects or 'none'}; "
              f"confirmed leaks: {leaks or 'none'}; vmalloc areas grew by {vm_growth}")
    assert leaks == {}, f"slab caches grow by >= {CYCLES} objects every {CYCLES} cycles: {leaks}"
    assert vm_growth < CYCLES, "vmalloc areas leak"
    assert not Path("/dev/huvm_ktest").exists()


def test_allow_test_0_refuses_test_commands(module_reloadable: None) -> None:
    run("insmod", KO, "allow_test=0")
    try:
        with guestlib.open_node() as node:
            with pytest.raises(huvm.NotSupported):
                guestlib.set_node(node)
            p = abi.new_params(lib.HUVM_IOCTL_TEST_EVENT)
            p.event, p.gpu, p.count = lib.HUVM_TEST_EVENT_EVICT, 0, 1
            assert guestlib.raw_ioctl(lib.HUVM_IOCTL_TEST_EVENT, p) == 0
            assert p.rmStatus == lib.HUVM_NV_ERR_NOT_SUPPORTED
            assert len(node.info().gpus) == 0       # the node stayed empty
    finally:
        run("rmmod", "huvm_ktest")
