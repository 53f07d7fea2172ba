"""Backends: where ioctls go. One Protocol; the kernel device and the in-process simulated node.

A backend only moves a params struct to the dispatch and back: :meth:`Backend.ioctl` raises for OS-level
failures (errno) and leaves ``rmStatus``/``error_field`` in the struct; :func:`huvm.errors.check` turns a
refusal into a typed exception. :mod:`huvm.client` adds the typed API on top.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
import stat
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from . import abi, errors

DEFAULT_DEVICE = "/dev/nvidia-uvm"


@runtime_checkable
class Backend(Protocol):
    """Something that executes huvm ioctls."""

    @property
    def name(self) -> str:
        """"kernel" or "sim"."""
        ...

    @property
    def description(self) -> str:
        """Human description (device path, simulated node preset)."""
        ...

    def ioctl(self, cmd: int, params: Any) -> object:
        """Run cmd on params in place; raise HuvmError for transport failures (not for rmStatus, which the
        caller checks; the return value, if any, is ignored)."""
        ...

    def close(self) -> None: ...


IoctlFn = Callable[[int, int, Any, bool], Any]


class KernelBackend:
    """Raw ioctls on a character device (the patched nvidia-uvm, or the qemu test module).

    ``open_fn``/``ioctl_fn``/``close_fn`` default to :func:`os.open`, :func:`fcntl.ioctl` and
    :func:`os.close`; tests pass fakes.
    """

    name = "kernel"

    def __init__(self, path: str = DEFAULT_DEVICE, *, open_fn: Callable[[str, int], int] = os.open,
                 ioctl_fn: IoctlFn = fcntl.ioctl, close_fn: Callable[[int], None] = os.close) -> None:
        self.path = path
        self._ioctl = ioctl_fn
        self._close = close_fn
        try:
            self._fd: int | None = open_fn(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise errors.DeviceUnavailable(
                f"{path} does not exist: the nvidia-uvm module is not loaded",
                reason="no-device", hint="load the patched module (make load) or use --backend sim",
                errno=_errno.ENOENT) from None
        except PermissionError as exc:
            raise errors.DeviceUnavailable(
                f"{path}: permission denied", reason="permission",
                hint="run as a user allowed to open the device", errno=exc.errno) from None
        except OSError as exc:
            raise errors.DeviceUnavailable(f"{path}: {exc.strerror}", reason="open-failed",
                                           errno=exc.errno) from None

    @property
    def description(self) -> str:
        return f"kernel ({self.path})"

    def ioctl(self, cmd: int, params: Any) -> None:
        if self._fd is None:
            raise errors.HuvmError(f"{self.path}: backend is closed")
        buf = abi.as_buffer(params)
        try:
            self._ioctl(self._fd, cmd, buf, True)
        except OSError as exc:
            module = int(params.hdr.module_abi_version)
            if exc.errno == _errno.EINVAL and module != 0:
                # The patched module refused the header (ABI version or struct size): it wrote back only the
                # header, with its own ABI version (a stock module writes nothing).
                name = abi.command_name(cmd)
                raise errors.AbiMismatch(
                    f"{name}: {self.path}: header refused: tool ABI {abi.version_str(abi.ABI_VERSION)} "
                    f"(params {abi.params_size(params)} bytes), module ABI {abi.version_str(module)}",
                    module_abi_version=module, errno=exc.errno, command=name) from None
            raise errors.from_errno(exc.errno or 0, abi.command_name(cmd), self.path) from None

    def probe(self) -> Any:
        """GET_INFO, with failures explained as DeviceUnavailable: a stock module (the command is unknown),
        a module of another ABI version, or no permission. Returns the GET_INFO params."""
        cmd = abi.lib.HUVM_IOCTL_GET_INFO
        params = abi.new_params(cmd)
        try:
            self.ioctl(cmd, params)
            errors.check(cmd, params)
        except errors.NotSupported as exc:
            if os.path.exists(self.path) and not stat.S_ISCHR(os.stat(self.path).st_mode):
                raise errors.DeviceUnavailable(
                    f"{self.path} is not a device node (ioctl: {os.strerror(exc.errno or 0)})", reason="open-failed",
                    hint="--device takes the patched nvidia-uvm's device node, /dev/nvidia-uvm") from None
            raise errors.DeviceUnavailable(
                f"{self.path}: the loaded nvidia-uvm is the stock module (GET_INFO is unknown to it: "
                f"{exc})", reason="stock-module",
                hint="load the huvm-patched module (make load) or use --backend sim") from None
        except errors.AbiMismatch as exc:
            raise errors.DeviceUnavailable(
                f"{self.path}: ABI mismatch: {exc}", reason="abi-version",
                hint="rebuild huvmctl and the module from the same tree") from None
        except errors.PermissionDenied as exc:
            raise errors.DeviceUnavailable(f"{self.path}: {exc}", reason="permission") from None
        module = int(params.hdr.module_abi_version)
        if module >> 16 != abi.ABI_VERSION >> 16:
            raise errors.DeviceUnavailable(
                f"{self.path}: module ABI {abi.version_str(module)}, tool ABI "
                f"{abi.version_str(abi.ABI_VERSION)}", reason="abi-version")
        return params

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._close(fd)

    def __enter__(self) -> KernelBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
