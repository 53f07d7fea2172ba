"""cffi builder of the UVM binding ``_huvm_uvm_cffi`` (out-of-line API mode), used by :mod:`huvm.uvm`.

NVIDIA's nvidia-uvm speaks raw-numbered ioctls whose params structs live in its own headers
(``uvm_ioctl.h``, ``uvm_linux_ioctl.h``, ``uvm_test_ioctl.h`` of the pinned 535.261.03 tree, or of
580.142 with ``make uvm-binding UPSTREAM=580.142``: ``build/pyuvm-580.142``). Those headers
exist only after ``make source`` (``build/upstream/orig``), so this extension is not part of the pip
install: ``make uvm-binding`` runs this file and leaves the module in ``build/pyuvm/``.

The cdef is derived from the header text, and the C compiler, not this file, fixes every layout:

* every ``typedef struct {...} NAME_PARAMS;`` whose command ``#define NAME`` exists becomes a *partial*
  struct (``...;``): its fields are listed by name and type (``NV_ALIGN_BYTES`` and ``volatile`` dropped,
  array lengths given as ``[...]``), and cffi takes sizes and offsets from the compiler. That matters:
  ``UVM_TEST_PMA_GET_BATCH_SIZE_PARAMS`` puts ``NV_ALIGN_BYTES(8)`` after a ``;``, which aligns the *next*
  field. A field whose type is not known here is left out (the partial struct keeps the real layout);
* integer macros (the command numbers, flags) and enumerators become ``#define NAME ...`` (values from the
  compiler);
* the NV_STATUS table is NVIDIA's own ``nvstatuscodes.h`` X-macro compiled into an array;
* ``NV_PROCESSOR_UUID_CPU_DEFAULT`` comes from compiling ``nvidia-uvm/nvCpuUuid.c``;
* ``mmap``/``munmap``/``ioctl`` and their flags come from libc's headers, for managed memory (the UVM fd
  must be mapped at ``vm_start == offset``, which Python's mmap module cannot ask for).

usage: python pyctl/huvm/_uvm_build.py --orig build/upstream/orig --out build/pyuvm
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from cffi import FFI

MODULE = "_huvm_uvm_cffi"
HEADERS = ("uvm_ioctl.h", "uvm_linux_ioctl.h", "uvm_test_ioctl.h")
COMPILE_ARGS = ["-O2", "-std=gnu11", "-Wall", "-Werror", "-Wno-unused-function"]

# Scalar typedefs of nvtypes.h / nvstatus.h / uvm_types.h: "some integer type", the compiler says which.
INT_TYPES = ("NvU8", "NvU16", "NvU32", "NvU64", "NvS8", "NvS16", "NvS32", "NvS64", "NvBool", "NvHandle",
             "NV_STATUS", "UvmStream", "NvLength")
# Aggregates declared below (or found in the ioctl headers themselves) that fields may use.
BASE_CDEF = "\n".join(f"typedef int... {t};" for t in INT_TYPES) + """
#define NV_UUID_LEN 16
typedef struct { NvU8 uuid[16]; } NvUuid;
typedef NvUuid NvProcessorUuid;
extern const NvProcessorUuid NV_PROCESSOR_UUID_CPU_DEFAULT;
#define UVM_MAX_GPUS ...
#define UVM_MAX_PROCESSORS ...

struct huvm_nv_status { NvU32 code; const char *name; const char *text; };
extern const struct huvm_nv_status huvm_nv_status_table[];
extern const int huvm_nv_status_count;

typedef int... off_t;
void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int munmap(void *addr, size_t length);
int ioctl(int fd, unsigned long request, ...);
#define PROT_NONE ...
#define PROT_READ ...
#define PROT_WRITE ...
#define MAP_SHARED ...
#define MAP_PRIVATE ...
#define MAP_FIXED ...
#define MAP_ANONYMOUS ...
#define MAP_NORESERVE ...
"""

SOURCE_PRELUDE = """
#include <stdint.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include "uvm_linux_ioctl.h"
#include "uvm_test_ioctl.h"
#include "nv_uvm_types.h"
#include "nvCpuUuid.h"

struct huvm_nv_status { NvU32 code; const char *name; const char *text; };
/* nvstatus.h's own X-macro list, included once more as nvidia-uvm/nvstatus.c does: every NV_STATUS
 * with its name and description. */
