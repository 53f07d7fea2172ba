"""The local node (``[node] kind = "local"``): an experiment's tenants are commands on this machine's GPUs,
under the patched nvidia-uvm, with each run's policy set through the huvm ioctl.

Per run: the policy (base preset, the tenants' GPU roles and lending keys, the ``[policy.NAME]`` table, the
sweep point) goes to the module as one SET_POLICY (:meth:`huvm.node.Node.apply`), exactly as on the
simulated node; then the tenants start in ``start_ms`` order (ties in file order), each in its own process
group and session, with

- ``CUDA_VISIBLE_DEVICES`` = the UUIDs of its ``gpus`` (``GPU-xxxxxxxx-...``, in the order listed), taken
  from the module's GET_INFO and checked against NVML: a UUID names the same GPU whatever
  ``CUDA_DEVICE_ORDER`` says, where an index would not (CUDA's default order is fastest-first, NVML's and
  the module's is PCI bus order);
- its ``env`` over this process's environment, its ``cwd``, and ``HUVM_TENANT`` (its name), ``HUVM_RUN_ID``
  and ``HUVM_TENANT_RESULT`` (a path: a command may write a JSON object of integers there, e.g.
  ``{"ops_done": 1200, "compute_ns": ...}``, which become the tenant's values, as the simulator's are);
- stdout and stderr in ``OUTDIR/logs/RUN_ID/TENANT.out`` / ``.err``.

The run ends when every foreground tenant (``steps = 1``) has exited (``timeout_s`` bounds it); then every
tenant's process group gets SIGTERM, and SIGKILL after ``stop_grace_s``. A foreground command that fails
fails the experiment (one line naming its log). The counters of a run are the module's GET_STATS change
over it; memory samples come from GET_INFO (free) and GET_STATS (lent, harvested) every ``sample_ms``. The
policy in force before the experiment is put back at the end.

Refused before anything runs, in one line each: no module (``/dev/nvidia-uvm`` missing, or the stock
module), no GPUs (NVML unavailable, or a tenant's GPU not on the node or not visible to NVML), no privilege
(CAP_SYS_ADMIN: SET_POLICY needs it), a command that is not found, a ``cwd`` that does not exist.

Not run on hardware: tested against a fake ``/dev/nvidia-uvm`` (the policy core behind the kernel backend)
and fake commands (tests/python/test_experiment_local.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huvm.backend import Backend, KernelBackend
from huvm.errors import ConfigError, DeviceUnavailable, HuvmError, PermissionDenied, Timeout
from huvm.info import NodeInfo
from huvm.node import Node
from huvm.policy import Policy

from .executor import (
    Executor,
    NodeRecord,
    PlannedRun,
    Progress,
    counter_rows,
    module_version,
    tenant_role,
    traffic_rows,
)
from .results import ExperimentResult, RunKey, RunResult, SampleRow, TenantRow
from .spec import ExperimentSpec, TenantSpec

#: CAP_SYS_ADMIN's bit in /proc/PID/status CapEff (linux/capability.h): the module's SET_POLICY needs it
CAP_SYS_ADMIN = 21
#: how often the run loop looks at its tenants (s)
POLL_S = 0.005


def has_cap_sys_admin(status: str = "/proc/self/status") -> bool:
    """Whether this process holds CAP_SYS_ADMIN (its effective capability set)."""
    try:
        text = Path(status).read_text()
    except OSError:
        return os.geteuid() == 0
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)$", text, re.M)
    if m is None:
        return os.geteuid() == 0
    return bool(int(m.group(1), 16) >> CAP_SYS_ADMIN & 1)


def nvml_uuids() -> list[str]:
    """The GPUs' UUIDs as NVML lists them (nvidia-ml-py); DeviceUnavailable where NVML cannot answer."""
    try:
        import pynvml
    except ImportError:
        raise DeviceUnavailable("pynvml is not installed (pip install nvidia-ml-py)", reason="no-gpus") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise DeviceUnavailable(f"NVML: {exc} (is the NVIDIA driver loaded?)", reason="no-gpus") from None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append(u.decode() if isinstance(u, bytes) else str(u))
        return out
    except pynvml.NVMLError as exc:
        raise DeviceUnavailable(f"NVML: {exc}", reason="no-gpus") from None
    finally:
        pynvml.nvmlShutdown()


@dataclass(frozen=True)
class LocalShape:
    """The local node's shape (what the simulator's NodeConfig gives the other kinds)."""

    name: str
    gpu_count: int


