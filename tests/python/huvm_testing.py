"""Test doubles over :class:`huvmlab.corenode.CoreNode` (not shipped with huvm): a kernel stand-in; and the DNN trace
tables the trace tests share (built once per configuration).

:class:`CoreNode` records the commands it runs and offers :meth:`CoreNode.fake_ioctl`, an ``fcntl.ioctl``
stand-in for :class:`huvm.backend.KernelBackend` with the kernel's behaviours that matter to user space:
unknown numbers fail with EINVAL (the stock module), an unprivileged caller is refused changes, and a
command can be made to fail with an errno.
"""

from __future__ import annotations

import errno
import importlib.util
from typing import Any

from huvm import abi
from huvmlab import corenode


class CoreNode(corenode.CoreNode):
    def __init__(self, gpu_count: int = 4, memory_bytes: int = 16 << 30, *, privileged: bool = True,
                 backend: int | None = None) -> None:
        super().__init__(gpu_count, memory_bytes, privileged=privileged, backend=backend)
        self.calls: list[int] = []
        self.fail_errno: int | None = None

    def dispatch(self, cmd: int, buf: Any) -> int:
        self.calls.append(cmd)
        return super().dispatch(cmd, buf)

    def fake_ioctl(self, *, known: bool = True) -> Any:
        """An fcntl.ioctl stand-in: known=False behaves like the stock module (EINVAL for huvm numbers)."""

        def ioctl(fd: int, cmd: int, buf: Any, mutate: bool = True) -> int:
            if self.fail_errno is not None:
                raise OSError(self.fail_errno, "injected")
            size = abi.lib.huvm_cmd_params_size(cmd) if known else 0
            if size == 0:
                raise OSError(errno.EINVAL, "Invalid argument")
            # as uvm_huvm_ioctl(): the header is checked first; if refused, only the header (with the
            # module's ABI version) goes back and the ioctl fails with EINVAL
            ffi = abi.ffi
            hdr = ffi.cast("huvm_hdr_t *", ffi.from_buffer(buf))
            err = ffi.new("uint32_t *")
            if abi.lib.huvm_check_hdr(cmd, hdr, size, err) != abi.lib.HUVM_NV_OK:
                raise OSError(errno.EINVAL, "Invalid argument")
            self.dispatch(cmd, buf)
            return 0

        return ioctl


def small_experiment(lender_trace: str = "bundled:lender-idle") -> str:
    """A two-GPU experiment file (stock and huvm, no ideal run, 3 GiB GPUs): a BFS harvester on GPU 0 and a
    background lender on GPU 1 running lender_trace."""
    return f"""[experiment]
policies = ["stock", "huvm"]
ideal = false
[node]
preset = "aws-p3.8xlarge"
gpu_count = 2
gpu_memory_bytes = "3GiB"
[[tenant]]
gpu = 0
trace = "bundled:bfs-small"
[[tenant]]
gpu = 1
trace = "{lender_trace}"
steps = 0
"""


def lender_budget_experiment(lend_traffic_mbyte_per_s: str | None) -> str:
    """A one-policy ("huvm") experiment where GPU 0's BFS harvester, squeezed by a static footprint, evicts
    to GPU 1's idle lender; lend_traffic_mbyte_per_s: that lender tenant's guest-traffic budget (None: the key
    left out)."""
    budget = (f'lend_traffic_mbyte_per_s = "{lend_traffic_mbyte_per_s}"\n'
              if lend_traffic_mbyte_per_s is not None else "")
    return small_experiment().replace('policies = ["stock", "huvm"]', 'policies = ["huvm"]').replace(
        "[[tenant]]\ngpu = 1\n", '[[tenant]]\ngpu = 0\ntrace = ""\nstatic = "2540MiB"\n[[tenant]]\ngpu = 1\n'
    ) + 'role = "lender"\n' + budget


def usdt_scenario() -> tuple[Any, list[Any]]:
    """A small simulated node where every kind of movement happens (evictions to peers and host, pre-eviction,
    fetch-back, give-back, prefetch): 3 GPUs of 320 MiB, a streaming harvester of twice that, a lender with a
    static footprint and a rising background lender. Returns (node config, tenants) for
    huvmlab.sim.run_scenario. (Prefetch to a peer needs a host-resident chunk in a window while a lender
    admits it; on 256 MiB GPUs with a 512 MiB stream it happened 15 times, then none once links were shared
    as processor sharing: the sizes are the test's, not a model's.)"""
    from huvmlab.sim import MIB, NodeConfig, TenantSpec, workloads

    node = NodeConfig.preset("aws-p3.8xlarge").subset(3).with_gpu_memory(320 * MIB, 0)
    tenants = [
        TenantSpec(0, workloads.streaming(640 * MIB, 3), role="harvester"),
        TenantSpec(1, static_bytes=64 * MIB, role="lender"),
        TenantSpec(2, workloads.rising(16 * MIB, 200 * MIB, 400, 20, op_time_ns=1_000_000), managed=False,
                   background=True, role="lender"),
    ]
    return node, tenants


def traces_available() -> bool:
    """Whether the traces extra (torch, transformers) is importable."""
    return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


_TABLES: dict[tuple[Any, ...], Any] = {}


def dnn_tables(model: str, **kw: Any) -> Any:
    """huvmlab.traces.gen.build_tables(model, **kw), built once per configuration for the whole test run."""
    from huvmlab.traces.gen import build_tables

    key = (model, *sorted(kw.items()))
    if key not in _TABLES:
        _TABLES[key] = build_tables(model, **kw)
    return _TABLES[key]
