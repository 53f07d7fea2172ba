"""The typed client: :func:`open` picks a backend; :class:`Node` (:mod:`huvm.node`) speaks the ABI's commands
through it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

from . import errors, registry
from .backend import DEFAULT_DEVICE, Backend, KernelBackend
from .node import Node, VaSpace

__all__ = ["BACKENDS", "BackendChoice", "Node", "VaSpace", "open", "open_kernel", "resolve"]

BackendChoice = Literal["auto", "kernel", "sim"]
BACKENDS: tuple[str, ...] = ("auto", *registry.BACKEND_KINDS)


def _open_sim(sim_config: str | None, live: bool = False) -> Backend:
    """The simulated node: the lab's backend, opened through the registry (huvm.registry)."""
    return registry.open_backend("sim", sim_config, live=live)


def resolve(backend: BackendChoice | str | None = None, device: str | None = None,
            sim_fallback: bool | None = None) -> tuple[str, str, bool]:
    """(backend choice, device path, sim fallback) from the arguments, else ``$HUVM_BACKEND``,
    ``$HUVM_DEVICE``, ``$HUVM_SIM_FALLBACK``, else auto, /dev/nvidia-uvm, no fallback."""
    choice = (backend or os.environ.get("HUVM_BACKEND") or "auto").lower()
    if choice not in BACKENDS:
        raise errors.UsageError(f"unknown backend {choice!r} (choose from {', '.join(BACKENDS)})")
    if sim_fallback is None:
        sim_fallback = os.environ.get("HUVM_SIM_FALLBACK", "") not in ("", "0")
    return choice, device or os.environ.get("HUVM_DEVICE") or DEFAULT_DEVICE, sim_fallback


def open_kernel(path: str = DEFAULT_DEVICE, *,
                backend_factory: Callable[[str], KernelBackend] | None = None) -> Node:
    """The kernel node on the device at path, checked with GET_INFO (DeviceUnavailable says why not: no
    device, stock module, ABI version, permission). ``backend_factory`` builds the backend (tests pass a
    KernelBackend with a fake ioctl)."""
    kb = (backend_factory or KernelBackend)(path)
    try:
        kb.probe()
    except BaseException:
        kb.close()
        raise
    return Node(kb)


def open(backend: BackendChoice | str | None = None, device: str | None = None, *,
         sim_config: str | None = None, sim_fallback: bool | None = None, sim_live: bool = False) -> Node:
    """Open a huvm node.

    backend: "kernel" (the device, default /dev/nvidia-uvm, or ``device``), "sim" (an in-process simulated
    node, configured by ``sim_config``: a node preset name or a TOML file), or "auto" (default; also from
    ``$HUVM_BACKEND``): the kernel if the patched module answers GET_INFO; otherwise DeviceUnavailable
    saying why (no device, stock module, ABI version, permission) -- unless sim_fallback (or
    ``$HUVM_SIM_FALLBACK=1``) is set, in which case the simulated node is used and ``Node.note`` says why.
    sim_live: a simulated node from an experiment file starts with its workload at time 0 instead of run to
    completion, and moves as :meth:`Node.advance` drives it (``huvmctl stats --watch``).
    """
    choice, path, sim_fallback = resolve(backend, device, sim_fallback)
    if choice == "sim":
        return Node(_open_sim(sim_config, sim_live))
    try:
        return open_kernel(path)
    except errors.DeviceUnavailable as exc:
        if choice == "auto" and sim_fallback:
            return Node(_open_sim(sim_config, sim_live), note=f"using the simulated node: {exc}")
        raise
