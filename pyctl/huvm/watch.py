"""Notice the huvm module and its device node appearing and disappearing: udev (pyudev) plus inotify.

Module loads and unloads are udev events of subsystem ``module`` (sys_name ``nvidia_uvm``). nvidia-uvm's
device node is made by nvidia-modprobe, not udev, so the node itself is watched with inotify
(``inotify_simple``) on its directory: its creation, removal or renaming wakes the watcher at once. Each
wake-up reports the module events it read and whether the device path now exists (a ``device`` event when
that changed).

Either source may be missing (no netlink socket in a container, a directory that cannot be watched): the
watcher then works with the other, and with neither it only compares the path's existence each ``poll``.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

MODULES: tuple[str, ...] = ("nvidia_uvm",)


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


class DeviceNodeWatch:
    """inotify on the directory of one path: readable (``fileno``) when an entry of that name is created,
    removed or renamed there."""

    def __init__(self, path: str) -> None:
        import inotify_simple

        self.name = os.path.basename(path)
        self._flags = inotify_simple.flags
        self._ino = inotify_simple.INotify(nonblocking=True)
        mask = (self._flags.CREATE | self._flags.DELETE | self._flags.MOVED_TO | self._flags.MOVED_FROM
                | self._flags.ATTRIB)
        try:
            self._ino.add_watch(os.path.dirname(os.path.abspath(path)) or "/", mask)
        except OSError:
            self._ino.close()
            raise

    def fileno(self) -> int:
        return int(self._ino.fileno())

    def read(self) -> bool:
        """Drain the queue; True if any event was about our name (or the queue overflowed)."""
        hit = False
        try:
            events = self._ino.read(timeout=0)
        except BlockingIOError:
            return False
        for ev in events:
            if ev.name == self.name or ev.mask & self._flags.Q_OVERFLOW:
                hit = True
        return hit

    def close(self) -> None:
        self._ino.close()


class Watcher:
    """Module/device events. ``monitor`` is a pyudev.Monitor, or anything with ``poll(timeout)`` returning
    objects with ``action`` and ``sys_name`` (tests pass a fake); ``udev=False`` goes without one.
    ``inotify`` (default: on, for a real ``exists``) also watches the device node's directory."""

    def __init__(self, device: str = "/dev/nvidia-uvm", *, monitor: Any = None,
                 modules: tuple[str, ...] = MODULES, exists: Callable[[str], bool] = os.path.exists,
                 udev: bool = True, inotify: bool | None = None) -> None:
        self.device = device
        self.modules = modules
        self._exists = exists
        #: why a source is missing (one line each), for a note to the user
        self.notes: list[str] = []
        self._monitor: Any = None
        if monitor is not None:
            self._monitor = monitor
        elif udev:
            try:
                self._monitor = default_monitor()
            except Exception as exc:  # noqa: BLE001 - pyudev raises OSError, ImportError, its own errors
                self.notes.append(f"udev: {exc or type(exc).__name__}; module loads and unloads are not seen")
        self._node: DeviceNodeWatch | None = None
        if inotify if inotify is not None else exists is os.path.exists:
            try:
                self._node = DeviceNodeWatch(device)
            except (OSError, ImportError) as exc:
                self.notes.append(f"inotify on {os.path.dirname(os.path.abspath(device))}: "
                                  f"{getattr(exc, 'strerror', None) or exc}; the device node is checked "
                                  f"on each wake-up only")
        self._present = exists(device)

    @property
    def present(self) -> bool:
        return self._present

    def close(self) -> None:
        if self._node is not None:
            self._node.close()
            self._node = None

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _device_event(self) -> Event | None:
        now = self._exists(self.device)
        if now == self._present:
            return None
        self._present = now
        return Event("device", "add" if now else "remove", self.device)

    def _module_event(self, dev: Any) -> Event | None:
        if dev is not None and getattr(dev, "sys_name", None) in self.modules:
            action = getattr(dev, "action", None)
            if action in ("add", "remove"):
                return Event("module", action, dev.sys_name)
        return None

    def poll(self, timeout: float | None = None) -> list[Event]:
        """Events of one wake-up (none after timeout seconds without one; None waits for ever)."""
        return self._poll(timeout)[1]

    def _poll(self, timeout: float | None) -> tuple[bool, list[Event]]:
        """(whether anything woke us, the events)."""
        monitor = self._monitor
        if monitor is not None and not callable(getattr(monitor, "fileno", None)):
            # a monitor without a file descriptor (tests' fakes): its own poll is the wait
            dev = monitor.poll(timeout=timeout)
            if self._node is not None:
                self._node.read()
            return dev is not None, [e for e in (self._module_event(dev), self._device_event()) if e]
        waits: list[Any] = []
        if monitor is not None:
            start = getattr(monitor, "start", None)
            if start is not None:
                start()  # pyudev: enable receiving before the select (its own poll() would do it)
            waits.append(monitor)
        if self._node is not None:
            waits.append(self._node)
        if not waits and timeout is None:
            raise RuntimeError("Watcher: neither udev nor inotify is available to wait on")
        ready, _, _ = select.select(waits, [], [], timeout)
        out: list[Event] = []
        woke = False
        if monitor is not None and monitor in ready:
            woke = True
            while (dev := monitor.poll(timeout=0)) is not None:
                ev = self._module_event(dev)
                if ev:
                    out.append(ev)
        if self._node is not None and self._node in ready:
            woke = self._node.read() or woke
        dev_ev = self._device_event()
        if dev_ev:
            out.append(dev_ev)
        return woke or bool(out), out

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Stream of events; with a timeout, ends after timeout seconds without any wake-up."""
        while True:
            got, batch = self._poll(timeout)
            yield from batch
            if not got and timeout is not None:
                return
