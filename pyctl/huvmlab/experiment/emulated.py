"""The emulated node (``[node] kind = "emulated"``): an experiment run by NVIDIA's real nvidia-uvm on the qemu
test bed's software GPUs (docs/softgpu.md, docs/experiments.md "The emulated node").

On the host, :class:`EmulatedExecutor` boots the test bed ONCE (``tests/vm/run-vm.sh --phases softgpu``: the
software GPU with ``node.gpus`` GPUs of ``node.fb_mib`` MiB and the chosen nvidia-uvm build loaded) and runs
the whole experiment in the guest with ``python -m huvmlab.experiment.emulated guest FILE``; the guest writes its
results (:mod:`huvmlab.experiment.resultio`) to the results share, the host loads them and writes the usual
output folder, with the test bed's logs under ``vm/``. Inside the guest (``HUVM_UVM_VARIANT`` set and
``/dev/huvm-softgpu`` present) the same executor runs the runs itself: each tenant is a guest process that
replays its trace through UVM (:mod:`huvmlab.experiment.emulated_guest`), the policy of each run is set through
the patched module's huvm ioctl on /dev/nvidia-uvm (pyctl's kernel backend), and the module's counters, the
tenants' wall times and where their data ended up (UVM's residency) are read back into the simulator's
result records.

Bytes are scaled by ``node.scale`` (a trace's 2 MiB chunk becomes ``scale_bytes(2 MiB)``, whole pages; static
footprints likewise, in whole 2 MiB pieces) and compute times by ``node.time_scale``; the report says both.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huvm import errors
from huvm.errors import ConfigError, DeviceUnavailable, HuvmError

from .emulated_guest import (
    Accesses,
    GuestNode,
    ReplayPlan,
    RunOutcome,
    TenantJob,
    build_plan,
    cpu_phase_ops,
    in_guest,
    plan_accesses,
    whole_blocks,
)
from .executor import (
    CHUNK_BYTES,
    Executor,
    NodeRecord,
    PlannedRun,
    Progress,
    counter_rows,
    scale_bytes,
    scale_text,
    tenant_role,
    traffic_rows,
)
from .results import CounterRow, ExperimentResult, RunEvents, RunKey, RunResult, SampleRow, TenantRow
from .spec import ExperimentSpec, TenantSpec

#: the nvidia-uvm build the test bed loads for node.module (HUVM_EMULATED_VARIANT overrides, e.g. patched-debug)
VARIANTS = {"patched": "patched-release", "stock": "stock-release"}
#: where the guest writes the experiment's results and, on failure, its one-line error (the results share)
RESULT_FILE = "emulated-result.json"
ERROR_FILE = "emulated-error.txt"
#: paths the guest covers with its own tmpfs (tests/vm/init.sh): host files there are not visible in it
GUEST_HIDDEN = ("/tmp/", "/run/", "/var/tmp/")
#: files of the test bed's results that are not kept in the output folder (the modules, 50 MB)
_DROP_SUFFIXES = (".ko",)


def repo_root() -> Path:
    """The checkout (pyctl/huvmlab/experiment/emulated.py -> the repository root)."""
    return Path(__file__).resolve().parents[3]


def variant_for(module: str) -> str:
    return os.environ.get("HUVM_EMULATED_VARIANT") or VARIANTS[module]


def emulated_tenant_values(outcome: dict[str, int], census_on: dict[str, int], census_blocks: dict[str, int],
                           gpu: int, n_gpus: int) -> dict[str, int]:
    """A tenant's per-run values: what the replay measured, and the residency census as the simulator's
    end-of-run chunk counts (``resident_chunks`` on its GPU, ``peer_chunks`` on others, ``host_chunks`` on the
    CPU: 2 MiB VA blocks with any sampled page there) plus ``blocks_on_gpuN`` / ``blocks_on_cpu`` and
    ``blocks_split`` (blocks with pages in more than one place)."""
    v = dict(outcome)
    v["resident_chunks"] = census_on.get(f"gpu{gpu}", 0)
    v["peer_chunks"] = sum(census_on.get(f"gpu{h}", 0) for h in range(n_gpus) if h != gpu)
    v["host_chunks"] = census_on.get("cpu", 0)
    for h in range(n_gpus):
        v[f"blocks_on_gpu{h}"] = census_on.get(f"gpu{h}", 0)
    v["blocks_on_cpu"] = census_on.get("cpu", 0)
    v["blocks_split"] = sum(n for k, n in census_blocks.items() if "+" in k)
    return v


def residency_check(run: RunResult, n_gpus: int) -> list[str]:
    """huvm's counters against UVM's residency at the end of a run: for every owner GPU g and holder h != g,
    the pair gauge ``held_bytes`` (g's data held on h) must equal the 2 MiB VA blocks of g's tenants that UVM
    shows resident on h (``blocks_on_gpuH`` of the tenant rows), and g's ``harvested_bytes`` their sum. One
    line per disagreement (empty: they agree). Needs the patched module's counters."""
    held: dict[tuple[int, int], int] = {}
    harvested: dict[int, int] = {}
    for c in run.counters:
        if c.scope == "pair" and c.metric == "held_bytes":
            held[(c.gpu, c.peer)] = c.value
        elif c.scope == "gpu" and c.metric == "harvested_bytes":
            harvested[c.gpu] = c.value
    out: list[str] = []
    for g in range(n_gpus):
        tenants = [t for t in run.tenants if t.gpu == g]
        total = 0
        for h in range(n_gpus):
            if h == g:
                continue
            blocks = sum(t.values.get(f"blocks_on_gpu{h}", 0) for t in tenants)
            total += blocks
            got = held.get((g, h), 0)
            if got != blocks * CHUNK_BYTES:
                out.append(f"{run.key.run_id}: GPU{g}'s data on GPU{h}: held_bytes {got >> 20} MiB, UVM shows "
                           f"{blocks} blocks ({blocks * 2} MiB)")
        if harvested.get(g, 0) != total * CHUNK_BYTES:
            out.append(f"{run.key.run_id}: GPU{g}: harvested_bytes {harvested.get(g, 0) >> 20} MiB, UVM shows "
                       f"{total} blocks on peers ({total * 2} MiB)")
    return out


class EmulatedExecutor(Executor):
    """``kind = "emulated"``: on the host, one test-bed boot running the whole experiment in the guest; in
    the guest, each run's tenants as processes replaying their traces through nvidia-uvm."""

    kind = "emulated"
    supports_ideal = False  # the framebuffers are fixed at module load: there is no unlimited-memory node
    # The tenants share the guest's two vCPUs and the software GPU's one engine thread: alone, a tenant gets
    # more CPU, so an "alone" baseline would measure that contention, not memory. Not measured.
    supports_alone = False

    def __init__(self, spec: ExperimentSpec, outdir: Path | None = None) -> None:
        if spec.emulated is None:
            raise ConfigError("not an emulated node", file=spec.path, key="node.kind")
        super().__init__(spec, outdir)
        self.em = spec.emulated
        self.guest = in_guest()
        self.chunk_bytes = scale_bytes(CHUNK_BYTES, self.em.scale)
        self.node: GuestNode | None = None
        self._plans: dict[str, ReplayPlan] = {}
        self._accesses: dict[tuple[str, int], Accesses] = {}
        self._version = ""
        self._checked = False

    # -- plans and jobs
    def plan_of(self, t: TenantSpec) -> ReplayPlan | None:
        """t's trace as the guest replays it (scaled); None without a trace."""
        tr = self.trace(t)
        if tr is None:
            return None
        if t.trace not in self._plans:
            sim = tr.to_sim_events(self.config.gpu_preset)
            self._plans[t.trace] = build_plan(sim, self.chunk_bytes, self.em.time_scale,
                                              cpu_phase_ops(tr.tables.o_phase))
        return self._plans[t.trace]

    def job(self, t: TenantSpec) -> TenantJob:
        """What t's process runs (sizes scaled, its SM accesses built once per trace)."""
        plan = self.plan_of(t)
        seed = 0x5EED + t.index
        acc = None
        if plan is not None and t.managed:
            if (t.trace, seed) not in self._accesses:
                self._accesses[(t.trace, seed)] = plan_accesses(plan, seed)
            acc = self._accesses[(t.trace, seed)]
        return TenantJob(t.name, t.gpu, t.steps,
                         int(t.start_ns * self.em.time_scale), whole_blocks(scale_bytes(t.static_bytes, self.em.scale)),
                         t.managed, plan, self.em.gpus, seed=seed, accesses=acc)

    # -- check
    def check(self) -> None:
        super().check()
        for t in self.spec.tenants:
            self.plan_of(t)
        if self.guest:
            self._check_guest()
        else:
            self._check_host()
        self._checked = True

    def _check_guest(self) -> None:
        node = GuestNode(self.em.gpus, self.em.module)
        self.node = node
        self._version = node.version()
        fb = {g.fb_bytes >> 20 for g in node.gpus}
        if fb != {self.em.fb_mib}:
            raise DeviceUnavailable(f"the software GPU's framebuffers are {'/'.join(map(str, sorted(fb)))} MiB, "
                                    f"node.fb_mib = {self.em.fb_mib} (load huvm-softgpu.ko with fb_mib="
                                    f"{self.em.fb_mib}: VM_FB_MIB)", reason="fb")
        pma = node.pma_bytes
        for g in range(self.em.gpus):
            pinned = sum(whole_blocks(scale_bytes(t.static_bytes, self.em.scale))
                         + (whole_blocks(p.footprint_bytes) if (p := self.plan_of(t)) and not t.managed else 0)
                         for t in self.spec.tenants if t.gpu == g)
            if pinned > pma:
                culprit = next(t for t in self.spec.tenants if t.gpu == g)
                raise ConfigError(f"GPU {g} pins {pinned >> 20} MiB (static footprints, scaled by "
                                  f"{scale_text(self.em.scale)}), more than its {pma >> 20} MiB of PMA memory",
                                  file=self.spec.path, line=culprit.key_line(self.spec.doc, "static"),
                                  key=f"tenant[{culprit.index}].static")

    def _check_host(self) -> None:
        if os.geteuid() != 0:
            raise DeviceUnavailable("the emulated node boots the qemu test bed, which needs root", reason="root",
                                    hint="run as root (or run the experiment inside the test bed's guest)")
        if shutil.which("qemu-system-x86_64") is None:
            raise DeviceUnavailable("the emulated node needs qemu-system-x86_64 (make deps)", reason="qemu")
        root = repo_root()
        runvm = root / "tests" / "vm" / "run-vm.sh"
        if not runvm.is_file():
            raise DeviceUnavailable(f"no test bed at {runvm}: the emulated node runs from a huvm checkout",
                                    reason="checkout")
        pre = subprocess.run(["bash", str(runvm), "--preflight", "--python", sys.executable],
                             capture_output=True, text=True, env={**os.environ, "CI": ""})
        if pre.returncode != 0:
            lines = (pre.stdout + pre.stderr).strip().splitlines()
            why = lines[-1].removeprefix("SKIP: vm-test: ") if lines else f"preflight exit {pre.returncode}"
            raise DeviceUnavailable(f"the qemu test bed cannot run: {why}", reason="testbed")
        variant = variant_for(self.em.module)
        build = Path(os.environ.get("BUILD") or root / "build")
        needed = {"the software GPU": build / "softgpu" / "huvm-softgpu.ko",
                  f"nvidia-uvm ({variant})": build / "module" / variant / "nvidia-uvm.ko"}
        for what, path in needed.items():
            if not path.is_file():
                raise DeviceUnavailable(f"{what} is not built ({path})", reason="modules",
                                        hint=f"make softgpu-vm-modules VM_SOFTGPU_VARIANTS={variant}")
        from huvm import uvm

        if uvm.binding_path() is None:
            raise DeviceUnavailable("the UVM binding is not built (build/pyuvm)", reason="modules",
                                    hint="make uvm-binding")
        for t in self.spec.tenants:
            if t.trace and not t.trace.startswith("bundled:") and guest_hidden(t.trace, root):
                raise ConfigError(f"trace {t.trace} is under {t.trace.split('/')[1]}/, which the test bed's guest "
                                  "does not see: move it elsewhere", file=self.spec.path,
                                  line=t.key_line(self.spec.doc, "trace"), key=f"tenant[{t.index}].trace")

    def check_recording(self) -> None:
        """``[record] events`` are recorded inside the guest (its kernel has the module): checked there."""
        if self.guest:
            super().check_recording()

    def adjust_events(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Recorded huvm GPU indices (huvm's slots) as the experiment's GPU indices, like the counters."""
        node = self._node()
        back = {sl: i for i, sl in node.slots.items()}
        if all(k == v for k, v in back.items()):
            return rows
        for r in rows:
            for col in ("gpu", "peer"):
                if r[col] in back:
                    r[col] = back[r[col]]
        return rows

    # -- the node record
    def record(self) -> NodeRecord:
        module = self._version or f"nvidia-uvm ({variant_for(self.em.module)}, in the qemu test bed)"
        return NodeRecord("emulated", module, self.spec.node_preset, self.em.scale, self.em.gpus,
                          CHUNK_BYTES / self.chunk_bytes)

    # -- runs (in the guest)
    def _node(self) -> GuestNode:
        if self.node is None:
            raise HuvmError("the emulated node runs its runs inside the test bed's guest (check() first)")
        return self.node

    def run_one(self, run: PlannedRun) -> RunResult:
        node = self._node()
        if run.policy is None:
            raise errors.UsageError("the emulated node has no ideal run")
        tenants = self.tenants(run.key.sweep_value)
        settings: list[Any] = []
        if node.node is None:
            preset = "stock"
        else:
            preset, settings = self.policy_settings(run, node.info())
        desc = node.apply(preset, settings)
        out = node.run([self.job(t) for t in tenants], timeout_s=self._timeout())
        print(f"emulated:   {run.key.run_id}: {out.phase_line()}", flush=True)
        return self.result_of(run.key, tenants, out, desc)

    def _timeout(self) -> float:
        return float(os.environ.get("HUVM_EMULATED_RUN_TIMEOUT", "900"))

    def result_of(self, key: RunKey, tenants: Sequence[TenantSpec], out: RunOutcome,
                  settings: dict[str, str]) -> RunResult:
        """The simulator's result records from a run's outcome."""
        n = self.em.gpus
        res = RunResult(key, out.wall_ns, policy_settings=dict(settings))
        if self.spec.record_events:  # the recorder fills the rows in; the counters' window is the run's
            res.events = RunEvents([], window_ns=out.window_ns)
        for t in tenants:
            runtime, values = out.tenants[t.name]
            c = out.census.get(t.name)
            v = emulated_tenant_values(values, c.on if c else {}, c.blocks if c else {}, t.gpu, n)
            res.tenants.append(TenantRow(key, t.name, t.gpu, t.steps > 0, runtime, v, tenant_role(t)))
        if out.after is not None and out.before is not None:
            d = out.after.delta(out.before)
            res.counters = counter_rows(key, d)
            res.traffic = traffic_rows(key, d, n)
        for g, values in sorted(out.softgpu.items()):
            for name, value in values.items():
                res.counters.append(CounterRow(key, "softgpu", g, -1, name, int(value)))
        for t_ns, g, s in out.samples:
            res.samples.append(SampleRow(key, t_ns, g, s["own_bytes"], s["guest_bytes"], s["free_bytes"],
                                         s["peer_bytes"], s["host_bytes"]))
        return res

    def add_notes(self, res: ExperimentResult) -> None:
        super().add_notes(res)
        page = scale_bytes(CHUNK_BYTES, self.em.scale)
        res.notes.append(f"emulated node: {self.em.gpus} software GPUs of {self.em.fb_mib} MiB under "
                         f"{self.record().module}; a trace's 2 MiB chunk is {page // 1024} KiB here; runtimes are "
                         "wall times in the qemu guest (the emulator's speed, not a V100's)")
        if self.em.module == "stock":
            res.notes.append("node.module = \"stock\": NVIDIA's nvidia-uvm without huvm counts nothing of its own, so "
                             "evictions, fetch-backs and give-backs read 0; where each tenant's data ended up is in "
                             "data/tenants.* (resident/peer/host_chunks) and the software GPU's own counters (scope "
                             "softgpu: CE bytes, faults, replays) in data/counters.*")
        res.notes.append("the tenants share the guest's two vCPUs and the software GPU's engine thread (every "
                         "emulated GPU's work is CPU work): a tenant's wall time includes waiting for the CPU, so "
                         "compare counts more than times")
        for r in res.runs:
            for line in residency_check(r, self.em.gpus):
                res.notes.append(f"counters vs residency: {line}")

    def close(self) -> None:
        """In the guest: the preset back to stock, the node's files closed."""
        node, self.node = self.node, None
        if node is not None:
            node.close()

    # -- the host side: one boot of the test bed
    def execute(self, planned: Sequence[PlannedRun], progress: Progress | None = None) -> ExperimentResult:
        if self.guest:
            return super().execute(planned, progress)
        if not self._checked:
            self.check()
        return self._execute_in_vm(planned, progress)

    def _execute_in_vm(self, planned: Sequence[PlannedRun], progress: Progress | None) -> ExperimentResult:
        from . import resultio

        root = repo_root()
        build = Path(os.environ.get("BUILD") or root / "build")
        vm_out = (self.outdir / "vm") if self.outdir is not None else build / "vm-experiment" / "out"
        work = Path(os.environ.get("HUVM_VM_WORK") or build / "vm-emulated")
        share_kernel_cache(build / "vm", work)
        variant = variant_for(self.em.module)
        script = guest_script(self.spec, root, sys.executable, f"/run/huvm-out/{RESULT_FILE}",
                              f"/run/huvm-out/{ERROR_FILE}")
        timeout = int(os.environ.get("HUVM_EMULATED_TIMEOUT", "1800"))
        env = {**os.environ, "VM_GPUS": str(self.em.gpus), "VM_FB_MIB": str(self.em.fb_mib),
               "VM_SOFTGPU_TIMEOUT": str(timeout), "CI": os.environ.get("CI", "")}
        cmd = ["bash", str(root / "tests" / "vm" / "run-vm.sh"), "--phases", "softgpu",
               "--softgpu-ko", str(build / "softgpu" / "huvm-softgpu.ko"),
               "--uvm", f"{variant}={build / 'module' / variant / 'nvidia-uvm.ko'}",
               "--softgpu-cmd", script, "--work", str(work), "--out", str(vm_out), "--python", sys.executable]
        vm_out.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        log: list[str] = []
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.append(line)
                del log[:-200]
                m = _PROGRESS.search(line)
                if m and progress is not None and 0 < int(m.group(1)) <= len(planned):
                    progress(planned[int(m.group(1)) - 1], int(m.group(1)) - 1, len(planned))
        rc = proc.returncode
        took = time.monotonic() - t0
        for f in vm_out.glob("*"):
            if f.suffix in _DROP_SUFFIXES:
                f.unlink()
        result = vm_out / RESULT_FILE
        if not result.is_file():
            why = (vm_out / ERROR_FILE).read_text().strip() if (vm_out / ERROR_FILE).is_file() else \
                _summary(vm_out) or _last(log) or f"run-vm.sh exit {rc}"
            raise HuvmError(f"the emulated node produced no results: {why} (logs: {vm_out})")
        if rc != 0:
            raise HuvmError(f"the emulated node's test bed failed: {_summary(vm_out) or _last(log) or rc} "
                            f"(logs: {vm_out})")
        res = resultio.loads(result.read_text())
        res.notes.append(f"the test bed (qemu TCG, {self.em.gpus} GPUs x {self.em.fb_mib} MiB, nvidia-uvm {variant}) "
                         f"ran for {took:.0f} s; its logs are in vm/")
        return res


def share_kernel_cache(src: Path, work: Path) -> list[Path]:
    """Hard-link the test bed's prepared kernel images (``src/kernel-*``, make vm-test's cache) into work, where
    there is none yet: the emulated node boots from its own work directory (its initramfs is rewritten on
    every boot, which must not race a vm-test) without downloading the kernel image again. Returns what it
    linked."""
    linked: list[Path] = []
    if work.exists() and work.resolve() == src.resolve():
        return linked
    for kdir in sorted(src.glob("kernel-*")):
        dest = work / kdir.name
        if not (kdir / "ready").is_file() or dest.exists():
            continue
        work.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copytree(kdir, dest, copy_function=os.link)
        except OSError:
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(kdir, dest)
        linked.append(dest)
    return linked


#: the guest's progress lines (guest_main's ``say``), seen in run-vm.sh's console output
_PROGRESS = re.compile(r"emulated: run ([0-9]+)/([0-9]+): ")


def _last(log: list[str]) -> str:
    lines = [ln.strip() for ln in log if ln.strip()]
    return lines[-1] if lines else ""


def _summary(vm_out: Path) -> str:
    p = vm_out / "summary"
    return p.read_text().strip() if p.is_file() else ""


def guest_hidden(path: str, root: Path) -> bool:
    """Whether the guest cannot see the host's path: under /tmp, /run or /var/tmp (tmpfs in the guest), unless
    it is in the checkout, which the guest's init binds back on top of them (tests/vm/init.sh)."""
    if not path.startswith(GUEST_HIDDEN):
        return False
    return not Path(path).resolve().is_relative_to(root.resolve())


def guest_script(spec: ExperimentSpec, root: Path, python: str, result: str, error: str) -> str:
    """The shell script the test bed runs in the guest (run-vm.sh --softgpu-cmd): the experiment file
    recreated where the guest cannot see the host's copy (under /tmp, /run, /var/tmp), then the guest run."""
    path = str(Path(spec.path).resolve())
    lines = ["set -u"]
    if guest_hidden(path, root):
        text = spec.doc.text
        end = "HUVM_EXPERIMENT_EOF"
        while end in text:
            end += "_"
        lines += [f"mkdir -p {shlex.quote(str(Path(path).parent))}",
                  f"cat > {shlex.quote(path)} <<'{end}'", text.rstrip("\n"), end]
    lines += [f"cd {shlex.quote(str(root))}",
              f"{shlex.quote(python)} -m huvmlab.experiment.emulated guest {shlex.quote(path)} "
              f"--result {shlex.quote(result)} --error {shlex.quote(error)}"]
    return "\n".join(lines) + "\n"


# ---- the guest's entry point ---------------------------------------------------------------------------------

def guest_main(argv: Sequence[str] | None = None) -> int:
    """``python -m huvmlab.experiment.emulated guest FILE --result PATH [--error PATH] [--out DIR]``: run the
    experiment in the test bed's guest and write its results (resultio JSON); with --out, the whole output
    folder too. A failure is one line on stderr and in --error, exit status 1."""
    ap = argparse.ArgumentParser(prog="python -m huvmlab.experiment.emulated")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("guest", help="run an emulated experiment inside the test bed's guest")
    g.add_argument("file")
    g.add_argument("--result", required=True)
    g.add_argument("--error")
    g.add_argument("--out")
    a = ap.parse_args(argv)
    from . import resultio
    from .spec import load

    def say(p: PlannedRun, i: int, n: int) -> None:
        print(f"emulated: run {i + 1}/{n}: {p.key.run_id}", flush=True)

    try:
        spec = load(a.file)
        if not in_guest():
            raise DeviceUnavailable("not inside the test bed's guest (no HUVM_UVM_VARIANT or /dev/huvm-softgpu)",
                                    reason="guest")
        if a.out:
            from .runner import run_to

            res, _ = run_to(spec, a.out, progress=say)
        else:
            from .runner import run

            res = run(spec, say)
        Path(a.result).write_text(resultio.dumps(res))
        print(f"emulated: {len(res.runs)} runs; results in {a.result}", flush=True)
        return 0
    except (HuvmError, OSError) as exc:
        line = f"{type(exc).__name__}: {exc}".splitlines()[0]
        print(f"emulated: {line}", file=sys.stderr, flush=True)
        if a.error:
            Path(a.error).write_text(line + "\n")
        return 1


if __name__ == "__main__":
    sys.exit(guest_main())
