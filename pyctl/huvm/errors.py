"""Typed exceptions, and the translation of errno / NV_STATUS / error_field into them.

One base class, :class:`HuvmError`; the CLI maps any of them to exit status 1 with a one-line message
(:class:`UsageError` and file errors to 2). :func:`check` turns a returned params struct into an exception
naming the command, the NV_STATUS and, for refused values, the field (``gpus[2].lend_reserve_bytes``).
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Any


class HuvmError(Exception):
    """Base of every huvm error. ``status`` is the NV_STATUS (if any), ``errno`` the OS errno (if any)."""

    def __init__(self, message: str, *, status: int | None = None, errno: int | None = None,
                 command: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errno = errno
        self.command = command


class PermissionDenied(HuvmError):
    """The caller may not do this (NV_ERR_INSUFFICIENT_PERMISSIONS, EPERM, EACCES)."""


class AbiMismatch(HuvmError):
    """The module speaks another ABI version or struct size (NV_ERR_NOT_COMPATIBLE, INVALID_PARAM_STRUCT)."""

    def __init__(self, message: str, *, module_abi_version: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.module_abi_version = module_abi_version


class InvalidValue(HuvmError):
    """A value was refused (NV_ERR_OUT_OF_RANGE, INVALID_ARGUMENT); ``field`` names it."""

    def __init__(self, message: str, *, field: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.field = field


class UnknownGpu(InvalidValue):
    """No GPU with that UUID (NV_ERR_GPU_UUID_NOT_FOUND), or an unknown GPU selector."""


class Conflict(HuvmError):
    """The policy changed concurrently (NV_ERR_STATE_IN_USE: generation mismatch)."""


class NotSupported(HuvmError):
    """The module does not support this (NV_ERR_NOT_SUPPORTED, INVALID_COMMAND)."""


class NoMemory(HuvmError):
    """Out of memory (NV_ERR_NO_MEMORY), e.g. no framebuffer left for an allocation."""


class InvalidAddress(InvalidValue):
    """An address or range is not valid for the call (NV_ERR_INVALID_ADDRESS)."""


class InvalidState(HuvmError):
    """The call is not allowed in the current state (NV_ERR_INVALID_STATE, ILLEGAL_ACTION, IN_USE)."""


class Timeout(HuvmError):
    """The driver gave up waiting (NV_ERR_TIMEOUT)."""


class DeviceUnavailable(HuvmError):
    """No usable backend: ``reason`` says why (no device, stock module, ABI, permission)."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.reason = reason
        self.hint = hint


class BindingMissing(DeviceUnavailable):
    """An optional compiled binding is not built (huvm.uvm's needs `make uvm-binding`)."""


class UsageError(HuvmError):
    """Bad input from the user, found before anything was sent (CLI exit status 2)."""


