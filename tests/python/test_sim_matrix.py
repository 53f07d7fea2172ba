"""The scenario matrix of `make eval` (huvmlab.sim.matrix): the split, a smoke run, the CLI's refusals, and
the table in docs/evaluation.md being the measured one."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvm import budget
from huvmlab.sim import matrix as M
from huvmlab.sim.errors import SimConfigError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "evaluation.md"
CHUNK = 2 << 20


def test_halves_split_the_matrix_and_each_covers_every_dimension() -> None:
    tune, ev = M.scenarios("tuning"), M.scenarios("evaluation")
    names = [s.name for s in M.scenarios()]
    assert len(names) == len(set(names)) == len(tune) + len(ev)
    assert not {s.name for s in tune} & {s.name for s in ev}
    assert [s.name for s in M.scenarios("tuning")] == [s.name for s in tune]      # deterministic
    for half in (tune, ev):
        assert {s.tag("node") for s in half} >= {"p3", "dgx1", "a100", "h100"}
        assert {s.tag("family") for s in half} >= {"dnn", "llm", "graph", "synthetic"}
        assert {s.tag("kind") for s in half} == set(M.KIND_NAMES)       # every workload kind in both halves
        levels = {s.tag("level") for s in half}
        assert any(x.startswith("fit-") for x in levels) and {"1.05", "3"} & levels
        lenders = set().union(*(M._LENDER_MIXES[s.tag("lenders")] for s in half if s.tag("lenders") in
                                M._LENDER_MIXES))
        assert lenders == {"idle", "steady", "rising", "spiky"}
        assert any(s.tag("lender_memory") == "managed" for s in half)
        assert any(s.tag("harvesters") == "2" for s in half)
    with pytest.raises(SimConfigError, match="unknown half"):
        M.scenarios("training")


def test_managed_memory_scenarios_have_working_lenders() -> None:
    """Issue 28 item 3 (a dead axis): the managed-memory (`/uvm`) scenarios once all had idle lenders (the
    rotation's arithmetic). In each half they now have lenders at work, steady, rising and spiky, whose own
    memory is managed (evictable), and whose slowdown is measured."""
    for half in M.HALVES:
        managed = [s for s in M.scenarios(half) if s.tag("lender_memory") == "managed"]
        working = [s for s in managed if s.lenders]
        assert len(working) >= len(managed) - 2, [s.name for s in managed]
        mixes = {k for s in working for k in M._LENDER_MIXES.get(s.tag("lenders"), ())} - {"idle"}
        assert mixes >= {"steady", "rising", "spiky"}, (half, mixes)
        for s in working:
            assert all(s.tenants[i].managed for i in s.lenders), s.name


def test_a_near_fit_scenario_fits_and_an_oversubscribed_one_does_not() -> None:
    by = {s.name: s for s in M.scenarios()}
    fit = next(s for s in by.values() if s.tag("level") == "fit-0")
    over = next(s for s in by.values() if s.tag("level") == "3")
    for sc, fits in ((fit, True), (over, False)):
        fp = M.footprint_bytes(sc.tenants[0].trace)
        assert (fp <= sc.node.usable_bytes(0)) is fits


def test_smoke_evaluate_two_scenarios() -> None:
    scs = [s for s in M.scenarios("tuning") if s.tag("level") in ("fit-32", "2")][:2]
    ev = M.evaluate(scs, [M.Variant("stock", "stock"), M.Variant("huvm", "huvm"),
                          M.parse_variant("fl=peer_select:fewest-lent")])
    assert ev.policies == ["stock", "huvm", "fl"]
    for s in scs:
        assert ev.outcome(s.name, "stock").harvester_speedup == 1.0
        st = ev.outcome(s.name, "stock")
        # stock never lends: a lender with work runs as fast as alone
        assert st.lender_slowdown is None or abs(st.lender_slowdown - 1) < 0.005
        assert ev.outcome(s.name, "huvm").harvester_speedup >= 1 - M.NOISE
    summary = ev.summary("huvm")
    assert summary["speedup_worst"] <= summary["speedup_geomean"]
    d = ev.to_dict()
    assert set(d["summary"]) == {"huvm", "fl"} and len(d["scenarios"]) == 2
    header, rows = M.table_rows(ev)
    assert header[0] == "scenario" and rows[-2][0] == "**geomean**" and rows[-1][0] == "**worst**"


@pytest.mark.parametrize("text,match", [("nope", "expected NAME=FIELD"), ("x=peer_select", "not FIELD:VALUE"),
                                        ("x=peer_select:fastest", "not a value of peer_select")])
def test_bad_variants_are_refused(text: str, match: str) -> None:
    with pytest.raises(SimConfigError, match=match):
        M.parse_variant(text)


@pytest.mark.parametrize("text,match", [
    ("x=lender.role:1", "a lender key is one of"),
    ("x=lender.lend_reserve_bytes:101%", "out of range"),
    ("x=lender.lend_reserve_bytes:-1", "out of range"),
    ("x=lender.lend_traffic_mbyte_per_s:5%", "not a value of lender.lend_traffic_mbyte_per_s"),
    ("x=lender.lend_limit_bytes:lots", "not a value of lender.lend_limit_bytes")])
def test_bad_lender_keys_are_refused(text: str, match: str) -> None:
    with pytest.raises(SimConfigError, match=match):
        M.parse_variant(text)


def test_lender_timing_stretches_the_working_lenders_clock_only() -> None:
    """``--lender-timing F``: each working lender's ops take F times as long (its spikes' period and phase move),
    the harvesters' traces and the idle lenders stay as they are; 1 is the matrix itself; out of range refused."""
    name = "p3/streaming/2/spiky/uvm/2h"
    base = next(s for s in M.scenarios("evaluation") if s.name == name)
    slow = next(s for s in M.scenarios("evaluation", lender_timing=1.25) if s.name == name)
    assert slow.tag("lender_timing") == "1.25" and not base.tag("lender_timing")
    assert base.lenders == slow.lenders and base.lenders
    for i, (a, b) in enumerate(zip(base.tenants, slow.tenants, strict=True)):
        if i in base.lenders:
            assert a.trace is not None and b.trace is not None
            assert len(a.trace.op_time_ns) == len(b.trace.op_time_ns)
            assert int(b.trace.op_time_ns.sum()) == pytest.approx(1.25 * int(a.trace.op_time_ns.sum()), rel=1e-3)
        else:
            assert a == b
    same = next(s for s in M.scenarios("evaluation", lender_timing=1.0) if s.name == name)
    assert M._run(same, M.Variant("huvm", "huvm")).stats == M._run(base, M.Variant("huvm", "huvm")).stats
    for bad in (0.4, 2.5, float("nan")):
        with pytest.raises(SimConfigError, match="lender timing"):
            M.scenarios("evaluation", lender_timing=bad)
    assert M.main(["--lender-timing", "3", "-q"]) == 2


