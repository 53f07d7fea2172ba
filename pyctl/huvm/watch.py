"""Notice the huvm module and its device appearing and disappearing (pyudev), e.g. to reconnect.

Module loads and unloads are udev events of subsystem ``module`` (sys_name ``nvidia_uvm``, or
``huvm_ktest`` for the qemu test bed). nvidia-uvm's device node is made by nvidia-modprobe, not udev, so
the watcher also reports the device path's existence after each module event.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

MODULES: tuple[str, ...] = ("nvidia_uvm", "huvm_ktest")


@dataclass(frozen=True)
class Event:
    kind: Literal["module", "device"]
    action: Literal["add", "remove"]
    name: str  # module name or device path


def default_monitor() -> Any:
    import pyudev

    monitor = pyudev.Monitor.from_netlink(pyudev.Context())
    monitor.filter_by("module")
    return monitor


class Watcher:
    """Iterate module/device events. ``monitor`` is a pyudev.Monitor or anything with ``poll(timeout)``
    returning objects with ``action`` and ``sys_name`` (tests pass a fake)."""

    def __init__(self, device: str = "/dev/nvidia-uvm", *, monitor: Any = None,
                 modules: tuple[str, ...] = MODULES, exists: Callable[[str], bool] = os.path.exists) -> None:
        self.device = device
        self.modules = modules
        self._monitor = monitor if monitor is not None else default_monitor()
        self._exists = exists
        self._present = exists(device)

    @property
    def present(self) -> bool:
        return self._present

    def _device_event(self) -> Event | None:
        now = self._exists(self.device)
        if now == self._present:
            return None
        self._present = now
        return Event("device", "add" if now else "remove", self.device)

    def poll(self, timeout: float | None = None) -> list[Event]:
        """Events from one udev message (or none after timeout)."""
        return self._poll(timeout)[1]

    def _poll(self, timeout: float | None) -> tuple[bool, list[Event]]:
        dev = self._monitor.poll(timeout=timeout)
        out: list[Event] = []
        if dev is not None and getattr(dev, "sys_name", None) in self.modules:
            action = getattr(dev, "action", None)
            if action in ("add", "remove"):
                out.append(Event("module", action, dev.sys_name))
        ev = self._device_event()
        if ev:
            out.append(ev)
        return dev is not None, out

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Stream of events; with a timeout, ends after timeout seconds without any udev message."""
        while True:
            got, batch = self._poll(timeout)
            yield from batch
            if not got and timeout is not None:
                return
