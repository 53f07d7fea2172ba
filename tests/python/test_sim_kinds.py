"""The workload kinds of the evaluation matrix (issue 28 item 4; docs/evaluation.md, "Workload kinds"): each
generator's shape (the KV cache follows the requests, expert popularity drifts, the all-reduce bytes are the
ring formula's), the simulator's collectives and op records, the asymmetric node presets, and every kind's
scenarios running end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
from huvmlab.sim import matrix as M
from huvmlab.sim import workloads as W
from huvmlab.sim.config import CHUNK_BYTES, MIB, NodeConfig
from huvmlab.sim.errors import SimConfigError, SimTraceError
from huvmlab.sim.node import SimNode
from huvmlab.sim.scenario import TenantResult, run_scenario
from huvmlab.sim.tenants import TenantSpec

# ---- the serving lender ----


def test_kv_cache_follows_the_requests_exactly() -> None:
    # two requests, half a chunk of KV per token: A (prompt 3, output 4) at op 0, B (prompt 1, output 6) at op 2
    t = W.kv_serving(4 * MIB, 64 * MIB, 12, kv_bytes_per_token=CHUNK_BYTES // 2, arrivals_per_op=0,
                     requests=[(0, 3, 4), (2, 1, 6)])
    weights = 2
    # live chunks: weights + ceil(context / 2) per running request; each is freed after its last token
    a = [math.ceil((3 + i + 1) / 2) for i in range(4)] + [0] * 8
    b = [0, 0] + [math.ceil((1 + i + 1) / 2) for i in range(6)] + [0] * 4
    assert list(W.kv_chunks_live(t)) == [weights + x + y for x, y in zip(a, b, strict=True)]
    assert t.op_tokens is not None
    assert list(t.op_tokens) == [int(x > 0) + int(y > 0) for x, y in zip(a, b, strict=True)]
    # an op reads the weights and every running request's KV, writing the chunks it allocates
    touched = np.diff(t.op_first_touch.astype(np.int64))
    assert list(touched) == [weights + x + y for x, y in zip(a, b, strict=True)]
    assert int(t.touch_mode.sum()) == t.n_chunks - weights        # each KV chunk written once, when allocated


def test_kv_cache_grows_and_shrinks_with_poisson_load() -> None:
    t = W.kv_serving(8 * MIB, 512 * MIB, 3000, kv_bytes_per_token=256 << 10, arrivals_per_op=0.25,
                     prompt_mean=16, output_mean=32, seed=3)
    kv = W.kv_chunks_live(t) - 4
    assert t.op_tokens is not None
    batch = t.op_tokens.astype(np.float64)
    # Little's law: the mean batch is the arrival rate times the mean output length (the capacity never binds)
    assert abs(batch[500:].mean() - 0.25 * 32) < 0.25 * 32 * 0.15
    assert int(kv.max()) <= 256 and int(kv.min()) >= 0
    # KV follows the batch (grows as requests arrive, shrinks as they finish), both ways
    assert np.corrcoef(kv, batch)[0, 1] > 0.8
    assert (np.diff(kv) > 0).sum() > 100 and (np.diff(kv) < 0).sum() > 100


def test_kv_admission_waits_for_capacity() -> None:
    # capacity 4 chunks; each request reserves 3: the second waits until the first has finished
    t = W.kv_serving(0, 4 * CHUNK_BYTES, 10, kv_bytes_per_token=CHUNK_BYTES, arrivals_per_op=0,
                     requests=[(0, 1, 2), (0, 1, 2)])
    assert t.op_tokens is not None
    assert list(t.op_tokens) == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert int(W.kv_chunks_live(t).max()) == 3
    with pytest.raises(SimConfigError, match="fits"):
        W.kv_serving(0, 2 * CHUNK_BYTES, 4, kv_bytes_per_token=CHUNK_BYTES, arrivals_per_op=0, requests=[(0, 2, 2)])


def test_token_latency_is_weighted_by_tokens() -> None:
    r = TenantResult(0, "s", 1, 0, 0, (), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, True, op_end_ns=(5, 15, 20, 120, 130))
    lat, cnt = M.token_latencies(r, [9, 1, 3, 1])          # op 4 wraps to op 0's tokens
    assert (lat, cnt) == ([10, 5, 100, 10], [1, 3, 1, 9])
    mean, p99 = M.token_stats(lat, cnt)
    assert mean == pytest.approx((10 + 15 + 100 + 90) / 14)
    assert p99 == 100.0            # 13 of 14 tokens took <= 10 ns: the 99th percentile is the slow one
    assert M.token_stats([5] * 200, [1] * 200) == (5.0, 5.0)


# ---- the MoE harvester ----


def test_moe_expert_popularity_drifts_and_routing_follows_it() -> None:
    pop = W.moe_popularity(2, 64, 8, drift=1.0, seed=5)
    assert np.allclose(pop.sum(axis=2), 1.0)
    first, last = pop[0, 0], pop[-1, 0]
    # the hot set moves: few of the first iteration's 8 hottest experts are still among the last one's
    assert len(set(np.argsort(first)[-8:]) & set(np.argsort(last)[-8:])) <= 4
    still = W.moe_popularity(2, 64, 8, drift=0.0, seed=5)
    assert np.allclose(still[0], still[-1])
    # the experts an op reads are those routed to: they change with the drift, cold experts go unread
    t = W.moe_expert_parallel(n_layers=2, iterations=8, seed=5)
    per_layer = 4 + 64 * 2
    sets = []
    for op in range(t.n_ops):
        c = t.touch_chunk[t.op_first_touch[op]:t.op_first_touch[op + 1]].astype(np.int64)
        if len(c) > 4 and int(c.min()) < per_layer:
            sets.append(frozenset(((c - 4) // 2).tolist()))
    assert len(sets) == 2 * 8 and all(len(s) < 64 for s in sets)       # some experts get no token
    # the backward pass reads what the forward pass routed to; each iteration routes anew
    assert all(sets[2 * i] == sets[2 * i + 1] for i in range(8)) and len(set(sets)) == 8


def test_moe_all_to_all_bytes_are_the_dispatch_formula() -> None:
    t = W.moe_expert_parallel(n_layers=3, iterations=2, tokens=32, top_k=8, hidden=7168, ep_ranks=4)
    assert t.op_link_bytes is not None
    per_peer = 32 * 8 * 7168 * 2 // 4
    assert W.alltoall_bytes_per_peer(32, 8, 7168, 2, 4) == per_peer
    comm = t.op_link_bytes > 0
    assert set(t.op_link_bytes[comm].tolist()) == {per_peer}
    assert int(comm.sum()) == 2 * 3 * 4        # iterations x layers x (dispatch + combine, forward + backward)
    assert not np.diff(t.op_first_touch)[comm].any()        # the all-to-all ops touch no memory


# ---- the all-reduce lenders ----


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_ring_allreduce_bytes_are_the_ring_formula(ranks: int) -> None:
    grad = 300 * MIB
    assert W.ring_allreduce_bytes(grad, ranks) == 2 * (ranks - 1) * grad // ranks
    t = W.allreduce_training(600 * MIB, grad, 40, ranks, ops_per_step=20, bucket_bytes=25 * MIB)
    assert t.op_link_bytes is not None
    step = t.op_link_bytes[:20]
    assert list(t.op_link_bytes[20:]) == list(step)           # every step the same
    assert int(step.sum()) == 12 * W.ring_allreduce_bytes(25 * MIB, ranks)      # 12 buckets of 25 MiB
    assert abs(int(step.sum()) - 2 * (ranks - 1) * grad / ranks) <= 12
    assert not step[:8].any() and step[8:].all()             # the buckets go with the step's last ops


def _ring(node: NodeConfig, gpus: tuple[int, ...], trace: W.CommTrace, steps: int = 1) -> list[TenantSpec]:
    return [TenantSpec(g, trace, name=f"ar@{g}", steps=steps, link_send=(gpus[(i + 1) % len(gpus)],))
            for i, g in enumerate(gpus)]


def test_collectives_move_their_bytes_over_the_links() -> None:
    node = NodeConfig.preset("aws-p3.8xlarge").with_gpu_memory(2 << 30, 256 * MIB)
    t = W.allreduce_training(64 * MIB, 100 * MIB, 20, 3, op_time_ns=100_000, ops_per_step=20,
                             bucket_bytes=25 * MIB)
    assert t.op_link_bytes is not None
    res = run_scenario(node, _ring(node, (1, 2, 3), t, steps=2), "stock", sample_interval_ns=0)
    per_step = int(t.op_link_bytes.sum())
    coll = res.traffic["collective"]
    for a, b in ((1, 2), (2, 3), (3, 1)):
        assert coll[a][b] == 2 * per_step
    assert coll[2][1] == 0 and sum(map(sum, res.traffic["gpu_to_gpu"])) == 0      # not migrations
    # GPU 1 -> 2 is NV2 (50 GB/s): a 33 MB bucket takes 0.67 ms on the link, longer than the op's compute
    r = res.tenants[0]
    assert r.link_stall_ns > 0 and r.runtime_ns > 2 * int(t.op_time_ns.sum())
    # 3 -> 1 is NV1 (25 GB/s): that rank waits twice as long per bucket
    assert res.tenants[2].link_stall_ns > 1.5 * res.tenants[0].link_stall_ns


def test_collectives_share_the_link_with_peer_eviction() -> None:
    """A harvester on GPU 0 evicting to GPU 1 over NV1 slows a collective that crosses the same link."""
    node = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(512 * MIB, 256 * MIB)
    coll = W.allreduce_training(16 * MIB, 64 * MIB, 200, 2, op_time_ns=50_000, ops_per_step=4,
                                bucket_bytes=4 * MIB)
    alone = run_scenario(node, [TenantSpec(0, coll, steps=1, link_send=(1,), role="both")], "huvm",
                         sample_interval_ns=0)
    h = W.streaming(600 * MIB, passes=3)
    both = run_scenario(node, [TenantSpec(0, coll, steps=1, link_send=(1,), role="both"),
                               TenantSpec(0, h, steps=1, name="h", role="both")], "huvm", sample_interval_ns=0)
    assert both.counter_total("evict_to_peer") > 0
    assert both.tenants[0].link_stall_ns > alone.tenants[0].link_stall_ns


def test_bad_collectives_are_refused_with_the_field() -> None:
    node = NodeConfig.preset("aws-p3.8xlarge").with_gpu_memory(1 << 30, 256 * MIB)
    t = W.allreduce_training(8 * MIB, 8 * MIB, 4, 2, ops_per_step=4, bucket_bytes=4 * MIB)
    with SimNode(node, "stock") as sim:
        with pytest.raises(SimConfigError, match="not another GPU") as e:
            sim.add_tenant(TenantSpec(1, t, link_send=(1,)))
        assert e.value.field == "tenants[0].link_send"
        with pytest.raises(SimConfigError, match="not another GPU"):
            sim.add_tenant(TenantSpec(1, t, link_recv=(7,)))
        with pytest.raises(SimTraceError, match="no op_link_bytes"):
            sim.add_tenant(TenantSpec(1, W.streaming(8 * MIB), link_send=(2,)))
        with pytest.raises(SimConfigError, match="idle tenant"):
            sim.add_tenant(TenantSpec(1, static_bytes=CHUNK_BYTES, link_send=(2,)))


def test_op_records_are_every_op_end() -> None:
    node = NodeConfig.preset("aws-p3.8xlarge").with_gpu_memory(1 << 30, 256 * MIB)
    t = W.streaming(64 * MIB, passes=1)
    res = run_scenario(node, [TenantSpec(0, t, steps=2, record_ops=True), TenantSpec(1, t, steps=1)], "stock",
                       sample_interval_ns=0)
    ends = res.tenants[0].op_end_ns
    assert len(ends) == 2 * t.n_ops and list(ends) == sorted(ends)
    assert ends[-1] == res.tenants[0].runtime_ns and ends[t.n_ops - 1] == res.tenants[0].step_end_ns[0]
    assert res.tenants[1].op_end_ns == ()


# ---- the nodes ----


def test_asymmetric_node_presets() -> None:
    l40s = NodeConfig.preset("l40s-pcie")
    assert l40s.link(0, 1)[0] == 1 and l40s.link(0, 2)[0] == 0            # PCIe peer-to-peer, no NVLink
    nvl = NodeConfig.preset("h100-nvl")
    assert nvl.link(0, 1)[1] == 12 and nvl.link(0, 2)[0] == 0 and nvl.link(2, 3)[1] == 12      # pairs only
    gh = NodeConfig.preset("gh200-nvl2")
    assert gh.gpus[0].pcie_mbyte_per_s > gh.link(0, 1)[2]               # host over C2C beats the peer
    assert NodeConfig.preset("gh200").gpu_count == 1
    mixed = NodeConfig.preset("mixed-a100-h100")
    assert mixed.gpus[2].memory_bytes == 2 * mixed.gpus[0].memory_bytes and mixed.link(1, 2)[0] == 1
    for n in (l40s, nvl, gh, mixed, NodeConfig.preset("gh200")):
        n.validate()
    sc = next(s for s in M.scenarios(kinds=["mixed"]))
    assert sc.node.gpus[2].memory_bytes - sc.node.gpus[2].reserved_bytes == \
        2 * (sc.node.gpus[0].memory_bytes - sc.node.gpus[0].reserved_bytes)


# ---- the matrix ----


def test_every_kind_is_in_both_halves_by_the_split_rule() -> None:
    for kind in M.KINDS:
        scs = M.scenarios(kinds=[kind])
        assert len(scs) == 2 and {s.half for s in scs} == set(M.HALVES)
        assert all(s.tag("kind") == kind for s in scs)
        every = M.scenarios(kinds=[kind], all_levels=True)
        assert len(every) == len(M._LEVELS)
        hi = len(M._HARVESTERS) + list(M.KINDS).index(kind)
        assert [s.half for s in every] == [M.HALVES[(hi + li) % 2] for li in range(len(M._LEVELS))]
    assert [s.name for s in M.scenarios(kinds=["base"])] == [s.name for s in M.scenarios() if s.tag("kind") == "base"]
    with pytest.raises(SimConfigError, match="unknown scenario kind"):
        M.scenarios(kinds=["llm-serving"])


def test_many_small_tenants_share_each_gpu() -> None:
    sc = M.scenarios(kinds=["many"])[0]
    per_gpu = [sum(t.gpu == g for t in sc.tenants) for g in range(sc.node.gpu_count)]
    assert per_gpu == [2, 3, 3, 3] and len(sc.harvesters) == 2 and len(sc.lenders) == 6


def test_every_kind_runs_end_to_end() -> None:
    scs = M.scenarios(kinds=list(M.KINDS))
    ev = M.evaluate(scs, [M.Variant("stock", "stock"), M.Variant("huvm", "huvm")])
    for sc in scs:
        o = ev.outcome(sc.name, "huvm")
        assert o.harvester_speedup > 1.0, sc.name              # every kind oversubscribes its harvester
        assert o.lender_slowdown is None or math.isfinite(o.lender_slowdown)
    kv = ev.outcome(M.scenarios("evaluation", kinds=["kv-serve"])[0].name, "huvm")
    serving = next(t for t in kv.tenants if t.name.startswith("kv-serve"))
    # the serving lender is scored on its p99 token latency, and that is the scenario's worst lender here
    assert serving.token_p99_slowdown is not None and serving.slowdown_vs_alone == serving.token_p99_slowdown
    assert serving.token_mean_slowdown is not None and serving.token_mean_slowdown <= serving.token_p99_slowdown
    stock = ev.outcome(M.scenarios("evaluation", kinds=["kv-serve"])[0].name, "stock")
    alone = next(t for t in stock.tenants if t.name.startswith("kv-serve")).slowdown_vs_alone
    assert alone is not None and abs(alone - 1) < 0.005          # stock never lends: as fast as alone
    moe = ev.outcome(M.scenarios("evaluation", kinds=["moe"])[0].name, "huvm")
    assert moe.tenants[0].link_stall_ns > 0 and moe.evict_to_peer > 0
    ar = ev.outcome(M.scenarios("evaluation", kinds=["allreduce"])[0].name, "stock")
    # stock does not lend: the ring's ranks run as fast as the ring alone
    assert all(abs((t.slowdown_vs_alone or 1) - 1) < 0.005 for t in ar.tenants if t.role == "lender")
    md = M.markdown(ev)
    assert "p99" in md and "Serving lenders" in md


def test_a_tenant_table_names_the_new_kinds_and_its_peers() -> None:
    node = NodeConfig.preset("aws-p3.8xlarge").with_gpu_memory(1 << 30, 256 * MIB)
    spec = TenantSpec.from_dict({"gpu": 1, "steps": 1, "link_send": [2], "workload": {
        "kind": "allreduce_training", "state_bytes": 16 * MIB, "grad_bytes": 8 * MIB, "n_ops": 8, "ranks": 2,
        "ops_per_step": 4, "bucket_bytes": 4 * MIB}})
    res = run_scenario(node, [spec], "stock", sample_interval_ns=0)
    assert res.traffic["collective"][1][2] == 2 * 2 * W.ring_allreduce_bytes(4 * MIB, 2)
    with pytest.raises(SimConfigError, match="kv_serving"):
        TenantSpec.from_dict({"gpu": 0, "workload": {"n_ops": 3}})
