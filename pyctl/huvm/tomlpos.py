"""TOML files that know where each key is written, and TOML syntax errors as ConfigError.

tomlkit parses (a style-preserving TOML parser: it reads the text token by token and keeps every item's
place in it); :class:`_Parser` notes where each value and each table header starts, so an error about a key
names its line. Keys are paths of strings; entries of an array (of tables or of values) are numbered: the
second ``[[tenant]]``'s ``gpu`` is ``("tenant", "1", "gpu")``, written ``tenant[1].gpu``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tomlkit.container import Container
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import AoT, Array, InlineTable, Item, Key, Table
from tomlkit.parser import Parser

from .errors import ConfigError

Path_ = tuple[str, ...]


class _Parser(Parser):
    """tomlkit's parser, noting the offset where each value and each table header starts."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.value_at: dict[int, tuple[Item, int]] = {}  # id(item) -> (item, offset); the item kept alive
        self.headers: list[tuple[Path_, bool, int]] = []  # (dotted name, [[array]]?, offset) in text order
        self._header: tuple[bool, int] | None = None  # set while a header's name is about to be parsed

    def _parse_value(self) -> Item:
        start = self._idx
        item = super()._parse_value()
        self.value_at[id(item)] = (item, start)
        return item

    def _parse_table(self, parent_name: Key | None = None, parent: Table | None = None) -> tuple[Key, Table | AoT]:
        start = self._idx
        self._header = (self._src[start : start + 2] == "[[", start)
        return super()._parse_table(parent_name, parent)

    def _parse_key(self) -> Key:
        header, self._header = self._header, None
        key = super()._parse_key()
        if header is not None:  # the first key a table parse reads is its header's name
            self.headers.append((tuple(part.key for part in key), header[0], header[1]))
        return key


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _header_lines(text: str, headers: list[tuple[Path_, bool, int]]) -> dict[Path_, int]:
    """Path -> line of each table header, entries of arrays of tables numbered in text order."""
    out: dict[Path_, int] = {}
    count: dict[Path_, int] = {}  # arrays of tables (resolved paths) -> entries so far
    for name, is_array, offset in headers:
        path: Path_ = ()
        for i, part in enumerate(name):
            path = (*path, part)
            if i < len(name) - 1 and path in count:
                path = (*path, str(count[path] - 1))  # [[a.b]] after [[a]]: inside a's latest entry
        line = _line(text, offset)
        if is_array:
            out.setdefault(path, line)
            count[path] = count.get(path, 0) + 1
            path = (*path, str(count[path] - 1))
        out.setdefault(path, line)
    return out


def _children(item: Any) -> list[tuple[str, Any]]:
    """The items inside item as parsed (a table written in parts lists each part)."""
    if isinstance(item, AoT):
        return [(str(i), t) for i, t in enumerate(item.body)]
    if isinstance(item, Array):
        return [(str(i), v) for i, v in enumerate(list.__iter__(item))]
    if isinstance(item, (Table, InlineTable)):
        item = item.value
    if isinstance(item, Container):
        return [(k.key, v) for k, v in item.body if k is not None]
    return []


def key_lines(text: str) -> tuple[dict[str, Any], dict[Path_, int], set[Path_]]:
    """(the document's data as plain Python values, path -> 1-based line of every key, table header and
    array entry, the paths of arrays). A table without a header of its own (``b`` of ``b.c = 1``) has the
    line of its first key. Raises tomlkit's ParseError."""
    parser = _Parser(text)
    doc = parser.parse()
    lines = _header_lines(text, parser.headers)
    arrays: set[Path_] = set()

    def walk(item: Any, path: Path_) -> int | None:
        if isinstance(item, (AoT, Array)):
            arrays.add(path)
        found = parser.value_at.get(id(item))
        if found is not None and found[0] is item:
            lines.setdefault(path, _line(text, found[1]))
        below = [line for k, v in _children(item) if (line := walk(v, (*path, k))) is not None]
        if below:
            lines.setdefault(path, min(below))
        return lines.get(path)

    walk(doc, ())
    lines.pop((), None)
    return doc.unwrap(), lines, arrays


def read_text(path: str | Path, error_cls: type[ConfigError] = ConfigError) -> str:
    """A text file's contents; error_cls (file, line) when it cannot be read or is not UTF-8 (TOML's
    encoding)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error_cls(exc.strerror or str(exc), file=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error_cls(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                        file=str(path), line=line) from None


class TomlDoc:
    """A parsed TOML file that can say where each key is."""

    def __init__(self, path: str | Path, text: str | None = None, *,
                 error_cls: type[ConfigError] = ConfigError) -> None:
        self.path = str(path)
        self.error_cls = error_cls
        self.text = read_text(path, error_cls) if text is None else text
        try:
            self.data, self._lines, self._arrays = key_lines(self.text)
        except ParseError as exc:
            raise error_cls(f"TOML syntax: {exc}", file=self.path, line=exc.line) from None
        except (TOMLKitError, ValueError) as exc:  # e.g. a date that does not exist
            raise error_cls(f"TOML syntax: {exc}", file=self.path) from None
        except RecursionError:
            raise error_cls("TOML syntax: arrays or tables nested too deeply", file=self.path) from None

    def line(self, *path: str) -> int | None:
        """Line of the key at path, else of the nearest enclosing table."""
        p = tuple(path)
        while p:
            if p in self._lines:
                return self._lines[p]
            p = p[:-1]
        return None

    def key_name(self, *path: str) -> str:
        """The key at path as users write it: entries of arrays in brackets, ("tenant", "1", "gpu") ->
        "tenant[1].gpu"; table keys dotted, ("gpu", "0", "role") -> "gpu.0.role"."""
        out = ""
        for i, part in enumerate(path):
            if path[:i] in self._arrays:
                out += f"[{part}]"
            else:
                out += ("." if out else "") + part
        return out

    def error(self, message: str, *path: str) -> ConfigError:
        return self.error_cls(message, file=self.path, line=self.line(*path), key=self.key_name(*path) or None)