#undef NV_STATUS_CODE
#undef SDK_NVSTATUSCODES_H
#define NV_STATUS_CODE(name, code, string) { (code), #name, (string) },
const struct huvm_nv_status huvm_nv_status_table[] = {
#include "nvstatuscodes.h"
};
#undef NV_STATUS_CODE
_Static_assert(sizeof(huvm_nv_status_table) > 100 * sizeof(huvm_nv_status_table[0]), "the NV_STATUS table");
const int huvm_nv_status_count = (int)(sizeof(huvm_nv_status_table) / sizeof(huvm_nv_status_table[0]));
_Static_assert(sizeof(NvProcessorUuid) == NV_UUID_LEN, "NvProcessorUuid is the 16 UUID bytes");
"""

# uvm_types.h's tools event queue types (partial: the compiler lays them out) and the constants they need.
TOOLS_CDEF: tuple[tuple[str, str], ...] = (
    ("UvmEventEntry", "typedef struct { ...; } UvmEventEntry;"),
    ("UvmEventEvictionInfo", "typedef struct {\n    NvU8 eventType;\n    NvU8 srcIndex;\n    NvU8 dstIndex;\n"
     "    NvU64 addressOut;\n    NvU64 addressIn;\n    NvU64 size;\n    NvU64 timeStamp;\n    ...;\n"
     "} UvmEventEvictionInfo;"),
    ("UvmToolsEventControlData", "typedef struct {\n    NvU32 get_ahead;\n    NvU32 get_behind;\n"
     "    NvU32 put_ahead;\n    NvU32 put_behind;\n    NvU64 dropped[...];\n    ...;\n"
     "} UvmToolsEventControlData;"),
)
TOOLS_CDEF_V2: tuple[tuple[str, str], ...] = (
    ("UvmEventEntry_V2", "typedef struct { ...; } UvmEventEntry_V2;"),
    ("UvmEventEvictionInfo_V2", "typedef struct {\n    NvU8 eventType;\n    NvU16 srcIndex;\n"
     "    NvU16 dstIndex;\n    NvU64 addressOut;\n    NvU64 addressIn;\n    NvU64 size;\n"
     "    NvU64 timeStamp;\n    ...;\n} UvmEventEvictionInfo_V2;"),
)
TOOLS_CONSTANTS = ("UvmEventTypeEviction", "UvmEventTypeMigration", "UvmEventNumTypes", "UvmEventNumTypesAll")

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)(\([^)]*\))?\s*(.*)$")
_ALIGN = re.compile(r"\bNV_ALIGN_BYTES\s*\(\s*\d+\s*\)")
_FIELD = re.compile(r"^(?:const\s+)?(\w+)\s+(\w+)\s*((?:\[[^\]]*\]\s*)*)$")


@dataclass
class Parsed:
    """What the ioctl headers define (after the mini preprocessor)."""

    structs: dict[str, str]          # typedef name -> cdef text
    commands: dict[str, str]         # command macro -> its params struct
    constants: list[str]             # integer macros and enumerators
    skipped_fields: dict[str, list[str]]


def strip_comments(text: str) -> str:
    text = text.replace("\\\n", " ")
    return _COMMENT.sub("", text)


def _condition(directive: str, arg: str, path: str) -> bool:
    """The few conditions NVIDIA's ioctl headers use, for a Linux user-space C compiler."""
    if directive == "ifndef":
        return True  # include guards
    if any(k in arg for k in ("WIN32", "WIN64", "__cplusplus")):
        return False
    if "__linux__" in arg or "NV_64_BITS" in arg:
        return True  # x86-64 Linux
    raise RuntimeError(f"{path}: unknown preprocessor condition '#{directive} {arg}': teach _uvm_build.py")


