"""Why huvm is `behind` the best T-respecting point (docs/policy.md, "Where huvm is behind the best T-respecting
point"): the explanation names the knob that differs and its numbers are the runs' own."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvmlab.sim import matrix as M
from huvmlab.sim import verdict as V

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"
#: a scenario whose lender budget binds where it need not (huvm at T = 1-5 % behind unbudgeted huvm)
SCENARIO = "p3/bfs-twitter/2/steady"


def _variant(name: str) -> M.Variant:
    return next(v for v in V.variants() if v.name == name)


def test_knob_diff_names_what_differs_and_nothing_else() -> None:
    d = {k: (a, b) for k, a, b in V.knob_diff(_variant("huvm@2%"), _variant("huvm/reserve-50%"))}
    assert d == {"budget": ("for 2%", "none"), "reserve": ("preset", "50%")}     # T: 2 % both (the preset's)
    d = {k: (a, b) for k, a, b in V.knob_diff(_variant("huvm"), _variant("huvm/no-peak"))}
    assert d == {"LEND_ABOVE_PEAK": ("on", "off")}
    d = {k: (a, b) for k, a, b in V.knob_diff(_variant("huvm@2%"), _variant("huvm@1%"))}
    assert d == {"T": ("2%", "1%"), "budget": ("for 2%", "for 1%")}
    d = {k: (a, b) for k, a, b in V.knob_diff(_variant("huvm"), _variant("huvm-atc22"))}
    assert d["preset"] == ("huvm", "huvm-atc22") and d["T"] == ("2%", "none")


def test_explanation_is_measured_from_the_runs() -> None:
    verdicts = V.judge("evaluation", [SCENARIO])
    exps = V.explain(verdicts, "evaluation")
    behind = [v for v in verdicts if v.behind]
    assert behind and [(e.scenario, e.bound) for e in exps] == [(v.scenario, v.bound) for v in behind]
    sc = next(s for s in M.scenarios("evaluation") if s.name == SCENARIO)
    stock = M._run(sc, M.Variant("stock", "stock"))
    stock_ms = max(stock.tenants[i].runtime_ns for i in sc.harvesters)
    for v, e in zip(behind, exps, strict=True):
        assert e.huvm.variant == V.huvm_at(v.bound) and e.best.variant == v.best.variant
        assert e.gap == v.gap
        # the breakdown's numbers are the runs': the verdict's speedups, and each run's own counters
        for b, point in ((e.huvm, v.huvm), (e.best, v.best)):
            assert b.speedup == pytest.approx(point.speedup)
            assert stock_ms / b.makespan_ns == pytest.approx(point.speedup)
            res = M._run(sc, _variant(b.variant))
            assert b.makespan_ns == max(res.tenants[i].runtime_ns for i in sc.harvesters)
            assert b.fault_stall_ns == sum(res.tenants[i].fault_stall_ns for i in sc.harvesters)
            assert b.faults == sum(res.tenants[i].faults for i in sc.harvesters)
            assert (b.evict_to_peer, b.preevict_to_peer, b.fetch_from_peer, b.giveback) == (
                res.counter_total("evict_to_peer"), res.counter_total("preevict_to_peer"),
                res.counter_total("fetch_from_peer"), res.counter_total("giveback"))
            assert b.lender == pytest.approx(point.lender)
        # huvm's point at T budgets its lenders; the best point here is unbudgeted huvm: the budget is the knob
        assert ("budget", f"for {(v.bound or 0) * 100:g}%", "none") in e.diff
        line = e.line()
        assert f"makespan ms {e.huvm.makespan_ns / 1e6:.1f} -> {e.best.makespan_ns / 1e6:.1f}" in line
        assert "budget for" in line and f"{e.gap:.3f} of {e.best.variant}" in line
    # the budget throttles the same copies: the lost time is fault stall, not more faults
    e = exps[0]
    assert e.huvm.fault_stall_ns > e.best.fault_stall_ns
    assert e.huvm.makespan_ns - e.best.makespan_ns == pytest.approx(
        e.huvm.fault_stall_ns - e.best.fault_stall_ns, rel=0.05)


def test_explain_runs_the_kinds_at_every_level(capsys: pytest.CaptureFixture[str]) -> None:
    """--all-levels judges the workload kinds at levels the default matrix lacks; --explain runs those
    scenarios too (it looked them up in the default matrix: "no scenario 'a100/moe/3/spiky' in the tuning half")."""
    assert V.main(["--half", "tuning", "--kind", "moe", "--all-levels", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "why a100/moe/3/spiky T=" in out


def test_explain_flag_rejects_another_cadence(capsys: pytest.CaptureFixture[str]) -> None:
    assert V.main(["--only", SCENARIO, "--explain", "--spike-period", "1000"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_explain_doc_takes_the_whole_half(tmp_path: Path) -> None:
    assert V.main(["--only", "p3/", "--explain-doc", str(tmp_path / "x.md")]) == 2


def test_doc_holds_the_generated_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = text.split(V.EXPLAIN_BEGIN, 1)[1].split(V.EXPLAIN_END, 1)[0]
    assert block == "\n" + V.explain_block(V.explain(V.judge("evaluation"), "evaluation"))
