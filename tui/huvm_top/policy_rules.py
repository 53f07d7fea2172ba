"""The editable policy fields and the checks the editor runs before anything is sent.

Field names, kinds, ranges and enum choices are huvm's (:data:`huvm.policy.KEYS`, built from the ABI
header: ``HUVM_PREFETCH_MAX_CHUNKS``, ``HUVM_HYSTERESIS_MAX_MS``, the enum #defines); parsing and printing
of values are huvm's too (:func:`huvm.policy.parse_value`, :func:`huvm.policy.format_value`). The core
checks again and has the last word; a live source also runs the core's own validation on a local mirror
(:meth:`huvm_top.sources.base.StatsSource.check_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from huvm import policy as hp
from huvm.errors import PolicyError

from huvm_top import abi
from huvm_top.model import FieldError, PolicyState


@dataclass(frozen=True)
class FieldSpec:
    """One editable field: ``name`` is the ABI struct field (``lend_limit_bytes``), ``key`` huvm's key."""

    name: str
    key: str
    kind: str  # enum, bool, int, bytes, flags, rate
    help: str
    lo: int
    hi: int
    choices: tuple[str, ...] = ()  # enum display names, indexed by value

    @property
    def is_enum(self) -> bool:
        return self.kind == "enum"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_bytes(self) -> bool:
        return self.kind == "bytes"

    @property
    def is_rate(self) -> bool:
        return self.kind == "rate"

    @property
    def huvm(self) -> hp.KeySpec:
        return hp.KEYS[self.key]


def _spec(k: hp.KeySpec) -> FieldSpec:
    choices: tuple[str, ...] = ()
    if k.kind == "enum":
        # Values below <PREFIX>COUNT only (HUVM_PREFETCH_MAX_CHUNKS is not a prefetch mode).
        choices = tuple(n.replace("_", "-") for n in abi.enum_names(k.enum_prefix))
    return FieldSpec(k.field, k.name, k.kind, k.help, k.lo, k.hi, choices)


@cache
def node_specs() -> tuple[FieldSpec, ...]:
    """Node-wide fields, in huvm's key order (that of huvm_policy_t)."""
    return tuple(_spec(hp.KEYS[k]) for k in hp.NODE_KEYS)


@cache
def gpu_specs() -> tuple[FieldSpec, ...]:
    """Fields of one per-GPU entry: role, flags, lend_limit_bytes, lend_reserve_bytes, lend_traffic_mbyte_per_s,
    lend_slowdown_max_pct (the lender's bound T)."""
    return tuple(_spec(hp.KEYS[k]) for k in hp.GPU_KEYS)


def spec(name: str) -> FieldSpec:
    for s in node_specs() + gpu_specs():
        if name in (s.name, s.key):
            return s
    raise KeyError(name)


def parse_value(s: FieldSpec, text: str) -> int:
    """What the user typed -> the field's integer (huvm's parser); ValueError with huvm's reason."""
    try:
        return hp.parse_value(s.huvm, text, s.name)
    except PolicyError as exc:
        msg = str(exc)
        if msg.startswith(f"{s.name}: "):
            msg = msg[len(s.name) + 2:]
        elif msg.startswith(f"{s.name}=") and ": " in msg:
            msg = msg.split(": ", 1)[1]  # "KEY=VALUE: must be <= N": the editor names the field and value
        raise ValueError(msg) from None


def format_value(s: FieldSpec, value: int) -> str:
    """The field's integer as huvm prints it (``bw-weighted``, ``8GiB``, ``unlimited``)."""
    return hp.format_value(s.huvm, value)


def rate_range(s: FieldSpec) -> str:
    """A rate field's allowed values as huvm writes them (``0 (off) or 105MB/s..16777216MB/s``)."""
    return hp.rate_range(s.huvm)


def check_value(s: FieldSpec, value: int) -> str | None:
    """Why ``value`` is refused for this field, or None."""
    if s.is_enum and not 0 <= value < len(s.choices):
        return f"{value} is not one of {', '.join(s.choices)}"
    if s.is_rate:
        ok = (value == 0 and s.huvm.off) or s.lo <= value <= s.hi
        return None if ok else f"{value} MB/s is not {rate_range(s)}"
    if not s.lo <= value <= s.hi and not (value == 0 and s.huvm.off):
        return f"{value} is out of range [{s.lo}, {s.hi}]" + (" (or 0: off)" if s.huvm.off else "")
    return None


def check_policy(policy: PolicyState) -> list[FieldError]:
    """Every field-level range problem of a policy (empty: fine to hand to the source's checks)."""
    errors: list[FieldError] = []
    for s in node_specs():
        if s.name in policy.node:
            why = check_value(s, policy.node[s.name])
            if why:
                errors.append(FieldError(s.name, why))
    for i, g in enumerate(policy.gpus):
        for s in gpu_specs():
            why = check_value(s, int(getattr(g, s.name)))
            if why:
                errors.append(FieldError(f"gpus[{i}].{s.name}", why))
    return errors