def preprocess(text: str, path: str) -> str:
    """Drop the lines of inactive #if branches and every directive except #define."""
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, some branch of this #if taken)
    for line in strip_comments(text).splitlines():
        m = _DIRECTIVE.match(line)
        active = all(s[0] for s in stack)
        if m is None:
            if active:
                out.append(line)
            continue
        directive, arg = m.group(1), m.group(2).strip()
        if directive in ("if", "ifdef", "ifndef"):
            cond = _condition(directive, arg, path)
            stack.append((cond, cond))
        elif directive == "elif":
            _, taken = stack.pop()
            cond = not taken and _condition("if", arg, path)
            stack.append((cond, taken or cond))
        elif directive == "else":
            _, taken = stack.pop()
            stack.append((not taken, True))
        elif directive == "endif":
            stack.pop()
        elif directive == "define" and active:
            out.append(line)
    if stack:
        raise RuntimeError(f"{path}: unbalanced #if")
    return "\n".join(out)


def _blocks(text: str, keyword: str) -> list[tuple[str, str]]:
    """(body, name) of every ``typedef <keyword> [tag] { body } name;`` (braces matched)."""
    found = []
    for m in re.finditer(rf"\btypedef\s+{keyword}\b\s*(\w+)?\s*\{{", text):
        depth, i = 1, m.end()
        while depth:
            c = text[i]
            depth += (c == "{") - (c == "}")
            i += 1
        body = text[m.end() : i - 1]
        tail = re.match(r"\s*(\w+)\s*;", text[i:])
        if tail is not None:  # pointer typedefs (``} *name;``) are not params structs
            found.append((body, tail.group(1)))
    return found


def _split_decls(body: str) -> list[str]:
    """Top-level declarations of a struct body (split at ';' outside braces)."""
    decls: list[str] = []
    depth = 0
    cur: list[str] = []
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == ";" and depth == 0:
            decls.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    tail = "".join(cur).strip()
    if tail:
        decls.append(tail)
    return [d for d in decls if d]


def _array(dims: str) -> str:
    """'[UVM_MAX_PROCESSORS]' -> '[...]' (the compiler knows the length); '[4]' stays."""
    out = ""
    for d in re.findall(r"\[([^\]]*)\]", dims):
        out += f"[{d.strip()}]" if re.fullmatch(r"\s*\d+\s*", d) else "[...]"
    return out


def _fields(body: str, known: set[str], owner: str, skipped: list[str], exact: bool) -> list[str]:
    """cdef field lines of a struct body. Nested aggregates are emitted exactly (cffi cannot make an
    unnamed nested struct partial); their fields must therefore all be known."""
    lines = []
    for decl in _split_decls(_ALIGN.sub("", body).replace("volatile", " ")):
        decl = " ".join(decl.split())
        nested = re.match(r"^(struct|union)\s*\{(.*)\}\s*(\w*)\s*$", decl, re.DOTALL)
        if nested:
            inner = _fields(nested.group(2), known, f"{owner}.{nested.group(3) or '<anon>'}", skipped, True)
            lines.append(f"{nested.group(1)} {{ {' '.join(inner)} }} {nested.group(3)};")
            continue
        m = _FIELD.match(decl)
        if m is None or m.group(1) not in known:
            if exact:
                raise RuntimeError(f"{owner}: cannot declare '{decl}' exactly")
            skipped.append(decl)
            continue
        typ, name, dims = m.groups()
        lines.append(f"{typ} {name}{_array(dims) if not exact else dims.replace(' ', '')};")
    return lines


