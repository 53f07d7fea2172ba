"""The core's documents and declarations stay in sync with the sources: docs/counters.md tables with the
ABI header's counter comments, docs/abi.md with the
commands and statuses the dispatch returns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import require_or_skip
from huvm._huvm_cffi import ffi, lib

ROOT = Path(__file__).resolve().parents[2]


def test_counters_doc_is_generated_from_the_header() -> None:
    gen = ROOT / "driver" / "core" / "gen_counters_doc.py"
    r = subprocess.run([sys.executable, str(gen), "--check"], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_statistic_is_documented() -> None:
    header = (ROOT / "driver" / "include" / "uapi" / "uvm_huvm_ioctl.h").read_text()
    doc = (ROOT / "docs" / "counters.md").read_text()
    fields = re.findall(r"^\s*uint64_t\s+(\w+)(?:\[\d+\])?;\s*/\*\s*(?:counter|gauge)\s", header, re.MULTILINE)
    assert len(fields) >= 30
    for f in fields:
        assert f"`{f}" in doc, f


def test_usdt_probes_are_in_the_extension() -> None:
    """The user-space build fires USDT probes huvm:huvm_<event> (sys/sdt.h): their names are in the .so's notes."""
    import huvm._huvm_cffi as ext

    so = Path(ext.__file__).read_bytes()
    require_or_skip(b"stapsdt" in so, "extension built without sys/sdt.h (install systemtap-sdt-dev)")
    for name in ("evict", "preevict", "fetch", "giveback", "prefetch", "policy"):
        assert b"huvm\x00huvm_" + name.encode() + b"\x00" in so, name


def test_abi_doc_lists_every_command() -> None:
    doc = (ROOT / "docs" / "abi.md").read_text()
    for name in ("GET_INFO", "GET_POLICY", "SET_POLICY", "GET_STATS", "RESET_STATS", "LIST_VA_SPACES",
                 "TEST_SET_NODE", "TEST_EVENT"):
        number = getattr(lib, f"HUVM_IOCTL_{name}")
        assert f"### `HUVM_IOCTL_{name}` ({number})" in doc, name
        size = ffi.sizeof(f"HUVM_{name}_PARAMS")
        assert f"`HUVM_{name}_PARAMS`, {size} bytes" in doc, name


def test_every_policy_key_is_in_pyctl_keys_table() -> None:
    """docs/pyctl.md's table of `huvmctl policy set` keys names every key of the core's descriptors (the lender
    bound T, `gpu.N.lend_slowdown_max_pct`, was missing from it)."""
    from huvm.policy import KEYS

    doc = (ROOT / "docs" / "pyctl.md").read_text()
    rows = set(re.findall(r"^\| `([\w.]+)` \|", doc, re.MULTILINE))
    for key, spec in KEYS.items():
        assert (f"gpu.N.{key}" if spec.scope == "gpu" else key) in rows, key
