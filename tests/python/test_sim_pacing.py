"""Issue 28: a lender's guest-traffic budget is paced (docs/policy.md, "Admission"). A lender still paying, at its
budget's rate, for the guests' copies it took is marked paced (``HUVM_TRAFFIC_PACED``, from the core's
``huvm_traffic_level``), and a new chunk goes to a lender that has paid when one admits it. Without pacing a
window's budget is spent in bursts that land inside a serving lender's tokens (its p99 token latency)."""

from __future__ import annotations

from huvmlab.sim import verdict
from huvmlab.sim.matrix import Scenario, evaluate, scenarios


def _tuning(name: str) -> Scenario:
    return next(s for s in scenarios("tuning", kinds=["kv-serve"], all_levels=True) if s.name == name)


def test_serving_lender_stays_within_its_bound_under_a_paced_budget() -> None:
    """The tuning half's serving lender (a KV-serving H100 beside a steady and an idle lender): at T = 1 % its
    p99 token latency was +3.4 % with the budget for 1 % (the budget bound only per 20 ms window). Paced, the
    copies it has not paid for go to the idle lender, at no cost to the harvester."""
    sc = _tuning("h100/llama-tiny/1.25/kv-serve")
    vs = {v.name: v for v in verdict.variants()}
    ev = evaluate([sc], [vs["stock"], vs["huvm"], vs["huvm@1%"]])
    plain, bound = ev.outcome(sc.name, "huvm"), ev.outcome(sc.name, "huvm@1%")
    assert plain.lender_slowdown is not None and bound.lender_slowdown is not None
    # unbudgeted it paid +3.4 % while each op ran in one event (a harvester op's copies landed together); with
    # the tenants in time order +0.4 % (docs/evaluation.md): the budget must not make it pay more
    assert bound.lender_slowdown <= max(plain.lender_slowdown, 1.0) + verdict.LENDER_NOISE_FLOOR
    # at T = 1 % it stays within T (and the verdicts' lender noise floor)
    assert bound.lender_slowdown <= 1.01 + verdict.LENDER_NOISE_FLOOR
    # the harvester is as fast as without a budget
    assert bound.harvester_speedup >= plain.harvester_speedup * (1 - verdict.NOISE_FLOOR)