def _same(a: object, b: object) -> bool:
    """Equal, numpy arrays by value, dataclasses (tenants, traces) field by field."""
    import dataclasses

    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and \
            np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return isinstance(b, type(a)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_seed_redraws_the_random_parts_only() -> None:
    """``--seed K`` re-draws what a scenario draws at random (its generated harvester's accesses, a serving
    lender's arrivals, the MoE's routing, the Fig 9 PageRank's gathers) and leaves everything else as it is; a
    scenario without random parts is the same at every seed; 0 is the matrix itself; out of range refused."""
    base = {s.name: s for s in M.scenarios(None)}
    other = {s.name: s for s in M.scenarios(None, seed=1)}
    assert base.keys() == other.keys()          # the same names: the seed moves no scenario
    randoms = {n for n, s in base.items() if s.random_parts}
    assert randoms == {n for n, s in base.items()
                       if s.tag("harvester") in ("random", "hot-cold", "moe", "pagerank-fig9")
                       or s.tag("lenders") == "kv-serve"}
    assert len(randoms) == 25 and len(base) - len(randoms) == 76
    for n, a in base.items():
        b = other[n]
        diff = [i for i, (x, y) in enumerate(zip(a.tenants, b.tenants, strict=True)) if not _same(x, y)]
        if n in randoms:
            assert diff and b.tag("seed") == "1", n
            want = {i for i, t in enumerate(a.tenants) if t.trace is not None and
                    (i in a.harvesters or "kv-serve" in t.name)}
            ha, hb = a.tenants[0].trace, b.tenants[0].trace
            assert ha is not None and hb is not None
            if int(ha.op_time_ns.sum()) != int(hb.op_time_ns.sum()):
                want |= set(a.lenders)      # the lenders' shapes are timed on the harvester's compute (MoE)
            assert set(diff) <= want, n
        else:
            assert not diff and not b.tag("seed"), n
    same = {s.name: s for s in M.scenarios(None, seed=0)}
    assert all(_same(same[n], s) for n, s in base.items())
    for bad in (-1, 1000):
        with pytest.raises(SimConfigError, match="seed"):
            M.scenarios("evaluation", seed=bad)
    assert M.main(["--seed", "-3", "--list"]) == 2


def test_lender_keys_reach_the_lenders_at_work_only() -> None:
    """``lender.FIELD`` sets the lending key on the GPUs of the lenders at work, not on the idle lender nor the
    harvester; a percentage is of the lender GPU's memory, in whole chunks."""
    v = M.parse_variant("x=gpu.flags:5,lender.lend_limit_bytes:2097152,lender.lend_reserve_bytes:60%")
    assert dict(v.overrides) == {"gpu.flags": 5}
    assert v.lender_overrides == (("lend_limit_bytes", 2097152, False), ("lend_reserve_bytes", 60, True))
    sc = next(s for s in M.scenarios("evaluation") if s.name == "h100/pagerank-twitter/3/spiky")
    working = {sc.tenants[i].gpu for i in sc.lenders}
    assert working == {1, 3}
    plain = M._run(sc, M.Variant("huvm", "huvm")).stats["gpus"]
    res = M._run(sc, v).stats["gpus"]
    for g in working:
        assert plain[g]["lent_peak_bytes"] > 2 * CHUNK
        assert res[g]["lent_peak_bytes"] <= CHUNK          # the limit: one chunk
    assert res[2]["lent_peak_bytes"] > 2 * CHUNK           # the idle lender keeps lending
    gpu = sc.node.gpus[1]
    mem = gpu.memory_bytes - gpu.reserved_bytes
    tenants = {t.gpu: t for t in M._lender_tenants(sc, v)}
    assert tenants[1].lend_reserve_bytes == mem * 60 // 100 // CHUNK * CHUNK
    assert tenants[2].lend_reserve_bytes is None and tenants[0].lend_reserve_bytes is None


def test_variants_take_enum_names() -> None:
    """Enum values by name, the *_mode fields' too (their constants are HUVM_PREFETCH_*, HUVM_FETCH_*)."""
    v = M.parse_variant("x=prefetch_mode:two-stage,fetch_mode:remote-map,peer_select:fewest-lent")
    assert dict(v.overrides) == {"prefetch_mode": 4, "fetch_mode": 1, "peer_select": 1}


def test_cli_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.md"
    plain.write_text("no markers here\n")
    assert M.main(["--only", "p3/bert-base/fit-32", "-q", "--update-doc", str(plain)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    refusal = ("error: update_doc: --update-doc takes one whole half (every kind, two levels each), the presets "
               "only, at lender timing 1, the default spike cadence and seed 0")
    assert err == [refusal]
    assert M.main(["-q", "--lender-timing", "1.1", "--update-doc", str(plain)]) == 2     # the whole half, timed
    assert capsys.readouterr().err.strip().splitlines() == [refusal]
    assert plain.read_text() == "no markers here\n"
    assert M.main(["--variant", "oops", "--list"]) == 2
    assert "variant 'oops': expected NAME=FIELD:VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        M.main(["--half", "training"])
    assert exc.value.code == 2


def test_docs_hold_the_measured_evaluation_table() -> None:
    """docs/evaluation.md's table is the evaluation half as measured now (`make eval-doc` regenerates it)."""
    text = DOC.read_text()
    assert M.DOC_BEGIN in text and M.DOC_END in text
    block = text.split(M.DOC_BEGIN, 1)[1].split(M.DOC_END, 1)[0]
    ev = M.evaluate(M.scenarios("evaluation"), half="evaluation")
    assert block == "\n" + M.doc_block(ev), "docs/evaluation.md's evaluation table is stale: run `make eval-doc`"
    # the criteria the issue sets, on the half nothing was tuned on
    s = ev.summary("huvm")
    assert s["speedup_worst"] >= 1 - M.NOISE                    # never slower than stock
    # lenders pay at most 2 %, apart from the modelled HBM time of guests' copies (docs/evaluation.md reports
    # the scenarios where that takes a lender over the target)
    for sc in ev.scenarios:
        for t in ev.outcome(sc.name, "huvm").tenants:
            if t.token_p99_slowdown is not None:
                # a serving lender: its mean token latency stays within the target, its p99 does not (bursts of
                # guests' copies land on single decode iterations: docs/evaluation.md, "Workload kinds")
                assert t.token_mean_slowdown is not None and t.token_mean_slowdown <= 1.02, (sc.name, t)
                continue
            if t.slowdown_vs_alone is not None and t.slowdown_vs_alone > 1.02:
                assert t.lend_stall_ns > 0, (sc.name, t)
                share = t.lend_stall_ns / t.runtime_ns
                assert t.slowdown_vs_alone * (1 - share) <= 1.02, (sc.name, t)
    # with a guest-traffic budget sized for the target on every working lender, no lender pays more than it,
    # and the harvesters keep most of their gain and never fall below stock
    b = ev.summary("huvm+budget")
    assert max(t.slowdown_vs_alone for sc in ev.scenarios for t in ev.outcome(sc.name, "huvm+budget").tenants
               if t.slowdown_vs_alone is not None and t.token_p99_slowdown is None) <= 1 + M.LENDER_TARGET
    assert b["speedup_worst"] >= 1 - M.NOISE
    assert b["speedup_geomean"] >= 0.9 * s["speedup_geomean"]


def test_lend_traffic_for_a_slowdown_target() -> None:
    """The budget is the HBM share s with 1 / (1 - s) = 1 + target: 1.96 % of the HBM for a 2 % target,
    never below the ABI's smallest budget."""
    from huvm import abi

    assert budget.lend_traffic_for(900_000, 0.02) == int(900_000 * (1 - 1 / 1.02)) == 17_647
    assert budget.lend_traffic_for(1_000, 0.02) == abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S
    assert M._hbm_mbyte_per_s(M.scenarios("evaluation")[0].node) in range(899_000, 901_000)   # V100: 900 GB/s


def test_the_budget_is_what_keeps_lenders_within_the_target() -> None:
    """The same lenders over the target without the budget, within it with it: a scenario where huvm's lender
    pays more than 2 % (the modelled HBM time of guests' copies) meets it once its GPU has the budget, and
    only the budget differs between the two runs."""
    sc = next(s for s in M.scenarios("tuning") if s.name == "dgx1/random/1.5/steady")
    v = M.Variant("b", "huvm", lender_slowdown=M.LENDER_TARGET)
    ev = M.evaluate([sc], [M.Variant("stock", "stock"), M.Variant("huvm", "huvm"), v])
    plain, budget = ev.outcome(sc.name, "huvm"), ev.outcome(sc.name, "b")
    assert plain.lender_slowdown is not None and plain.lender_slowdown > 1 + M.LENDER_TARGET
    assert budget.lender_slowdown is not None and budget.lender_slowdown <= 1 + M.LENDER_TARGET
    # what it cut is the guests' traffic through the lenders: their HBM time lost to guests' copies
    lost = {o.policy: sum(t.lend_stall_ns for t in o.tenants) for o in (plain, budget)}
    assert lost["b"] < lost["huvm"] * 0.9

