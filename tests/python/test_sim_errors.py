"""Bad input to the simulated node is refused with the field (and record) named; nothing crashes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from huvm import errors
from huvmlab.sim import (
    MIB,
    GpuSpec,
    NodeConfig,
    SimConfigError,
    SimNode,
    SimRunError,
    SimTraceError,
    TenantSpec,
    run_scenario,
    workloads,
)


def node2() -> NodeConfig:
    return NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(128 * MIB, 0)


def test_unknown_preset() -> None:
    with pytest.raises(SimConfigError) as exc:
        NodeConfig.preset("dgx-z900")
    assert exc.value.field == "preset" and "aws-p3.8xlarge" in str(exc.value)
    with pytest.raises(SimConfigError) as exc2:
        run_scenario(node2(), [TenantSpec(0)], "magic")
    assert exc2.value.field == "policy"
    with pytest.raises(SimConfigError):
        SimNode(node2(), "huvm-2030")


@pytest.mark.parametrize(("change", "field"), [
    (lambda c: c.with_gpu_memory(128 * MIB, 128 * MIB, gpus=[1]), "gpus[1].reserved_bytes"),
    (lambda c: c.with_gpu_memory(64 * MIB, 200 * MIB, gpus=[0]), "gpus[0].reserved_bytes"),
    (lambda c: replace(c, gpus=(replace(c.gpus[0], pcie_mbyte_per_s=-5), c.gpus[1])), "gpus[0].pcie_mbyte_per_s"),
    (lambda c: replace(c, gpus=(c.gpus[0], replace(c.gpus[1], pcie_mbyte_per_s=0))), "gpus[1].pcie_mbyte_per_s"),
    (lambda c: replace(c, nvlink_mbyte_per_s_per_link=-25_000), "nvlink_mbyte_per_s_per_link"),
    (lambda c: replace(c, nvlink_mbyte_per_s_per_link=0), "nvlink_mbyte_per_s_per_link"),
    (lambda c: replace(c, gpus=(GpuSpec("x", 0, 0),) + c.gpus[1:]), "gpus[0].memory_bytes"),
    (lambda c: replace(c, topology=(("X", "NV2"), ("NV1", "X"))), "topology[0][1]"),
    (lambda c: replace(c, topology=(("X", "NVX"), ("NVX", "X"))), "topology[0][1]"),
    (lambda c: replace(c, topology=(("X",),)), "topology"),
    (lambda c: replace(c, host_memory_bytes=-1), "host_memory_bytes"),
    (lambda c: c.with_costs(fault_service_ns=-1), "costs.fault_service_ns"),
    (lambda c: c.with_costs(fault_batch_max=0), "costs.fault_batch_max"),
    (lambda c: replace(c, gpus=()), "gpus"),
])
def test_bad_node_config_names_field(change: object, field: str) -> None:
    cfg = change(node2())  # type: ignore[operator]
    with pytest.raises(SimConfigError) as exc:
        SimNode(cfg, "huvm")
    assert exc.value.field == field, str(exc.value)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, errors.HuvmError)


def test_from_dict_errors() -> None:
    with pytest.raises(SimConfigError) as exc:
        NodeConfig.from_dict({"preset": "hgx-h100", "gpu_mem": 1})
    assert exc.value.field == "gpu_mem"
    with pytest.raises(SimConfigError) as exc:
        NodeConfig.from_dict({"preset": "hgx-h100", "gpu_memory_bytes": 1 << 30, "gpu_reserved_bytes": 2 << 30})
    assert exc.value.field == "gpu_reserved_bytes"  # the key written, not the field it sets on every GPU


def test_trace_referencing_missing_chunk() -> None:
    tr = workloads.streaming(32 * MIB, 2)
    bad = replace(tr, touch_chunk=tr.touch_chunk.copy())
    bad.touch_chunk[5] = 999
    with SimNode(node2(), "stock") as node, pytest.raises(SimTraceError) as exc:
        node.add_tenant(TenantSpec(0, bad, name="broken"))
    assert exc.value.field == "tenants[0].touch_chunk" and exc.value.record == 5
    assert "999" in str(exc.value) and "broken" in str(exc.value)


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda t: replace(t, op_first_touch=t.op_first_touch[:-1]), "tenants[0].op_first_touch"),
    (lambda t: replace(t, touch_mode=np.full_like(t.touch_mode, 7)), "tenants[0].touch_mode"),
    (lambda t: replace(t, chunk_alloc_op=np.full_like(t.chunk_alloc_op, 3)), "tenants[0].touch_chunk"),
    (lambda t: replace(t, chunk_free_op=np.full_like(t.chunk_free_op, 10_000)), "tenants[0].chunk_free_op"),
    (lambda t: replace(t, op_time_ns=t.op_time_ns.astype(np.int64) - 10**9), "tenants[0].op_time_ns"),
    (lambda t: replace(t, touch_chunk=t.touch_chunk.astype(np.float32)), "tenants[0].touch_chunk"),
])
def test_bad_trace_names_field(mutate: object, field: str) -> None:
    tr = mutate(workloads.streaming(32 * MIB, 2))  # type: ignore[operator]
    with SimNode(node2(), "stock") as node, pytest.raises(SimTraceError) as exc:
        node.add_tenant(TenantSpec(0, tr))
    assert exc.value.field == field, str(exc.value)


def test_tenant_on_missing_gpu() -> None:
    with SimNode(node2(), "stock") as node, pytest.raises(SimConfigError) as exc:
        node.add_tenant(TenantSpec(5))
    assert exc.value.field == "tenants[0].gpu"


def test_policy_refused_by_core_names_field() -> None:
    with pytest.raises(errors.InvalidValue) as exc:
        run_scenario(node2(), [TenantSpec(0, workloads.streaming(64 * MIB)),
                               TenantSpec(1, role="lender", lend_reserve_bytes=1 << 40)], "huvm")
    assert exc.value.field == "gpus[1].lend_reserve_bytes"
    with pytest.raises(SimConfigError) as exc2:
        run_scenario(node2(), [TenantSpec(0, workloads.streaming(64 * MIB), role="farmer")], "huvm")
    assert exc2.value.field == "roles[0]"


def test_pinned_footprint_over_capacity_is_a_run_error() -> None:
    with pytest.raises(SimRunError) as exc:
        run_scenario(node2(), [TenantSpec(0, workloads.streaming(64 * MIB)),
                               TenantSpec(1, static_bytes=512 * MIB)], "stock")
    assert exc.value.field == "tenants" and "GPU 1" in str(exc.value)


def test_host_memory_exhausted_is_a_run_error() -> None:
    cfg = replace(node2(), host_memory_bytes=8 * MIB)
    with pytest.raises(SimRunError) as exc:
        run_scenario(cfg, [TenantSpec(0, workloads.streaming(256 * MIB, 2))], "stock")
    assert exc.value.field == "host_memory_bytes"


def test_closed_node_refuses() -> None:
    node = SimNode(node2(), "stock")
    node.close()
    with pytest.raises(errors.HuvmError):
        node.run()


def test_tenant_from_dict() -> None:
    t = TenantSpec.from_dict({"gpu": 0, "workload": {"kind": "streaming", "working_set_bytes": 8 * MIB},
                              "role": "harvester", "steps": 2})
    assert t.trace is not None and t.trace.n_chunks == 4 and t.steps == 2
    b = TenantSpec.from_dict({"gpu": 1, "trace": "lender-idle", "managed": False, "background": True})
    assert b.trace is not None and b.trace.n_ops > 0
    for bad, field in (({"gpu": 0, "workload": {"kind": "nope"}}, "tenants[0].workload.kind"),
                       ({"gpu": 0, "trace": "/no/such.trace"}, "tenants[0].trace"),
                       ({"gpu": 0, "colour": 1}, "tenants[0].colour"),
                       ({"gpu": -1}, "tenants[0].gpu"),
                       ({"gpu": 0, "role": "boss"}, "tenants[0].role")):
        with pytest.raises(SimConfigError) as exc:
            TenantSpec.from_dict(bad, where="tenants[0]")
        assert exc.value.field == field