@dataclass
class _Proc:
    tenant: TenantSpec
    popen: subprocess.Popen[bytes]
    start_ns: int  # since the run began
    result_path: Path
    log: Path
    end_ns: int | None = None  # when it exited (since the run began)
    stopped: bool = False  # stopped by us (a background tenant at the end)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@#=+-]", "_", name)


class LocalExecutor(Executor):
    """Commands on this machine's GPUs under the patched module (see the module's docstring)."""

    kind = "local"
    supports_ideal = False  # a real node has the memory it has

    def __init__(self, spec: ExperimentSpec, outdir: Path | None = None, *,
                 open_backend: Callable[[str], Backend] | None = None,
                 gpu_uuids: Callable[[], Sequence[str]] | None = None,
                 privileged: Callable[[], bool] | None = None) -> None:
        assert spec.local is not None, "a local node's spec"
        self.local = spec.local
        self._open_backend = open_backend or (lambda path: KernelBackend(path))
        self._gpu_uuids = gpu_uuids or (lambda: nvml_uuids())
        self._privileged = privileged or (lambda: has_cap_sys_admin())
        self._shape = LocalShape(spec.local.label or "local node", 0)
        self._node: Node | None = None
        self._info: NodeInfo | None = None
        self._original: Policy | None = None
        self._logdir: Path | None = None
        self.notes: list[str] = []
        super().__init__(spec, outdir)

    # -- the node --
    def config_for(self, value: Any) -> Any:
        return self._shape

    @property
    def node(self) -> Node:
        if self._node is None:
            raise HuvmError("the local node is not open (check() first)")
        return self._node

    @property
    def info(self) -> NodeInfo:
        assert self._info is not None
        return self._info

    def check(self) -> None:
        """Everything that can be refused, before anything runs: the module, the GPUs, the privilege, the
        commands and every run's policy."""
        backend = self._open_backend(self.local.device)
        try:
            probe = getattr(backend, "probe", None)
            if probe is not None:
                probe()  # a stock module or another ABI: refused with the reason
            node = Node(backend)
            info = node.info()
        except BaseException:
            backend.close()
            raise
        self._node, self._info = node, info
        self._shape = LocalShape(self.local.label or f"local node ({len(info.gpus)} GPUs: "
                                 f"{', '.join(sorted({g.name for g in info.gpus}))})", len(info.gpus))
        self.config = self._shape
        for t in self.spec.tenants:
            for g in t.gpus:
                if g >= len(info.gpus):
                    raise ConfigError(f"GPU {g} is not on this node (the module has GPUs 0..{len(info.gpus) - 1})",
                                      file=self.spec.path, line=t.key_line(self.spec.doc, "gpus"),
                                      key=f"tenant[{t.index}].gpus")
        visible = {u.lower() for u in self._gpu_uuids()}
        for t in self.spec.tenants:
            for g in t.gpus:
                uuid = info.gpus[g].uuid
                if uuid.lower() not in visible:
                    raise DeviceUnavailable(f"GPU {g} ({uuid}, tenant {t.name!r}) is not visible to NVML: the "
                                            "module and the driver disagree on the GPUs", reason="no-gpus")
        if not self._privileged():
            raise DeviceUnavailable("setting the policy needs CAP_SYS_ADMIN: run the local experiment as root",
                                    reason="permission")
        for t in self.spec.tenants:
            self._check_command(t)
        seen: set[tuple[str, str]] = set()
        current = node.get_policy()
        for run in self.planned():
            if run.policy is None or (run.policy.name, str(run.key.sweep_value)) in seen:
                continue
            seen.add((run.policy.name, str(run.key.sweep_value)))
            preset, settings = self.policy_settings(run, info)
            node.plan(settings, preset=preset, info=info, current=current)
        if self.spec.record_events:
            self.check_recording()
        self._original = current

    def _check_command(self, t: TenantSpec) -> None:
        if t.cwd is not None and not Path(t.cwd).is_dir():
            raise ConfigError(f"tenant {t.name!r}: working directory {t.cwd} does not exist", file=self.spec.path,
                              line=t.key_line(self.spec.doc, "cwd"), key=f"tenant[{t.index}].cwd")
        env = self._env(t, None, Path(os.devnull))
        prog = t.command[0]
        if "/" in prog:
            p = Path(prog) if Path(prog).is_absolute() else Path(t.cwd or os.getcwd()) / prog
            found = p.is_file() and os.access(p, os.X_OK)
        else:
            found = shutil.which(prog, path=env.get("PATH")) is not None
        if not found:
            raise ConfigError(f"tenant {t.name!r}: command {prog!r} is not found or not executable",
                              file=self.spec.path, line=t.key_line(self.spec.doc, "command"),
                              key=f"tenant[{t.index}].command")

    def record(self) -> NodeRecord:
        info = self._info
        return NodeRecord("local", module_version(info) if info else "", self._shape.name, 1.0,
                          len(info.gpus) if info else 0)

    # -- launching --
    def visible_devices(self, t: TenantSpec) -> str:
        """CUDA_VISIBLE_DEVICES for t: its GPUs' UUIDs, in the order of ``gpus``."""
        return ",".join(self.info.gpus[g].uuid for g in t.gpus)

    def _env(self, t: TenantSpec, run: RunKey | None, result: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(dict(t.env))
        if self._info is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_devices(t)
        env["HUVM_TENANT"] = t.name
        env["HUVM_RUN_ID"] = run.run_id if run is not None else ""
        env["HUVM_TENANT_RESULT"] = str(result)
        return env

    def logdir(self, run_id: str) -> Path:
        """Where a run's tenants write stdout/stderr: OUTDIR/logs/RUN_ID (a temporary folder without OUTDIR)."""
        if self._logdir is None:
            if self.outdir is not None:
                self._logdir = self.outdir / "logs"
            else:
                self._logdir = Path(tempfile.mkdtemp(prefix="huvm-local-"))
                self.notes.append(f"tenant logs: {self._logdir}")
        d = self._logdir / _safe(run_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _launch(self, t: TenantSpec, key: RunKey, logs: Path, t0: int) -> _Proc:
        out, err = logs / f"{_safe(t.name)}.out", logs / f"{_safe(t.name)}.err"
        result = logs / f"{_safe(t.name)}.result.json"
        result.unlink(missing_ok=True)
        start = time.monotonic_ns() - t0
        with out.open("wb") as fo, err.open("wb") as fe:
            popen = subprocess.Popen(list(t.command), cwd=t.cwd, env=self._env(t, key, result),
                                     stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, start_new_session=True)
        return _Proc(t, popen, start, result, out)

    def _stop(self, procs: Sequence[_Proc], t0: int) -> None:
        """SIGTERM to every tenant's process group, SIGKILL to those still there after the grace period."""
        live = [p for p in procs if p.popen.poll() is None]
        for p in live:
            p.stopped = True
        groups = [p.popen.pid for p in procs]
        for pg in groups:
            _signal_group(pg, signal.SIGTERM)
        deadline = time.monotonic() + self.local.stop_grace_s
        while time.monotonic() < deadline and any(p.popen.poll() is None for p in live):
            time.sleep(POLL_S)
        for pg in groups:
            _signal_group(pg, signal.SIGKILL)
        for p in procs:
            p.popen.wait()
            if p.end_ns is None:
                p.end_ns = time.monotonic_ns() - t0

    def _run_tenants(self, key: RunKey, tenants: Sequence[TenantSpec], logs: Path, horizon_ns: int | None = None,
                     sample: Callable[[int], None] | None = None) -> tuple[list[_Proc], int]:
        """Launch tenants in start order, wait for the foreground (or horizon_ns), stop everything; returns
        (the processes, the run's wall time in ns)."""
        order = sorted(tenants, key=lambda t: (t.start_ns, t.index))
        procs: list[_Proc] = []
        t0 = time.monotonic_ns()
        limit = None if self.local.timeout_s is None else int(self.local.timeout_s * 1e9)
        next_sample = 0
        interval = self.local.sample_ms * 1_000_000
        try:
            while True:
                now = time.monotonic_ns() - t0
                while order and order[0].start_ns <= now:
                    procs.append(self._launch(order.pop(0), key, logs, t0))
                for p in procs:
                    if p.end_ns is None and p.popen.poll() is not None:
                        p.end_ns = time.monotonic_ns() - t0
                if sample is not None and interval and now >= next_sample:
                    sample(now)
                    next_sample = now + interval
                fg = [p for p in procs if p.tenant.steps > 0]
                if horizon_ns is not None:
                    if now >= horizon_ns and not order:
                        break
                elif not any(t.steps > 0 for t in order) and all(p.end_ns is not None for p in fg):
                    # the foreground is done: a background tenant not started yet never starts (as simulated)
                    failed = [p for p in fg if p.popen.returncode != 0]
                    if failed:
                        p = failed[0]
                        raise HuvmError(f"tenant {p.tenant.name!r} exited with status {_status(p.popen.returncode)} "
                                        f"(stderr: {p.log.with_suffix('.err')})")
                    break
                if limit is not None and now >= limit:
                    raise Timeout(f"foreground tenants still running after timeout_s = {self.local.timeout_s:g} s "
                                  f"(logs: {logs})")
                time.sleep(POLL_S)
        finally:
            self._stop(procs, t0)
        return procs, time.monotonic_ns() - t0

    @staticmethod
    def _row(key: RunKey, p: _Proc) -> TenantRow:
        t = p.tenant
        values = {"exit_status": int(p.popen.returncode or 0), "start_ns": p.start_ns, "stopped": int(p.stopped)}
        values.update(_reported(p.result_path))
        end = p.end_ns if p.end_ns is not None else p.start_ns
        return TenantRow(key, t.name, t.gpu, t.steps > 0, max(end - p.start_ns, 0), values, tenant_role(t))

    # -- runs --
    def run_one(self, run: PlannedRun) -> RunResult:
        assert run.policy is not None, "a local node has no ideal run"
        node, info = self.node, self.info
        preset, settings = self.policy_settings(run, info)
        try:
            node.apply(settings, preset=preset)
        except PermissionDenied as exc:
            raise DeviceUnavailable(f"{self.local.device}: {exc}", reason="permission") from None
        desc = node.get_policy().settings(info)
        samples: list[SampleRow] = []

        def sample(t_ns: int) -> None:
            snap, now = node.stats(), node.info()
            for g in now.gpus:
                gs = snap.gpus[g.index] if g.index < len(snap.gpus) else None
                lent = gs.scalar("lent_bytes") if gs else 0
                harvested = gs.scalar("harvested_bytes") if gs else 0
                used = max(g.memory_bytes - g.free_bytes - lent, 0)
                samples.append(SampleRow(run.key, t_ns, g.index, used, lent, g.free_bytes, harvested, 0))

        before = node.stats()
        tenants = self.tenants(run.key.sweep_value)
        procs, wall = self._run_tenants(run.key, tenants, self.logdir(run.key.run_id), sample=sample)
        delta = node.stats().delta(before)
        res = RunResult(run.key, wall, policy_settings=desc)
        by_name = {p.tenant.name: p for p in procs}
        res.tenants = [self._row(run.key, by_name[t.name]) for t in tenants if t.name in by_name]
        res.counters = counter_rows(run.key, delta)
        res.traffic = traffic_rows(run.key, delta, len(info.gpus))
        res.samples = samples
        return res

    def run_alone(self, t: TenantSpec, value: Any, horizon_ns: int) -> TenantRow | None:
        """t alone under the stock policy: to completion, or for horizon_ns when it runs in the background."""
        self.node.apply([], preset="stock")
        key = RunKey("alone", value, 0)
        logs = self.logdir(f"alone-{t.name}" + ("" if value is None else f"@{value}") + f"-{horizon_ns}")
        procs, _wall = self._run_tenants(key, [t], logs, horizon_ns=None if t.steps > 0 else horizon_ns)
        return self._row(key, procs[0]) if procs else None

    def execute(self, planned: Sequence[PlannedRun], progress: Progress | None = None) -> ExperimentResult:
        res = super().execute(planned, progress)
        res.notes.extend(self.notes)
        return res

    def close(self) -> None:
        """Put back the policy in force before the experiment; close the device."""
        node, self._node = self._node, None
        if node is None:
            return
        try:
            if self._original is not None:
                node.set_policy(self._original, expect_generation=0)
        except HuvmError:
            pass  # the module went away, or the policy cannot be restored: nothing more to do here
        finally:
            node.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _status(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"{rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return str(rc)
    return str(rc)


def _reported(path: Path) -> dict[str, int]:
    """The integers a command wrote to HUVM_TENANT_RESULT (a JSON object); others are left out."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items()
            if isinstance(v, int) and not isinstance(v, bool) and str(k) not in ("exit_status", "start_ns", "stopped")}


__all__ = ["CAP_SYS_ADMIN", "LocalExecutor", "LocalShape", "has_cap_sys_admin", "nvml_uuids"]
