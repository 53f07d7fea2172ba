"""huvm-top: rate computation, histograms, metric table and policy-field parsing (no UI)."""

from __future__ import annotations

import pytest
from huvm_top import abi, fmt
from huvm_top.hist import Log2Hists, format_log2_hist, log2_slot
from huvm_top.metrics import gpu_metric, gpu_metrics, pair_metrics, reason_key
from huvm_top.model import GpuPolicy, PolicyState, Snapshot, VaSpace
from huvm_top.policy_rules import check_policy, format_value, node_specs, parse_value, spec
from huvm_top.rates import History, compute_rates, counter_delta


def snap(t_s: float, gpus: list[dict[str, int]], pairs: list[list[dict[str, int]]] | None = None) -> Snapshot:
    n = len(gpus)
    pairs = pairs or [[{} for _ in range(n)] for _ in range(n)]
    return Snapshot(int(t_s * 1e9), 1, tuple(gpus), tuple(tuple(r) for r in pairs))


def test_counter_delta_counts_from_zero_after_reset() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(10, 10) == 0
    assert counter_delta(100, 7) == 7  # reset in between: 7 since the reset


def test_rates_are_the_librarys() -> None:
    # one delta/rate implementation: huvm-top's rates are huvm.stats' on the same samples
    from huvm import stats as hstats

    a = snap(1.0, [{"evict_to_peer": 100, "faults": 90, "lent_bytes": 5}])
    b = snap(1.5, [{"evict_to_peer": 130, "faults": 3, "lent_bytes": 6}])
    kinds = {m.key: m.kind for m in gpu_metrics()}
    assert compute_rates(a, b).gpus[0] == hstats.rate_map(kinds, a.gpus[0], b.gpus[0], 0.5)
    assert counter_delta is hstats.counter_delta


def test_rates_per_second_and_gauges_as_is() -> None:
    a = snap(1.0, [{"evict_to_peer": 100, "lent_bytes": 5 << 20}])
    b = snap(3.0, [{"evict_to_peer": 160, "lent_bytes": 9 << 20}])
    r = compute_rates(a, b)
    assert r.dt_s == pytest.approx(2.0)
    assert not r.first
    assert r.gpus[0]["evict_to_peer"] == pytest.approx(30.0)
    assert r.gpus[0]["lent_bytes"] == 9 << 20  # gauge: current value, not a rate
    assert r.gpus[0]["evict_to_host"] == 0.0  # absent key reads as zero


def test_first_snapshot_and_no_time_give_zero_rates() -> None:
    b = snap(3.0, [{"evict_to_peer": 160}])
    assert compute_rates(None, b).first
    assert compute_rates(None, b).gpus[0]["evict_to_peer"] == 0.0
    same = compute_rates(b, b)
    assert same.first and same.gpus[0]["evict_to_peer"] == 0.0


def test_rates_after_reset_and_gpu_count_change() -> None:
    a = snap(1.0, [{"faults": 1000}])
    b = snap(2.0, [{"faults": 40}])
    assert compute_rates(a, b).gpus[0]["faults"] == pytest.approx(40.0)
    c = snap(3.0, [{"faults": 50}, {"faults": 9}])
    assert compute_rates(b, c).first  # another node shape: no rates yet


def test_pair_rates_and_node_totals() -> None:
    a = snap(0.0, [{"giveback": 0}, {"giveback": 0}],
             [[{}, {"evict_chunks": 10, "held_bytes": 1}], [{}, {}]])
    b = snap(0.5, [{"giveback": 3}, {"giveback": 1}],
             [[{}, {"evict_chunks": 15, "held_bytes": 7}], [{}, {}]])
    r = compute_rates(a, b)
    assert r.pairs[0][1]["evict_chunks"] == pytest.approx(10.0)
    assert r.pairs[0][1]["held_bytes"] == 7
    assert r.node_total("giveback") == pytest.approx(8.0)


def test_process_rates_by_id_new_processes_start_at_zero() -> None:
    a = Snapshot(0, 1, ({},), (({},),), va_spaces=(VaSpace(7, 70, "a", 1, {"evict_to_peer": 10}),))
    b = Snapshot(2_000_000_000, 1, ({},), (({},),),
                 va_spaces=(VaSpace(7, 70, "a", 1, {"evict_to_peer": 30, "harvested_bytes": 5}),
                            VaSpace(8, 80, "b", 2, {"evict_to_peer": 99})))
    r = compute_rates(a, b)
    assert r.va_spaces[7]["evict_to_peer"] == pytest.approx(10.0)
    assert r.va_spaces[7]["harvested_bytes"] == 5
    assert r.va_spaces[8]["evict_to_peer"] == 0.0  # no earlier sample of it


