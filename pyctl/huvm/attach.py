"""A huvm node that may come and go, for services that outlive the module (the exporter, huvm-top).

:func:`attach` decides the backend once, as :func:`huvm.client.open` does, but does not fail when the module
is not loaded. On the kernel backend every :meth:`Attachment.session` (one scrape, one refresh) opens the
device, checks it with GET_INFO and closes it afterwards. A running service therefore never holds the
module: ``rmmod nvidia_uvm`` (``make unload``) works while it runs, the next session finds the node gone
(:class:`~huvm.errors.DeviceUnavailable`, saying why) and a later one finds it back, with nothing to
reconnect. A simulated node is opened once and held: there is no module to unload.

:meth:`Attachment.wait` blocks until udev or inotify report the module or its device node changing
(:class:`huvm.watch.Watcher`), so a waiting service attaches as soon as the node is there, without polling
the device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import client, errors
from .backend import KernelBackend
from .client import Node
from .watch import Event, Watcher

#: DeviceUnavailable reasons that loading (or reloading) the module can cure: worth waiting for
WAITABLE: frozenset[str] = frozenset({"no-device", "stock-module"})


class Attachment:
    """Sessions on a node: ``connect`` opens it (raising DeviceUnavailable when it is not there).

    hold=False (the kernel): a fresh connection per session, closed after it. hold=True: the first
    connection is kept for every session (a simulated node, or a given Node in tests).
    ``on_change`` gets one line each time the node comes or goes (or the reason it is missing changes).
    """

    def __init__(self, connect: Callable[[], Node], *, device: str | None = None, hold: bool = False,
                 description: str = "", on_change: Callable[[str], None] | None = None) -> None:
        self._connect = connect
        self.device = device
        self.hold = hold
        self.description = description or (f"kernel ({device})" if device else "huvm node")
        self.on_change = on_change
        #: True after a session reached the node, False after one did not, None before the first
        self.up: bool | None = None
        #: why the node is not reachable (the last failed session), else None
        self.error: errors.DeviceUnavailable | None = None
        #: counts the node's comings and goings; a cache of the node's identity keys on it
        self.epoch = 0
        self.note: str | None = None  # why this backend was chosen, when it was a fallback
        self._held: Node | None = None
        self._lock = threading.RLock()
        self._watcher: Watcher | None = None
        self._watcher_failed = False

    @classmethod
    def of(cls, node: Node) -> Attachment:
        """An attachment that always uses this node."""
        return cls(lambda: node, hold=True, description=node.backend.description)

    # -- sessions --

    def _state(self, up: bool, error: errors.DeviceUnavailable | None = None) -> None:
        changed = up != self.up or (error is not None and self.error is not None
                                    and getattr(error, "reason", None) != getattr(self.error, "reason", None))
        self.up, self.error = up, error
        if changed:
            self.epoch += 1
            if self.on_change is not None:
                self.on_change(f"attached to {self.description}" if up else f"node unavailable: {error}")

    @contextmanager
    def session(self) -> Iterator[Node]:
        """The node, for the duration of one ``with``; DeviceUnavailable when it is not there."""
        with self._lock:
            node = self._held
            if node is None:
                try:
                    node = self._connect()
                except errors.DeviceUnavailable as exc:
                    self._state(False, exc)
                    raise
                if self.hold:
                    self._held = node
            self._state(True)
            try:
                yield node
            except errors.DeviceUnavailable as exc:
                self._state(False, exc)
                raise
            finally:
                if not self.hold:
                    node.close()

    def check(self) -> bool:
        """Try one session; True if the node is there now."""
        try:
            with self.session():
                return True
        except errors.DeviceUnavailable:
            return False

    # -- waiting for the node --

    def watcher(self, **kw: Any) -> Watcher | None:
        """The udev/inotify watcher of this node's module and device (None for a held node); made once."""
        if self.hold or self.device is None or self._watcher_failed:
            return None
        if self._watcher is None:
            try:
                self._watcher = Watcher(self.device, **kw)
            except Exception:  # noqa: BLE001 - no watcher: waiting falls back to a timed retry
                self._watcher_failed = True
                return None
        return self._watcher

    def wait(self, timeout: float) -> list[Event]:
        """Block until the module or its device node changes (udev, inotify), at most timeout seconds.
        Returns the events (empty after the timeout, or at once for a held node)."""
        w = self.watcher()
        if w is None:
            if not self.hold:
                threading.Event().wait(timeout)
            return []
        try:
            events = w.poll(timeout)
        except (OSError, RuntimeError):
            threading.Event().wait(timeout)
            return []
        if events:
            self.epoch += 1
        return events

    def close(self) -> None:
        with self._lock:
            node, self._held = self._held, None
            if node is not None:
                node.close()
            if self._watcher is not None:
                self._watcher.close()
                self._watcher = None

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attach(backend: str | None = None, device: str | None = None, *, sim_config: str | None = None,
           sim_fallback: bool | None = None, sim_live: bool = False,
           backend_factory: Callable[[str], KernelBackend] | None = None,
           on_change: Callable[[str], None] | None = None) -> Attachment:
    """An Attachment for the node :func:`huvm.client.open` would open with these arguments, that does not
    need the node to be there yet. "sim" (or "auto" with the simulator fallback when the kernel node is not
    there now) holds a simulated node; otherwise sessions go to the kernel device. UsageError for an
    unknown backend; errors building a simulated node as client.open raises them."""
    choice, path, fallback = client.resolve(backend, device, sim_fallback)
    if choice == "sim":
        return Attachment.of(client.open("sim", sim_config=sim_config, sim_live=sim_live))
    att = Attachment(lambda: client.open_kernel(path, backend_factory=backend_factory), device=path,
                     on_change=on_change)
    if choice == "auto" and fallback:
        try:
            with att.session():
                pass
        except errors.DeviceUnavailable as exc:
            node = client.open("sim", sim_config=sim_config, sim_live=sim_live)
            held = Attachment.of(node)
            held.note = f"using the simulated node: {exc}"
            return held
    return att
