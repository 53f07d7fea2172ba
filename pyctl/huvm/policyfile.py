"""Policy files (TOML): load into settings with file/line/key for every value; save a full policy.

Format::

    preset = "huvm"              # optional: start from this preset instead of the current policy
    peer_select = "fewest-lent"  # node-wide keys (see `huvmctl policy keys`)
    prefetch_chunks = 16

    [gpu.0]                      # per GPU: by index, by UUID ([gpu."GPU-..."]) or [gpu.all]
    role = "harvester"
    lend_limit_bytes = "8GiB"    # bytes, or a size with a unit, or "unlimited"
    lend_reserve_bytes = "1GiB"
    lend_traffic_mbyte_per_s = "18GB/s"  # MB/s, or a rate with a decimal unit (MB/s, GB/s, TB/s), or "off"

Keys are the policy table's fields (``huvmctl policy keys``); the former spellings ``lend_limit``,
``lend_reserve`` and ``lend_traffic`` are still read (deprecated, :data:`huvm.policy.DEPRECATED_ALIASES`).

``generation`` (written by ``save``) is ignored on load, and so is ``preset = "custom"`` (a saved policy
lists every value); ``index`` in a [gpu."GPU-..."] table is a comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tomli_w
from pydantic import AfterValidator, create_model

from .errors import PolicyError, PolicyFileError
from .info import NodeInfo
from .policy import (
    DEPRECATED_ALIASES,
    GPU_KEYS,
    KEYS,
    NODE_KEYS,
    Origin,
    Policy,
    Setting,
    gpu_indices,
    preset_value,
    value_type,
    written,
)
from .schema import FileModel, validate
from .tomlpos import TomlDoc


def _preset(name: str) -> str:
    """A preset's name as written, checked ("custom": a saved custom policy, which lists every value)."""
    if name.strip().lower() == "custom":
        return name
    try:
        preset_value(name)
    except PolicyError as exc:
        raise ValueError(str(exc.args[0])) from None
    return name


def _fields(keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: (value_type(KEYS[k]) | None, None) for k in keys}


def _deprecated_fields(keys: tuple[str, ...]) -> dict[str, Any]:
    """The former spellings of keys, still read (deprecated)."""
    return {a: (value_type(KEYS[k]) | None, None) for a, k in DEPRECATED_ALIASES.items() if k in keys}


#: one [gpu.SEL] table: the per-GPU keys; ``index`` (written by ``save`` beside a UUID) is a comment
GpuTable: type[FileModel] = create_model("GpuTable", __base__=FileModel, index=(int | None, None),
                                         **_fields(GPU_KEYS), **_deprecated_fields(GPU_KEYS))
_Gpus = dict[str, GpuTable]  # type: ignore[valid-type]
#: a policy file, or an experiment's [policy.NAME] table: node-wide keys, preset, [gpu.SEL] tables
PolicyTable: type[FileModel] = create_model(
    "PolicyTable", __base__=FileModel,
    preset=(Annotated[str, AfterValidator(_preset)] | None, None),
    generation=(int | None, None), gpu=(_Gpus, {}), gpus=(_Gpus, {}), **_fields(NODE_KEYS))


@dataclass(frozen=True)
class PolicyFile:
    path: str
    preset: str | None
    settings: tuple[Setting, ...]


def parse(doc: TomlDoc, info: NodeInfo, table: tuple[str, ...] = ()) -> PolicyFile:
    """Settings of a policy document (or of a sub-table of it, e.g. an experiment's [policy.NAME]), checked
    against :data:`PolicyTable`; GPU selectors are resolved on info's node."""
    data: Any = doc.data
    for t in table:
        data = data.get(t, {}) if isinstance(data, dict) else data
    model = validate(doc, PolicyTable, data, *table)
    settings: list[Setting] = []
    for key in NODE_KEYS:
        if key in data:
            origin = Origin(doc.path, doc.line(*table, key))
            settings.append(Setting(key, KEYS[key], None, getattr(model, key), str(data[key]), origin))
    for name in ("gpu", "gpus"):
        for sel, entry in getattr(model, name).items():
            for k, w in written(data[name][sel], GPU_KEYS):
                origin = Origin(doc.path, doc.line(*table, name, sel, w))
                value, text = getattr(entry, w), str(data[name][sel][w])
                settings += [Setting(f"gpu.{i}.{k}", KEYS[k], i, value, text, origin)
                             for i in gpu_indices(sel, info, f"gpu.{sel}.{k}", origin)]
    preset: str | None = getattr(model, "preset")  # noqa: B009 - a field of a model made at run time
    return PolicyFile(doc.path, None if preset is None or preset.strip().lower() == "custom" else preset,
                      tuple(settings))


def load(path: str | Path, info: NodeInfo) -> PolicyFile:
    return parse(TomlDoc(path, error_cls=PolicyFileError), info)


def dumps(policy: Policy, info: NodeInfo | None = None) -> str:
    d = policy.to_dict(info)
    header = "# huvm policy (huvmctl policy apply FILE); generation is informational\n"
    return header + tomli_w.dumps(d)


def save(path: str | Path, policy: Policy, info: NodeInfo | None = None) -> None:
    Path(path).write_text(dumps(policy, info), encoding="utf-8")
