"""Policy files (TOML): load into settings with file/line/key for every value; save a full policy.

Format::

    preset = "huvm"              # optional: start from this preset instead of the current policy
    peer_select = "fewest-lent"  # node-wide keys (see `huvmctl policy keys`)
    prefetch_chunks = 16

    [gpu.0]                      # per GPU: by index, by UUID ([gpu."GPU-..."]) or [gpu.all]
    role = "harvester"
    lend_limit = "8GiB"          # bytes, or a size with a unit, or "unlimited"
    lend_reserve = "1GiB"

``generation`` (written by ``save``) is ignored on load, and so is ``preset = "custom"`` (a saved policy
lists every value); ``index`` in a [gpu."GPU-..."] table is a comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from .errors import PolicyFileError
from .info import NodeInfo
from .policy import NODE_KEYS, Origin, Policy, Setting, parse_setting
from .tomlpos import TomlDoc


@dataclass(frozen=True)
class PolicyFile:
    path: str
    preset: str | None
    settings: tuple[Setting, ...]


def parse(doc: TomlDoc, info: NodeInfo, table: tuple[str, ...] = ()) -> PolicyFile:
    """Settings of a policy document (or of a sub-table of it, e.g. an experiment's [policies.X])."""
    data: Any = doc.data
    for t in table:
        data = data.get(t, {})
    if not isinstance(data, dict):
        raise _err(doc, "expected a table", table)
    preset: str | None = None
    settings: list[Setting] = []
    for key, value in data.items():
        path = (*table, key)
        if key == "preset":
            if not isinstance(value, str):
                raise _err(doc, f"expected a preset name, got {value!r}", path)
            preset = None if value.strip().lower() == "custom" else value  # a saved custom policy
        elif key == "generation":
            continue
        elif key in ("gpu", "gpus"):
            if not isinstance(value, dict):
                raise _err(doc, "expected [gpu.N] tables", path)
            for sel, entries in value.items():
                if not isinstance(entries, dict):
                    raise _err(doc, f"expected a table [{key}.{sel}]", (*path, sel))
                for k, v in entries.items():
                    if k == "index":
                        continue
                    settings.extend(parse_setting(f"gpu.{sel}.{k}", v, info,
                                                  Origin(doc.path, doc.line(*path, sel, k))))
        elif isinstance(value, dict):
            raise _err(doc, f"unknown table (known keys: preset, {', '.join(NODE_KEYS)}, [gpu.N])", path)
        else:
            settings.extend(parse_setting(key, value, info, Origin(doc.path, doc.line(*path))))
    if preset is not None:
        from .policy import preset_value

        try:
            preset_value(preset)
        except Exception as exc:
            raise _err(doc, str(exc.args[0]), (*table, "preset")) from None
    return PolicyFile(doc.path, preset, tuple(settings))


def _err(doc: TomlDoc, message: str, path: tuple[str, ...]) -> PolicyFileError:
    return PolicyFileError(message, file=doc.path, line=doc.line(*path), key=".".join(path) or None)


def load(path: str | Path, info: NodeInfo) -> PolicyFile:
    return parse(TomlDoc(path, error_cls=PolicyFileError), info)


def dumps(policy: Policy, info: NodeInfo | None = None) -> str:
    d = policy.to_dict(info)
    header = "# huvm policy (huvmctl policy apply FILE); generation is informational\n"
    return header + tomli_w.dumps(d)


def save(path: str | Path, policy: Policy, info: NodeInfo | None = None) -> None:
    Path(path).write_text(dumps(policy, info), encoding="utf-8")
