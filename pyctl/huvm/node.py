"""A huvm node behind a backend: :class:`Node` speaks the ABI's commands (:func:`huvm.client.open` picks the
backend)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import abi, errors
from .backend import Backend
from .info import NodeInfo
from .mirror import Mirror
from .policy import Policy, Setting, apply_settings, parse_assignments, preset_value
from .rates import GpuRates, check_rate
from .stats import StatsSnapshot


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

    def gpu_rates(self) -> list[GpuRates]:
        """Each GPU's rates that its slowdown bound weighs (GET_GPU_RATES; MB/s, 0 = unknown), in node order."""
        info = self.info()
        p = self.call(abi.lib.HUVM_IOCTL_GET_GPU_RATES)
        return [GpuRates(g.index, g.uuid, int(p.hbm_mbyte_per_s[g.index]), int(p.giveback_mbyte_per_s[g.index]))
                for g in info.gpus if g.index < int(p.gpu_count)]

    def set_gpu_rates(self, gpu: int | str, hbm_mbyte_per_s: int, giveback_mbyte_per_s: int) -> GpuRates:
        """Set one GPU's rates (SET_GPU_RATES, privileged; MB/s, 0 = unknown). gpu: an index or a UUID (or a
        unique prefix). Checked here first (PolicyError, nothing sent); returns the rates now in force."""
        check_rate(hbm_mbyte_per_s, "hbm")
        check_rate(giveback_mbyte_per_s, "giveback")
        info = self.info()
        try:
            g = info.gpu(gpu)
        except KeyError as exc:
            raise errors.PolicyError(f"GPU {gpu!r}: {exc.args[0] if exc.args else 'not found'}", key="gpu") from None
        if not g.present:
            raise errors.PolicyError(f"GPU {g.index} ({g.uuid}) is not present", key="gpu")
        p = abi.new_params(abi.lib.HUVM_IOCTL_SET_GPU_RATES)
        raw = abi.uuid_bytes(g.uuid)
        for i in range(len(raw)):
            p.uuid[i] = raw[i]
        p.hbm_mbyte_per_s = hbm_mbyte_per_s
        p.giveback_mbyte_per_s = giveback_mbyte_per_s
        self.call(abi.lib.HUVM_IOCTL_SET_GPU_RATES, p)
        return next(r for r in self.gpu_rates() if r.gpu == g.index)

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
