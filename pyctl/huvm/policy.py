"""The policy model: typed values, KEY=VALUE parsing, validation before sending, presets and diffs.

A :class:`Policy` mirrors ``huvm_policy_t``: node-wide settings plus one :class:`GpuPolicy` per GPU UUID.
Settings are written ``KEY=VALUE``: node keys (``prefetch_chunks=16``) and per-GPU keys
``gpu.SEL.KEY`` where SEL is a GPU index, a UUID (``GPU-...``, a unique prefix works) or ``all``.

Every setting is parsed and checked here (unknown key, wrong type, outside its field's range, one key set
to two values); whether the resulting policy is consistent is for the policy core alone to say, on a local
mirror of the node (:mod:`huvm.mirror`), before anything is sent; the module applies a policy atomically,
so nothing is ever half-applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from . import abi, header, schema
from .errors import PolicyError, PolicyFileError
from .info import NodeInfo
from .units import format_rate, format_size, parse_count, parse_rate, parse_size

Kind = Literal["enum", "bool", "int", "bytes", "flags", "rate"]


@dataclass(frozen=True)
class KeySpec:
    """One settable key: a row of the ABI header's policy field table (``HUVM_POLICY_FIELDS``,
    ``HUVM_GPU_POLICY_FIELDS``), as the core exports it (:func:`policy_fields`)."""

    name: str  # the struct member (huvm_policy_t or huvm_gpu_policy_t): the key's one spelling
    kind: Kind  # how it is written and checked, from the row's unit
    scope: Literal["node", "gpu"]
    field: str  # the struct member (= name)
    help: str
    enum_prefix: str = ""
    lo: int = 0
    hi: int = 0xFFFFFFFF
    unlimited: bool = False  # bytes: "unlimited" allowed (HUVM_UNLIMITED)
    off: bool = False  # 0 ("off", "none") allowed besides lo..hi (the row's HUVM_POLICY_FIELD_ZERO_OFF)
    unit: str = ""  # the row's HUVM_UNIT_* in lower case: chunks, percent, ms, bytes, mbyte_per_s, ...
    code: int = 0  # error_field: HUVM_FIELD_* (node), HUVM_FIELD_GPU_* within an entry (GPU)
    presets: tuple[int, ...] = ()  # the value in stock, huvm-atc22, huvm (huvm's lend reserve: per GPU)

    def choices(self) -> dict[str, int]:
        """Display name -> value for enums; name -> bit for flags."""
        if self.kind == "flags":
            bits = {k[len(self.enum_prefix):].lower(): v for k, v in abi.constants(self.enum_prefix).items()
                    if not k.endswith("_KNOWN")}
            return {_display(n): v for n, v in sorted(bits.items(), key=lambda kv: kv[1])}
        names = abi.enum_names(self.enum_prefix)
        return {_display(n): v for v, n in sorted(names.items())}


def _display(name: str) -> str:
    return name.replace("_", "-")


def _help(struct: str, fld: str) -> str:
    """A field's header comment as users read it: C macro names become their values (``HUVM_UNLIMITED``
    the word ``unlimited``)."""
    for f in header.fields_of(struct):
        if f.name == fld:
            if re.fullmatch(r"HUVM_[A-Z0-9_]*\*", f.comment.strip()):
                return ""  # an enum's "HUVM_ROLE_*": its choices are listed instead
            return _MACRO.sub(_macro_value, f.comment)
    return ""


_MACRO = re.compile(r"\bHUVM_[A-Z0-9_]+\b")


def _macro_value(m: re.Match[str]) -> str:
    if m.group(0) == "HUVM_UNLIMITED":
        return "or unlimited"
    value = abi.constants("HUVM_").get(m.group(0))
    if value is None:
        return m.group(0).removeprefix("HUVM_").lower().replace("_", " ")
    unit = next((u for suffix, u in (("_MS", " ms"), ("_MBYTE_PER_S", " MB/s")) if m.group(0).endswith(suffix)), "")
    return f"{value}{unit}"


# How a unit is written and checked (huvm.units' grammar: "64MiB", "18GB/s", "off").
_UNIT_KIND: dict[str, Kind] = {"chunks": "int", "percent": "int", "ms": "int", "bytes": "bytes",
                               "mbyte_per_s": "rate", "enum": "enum", "flags": "flags", "bool": "bool"}


def policy_fields() -> tuple[KeySpec, ...]:
    """The core's policy field descriptors (``huvm_policy_field()``, built from the header's table), node
    fields then GPU fields, each in struct order."""
    lib, ffi = abi.lib, abi.ffi
    units = {v: k.removeprefix("HUVM_UNIT_").lower() for k, v in abi.constants("HUVM_UNIT_").items()
             if k != "HUVM_UNIT_COUNT"}
    out = []
    for i in range(lib.huvm_policy_field_count()):
        d = lib.huvm_policy_field(i)
        name = abi.cstr(d.name)
        scope: Literal["node", "gpu"] = "node" if d.scope == lib.HUVM_POLICY_SCOPE_NODE else "gpu"
        unit = units[int(d.unit)]
        kind = _UNIT_KIND[unit]
        choices = abi.cstr(d.choices)
        struct = "huvm_policy_t" if scope == "node" else "huvm_gpu_policy_t"
        spec = KeySpec(name, kind, scope, name, _help(struct, name),
                       "HUVM_" + choices if choices else "", int(d.min), int(d.max),
                       unlimited=bool(d.special & lib.HUVM_POLICY_FIELD_UNLIMITED),
                       off=bool(d.special & lib.HUVM_POLICY_FIELD_ZERO_OFF), unit=unit, code=int(d.field),
                       presets=tuple(int(v) for v in ffi.unpack(d.preset, 3)))
        if kind == "enum" and (not spec.help or spec.help.startswith("HUVM_")):
            spec = replace(spec, help="one of " + ", ".join(spec.choices()))
        if kind == "flags":
            spec = replace(spec, help="comma-separated, any of " + ", ".join(spec.choices()) + "; or none")
        out.append(spec)
    return tuple(out)


KEYS: dict[str, KeySpec] = {s.name: s for s in policy_fields()}
NODE_KEYS: tuple[str, ...] = tuple(k for k, s in KEYS.items() if s.scope == "node")
GPU_KEYS: tuple[str, ...] = tuple(k for k, s in KEYS.items() if s.scope == "gpu")
#: Former spellings, accepted for one release (deprecated, docs/policy.md): the key is the struct member.
DEPRECATED_ALIASES: dict[str, str] = {"lend_limit": "lend_limit_bytes", "lend_reserve": "lend_reserve_bytes",
                                      "lend_traffic": "lend_traffic_mbyte_per_s"}


def key_spec(name: str) -> KeySpec | None:
    """The key a name (or a deprecated spelling of one) names."""
    return KEYS.get(DEPRECATED_ALIASES.get(name, name))


def spellings(key: str) -> tuple[str, ...]:
    """A key and its deprecated spellings (what a file may write for it)."""
    return (key, *(a for a, k in DEPRECATED_ALIASES.items() if k == key))


def written(table: dict[str, Any], keys: Iterable[str]) -> list[tuple[str, str]]:
    """(key, the spelling written) for each of keys a table (a file's) sets, by any of its spellings."""
    return [(k, w) for k in keys for w in spellings(k) if w in table]


def preset_names() -> dict[str, int]:
    """Preset display name -> HUVM_PRESET_* (custom left out): stock, huvm-atc22, huvm."""
    out: dict[str, int] = {}
    for value, short in sorted(abi.enum_names("HUVM_PRESET_").items()):
        if short == "custom":
            continue
        out[preset_name(value)] = value
    return out


def preset_name(value: int) -> str:
    """The core's name for a preset value (huvm_preset_name), e.g. "huvm-atc22"."""
    ptr = abi.lib.huvm_preset_name(value)
    if ptr != abi.ffi.NULL:
        return abi.cstr(ptr)
    short = abi.enum_names("HUVM_PRESET_").get(value, str(value))
    return "huvm-" + short if short == "atc22" else _display(short)


def preset_value(name: str) -> int:
    """HUVM_PRESET_* of a preset name; aliases: atc22 and prototype for huvm-atc22, default for huvm (ours, the
    recommended preset; the kernel module itself starts at stock)."""
    names = preset_names()
    key = name.strip().lower().replace("_", "-")
    aliases = {"atc22": "huvm-atc22", "prototype": "huvm-atc22", "default": "huvm"}
    key = aliases.get(key, key)
    if key not in names:
        raise PolicyError(f"unknown preset {name!r}; known: {', '.join(names)}", key="preset")
    return names[key]


# ---- the model -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuPolicy:
    uuid: str
    role: int
    lend_limit_bytes: int
    lend_reserve_bytes: int
    flags: int = 0
    lend_traffic_mbyte_per_s: int = 0  # guests' traffic budget in MB/s; 0: none
    lend_slowdown_max_pct: int = 0  # the lender's slowdown bound T, %; 0: none

    @property
    def role_name(self) -> str:
        return _display(abi.enum_names("HUVM_ROLE_").get(self.role, str(self.role)))


@dataclass(frozen=True)
class Policy:
    """A full policy as the module holds it (values are the raw ABI numbers)."""

    generation: int
    preset: int
    peer_select: int
    nvlink_only: int
    peer_usage_max_pct: int
    preevict_chunks: int
    preevict_batch: int
    fetch_mode: int
    prefetch_mode: int
    prefetch_chunks: int
    prefetch_stride: int
    hysteresis_ms: int
    gpus: tuple[GpuPolicy, ...] = field(default=())

    # -- conversion to/from the ABI struct --
    @classmethod
    def from_struct(cls, p: Any) -> Policy:
        gpus = tuple(GpuPolicy(abi.uuid_str(g.uuid), **{k: int(getattr(g, k)) for k in GPU_KEYS})
                     for g in (p.gpus[i] for i in range(int(p.gpu_count))))
        values: dict[str, Any] = {k: int(getattr(p, k)) for k in NODE_KEYS}
        return cls(generation=int(p.generation), preset=int(p.preset), gpus=gpus, **values)

    def to_struct(self, p: Any) -> None:
        """Fill a huvm_policy_t cdata."""
        p.generation = self.generation
        p.preset = self.preset
        for k in NODE_KEYS:
            setattr(p, k, getattr(self, k))
        p.gpu_count = len(self.gpus)
        for i, g in enumerate(self.gpus):
            e = p.gpus[i]
            abi.ffi.memmove(e.uuid, abi.uuid_bytes(g.uuid), 16)
            for k in GPU_KEYS:
                setattr(e, k, getattr(g, k))

    # -- views --
    @property
    def preset_name(self) -> str:
        return preset_name(self.preset)

    def gpu_by_uuid(self, uuid: str) -> GpuPolicy | None:
        for g in self.gpus:
            if g.uuid.lower() == uuid.lower():
                return g
        return None

    def settings(self, info: NodeInfo | None = None) -> dict[str, str]:
        """Flat KEY -> display value; GPUs by index when info knows them, else by UUID."""
        out = {"preset": self.preset_name}
        for k in NODE_KEYS:
            out[k] = format_value(KEYS[k], getattr(self, k))
        index = {g.uuid.lower(): g.index for g in info.gpus} if info else {}
        for g in self.gpus:
            sel = str(index.get(g.uuid.lower(), g.uuid))
            for k in GPU_KEYS:
                out[f"gpu.{sel}.{k}"] = format_value(KEYS[k], getattr(g, KEYS[k].field))
        return out

    def to_dict(self, info: NodeInfo | None = None) -> dict[str, Any]:
        """JSON/TOML-friendly nested form (the policy file format)."""
        d: dict[str, Any] = {"generation": self.generation, "preset": self.preset_name}
        for k in NODE_KEYS:
            d[k] = file_value(KEYS[k], getattr(self, k))
        gpus: dict[str, Any] = {}
        index = {g.uuid.lower(): g.index for g in info.gpus} if info else {}
        for g in self.gpus:
            entry: dict[str, Any] = {k: file_value(KEYS[k], getattr(g, KEYS[k].field)) for k in GPU_KEYS}
            if g.uuid.lower() in index:
                entry = {"index": index[g.uuid.lower()], **entry}
            gpus[g.uuid] = entry
        d["gpu"] = gpus
        return d

    def diff(self, other: Policy, info: NodeInfo | None = None) -> list[tuple[str, str, str]]:
        """(key, self's value, other's value) for each key that differs (generation left out)."""
        a, b = self.settings(info), other.settings(info)
        return [(k, a.get(k, "-"), b.get(k, "-")) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]


def flag_names(spec: KeySpec, value: int) -> list[str]:
    """The names of the bits set in a flags value (unknown bits as hex)."""
    names = [n for n, bit in spec.choices().items() if value & bit]
    rest = value & ~sum(spec.choices().values())
    return names + ([hex(rest)] if rest else [])


def parse_flags(spec: KeySpec, raw: object) -> int:
    """Flag names, comma-separated in a string or as a list (a file); ``none`` or empty for no flag.
    Raises ValueError naming the unknown flag."""
    if isinstance(raw, str):
        words = [w.strip().lower().replace("_", "-") for w in raw.split(",")]
    elif isinstance(raw, (list, tuple)) and all(isinstance(w, str) for w in raw):
        words = [str(w).strip().lower().replace("_", "-") for w in raw]
    else:
        raise ValueError(f"expected flag names (comma-separated, or a list), got {raw!r}")
    choices = spec.choices()
    value = 0
    for w in words:
        if w in ("", "none"):
            continue
        if w not in choices:
            raise ValueError(f"unknown flag {w!r}; known: {', '.join(choices)}, none")
        value |= choices[w]
    return value


def format_value(spec: KeySpec, value: int) -> str:
    if spec.kind == "flags":
        return ",".join(flag_names(spec, value)) or "none"
    if spec.kind == "enum":
        return _display(abi.enum_names(spec.enum_prefix).get(value, str(value)))
    if spec.kind == "bool":
        return "true" if value else "false"
    if spec.kind == "bytes":
        return "unlimited" if spec.unlimited and value == abi.UNLIMITED else format_size(value)
    if spec.kind == "rate":
        return "off" if spec.off and value == 0 else format_rate(value)
    return str(value)


def file_value(spec: KeySpec, value: int) -> Any:
    if spec.kind == "flags":
        return flag_names(spec, value)
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "int":
        return value
    return format_value(spec, value)


# ---- settings ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Origin:
    """Where a setting came from: a file and line, or the command line."""

    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Setting:
    key: str  # canonical: "prefetch_chunks" or "gpu.<index>.role"
    spec: KeySpec
    gpu: int | None  # GPU index for per-GPU keys
    value: int
    text: str  # as written
    origin: Origin = Origin()


def _error(msg: str, key: str, origin: Origin | None, *, text: str | None = None) -> PolicyError:
    """A refused setting: ``KEY: msg``, or with the value written ``KEY=VALUE: msg`` (in a file
    ``FILE:LINE: KEY: VALUE: msg``)."""
    if origin and origin.file:
        return PolicyFileError(f"{text}: {msg}" if text is not None else msg, file=origin.file, line=origin.line,
                               key=key)
    return PolicyError(f"{key}={text}: {msg}" if text is not None else f"{key}: {msg}", key=key)


def parse_value(spec: KeySpec, raw: object, key: str, origin: Origin | None = None) -> int:
    """Type-check and range-check one value.

    From the command line (``origin`` without a file) the value is text in :mod:`huvm.units`' grammar:
    decimal integers (no ``+``, ``_``, ``0x``/``0b``), sizes with an IEC or SI unit. From a file (TOML) it
    keeps its TOML type, which must be the key's: an integer for int keys (``"16"`` is refused), a boolean
    for bool keys, a string for enums, an integer or a size string for sizes, an integer (MB/s) or a rate
    string for rates."""
    typed = origin is not None and origin.file is not None
    if spec.kind == "flags":
        try:
            return parse_flags(spec, raw)
        except ValueError as exc:
            raise _error(str(exc), key, origin) from None
    if spec.kind == "enum":
        choices = spec.choices()
        text = raw.strip().lower().replace("_", "-") if isinstance(raw, str) else None
        if text is None or text not in choices:
            raise _error(f"expected one of {', '.join(choices)}, got {raw!r}", key, origin)
        return choices[text]
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return int(raw)
        text = raw.strip().lower() if isinstance(raw, str) and not typed else None
        if text in ("1", "true", "yes", "on"):
            return 1
        if text in ("0", "false", "no", "off"):
            return 0
        raise _error(f"expected a boolean (true/false), got {raw!r}", key, origin)
    if spec.kind == "rate":
        try:
            value = rate_value(spec, raw)
        except ValueError as exc:
            text = str(raw).strip() if isinstance(raw, (int, str)) and not isinstance(raw, bool) else None
            raise _error(str(exc), key, origin, text=text if str(exc).startswith("must be") else None) from None
        return value
    if spec.kind == "int":
        if spec.off and (raw == 0 and not isinstance(raw, bool) or
                         isinstance(raw, str) and raw.strip().lower() in ("0", "off", "none")):
            return 0
        if isinstance(raw, bool) or not isinstance(raw, (int, str)) or (typed and isinstance(raw, str)):
            raise _error(f"expected an integer, got {raw!r}", key, origin)
        try:
            value = parse_count(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise _error(f"expected an integer (decimal digits), got {raw!r}", key, origin) from None
    else:  # bytes
        if isinstance(raw, str) and spec.unlimited and raw.strip().lower() in ("unlimited", "inf", "none"):
            return abi.UNLIMITED
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise _error(f"expected a size (bytes, or e.g. \"8GiB\"), got {raw!r}", key, origin)
        if isinstance(raw, str) and raw.strip().startswith("-"):
            raise _error("must be >= 0", key, origin, text=raw.strip())
        try:
            value = parse_size(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            raise _error(str(exc), key, origin) from None
    if value > spec.hi:
        raise _error(f"must be <= {_bound(spec, spec.hi)}", key, origin, text=str(raw).strip())
    if value < spec.lo:
        # a row with ZERO_OFF also takes 0: "must be >= 1" would hide it (the rate keys say it the same way)
        want = (f"0 (off) or {_bound(spec, spec.lo)}..{_bound(spec, spec.hi)}" if spec.off
                else f">= {_bound(spec, spec.lo)}")
        raise _error(f"must be {want}", key, origin, text=str(raw).strip())
    return value


def rate_range(spec: KeySpec) -> str:
    """A rate key's allowed values as a user would write them: "0 (off) or 105MB/s..16777216MB/s"."""
    return ("0 (off) or " if spec.off else "") + f"{format_rate(spec.lo)}..{format_rate(spec.hi)}"


def rate_value(spec: KeySpec, raw: object) -> int:
    """A rate key's value in MB/s: an integer (MB/s), a rate string (``"18GB/s"``, :func:`huvm.units.parse_rate`)
    or ``off``/``none``; ValueError (one line, ``must be ...`` when out of range) otherwise."""
    if isinstance(raw, str) and spec.off and raw.strip().lower() in ("off", "none"):
        return 0
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"expected a rate (MB/s, or e.g. \"18GB/s\", or off), got {raw!r}")
    if isinstance(raw, str) and raw.strip().startswith("-"):
        value = -1
    else:
        value = parse_rate(raw) if isinstance(raw, str) else raw
    if (value == 0 and spec.off) or spec.lo <= value <= spec.hi:
        return value
    raise ValueError(f"must be {rate_range(spec)}")


def value_type(spec: KeySpec) -> Any:
    """The key's value in a file (TOML), as a :mod:`huvm.schema` type that gives the ABI number: a string of
    its choices for enums, true/false for booleans, an integer in its range, a size (or "unlimited")."""
    from pydantic import AfterValidator, BeforeValidator, Field

    if spec.kind == "flags":
        def flags(raw: Any) -> int:
            return parse_flags(spec, raw)

        return Annotated[Any, AfterValidator(flags)]
    if spec.kind == "enum":
        def choice(raw: Any) -> int:
            choices = spec.choices()
            text = raw.strip().lower().replace("_", "-") if isinstance(raw, str) else None
            if text is None or text not in choices:
                raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
            return choices[text]

        return Annotated[Any, AfterValidator(choice)]
    if spec.kind == "bool":
        return Annotated[bool, AfterValidator(int)]
    if spec.kind == "int" and spec.off:
        def off_or_range(raw: Any) -> int:
            try:
                return parse_value(spec, raw, spec.name, Origin(file="-"))
            except PolicyFileError as exc:
                raise ValueError(exc.reason) from None

        return Annotated[Any, AfterValidator(off_or_range)]
    if spec.kind == "int":
        return Annotated[int, Field(ge=spec.lo, le=spec.hi)]
    if spec.kind == "rate":
        def rate(raw: Any) -> int:
            try:
                return rate_value(spec, raw)
            except ValueError as exc:
                raise ValueError(f"{raw}: {exc}" if str(exc).startswith("must be") else str(exc)) from None

        return Annotated[Any, AfterValidator(rate)]

    def size(raw: Any) -> Any:
        if isinstance(raw, str) and spec.unlimited and raw.strip().lower() in ("unlimited", "inf", "none"):
            return abi.UNLIMITED
        return schema.size_value(raw)

    return Annotated[int, BeforeValidator(size), Field(ge=spec.lo, le=spec.hi)]


def _bound(spec: KeySpec, value: int) -> str:
    """A range bound as a user would write it."""
    if spec.kind == "bytes":
        return "unlimited" if spec.unlimited and value == abi.UNLIMITED else format_size(value)
    return str(value)


def gpu_indices(sel: str, info: NodeInfo, key: str, origin: Origin | None = None) -> list[int]:
    """The GPUs a selector names: an index, a UUID (or a unique prefix of one), or ``all``."""
    if sel.lower() in ("all", "*"):
        return [g.index for g in info.gpus]
    try:
        return [info.gpu(sel).index]
    except KeyError as exc:
        raise _error(f"unknown GPU {sel!r}: {exc.args[0]}", key, origin) from None


def split_key(key: str) -> tuple[str | None, str]:
    """"gpu.0.role" -> ("0", "role"); "gpu[GPU-ab].role" -> ("GPU-ab", "role"); "fetch_mode" -> (None, ...)."""
    k = key.strip()
    low = k.lower()
    if low.startswith("gpu[") or low.startswith("gpus["):
        close = k.find("]")
        if close < 0:
            return None, k
        return k[k.find("[") + 1 : close], k[close + 1 :].lstrip(".")
    for prefix in ("gpu.", "gpus."):
        if low.startswith(prefix):
            rest = k[len(prefix) :]
            sel, _, name = rest.rpartition(".")
            return (sel or None), name
    return None, k


def parse_setting(key: str, raw: object, info: NodeInfo, origin: Origin | None = None) -> list[Setting]:
    """One KEY=VALUE into canonical settings (several for gpu.all.*)."""
    sel, name = split_key(key)
    name = name.strip().lower().replace("-", "_")
    name = DEPRECATED_ALIASES.get(name, name)
    spec = KEYS.get(name)
    if spec is None or (sel is None) != (spec.scope == "node"):
        known = ", ".join([*NODE_KEYS, *(f"gpu.N.{k}" for k in GPU_KEYS)])
        if spec is not None and sel is None:
            raise _error(f"{name} is a per-GPU key: write gpu.N.{name} (N: index, UUID or all)", key, origin)
        raise _error(f"unknown key (known: {known})", key, origin)
    value = parse_value(spec, raw, key, origin)
    text = str(raw)
    o = origin or Origin()
    if sel is None:
        return [Setting(name, spec, None, value, text, o)]
    return [Setting(f"gpu.{i}.{name}", spec, i, value, text, o) for i in gpu_indices(sel, info, key, origin)]


def parse_assignments(items: Sequence[str], info: NodeInfo) -> list[Setting]:
    """Command-line KEY=VALUE words."""
    out: list[Setting] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PolicyError(f"expected KEY=VALUE, got {item!r}")
        out.extend(parse_setting(key, value.strip(), info))
    return out


def apply_settings(base: Policy, settings: Iterable[Setting], info: NodeInfo) -> Policy:
    """The policy base with settings applied; refuses a key set twice to different values. Whether the
    result is consistent (a reserve above the GPU's memory, prefetching with zero chunks, a lender allowed
    to lend nothing, ...) is the policy core's to say: :meth:`huvm.mirror.Mirror.validate`."""
    seen: dict[str, Setting] = {}
    node: dict[str, Any] = {}
    gpus = {g.uuid.lower(): g for g in base.gpus}
    for s in settings:
        prev = seen.get(s.key)
        if prev is not None and prev.value != s.value:
            where = f" (also set at line {prev.origin.line})" if prev.origin.line else ""
            raise _error(f"contradictory: set to {prev.text!r} and {s.text!r}{where}", s.key, s.origin)
        seen[s.key] = s
        if s.gpu is None:
            node[s.key] = s.value
        else:
            g = info.gpus[s.gpu]
            entry = gpus.get(g.uuid.lower()) or GpuPolicy(g.uuid, abi.lib.HUVM_ROLE_NONE, abi.UNLIMITED, 0)
            change: dict[str, Any] = {s.spec.field: s.value}
            gpus[g.uuid.lower()] = replace(entry, **change)
    return replace(base, **node, gpus=tuple(gpus.values()))


def describe_keys() -> list[dict[str, Any]]:
    """For `huvmctl policy keys` and docs: every key with type, range/choices and help."""
    out = []
    for spec in KEYS.values():
        ranged = spec.kind in ("int", "rate")
        out.append({
            "key": spec.name if spec.scope == "node" else f"gpu.N.{spec.name}",
            "scope": spec.scope,
            "type": {"bytes": "size"}.get(spec.kind, spec.kind),
            "off_allowed": spec.off,
            "min": spec.lo if ranged else None,
            "max": spec.hi if ranged else None,
            "choices": list(spec.choices()) if spec.kind in ("enum", "flags") else None,
            "unlimited_allowed": spec.unlimited,
            "help": spec.help,
        })
    return out
