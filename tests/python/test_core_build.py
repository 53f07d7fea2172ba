"""The cffi builder (pyctl/huvm/_build.py): how header text becomes cffi's cdef, and that the compiler checks
every literal value the cdef carries."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from huvm._huvm_cffi import ffi, lib

ROOT = Path(__file__).resolve().parents[2]


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("huvm_build_under_test", ROOT / "pyctl" / "huvm" / "_build.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_to_cdef_keeps_literals_and_elides_expressions() -> None:
    b = load_build()
    out = b.to_cdef(
        "#define A 16 /* c */\n#define B 0xffffffffffffffffULL\n#define C ((A << 16) | 1)\n"
        "#define F(x) ((x) + 1)\n#include <stdint.h>\n#ifdef X\ntypedef struct { uint32_t a; } t_t; // c\n#endif\n")
    lines = out.splitlines()
    assert "#define A 16" in lines
    assert "#define B 0xffffffffffffffffULL" in lines
    assert "#define C ..." in lines
    assert not any("F" in line.split()[1:2] for line in lines if line.startswith("#define"))
    assert "typedef struct { uint32_t a; } t_t;" in [line.strip() for line in lines]
    assert not any(line.lstrip().startswith(("#include", "#ifdef", "#endif")) for line in lines)


def test_literal_checks_cover_every_literal_define() -> None:
    b = load_build()
    cdef = b.abi_cdef()
    checks = b.literal_checks(cdef)
    assert '_Static_assert((HUVM_IOCTL_GET_INFO) == (1801), "cdef value of HUVM_IOCTL_GET_INFO");' in checks
    assert "HUVM_ABI_VERSION)" not in checks  # an expression: cffi asks the compiler for its value
    assert "#define HUVM_ABI_VERSION ..." in cdef


def test_abi_and_core_api_are_in_the_extension() -> None:
    b = load_build()
    assert "huvm_dispatch" in b.core_cdef()
    assert lib.HUVM_ABI_VERSION == (lib.HUVM_ABI_VERSION_MAJOR << 16) | lib.HUVM_ABI_VERSION_MINOR
    assert ffi.sizeof("huvm_gpu_counters_t") == 8 * 30
    assert ffi.sizeof("huvm_policy_t") == 56 + 16 * 48
    assert ffi.offsetof("HUVM_TEST_EVENT_PARAMS", "rmStatus") == ffi.sizeof("HUVM_TEST_EVENT_PARAMS") - 4
    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_SIM, lib.HUVM_PRESET_ATC22)
    assert core.policy.preset == lib.HUVM_PRESET_ATC22
    assert ffi.string(lib.huvm_preset_name(core.policy.preset)) == b"huvm-atc22"
    assert ffi.string(lib.huvm_reason_name(lib.HUVM_REASON_PEER_FULL)) == b"peer_full"


def test_the_extension_always_has_the_core_and_the_simulator() -> None:
    """No build without the simulator any more (issue 27: the "optional simulator" branches are gone)."""
    b = load_build()
    assert b.CORE_SOURCES and all("driver/core/" in s for s in b.CORE_SOURCES)
    assert any(s.endswith("huvm_dispatch_test.c") for s in b.CORE_SOURCES)  # the simulator is a test build
    assert b.SIM_CDEF_HEADER.is_file()
    assert b.SIM_SOURCES and all("driver/sim/" in s for s in b.SIM_SOURCES)
