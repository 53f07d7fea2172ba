"""Thin access to the compiled ABI: cffi's ``ffi`` and ``lib`` from ``huvm._huvm_cffi``.

Every struct layout, constant and ioctl number comes from the C compiler through cffi's API mode; nothing
here restates a layout. The helpers fill the common header and convert the few ABI-specific encodings
(UUIDs, fixed C strings, versions).
"""

from __future__ import annotations

import uuid as _uuid
from typing import Any

try:
    from huvm._huvm_cffi import ffi as _ffi
    from huvm._huvm_cffi import lib as _lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        "huvm's C extension huvm._huvm_cffi is not built; run `make venv` (or "
        "`pip install -e pyctl`) to compile it"
    ) from exc

ffi: Any = _ffi
lib: Any = _lib

ABI_VERSION: int = lib.HUVM_ABI_VERSION
MAX_GPUS: int = lib.HUVM_MAX_GPUS
CHUNK_SIZE: int = lib.HUVM_CHUNK_SIZE
UNLIMITED: int = lib.HUVM_UNLIMITED
DEST_HOST: int = lib.HUVM_DEST_HOST

#: ioctl command number -> params struct type
PARAMS_TYPES: dict[int, str] = {
    lib.HUVM_IOCTL_GET_INFO: "HUVM_GET_INFO_PARAMS",
    lib.HUVM_IOCTL_GET_POLICY: "HUVM_GET_POLICY_PARAMS",
    lib.HUVM_IOCTL_SET_POLICY: "HUVM_SET_POLICY_PARAMS",
    lib.HUVM_IOCTL_GET_STATS: "HUVM_GET_STATS_PARAMS",
    lib.HUVM_IOCTL_RESET_STATS: "HUVM_RESET_STATS_PARAMS",
    lib.HUVM_IOCTL_LIST_VA_SPACES: "HUVM_LIST_VA_SPACES_PARAMS",
    lib.HUVM_IOCTL_TEST_SET_NODE: "HUVM_TEST_SET_NODE_PARAMS",
    lib.HUVM_IOCTL_TEST_EVENT: "HUVM_TEST_EVENT_PARAMS",
    lib.HUVM_IOCTL_SET_GPU_RATES: "HUVM_SET_GPU_RATES_PARAMS",
    lib.HUVM_IOCTL_GET_GPU_RATES: "HUVM_GET_GPU_RATES_PARAMS",
}


def constants(prefix: str) -> dict[str, int]:
    """Integer constants of the compiled ABI whose names start with prefix (e.g. ``HUVM_ROLE_``)."""
    out: dict[str, int] = {}
    for name in dir(lib):
        if name.startswith(prefix):
            value = getattr(lib, name)
            if isinstance(value, int):
                out[name] = value
    return out


def enum_names(prefix: str) -> dict[int, str]:
    """value -> lower-case short name for an enum-like constant family (``HUVM_ROLE_`` -> {1: "harvester"}).

    ``*_COUNT`` entries, and constants at or above the family's ``*_COUNT`` (limits such as
    ``HUVM_PREFETCH_MAX_CHUNKS``), are left out."""
    consts = constants(prefix)
    count = consts.get(prefix + "COUNT")
    return {v: k[len(prefix) :].lower() for k, v in consts.items()
            if not k.endswith("_COUNT") and (count is None or 0 <= v < count)}


def command_name(cmd: int) -> str:
    names = {v: k[len("HUVM_IOCTL_") :] for k, v in constants("HUVM_IOCTL_").items()
             if v in PARAMS_TYPES}
    return names.get(cmd, str(cmd))


def params_type(cmd: int) -> str:
    try:
        return PARAMS_TYPES[cmd]
    except KeyError:
        raise ValueError(f"not a huvm ioctl command: {cmd}") from None


def new_params(cmd: int) -> Any:
    """A zeroed params struct for cmd with its header filled (ABI version, size)."""
    ctype = params_type(cmd)
    params = ffi.new(f"{ctype} *")
    params.hdr.abi_version = ABI_VERSION
    params.hdr.size = ffi.sizeof(ctype)
    return params


def params_size(params: Any) -> int:
    return int(ffi.sizeof(params[0]))


def as_buffer(params: Any) -> Any:
    """A writable buffer over the params struct (for fcntl.ioctl and the simulator)."""
    return ffi.buffer(params, params_size(params))


def version_str(version: int) -> str:
    """ABI version word (major << 16 | minor) as text."""
    return f"{version >> 16}.{version & 0xFFFF}"


def huvm_version_str(version: int) -> str:
    return f"{version >> 16}.{(version >> 8) & 0xFF}.{version & 0xFF}"


def uuid_str(raw: Any) -> str:
    """16 raw UUID bytes (a cdata uint8_t[16] or bytes) as nvidia-smi prints it: GPU-xxxxxxxx-...."""
    data = bytes(raw) if isinstance(raw, (bytes, bytearray)) else bytes(ffi.buffer(raw, 16))
    return "GPU-" + str(_uuid.UUID(bytes=data))


def uuid_bytes(text: str) -> bytes:
    """Parse "GPU-xxxxxxxx-xxxx-..." (or the bare UUID) into 16 bytes; ValueError if malformed."""
    s = text.strip()
    if s.upper().startswith("GPU-"):
        s = s[4:]
    return _uuid.UUID(s).bytes


def cstr(arr: Any) -> str:
    """A NUL-terminated char array as str."""
    return bytes(ffi.string(arr)).decode("utf-8", "replace")
