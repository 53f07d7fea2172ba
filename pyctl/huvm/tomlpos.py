"""Line numbers for TOML keys (tomllib gives values only), and TOML syntax errors as ConfigError."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from .errors import ConfigError

_HEADER_RE = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")
_PART = r"(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)"
_KEY_RE = re.compile(rf"^\s*(?P<key>{_PART}(\s*\.\s*{_PART})*)\s*=")


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_\-]+)", text)
    return tuple(a or b or c for a, b, c in parts)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Full dotted path of each key (and table header) -> 1-based line where it is written. Entries of an
    array of tables are numbered: the second [[tenant]]'s gpu key is ("tenant", "1", "gpu")."""
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    counts: dict[tuple[str, ...], int] = {}
    for no, line in enumerate(text.splitlines(), 1):
        h = _HEADER_RE.match(line)
        if h:
            table = _split_dotted(h.group("name"))
            out.setdefault(table, no)
            if line.lstrip().startswith("[["):
                counts[table] = counts.get(table, -1) + 1
                table = (*table, str(counts[table]))
                out.setdefault(table, no)
            continue
        k = _KEY_RE.match(line)
        if k:
            out.setdefault(table + _split_dotted(k.group("key")), no)
    return out


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
            self.data: dict[str, Any] = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"line (\d+)", str(exc))
            raise error_cls(f"TOML syntax: {exc}", file=self.path, line=int(m.group(1)) if m else None) from None
        except RecursionError:
            raise error_cls("TOML syntax: arrays or tables nested too deeply", file=self.path) from None
        self._lines = key_lines(self.text)

    def line(self, *path: str) -> int | None:
        """Line of the key at path, else of the nearest enclosing table."""
        p = tuple(path)
        while p:
            if p in self._lines:
                return self._lines[p]
            p = p[:-1]
        return None

    def error(self, message: str, *path: str) -> ConfigError:
        return self.error_cls(message, file=self.path, line=self.line(*path), key=key_name(path) or None)


def key_name(path: tuple[str, ...] | list[str]) -> str:
    """("tenant", "1", "gpu") -> "tenant[1].gpu"."""
    out = ""
    for part in path:
        if part.isdigit() and out:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out
