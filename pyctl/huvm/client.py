"""The typed client: :func:`open` picks a backend; :class:`Node` speaks the ABI's commands through it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from . import abi, errors
from .backend import DEFAULT_DEVICE, Backend, KernelBackend
from .info import NodeInfo
from .mirror import Mirror
from .policy import Policy, Setting, apply_settings, parse_assignments, preset_value
from .stats import StatsSnapshot

BackendChoice = Literal["auto", "kernel", "sim"]
BACKENDS: tuple[str, ...] = ("auto", "kernel", "sim")


@dataclass(frozen=True)
class VaSpace:
    id: int
    pid: int
    uid: int
    comm: str
    registered_gpus: int
    counters: dict[str, int]


class Node:
    """A huvm node (the kernel module or a simulated node) behind a backend."""

    def __init__(self, backend: Backend, note: str | None = None) -> None:
        self.backend = backend
        #: why this backend was chosen when it was a fallback (printed by the CLI), else None
        self.note = note

    # -- plumbing --
    def call(self, cmd: int, params: Any = None) -> Any:
        """Run one ioctl; raise the typed error if refused; return the params."""
        if params is None:
            params = abi.new_params(cmd)
        self.backend.ioctl(cmd, params)
        return errors.check(cmd, params)

    def close(self) -> None:
        self.backend.close()

    def advance(self, seconds: float) -> None:
        """Let seconds of the node's time pass: a simulated node runs its workload that long; a real node's
        time passes by itself (nothing to do)."""
        step = getattr(self.backend, "advance", None)
        if step is not None:
            step(seconds)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands --
    def info(self) -> NodeInfo:
        return NodeInfo.from_params(self.call(abi.lib.HUVM_IOCTL_GET_INFO))

    def get_policy(self) -> Policy:
        # Keep the params alive while reading: cffi does not keep an owner alive through a member.
        params = self.call(abi.lib.HUVM_IOCTL_GET_POLICY)
        return Policy.from_struct(params.policy)

    def stats(self) -> StatsSnapshot:
        return StatsSnapshot.from_params(self.call(abi.lib.HUVM_IOCTL_GET_STATS))

    def reset_stats(self) -> None:
        p = abi.new_params(abi.lib.HUVM_IOCTL_RESET_STATS)
        p.reset_flags = abi.lib.HUVM_RESET_COUNTERS
        self.call(abi.lib.HUVM_IOCTL_RESET_STATS, p)

    def va_spaces(self) -> list[VaSpace]:
        from .metrics import VA_SPACE_METRICS

        out: list[VaSpace] = []
        start = 0
        while True:
            p = abi.new_params(abi.lib.HUVM_IOCTL_LIST_VA_SPACES)
            p.start_index = start
            self.call(abi.lib.HUVM_IOCTL_LIST_VA_SPACES, p)
            for i in range(int(p.count)):
                e = p.entries[i]
                out.append(VaSpace(int(e.id), int(e.pid), int(e.uid), abi.cstr(e.comm), int(e.registered_gpus),
                                   {m.field: int(getattr(e, m.field)) for m in VA_SPACE_METRICS}))
            start += int(p.count)
            if int(p.count) == 0 or start >= int(p.total):
                return out

    # -- policy changes: validated locally by the core, then sent in one SET_POLICY --
    def plan(self, settings: Sequence[Setting], *, preset: str | None = None,
             info: NodeInfo | None = None, current: Policy | None = None) -> tuple[Policy, Policy]:
        """(current, proposed) for settings applied to the current policy (or to a preset); validated."""
        info = info or self.info()
        current = current or self.get_policy()
        mirror = Mirror(info, current)
        base = current
        if preset is not None:
            base = replace(mirror.preset(preset_value(preset)), generation=current.generation)
        new = apply_settings(base, settings, info)
        mirror.validate(new, list(settings))
        return current, new

    def set_policy(self, policy: Policy, *, expect_generation: int | None = None) -> Policy:
        """Send a full policy (generation: expect_generation, or policy.generation; 0 = unconditional).
        Returns the policy now in force."""
        p = abi.new_params(abi.lib.HUVM_IOCTL_SET_POLICY)
        policy.to_struct(p.policy)
        p.policy.generation = policy.generation if expect_generation is None else expect_generation
        self.call(abi.lib.HUVM_IOCTL_SET_POLICY, p)
        return self.get_policy()

    def apply(self, settings: Sequence[Setting], *, preset: str | None = None) -> tuple[Policy, Policy]:
        """Validate and apply settings atomically; returns (before, after). Conflict if the policy changed
        between reading and writing it."""
        before, new = self.plan(settings, preset=preset)
        return before, self.set_policy(new)

    def set(self, assignments: Sequence[str]) -> tuple[Policy, Policy]:
        """KEY=VALUE words (as on the command line)."""
        return self.apply(parse_assignments(assignments, self.info()))

    def apply_preset(self, name: str) -> tuple[Policy, Policy]:
        return self.apply([], preset=name)


def _open_sim(sim_config: str | None, live: bool = False) -> Backend:
    from .simbackend import SimBackend

    return SimBackend.from_config(sim_config, live=live)


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
    choice = (backend or os.environ.get("HUVM_BACKEND") or "auto").lower()
    if choice not in BACKENDS:
        raise errors.UsageError(f"unknown backend {choice!r} (choose from {', '.join(BACKENDS)})")
    if sim_fallback is None:
        sim_fallback = os.environ.get("HUVM_SIM_FALLBACK", "") not in ("", "0")
    path = device or os.environ.get("HUVM_DEVICE") or DEFAULT_DEVICE
    if choice == "sim":
        return Node(_open_sim(sim_config, sim_live))
    try:
        kb = KernelBackend(path)
        try:
            kb.probe()
        except BaseException:
            kb.close()
            raise
        return Node(kb)
    except errors.DeviceUnavailable as exc:
        if choice == "auto" and sim_fallback:
            return Node(_open_sim(sim_config, sim_live), note=f"using the simulated node: {exc}")
        raise
