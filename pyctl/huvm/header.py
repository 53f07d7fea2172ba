"""The ABI header as text: where it is, and the comments of its struct fields.

The header (``driver/include/uapi/uvm_huvm_ioctl.h``) is the one contract between the driver and this
package. cffi compiles it into ``huvm._huvm_cffi``: every constant, limit and layout comes from there
(:mod:`huvm.abi`), checked by the C compiler. This module reads the same file for the one thing the compiler
throws away: the comment after each struct field, such as the ``counter|gauge UNIT: help`` comments of the
statistics fields (see :mod:`huvm.metrics`). The fields themselves (names, types, array sizes, order) are
cffi's; the text is only read for comments, by a C tokenizer (comments, words, punctuation), not by
patterns over lines.

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
from typing import Any

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


# C tokens: comments, line ends, other white space, preprocessor lines, words, numbers, strings, punctuation.
_TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<newline>\n)
  | (?P<space>[ \t\r\f\v]+|\\\n)
  | (?P<pp>\#(?:\\\n|[^\n])*)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[\w.])*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<punct>.)
""", re.S | re.X)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) of each C token; white space other than line ends dropped."""
    out: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "punct"
        if kind != "space":
            out.append((kind, m.group()))
    return out


def _comment_text(token: str) -> str:
    """A comment's words: delimiters dropped, continuation lines joined by one space."""
    body = token[2:-2] if token.startswith("/*") else token[2:]
    return " ".join(line.strip() for line in body.splitlines() if line.strip())


@cache
def field_comments() -> dict[str, dict[str, str]]:
    """:func:`comments_of_fields` of the ABI block."""
    return comments_of_fields(abi_text())


def comments_of_fields(text: str) -> dict[str, dict[str, str]]:
    """struct name -> field name -> the comment that follows the field's declaration on its line (a
    comment that goes on over several lines included), for every ``typedef struct { ... } NAME;`` of C
    text."""
    toks = _tokens(text)
    out: dict[str, dict[str, str]] = {}
    i = 0
    while i < len(toks):
        if [t for _, t in toks[i:i + 2]] != ["typedef", "struct"]:
            i += 1
            continue
        i += 2
        while i < len(toks) and toks[i][0] in ("newline", "comment"):
            i += 1
        if i >= len(toks) or toks[i][1] != "{":
            continue
        i += 1
        fields: dict[str, str] = {}
        words: list[str] = []
        depth = 1
        while i < len(toks) and depth:
            kind, text = toks[i]
            i += 1
            if text in ("{", "}"):
                depth += 1 if text == "{" else -1
            elif text == "[" and depth == 1:
                words.append("[")  # the name is the last word before the first bracket
            elif text == ";" and depth == 1 and words:
                name = words[words.index("[") - 1] if "[" in words else words[-1]
                words = []
                comment = ""
                while i < len(toks) and toks[i][0] == "comment":
                    comment += (" " if comment else "") + _comment_text(toks[i][1])
                    i += 1
                fields[name] = comment
            elif kind == "word" and depth == 1:
                words.append(text)
        while i < len(toks) and toks[i][0] in ("newline", "comment"):
            i += 1
        if i < len(toks) and toks[i][0] == "word":
            out[toks[i][1]] = fields
    return out


def _shape(ctype: Any) -> tuple[str, tuple[int, ...]]:
    """(element type name, array sizes) of a cffi type."""
    dims: list[int] = []
    while ctype.kind == "array":
        dims.append(int(ctype.length))
        ctype = ctype.item
    return ctype.cname, tuple(dims)


@cache
def struct_fields() -> dict[str, tuple[StructField, ...]]:
    """Fields of every struct of the ABI block, as compiled (cffi: names, types, array sizes, in order),
    with their comments from the header text."""
    from . import abi

    out: dict[str, tuple[StructField, ...]] = {}
    for struct, comments in field_comments().items():
        try:
            compiled = abi.ffi.typeof(struct).fields
        except (abi.ffi.error, KeyError, TypeError):
            raise ConfigError(f"not huvm's ABI header: struct {struct} is not one of the compiled ABI's",
                              file=str(header_path())) from None
        out[struct] = tuple(StructField(struct, name, *_shape(f.type), comments.get(name, ""))
                            for name, f in compiled)
    return out


def fields_of(struct: str) -> tuple[StructField, ...]:
    """The fields of one struct of the ABI block; ConfigError naming the header when it lacks the struct."""
    fields = struct_fields()
    if struct not in fields:
        raise ConfigError(f"not huvm's ABI header: no struct {struct}", file=str(header_path()))
    return fields[struct]