def test_history_keeps_the_last_values() -> None:
    h = History(["faults"], size=3)
    prev = snap(0, [{"faults": 0}])
    h.add(compute_rates(None, prev))  # first: not recorded
    for i in range(1, 6):
        cur = snap(i, [{"faults": 10 * i * i}])
        h.add(compute_rates(prev, cur))
        prev = cur
    assert h.series("faults") == [50.0, 70.0, 90.0]


def test_metric_table_comes_from_the_header() -> None:
    keys = [m.key for m in gpu_metrics()]
    assert keys[:2] == ["evict_to_peer", "evict_to_host"]
    assert reason_key(abi.reason_names().index("peer_full")) in keys
    assert gpu_metric("lent_bytes").kind == "gauge" and gpu_metric("lent_bytes").label == "lent_bytes"
    assert gpu_metric("faults").label == "faults/s"
    assert gpu_metric("host_reason[5]").help.endswith("peer_full")
    assert [m.key for m in pair_metrics()][-1] == "held_bytes"
    assert abi.event_names() == ("evict", "preevict", "fetch", "giveback", "prefetch", "policy")


def test_log2_histogram_like_bcc() -> None:
    assert [log2_slot(v) for v in (0, 1, 2, 3, 4, 2097152)] == [0, 1, 2, 2, 3, 22]
    h = Log2Hists()
    for v in (2097152, 2097152, 4194304):
        h.add("evict", v)
    lines = format_log2_hist(h.snapshot()["evict"], "bytes", width=10)
    assert lines[1].split(":")[0].split() == ["2097152", "->", "4194303"]
    assert "|**********|" in lines[1]  # the biggest slot gets the full bar
    assert lines[2].split(":")[1].split()[0] == "1"
    assert format_log2_hist([0] * 65) == []


def test_value_formatting() -> None:
    assert fmt.rate(0) == "0" and fmt.rate(2.5) == "2.5" and fmt.rate(310.2) == "310"
    assert fmt.rate(12400) == "12.4k" and fmt.rate(3.1e6) == "3.1M"
    assert fmt.value(gpu_metric("lent_bytes"), 3 << 29) == "1.5 GiB"
    assert fmt.value(gpu_metric("bytes_to_peer"), 1 << 20) == "1.0 MiB/s"


def test_policy_fields_parse_check_and_print() -> None:
    names = [s.name for s in node_specs()]
    assert "prefetch_chunks" in names and "generation" not in names and "preset" not in names
    chunks = spec("prefetch_chunks")
    assert parse_value(chunks, "16") == 16
    with pytest.raises(ValueError, match="must be <= 64"):
        parse_value(chunks, "999")
    with pytest.raises(ValueError, match="integer"):
        parse_value(chunks, "many")
    limit = spec("lend_limit_bytes")
    assert parse_value(limit, "8GiB") == 8 << 30
    assert format_value(limit, abi.unlimited()) == "unlimited"
    assert parse_value(limit, "unlimited") == abi.unlimited()
    sel = spec("peer_select")
    assert sel.choices[parse_value(sel, "bw-weighted")] == "bw-weighted"
    assert spec("prefetch_mode").choices == ("off", "local", "peer", "multipath", "two-stage")


def test_check_policy_names_each_bad_field() -> None:
    p = PolicyState(1, {"prefetch_chunks": 65, "prefetch_stride": 0, "hysteresis_ms": 10},
                    [GpuPolicy("GPU-x", 7, 0, 0)])
    errors = {e.field: e.message for e in check_policy(p)}
    assert set(errors) == {"prefetch_chunks", "prefetch_stride", "gpus[0].role"}
    assert "[0, 64]" in errors["prefetch_chunks"]


def test_guest_traffic_is_the_budgeted_pair_counters() -> None:
    """A lender's guests' traffic (MB/s) in huvm-top: chunks evicted or prefetched onto it, fetched or given
    back from it, per second, the sum the core budgets; a GPU's own pair cell is not guests' traffic."""
    from huvm import stats as hstats

    chunk = abi.chunk_size()
    zero = dict.fromkeys(hstats.GUEST_TRAFFIC_FIELDS, 0)
    a = snap(0.0, [{}, {}, {}], [[dict(zero)] * 3 for _ in range(3)])
    moved = {"evict_chunks": 4, "prefetch_chunks": 2, "fetch_chunks": 3, "giveback_chunks": 1}
    b = snap(2.0, [{}, {}, {}], [[dict(zero), dict(moved), dict(zero)],
                                 [dict(zero), {**zero, "evict_chunks": 50}, dict(zero)],
                                 [dict(zero), {**zero, "evict_chunks": 6}, dict(zero)]])
    r = compute_rates(a, b)
    assert r.guest_traffic_mbyte_per_s(1) == pytest.approx((10 + 6) / 2 * chunk / 1e6)
    assert r.guest_traffic_mbyte_per_s(0) == 0 and r.guest_traffic_mbyte_per_s(2) == 0