def parse(orig: Path) -> Parsed:
    uvm = orig / "nvidia-uvm"
    known = set(INT_TYPES) | {"NvProcessorUuid", "NvUuid"}
    structs: dict[str, str] = {}
    skipped: dict[str, list[str]] = {}
    macros: dict[str, str] = {}
    enumerators: list[str] = []

    # UvmPmaStatistics (nv_uvm_types.h; nv_uvm_user_types.h since 570) is the one aggregate from outside
    # the ioctl headers a test uses.
    inc = orig / "common" / "inc"
    types_text = "\n".join(preprocess_types(inc / h) for h in ("nv_uvm_user_types.h", "nv_uvm_types.h")
                           if (inc / h).is_file())
    for body, name in _blocks(types_text, "struct"):
        if name == "UvmPmaStatistics":
            skipped[name] = []
            structs[name] = _struct_cdef(name, body, known, skipped[name])
            known.add(name)

    # The tools event queue (uvm_types.h, outside the ioctl headers): an entry is a union of every event's
    # info, opaque here (the compiler sizes it); the eviction info is read through a cast (it starts the
    # entry, as every event's info does). 570 added the V2 queue (16-bit processor ids).
    has_v2 = "UvmEventEntry_V2" in (uvm / "uvm_types.h").read_text()
    for name, cdef in TOOLS_CDEF + (TOOLS_CDEF_V2 if has_v2 else ()):
        structs[name] = cdef
        known.add(name)
    macros.update({c: c for c in TOOLS_CONSTANTS})

    for header in HEADERS:
        text = preprocess((uvm / header).read_text(), str(uvm / header))
        for line in text.splitlines():
            m = _DEFINE.match(line)
            if m and m.group(2) is None and m.group(3) and m.group(1).startswith("UVM_"):
                macros[m.group(1)] = m.group(3).strip()
        for body, _name in _blocks(text, "enum"):
            for item in body.split(","):
                ident = item.split("=")[0].strip()
                if ident:
                    enumerators.append(ident)
        for body, name in _blocks(text, "struct"):
            skipped[name] = []
            structs[name] = _struct_cdef(name, body, known, skipped[name])
            known.add(name)

    commands = {name: f"{name}_PARAMS" for name in macros if f"{name}_PARAMS" in structs}
    constants = sorted(set(enumerators) | set(macros))
    return Parsed(structs, commands, constants, {k: v for k, v in skipped.items() if v})


def preprocess_types(path: Path) -> str:
    # nv_uvm_types.h has many #if's; only the plain typedef of UvmPmaStatistics is needed, so comments
    # are stripped and directives dropped without evaluation.
    return "\n".join(line for line in strip_comments(path.read_text()).splitlines()
                     if not line.lstrip().startswith("#"))


def _struct_cdef(name: str, body: str, known: set[str], skipped: list[str]) -> str:
    """Params structs are partial (the compiler lays them out). Helper structs (UvmPmaStatistics,
    UVM_TEST_VA_RANGE_INFO_MANAGED) are declared exactly, because cffi can embed only exact structs in
    the unnamed unions that use them; cffi then checks that layout against the compiler's."""
    exact = not name.endswith("_PARAMS")
    fields = _fields(body, known, name, skipped, exact=exact)
    return "typedef struct {\n    " + "\n    ".join(fields + ([] if exact else ["...;"])) + f"\n}} {name};"


def cdef_text(parsed: Parsed) -> str:
    parts = [BASE_CDEF]
    parts += parsed.structs.values()
    parts += [f"#define {c} ..." for c in parsed.constants]
    return "\n".join(parts) + "\n"


def make_ffibuilder(orig: Path) -> FFI:
    orig = orig.resolve()
    parsed = parse(orig)
    builder = FFI()
    builder.cdef(cdef_text(parsed))
    builder.set_source(
        MODULE,
        SOURCE_PRELUDE,
        sources=[str(orig / "nvidia-uvm" / "nvCpuUuid.c")],
        include_dirs=[str(orig / "nvidia-uvm"), str(orig / "common" / "inc")],
        extra_compile_args=COMPILE_ARGS,
    )
    return builder


def build(orig: Path, out: Path, verbose: bool = False) -> Path:
    """Compile the binding into out/; return the extension's path."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    builder = make_ffibuilder(orig)
    # cffi compiles in the current directory's terms; keep the objects inside out/.
    cwd = os.getcwd()
    try:
        os.chdir(out)
        so = builder.compile(tmpdir=str(out), verbose=verbose)
    finally:
        os.chdir(cwd)
    return Path(so)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orig", type=Path, required=True, help="the unpacked upstream tree (build/upstream/orig)")
    ap.add_argument("--out", type=Path, required=True, help="output directory (build/pyuvm)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not (args.orig / "nvidia-uvm" / "uvm_ioctl.h").exists():
        print(f"uvm-binding: {args.orig} has no nvidia-uvm/uvm_ioctl.h (make source)", file=sys.stderr)
        return 1
    parsed = parse(args.orig)
    so = build(args.orig, args.out, args.verbose)
    print(f"uvm-binding: {so} ({len(parsed.commands)} ioctls, {len(parsed.structs)} structs)")
    for name, fields in sorted(parsed.skipped_fields.items()) if args.verbose else ():
        print(f"uvm-binding: {name}: fields of unknown type left to the compiler: {'; '.join(fields)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
