"""The ABI header as text: where it is, and what its ABI block declares.

The header (``driver/include/uapi/uvm_huvm_ioctl.h``) is the one contract between the driver and this
package. cffi compiles it into ``huvm._huvm_cffi`` (constants and layouts, checked by the C compiler); this
module reads the same file as text for what the compiler throws away: the ``counter|gauge UNIT: help``
comments of the statistics fields (see :mod:`huvm.metrics`).

Lookup order: ``$HUVM_ABI_HEADER``; ``$HUVM_ROOT/driver/include/uapi/``; a copy shipped as package data
(``huvm/data/uvm_huvm_ioctl.h``); the source tree (``<repo>/driver/include/uapi/uvm_huvm_ioctl.h``, which
editable installs, the project's set-up, use).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .errors import ConfigError, HuvmError
from .tomlpos import read_text

HEADER_NAME = "uvm_huvm_ioctl.h"
BEGIN_MARK = "/* HUVM_ABI_BEGIN */"
END_MARK = "/* HUVM_ABI_END */"


@dataclass(frozen=True)
class StructField:
    """One field of a typedef'd struct in the ABI block."""

    struct: str
    name: str
    ctype: str
    dims: tuple[int, ...]
    comment: str


def candidates() -> list[Path]:
    """Where the header is looked for, in order."""
    here = Path(__file__).resolve().parent
    paths = []
    env = os.environ.get("HUVM_ABI_HEADER")
    if env:
        paths.append(Path(env))
    root = os.environ.get("HUVM_ROOT")  # the source tree, as pyctl/huvm/_build.py takes it
    if root:
        paths.append(Path(root) / "driver" / "include" / "uapi" / HEADER_NAME)
    paths.append(here / "data" / HEADER_NAME)
    paths.append(here.parent.parent / "driver" / "include" / "uapi" / HEADER_NAME)
    return paths


class HeaderNotFound(HuvmError):
    """No ABI header where it is looked for (an incomplete install)."""


@cache
def header_path() -> Path:
    for path in candidates():
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in candidates())
    raise HeaderNotFound(f"huvm ABI header {HEADER_NAME} not found (tried {tried}); reinstall huvm or set "
                         "$HUVM_ABI_HEADER")


@cache
def abi_text() -> str:
    """The text between the ABI markers; ConfigError naming the file when it is not the ABI header."""
    path = header_path()
    text = read_text(path)
    start, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        raise ConfigError(f"not huvm's ABI header: no {BEGIN_MARK} ... {END_MARK} block", file=str(path))
    return text[start + len(BEGIN_MARK) : end]


_STRUCT_RE = re.compile(r"typedef\s+struct\s*\{(?P<body>.*?)\}\s*(?P<name>\w+)\s*;", re.S)
_FIELD_RE = re.compile(
    r"^\s*(?P<type>[A-Za-z_]\w*)\s+(?P<name>[A-Za-z_]\w*)(?P<dims>(\s*\[[^\]]+\])*)\s*;"
    r"\s*(/\*(?P<comment>.*?)(\*/|$))?"
)
_DEFINE_RE = re.compile(r"^#define\s+(?P<name>[A-Z_][A-Z0-9_]*)\s+(?P<value>[^/\n]+?)\s*(/\*.*)?$", re.M)


@cache
def defines() -> dict[str, int]:
    """Integer #defines of the ABI block (literals and simple expressions of earlier names)."""
    out: dict[str, int] = {}
    for m in _DEFINE_RE.finditer(abi_text()):
        expr = re.sub(r"(?<=[0-9a-fA-F])[uU]?[lL]{0,2}\b", "", m.group("value"))
        expr = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda t: str(out.get(t.group(0), t.group(0))), expr)
        if re.fullmatch(r"[0-9a-fA-FxX()<>|&+\-* ]+", expr):
            try:
                out[m.group("name")] = int(eval(expr, {"__builtins__": {}}))  # noqa: S307 - digits/operators only
            except (SyntaxError, ValueError, TypeError, ArithmeticError):
                continue  # not an integer expression: not one of ours
    return out


def _dim(text: str, consts: dict[str, int]) -> int:
    text = text.strip()
    return consts[text] if text in consts else int(text, 0)


@cache
def struct_fields() -> dict[str, tuple[StructField, ...]]:
    """Fields of every struct in the ABI block, with their trailing comments (continuations joined)."""
    consts = defines()
    out: dict[str, tuple[StructField, ...]] = {}
    for sm in _STRUCT_RE.finditer(abi_text()):
        fields: list[StructField] = []
        lines = sm.group("body").splitlines()
        i = 0
        while i < len(lines):
            fm = _FIELD_RE.match(lines[i])
            i += 1
            if not fm:
                continue
            comment = (fm.group("comment") or "").strip()
            if fm.group("comment") is not None and "*/" not in lines[i - 1].split("/*", 1)[1]:
                while i < len(lines):  # multi-line comment
                    part = lines[i].strip()
                    i += 1
                    comment += " " + part.replace("*/", "").strip()
                    if "*/" in part:
                        break
            try:
                dims = tuple(_dim(d, consts) for d in re.findall(r"\[([^\]]+)\]", fm.group("dims") or ""))
            except ValueError:
                raise ConfigError(f"not huvm's ABI header: array size of {fm.group('name')} is not a number",
                                  file=str(header_path())) from None
            fields.append(StructField(sm.group("name"), fm.group("name"), fm.group("type"), dims, comment.strip()))
        out[sm.group("name")] = tuple(fields)
    return out


def fields_of(struct: str) -> tuple[StructField, ...]:
    """The fields of one struct of the ABI block; ConfigError naming the header when it lacks the struct."""
    fields = struct_fields()
    if struct not in fields:
        raise ConfigError(f"not huvm's ABI header: no struct {struct}", file=str(header_path()))
    return fields[struct]