class PolicyError(UsageError):
    """A policy setting is refused before sending: unknown key, wrong type, out of range, contradictory."""

    def __init__(self, message: str, *, key: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.key = key


class ConfigError(UsageError):
    """A configuration file (policy, experiment, simulator) is malformed; names file, line and key."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, **kw: Any) -> None:
        where = file or ""
        if file and line:
            where += f":{line}"
        if key:
            where += f"{': ' if where else ''}{key}"
        super().__init__(f"{where}: {message}" if where else message, **kw)
        self.file = file
        self.line = line
        self.key = key
        self.reason = message


class PolicyFileError(ConfigError, PolicyError):
    """A policy file is refused: ``file``, ``line`` and ``key`` name the place."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, **kw: Any) -> None:
        ConfigError.__init__(self, message, file=file, line=line, key=key, **kw)


# ---- translation -------------------------------------------------------------------------------------

def status_name(status: int) -> str:
    from . import abi

    for name, value in abi.constants("HUVM_NV_").items():
        if value == status:
            return name[len("HUVM_") :]
    return f"0x{status:08x}"


_FIELD_PATHS: dict[str, str] = {
    "HDR_ABI_VERSION": "hdr.abi_version",
    "HDR_SIZE": "hdr.size",
    "HDR_FLAGS": "hdr.flags",
    "NODE_LINK": "links",
    "TEST_EVENT": "event",
    "TEST_GPU": "gpu",
    "TEST_PEER": "peer",
    "TEST_COUNT": "count",
    "RATES_GPU": "uuid",
    "RATES_HBM": "hbm_mbyte_per_s",
    "RATES_GIVEBACK": "giveback_mbyte_per_s",
}
_GPU_FIELD_PATHS: dict[str, str] = {  # GPU facts (huvm_gpu_info_t); policy fields are named by the table
    "MEMORY": "memory_bytes",
    "FREE": "free_bytes",
}


def _policy_field_names(scope: int) -> dict[int, str]:
    """error_field code -> member name of the policy table's fields of one scope (node codes, or GPU codes
    within an entry)."""
    from . import abi

    lib = abi.lib
    out: dict[int, str] = {}
    for i in range(lib.huvm_policy_field_count()):
        d = lib.huvm_policy_field(i)
        if d.scope == scope:
            out[int(d.field)] = abi.cstr(d.name)
    return out


def field_name(error_field: int) -> str | None:
    """Decode error_field (HUVM_FIELD_*) into the field's path, e.g. ``gpus[2].lend_reserve_bytes``."""
    from . import abi

    if error_field == 0:
        return None
    fields = abi.constants("HUVM_FIELD_")
    base, stride = fields["HUVM_FIELD_GPU_BASE"], fields["HUVM_FIELD_GPU_STRIDE"]
    if error_field >= base:
        index, sub = divmod(error_field - base, stride)
        member = _policy_field_names(abi.lib.HUVM_POLICY_SCOPE_GPU).get(sub)
        if member is not None:
            return f"gpus[{index}].{member}"
        for name, value in fields.items():
            short = name[len("HUVM_FIELD_GPU_") :]
            if name.startswith("HUVM_FIELD_GPU_") and short not in ("BASE", "STRIDE") and value == sub:
                return f"gpus[{index}].{_GPU_FIELD_PATHS.get(short, short.lower())}"
        return f"gpus[{index}].field{sub}"
    member = _policy_field_names(abi.lib.HUVM_POLICY_SCOPE_NODE).get(error_field)
    if member is not None:
        return member
    for name, value in fields.items():
        if value == error_field and not name.startswith("HUVM_FIELD_GPU_") and name != "HUVM_FIELD_NONE":
            short = name[len("HUVM_FIELD_") :]
            return _FIELD_PATHS.get(short, short.lower())
    return f"field{error_field}"


def from_errno(err: int, command: str, path: str) -> HuvmError:
    """An OS error from ioctl(2) on the device."""
    text = f"{command}: {path}: {_errno.errorcode.get(err, str(err))} ({os.strerror(err)})"
    if err in (_errno.EPERM, _errno.EACCES):
        return PermissionDenied(text, errno=err, command=command)
    if err in (_errno.EINVAL, _errno.ENOTTY):
        return NotSupported(text + ": the module does not know this command", errno=err, command=command)
    return HuvmError(text, errno=err, command=command)


def from_status(status: int, command: str, error_field: int = 0, module_abi_version: int = 0) -> HuvmError:
    """The exception for an NV_STATUS returned in rmStatus."""
    from . import abi

    lib = abi.lib
    name = status_name(status)
    field = field_name(error_field)
    where = f" ({field})" if field else ""
    text = f"{command}: {name}{where}"
    kw: dict[str, Any] = {"status": status, "command": command}
    if status == lib.HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS:
        return PermissionDenied(text + ": needs CAP_SYS_ADMIN", **kw)
    if status in (lib.HUVM_NV_ERR_NOT_COMPATIBLE, lib.HUVM_NV_ERR_INVALID_PARAM_STRUCT):
        mine, theirs = abi.version_str(abi.ABI_VERSION), abi.version_str(module_abi_version)
        return AbiMismatch(f"{text}: tool ABI {mine}, module ABI {theirs}",
                           module_abi_version=module_abi_version, **kw)
    if status == lib.HUVM_NV_ERR_GPU_UUID_NOT_FOUND:
        return UnknownGpu(text + ": no GPU with that UUID", field=field, **kw)
    if status in (lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_NV_ERR_INVALID_ARGUMENT):
        return InvalidValue(text + ": value refused", field=field, **kw)
    if status == lib.HUVM_NV_ERR_STATE_IN_USE:
        return Conflict(text + ": the policy changed meanwhile (generation mismatch); retry", **kw)
    if status in (lib.HUVM_NV_ERR_NOT_SUPPORTED, lib.HUVM_NV_ERR_INVALID_COMMAND):
        return NotSupported(text + ": not supported by this module", **kw)
    return HuvmError(text, **kw)


# NV_STATUS name -> typed exception for calls into NVIDIA's UVM and the software GPU (names, not values:
# the values live in the upstream headers).
_NV_CLASSES: dict[str, type[HuvmError]] = {
    "NV_ERR_INSUFFICIENT_PERMISSIONS": PermissionDenied,
    "NV_ERR_GPU_UUID_NOT_FOUND": UnknownGpu,
    "NV_ERR_INVALID_DEVICE": UnknownGpu,
    "NV_ERR_INVALID_ADDRESS": InvalidAddress,
    "NV_ERR_INVALID_ARGUMENT": InvalidValue,
    "NV_ERR_INVALID_PARAMETER": InvalidValue,
    "NV_ERR_OUT_OF_RANGE": InvalidValue,
    "NV_ERR_INVALID_OBJECT_HANDLE": InvalidValue,
    "NV_ERR_NOT_SUPPORTED": NotSupported,
    "NV_ERR_INVALID_COMMAND": NotSupported,
    "NV_ERR_NO_MEMORY": NoMemory,
    "NV_ERR_INVALID_STATE": InvalidState,
    "NV_ERR_ILLEGAL_ACTION": InvalidState,
    "NV_ERR_IN_USE": InvalidState,
    "NV_ERR_STATE_IN_USE": InvalidState,
    "NV_ERR_TIMEOUT": Timeout,
}


def from_nv_status(status: int, command: str, name: str | None = None) -> HuvmError:
    """The exception for an NV_STATUS that NVIDIA's UVM or the software GPU returned in rmStatus; the
    message names the command and the status (``UVM_MIGRATE: NV_ERR_INVALID_ADDRESS``): name, as
    :func:`huvm.uvm.nv_status_name` gives it, else the huvm ABI's name for it."""
    name = name or status_name(status)
    cls = _NV_CLASSES.get(name, HuvmError)
    return cls(f"{command}: {name}", status=status, command=command)


def check(cmd: int, params: Any) -> Any:
    """Raise the typed exception if params.rmStatus is not NV_OK; else return params."""
    from . import abi

    status = int(params.rmStatus)
    if status != abi.lib.HUVM_NV_OK:
        raise from_status(status, abi.command_name(cmd), int(params.error_field),
                          int(params.hdr.module_abi_version))
    return params
