"""The lender bound T in the simulator (docs/policy.md "Admission"): spike cadence as a dimension of the
lender scenarios, and cost-aware lending above a lender's peak (``lend_slowdown_max_pct``)."""

from __future__ import annotations

from functools import cache

import pytest
from huvm.sim.matrix import Evaluation, Variant, _build, evaluate

#: the scenario: an H100 node, a PageRank harvester at 3x oversubscription, two spiky lenders (cudaMalloc)
NODE, FAMILY, HARVESTER, LEVEL = "h100", "graph", "pagerank-twitter", "3"
FAST_MS, SLOW_MS = 5.0, 2000.0
T = 0.02        # the huvm preset's bound


@cache
def _run(period_ms: float) -> tuple[str, Evaluation]:
    sc = _build(NODE, FAMILY, HARVESTER, LEVEL, "spiky", False, "tuning", spike_period_ms=period_ms)
    ev = evaluate([sc], [Variant("stock", "stock"), Variant("huvm-atc22", "huvm-atc22"), Variant("huvm", "huvm"),
                         Variant("unbounded", "huvm", overrides=(("gpu.lend_slowdown_max_pct", 0),))])
    return sc.name, ev


def _point(period_ms: float, policy: str) -> tuple[float, float]:
    name, ev = _run(period_ms)
    o = ev.outcome(name, policy)
    assert o.lender_slowdown is not None
    return o.harvester_speedup, o.lender_slowdown - 1


def test_cadence_is_a_scenario_dimension() -> None:
    name, _ = _run(SLOW_MS)
    assert name.endswith("/every-2000ms")
    sc = _build(NODE, FAMILY, HARVESTER, LEVEL, "spiky", False, "tuning", spike_period_ms=SLOW_MS)
    assert dict(sc.tags)["spike_period_ms"] == "2000"
    lender = sc.tenants[sc.lenders[0]].trace
    # the spike lives for half of each 2 s period: the trace's period is 2 s of ops
    assert abs(int(lender.op_time_ns.sum()) - 2_000_000_000) <= int(lender.op_time_ns[0])


@pytest.mark.parametrize("period_ms", [FAST_MS, SLOW_MS])
def test_bound_holds_the_lender_within_t(period_ms: float) -> None:
    _, lender = _point(period_ms, "huvm")
    assert lender <= T, f"huvm's lender slowed {lender:.2%} at a {period_ms:g} ms cadence (T = {T:.0%})"


def test_fast_cadence_keeps_the_peak() -> None:
    """Spikes every 5 ms: T of 5 ms gives back a chunk or two of the peak, so huvm lends (almost) none of it: the
    run is within 1 % of keeping the whole peak free, and its lender pays no more (within 0.1 %)."""
    huvm, huvm_lender = _point(FAST_MS, "huvm")
    keep, keep_lender = _point(FAST_MS, "unbounded")
    assert abs(huvm / keep - 1) < 0.01, f"huvm {huvm:.3f}x vs the whole peak kept {keep:.3f}x"
    assert huvm_lender <= keep_lender + 0.001


def test_slow_cadence_lends_above_the_peak() -> None:
    """Spikes every 2 s: huvm lends the part of the peak it can give back within T, faster than keeping the
    whole peak free and closer to the prototype (which lends all of it), with its lender still within T."""
    proto, _ = _point(SLOW_MS, "huvm-atc22")
    huvm, _ = _point(SLOW_MS, "huvm")
    keep, _ = _point(SLOW_MS, "unbounded")
    assert huvm > keep * 1.02, f"huvm {huvm:.3f}x vs the whole peak kept {keep:.3f}x"
    assert abs(proto - huvm) < abs(proto - keep)


def test_spike_period_option() -> None:
    from huvm.sim.errors import SimConfigError
    from huvm.sim.matrix import main, scenarios

    names = [s.name for s in scenarios("tuning", spike_period_ms=500)]
    assert any(n.endswith("/every-500ms") for n in names)
    assert all("spiky" in n or "mixed" in n for n in names if "every-" in n)
    with pytest.raises(SimConfigError, match="spike period 0.5 ms"):
        scenarios("tuning", spike_period_ms=0.5)
    assert main(["--spike-period", "0", "--list"]) == 2
