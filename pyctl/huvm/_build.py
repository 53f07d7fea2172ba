"""cffi builder of ``huvm._huvm_cffi`` (out-of-line API mode).

The extension compiles the portable policy core (``driver/core/*.c``) and the simulated node
(``driver/sim/*.c``). Its cdef is taken verbatim from
the C headers, so the C compiler checks every struct layout, field type and ioctl number that Python uses
against the real header: a drift fails the build.

* ABI: the text between ``/* HUVM_ABI_BEGIN */`` and ``/* HUVM_ABI_END */`` of
  ``driver/include/uapi/uvm_huvm_ioctl.h``. ``#define NAME <integer literal>`` stays as it is (cffi checks
  the value); any other ``#define`` becomes ``#define NAME ...`` (value taken from the compiler).
* Software-GPU ABI (the qemu test bed's emulated GPUs, :mod:`huvm.softgpu`): the text between
  ``/* SOFTGPU_ABI_BEGIN */`` and ``/* SOFTGPU_ABI_END */`` of ``driver/include/uapi/huvm_softgpu_ioctl.h``,
  by the same rules.
* Core API: the text between ``HUVM_CORE_API_BEGIN`` and ``HUVM_CORE_API_END`` of
  ``driver/core/huvm_core.h`` (structs fully declared, so their layout is checked too).
* Simulator: ``driver/sim/huvm_sim_cdef.h``, a C header that is both ``#include``d by the extension and fed
  to cdef (the part between ``/* HUVM_SIM_CDEF_BEGIN */`` and ``/* HUVM_SIM_CDEF_END */``).

Run directly (``python huvm/_build.py``) or through setuptools (``cffi_modules`` in ``pyctl/setup.py``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
# pyctl/huvm/_build.py -> repository root; HUVM_ROOT overrides (e.g. an sdist built elsewhere).
ROOT = Path(os.environ.get("HUVM_ROOT", HERE.parent.parent)).resolve()
DRIVER = ROOT / "driver"
ABI_HEADER = DRIVER / "include" / "uapi" / "uvm_huvm_ioctl.h"
SOFTGPU_HEADER = DRIVER / "include" / "uapi" / "huvm_softgpu_ioctl.h"
CORE_HEADER = DRIVER / "core" / "huvm_core.h"
SIM_CDEF_HEADER = DRIVER / "sim" / "huvm_sim_cdef.h"



def _rel(path: Path) -> str:
    """setuptools wants source paths relative to the setup.py directory (the current directory)."""
    return os.path.relpath(path, Path.cwd())


CORE_SOURCES = sorted(_rel(p) for p in (DRIVER / "core").glob("*.c"))
SIM_SOURCES = sorted(_rel(p) for p in (DRIVER / "sim").glob("*.c"))
INCLUDE_DIRS = [str(DRIVER / "include" / "uapi"), str(DRIVER / "core"), str(DRIVER / "sim")]
# -fvisibility=hidden: only the module's init (PyMODINIT_FUNC, default visibility) is exported, so LTO may inline and
# specialise the core and the simulator across files freely (cffi reaches the C functions through its own tables).
COMPILE_ARGS = ["-O3", "-flto=auto", "-fno-semantic-interposition", "-fvisibility=hidden", "-std=gnu11", "-Wall",
                "-Werror", "-Wno-unused-function"]

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)(\([^)]*\))?\s*(.*)$")
_LITERAL = re.compile(r"^(0[xX][0-9a-fA-F]+|[0-9]+)([uU]?[lL]{0,2})$")


def _between(text: str, begin: str, end: str, path: Path) -> str:
    """The lines strictly between the line holding `begin` and the line holding `end`."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if begin in line]
    ends = [i for i, line in enumerate(lines) if end in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise RuntimeError(f"{path}: expected one {begin!r} line before one {end!r} line")
    return "\n".join(lines[starts[0] + 1 : ends[0]])


def to_cdef(text: str) -> str:
    """C header text -> cffi cdef: comments dropped, non-literal #defines turned into `...`."""
    out: list[str] = []
    for line in _COMMENT.sub("", text).splitlines():
        m = _DEFINE.match(line)
        if m is None:
            if line.lstrip().startswith("#"):
                continue  # #include, #if..., guards
            out.append(line)
            continue
        name, params, value = m.group(1), m.group(2), m.group(3).strip()
        if params is not None or not value:
            continue  # function-like or empty macros are not for Python
        if _LITERAL.match(value):
            out.append(f"#define {name} {value}")
        else:
            out.append(f"#define {name} ...")
    return "\n".join(line for line in out if line.strip())


def abi_cdef() -> str:
    return to_cdef(_between(ABI_HEADER.read_text(), "HUVM_ABI_BEGIN", "HUVM_ABI_END", ABI_HEADER))


def softgpu_cdef() -> str:
    text = SOFTGPU_HEADER.read_text()
    return to_cdef(_between(text, "SOFTGPU_ABI_BEGIN", "SOFTGPU_ABI_END", SOFTGPU_HEADER))


def core_cdef() -> str:
    text = _between(CORE_HEADER.read_text(), "HUVM_CORE_API_BEGIN", "HUVM_CORE_API_END", CORE_HEADER)
    return to_cdef(text) + "\nextern uint64_t huvm_port_assert_failures;\n"


def sim_cdef() -> str:
    text = _between(SIM_CDEF_HEADER.read_text(), "HUVM_SIM_CDEF_BEGIN", "HUVM_SIM_CDEF_END", SIM_CDEF_HEADER)
    return to_cdef(text)


def literal_checks(cdef: str) -> str:
    """_Static_asserts that make the C compiler (not only the import) refuse a literal #define whose cdef
    value differs from what the compiler sees."""
    checks = []
    for m in re.finditer(r"^#define (\w+) (?!\.\.\.)(\S+)$", cdef, re.M):
        checks.append(f'_Static_assert(({m.group(1)}) == ({m.group(2)}), "cdef value of {m.group(1)}");')
    return "\n".join(checks)


def make_ffibuilder() -> FFI:
    builder = FFI()
    cdefs = [abi_cdef(), softgpu_cdef(), core_cdef(), sim_cdef()]
    for text in cdefs:
        builder.cdef(text)
    includes = ['#include "uvm_huvm_ioctl.h"', '#include "huvm_softgpu_ioctl.h"', '#include "huvm_core.h"',
                f'#include "{SIM_CDEF_HEADER.name}"']
    builder.set_source(
        "huvm._huvm_cffi",
        "\n".join(includes) + "\n" + "\n".join(literal_checks(text) for text in cdefs) + "\n",
        sources=CORE_SOURCES + SIM_SOURCES,
        include_dirs=INCLUDE_DIRS,
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=["-O3", "-flto=auto"],
    )
    return builder


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(HERE.parent), verbose=True)
