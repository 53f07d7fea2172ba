"""Names and limits the TUI shows, from the compiled ABI (:mod:`huvm.abi`, cffi over the ABI header).

Nothing here is hand-written from the header: reason, role, preset and mode names come from the
``HUVM_*`` constants, limits from the same constants huvmctl uses.
"""

from __future__ import annotations

from functools import cache

from huvm import abi as habi
from huvm import bpf


def define(name: str) -> int:
    """The integer value of one ``#define`` of the ABI block, as compiled."""
    value = getattr(habi.lib, name)
    if not isinstance(value, int):
        raise KeyError(name)
    return value


@cache
def enum_names(prefix: str) -> tuple[str, ...]:
    """Lower-case names of ``<prefix>NAME`` constants, indexed by value, up to ``<prefix>COUNT``.

    ``enum_names("HUVM_REASON_")`` gives ``("peer", "tier_off", ...)``.
    """
    by_value = habi.enum_names(prefix)
    count = habi.constants(prefix).get(prefix + "COUNT")
    n = count if count is not None else (max(by_value) + 1 if by_value else 0)
    return tuple(by_value.get(i, str(i)) for i in range(n))


def reason_names() -> tuple[str, ...]:
    return enum_names("HUVM_REASON_")


def role_names() -> tuple[str, ...]:
    return enum_names("HUVM_ROLE_")


def preset_names() -> tuple[str, ...]:
    return enum_names("HUVM_PRESET_")


def dest_host() -> int:
    return define("HUVM_DEST_HOST")


def max_gpus() -> int:
    return define("HUVM_MAX_GPUS")


def chunk_size() -> int:
    return define("HUVM_CHUNK_SIZE")


def unlimited() -> int:
    return define("HUVM_UNLIMITED")


def event_names() -> tuple[str, ...]:
    """The events of ``driver/core/huvm_events.h`` (tracepoints and USDT probes), in order (:mod:`huvm.bpf`)."""
    return bpf.event_names()


def event_prefix() -> str:
    """HUVM_EVENT_PREFIX of huvm_events.h: the tracepoint and USDT probe of ``evict`` are ``huvm:huvm_evict``."""
    return bpf.event_prefix()


def probe_name(event: str) -> str:
    """The kernel tracepoint's and the USDT probe's name of ``event`` (provider/subsystem ``huvm``)."""
    return bpf.probe_name(event)


def fetch_names() -> tuple[str, ...]:
    """The fetch event's reasons (HUVM_FETCHED_*): moved, remote_map, pages, released."""
    return enum_names("HUVM_FETCHED_")
