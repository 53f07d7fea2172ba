"""Verdicts at a lender bound T (docs/evaluation.md, "Verdicts at a lender bound T"): Pareto dominance by the
prototype and the gap to the best point that keeps every lender within T, with noise from a perturbation
ensemble."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvmlab.sim import matrix as M
from huvmlab.sim import verdict as V

DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"


def _v(h: tuple[float, float], p: tuple[float, float], best: tuple[float, float] | None = None,
       noise: float = 0.01, lnoise: float = 0.002) -> V.Verdict:
    hp, pp = V.Point("huvm", *h), V.Point("huvm-atc22", *p)
    return V.Verdict("s", 0.02, hp, pp, V.Point("b", *best) if best else hp, noise, lnoise)


def test_dominated_needs_faster_and_lenders_no_worse_off() -> None:
    assert _v((2.0, 0.01), (2.1, 0.01)).dominated              # faster, same lender cost
    assert not _v((2.0, 0.01), (2.01, 0.0)).dominated          # within noise
    assert not _v((2.0, 0.01), (3.0, 0.05)).dominated          # faster, but its lenders paid for it
    assert _v((2.0, 0.01), (3.0, 0.012)).dominated             # lender difference within lender noise


def test_best_gap_is_against_the_best_point_within_noise() -> None:
    v = _v((2.0, 0.0), (1.0, 0.0), best=(2.5, 0.01))
    assert v.gap == pytest.approx(0.8) and v.behind
    assert not _v((2.0, 0.0), (1.0, 0.0), best=(2.01, 0.0)).behind
    assert _v((2.0, 0.0), (1.0, 0.0)).line() == "verdict s T=2%: pareto ok, best-gap 1.000 ok"


def test_judge_a_scenario_at_every_bound() -> None:
    vs = V.judge("evaluation", ["p3/streaming/2/spiky/uvm/2h"])
    assert [v.bound for v in vs] == list(V.BOUNDS)
    for v in vs:
        assert v.huvm.variant == V.huvm_at(v.bound)
        assert v.noise >= V.NOISE_FLOOR and v.lender_noise >= V.LENDER_NOISE_FLOOR
        # the best point respects the bound (within noise) and is at least as fast as any such point
        if v.bound is not None:
            assert v.best.lender <= v.bound + v.lender_noise
        assert v.best.speedup >= v.huvm.speedup or v.huvm.lender > (v.bound or 1e9) + v.lender_noise
    # with no bound the best point may take the lenders' memory: here the prototype's lenders pay for it
    free = vs[-1]
    assert free.bound is None and free.best.speedup >= max(free.huvm.speedup, free.prototype.speedup)


def test_update_doc_takes_the_whole_half(tmp_path: Path) -> None:
    assert V.main(["--only", "p3/", "--update-doc", str(tmp_path / "x.md")]) == 2


def test_doc_holds_the_generated_verdict_summary() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = text.split(V.DOC_BEGIN, 1)[1].split(V.DOC_END, 1)[0]
    assert block == "\n" + V.doc_block(V.judge("evaluation"))


def test_make_eval_prints_the_points_of_every_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 item 2: for every scenario and T, huvm's harvester speedup and worst lender, the prototype's point
    and the best T-respecting point (which variant), each right before its verdict line; then, per T, the same
    over the scenarios."""
    only = "p3/resnet-small/2/spiky/2h"
    vs = V.judge("evaluation", [only])
    assert V.main(["--only", only]) == 0
    out = capsys.readouterr().out.splitlines()

    def pt(p: V.Point) -> str:
        return f"{p.speedup:.3f}x (worst lender {p.lender * 100:+.1f}%)"

    for v in vs:
        t = V._t_name(v.bound)
        want = (f"points {only} T={t}: {V.huvm_at(v.bound)} {pt(v.huvm)}, prototype {pt(v.prototype)}, "
                f"best {v.best.variant} {pt(v.best)}")
        assert want in out, want
        assert out[out.index(want) + 1] == v.line()
        assert v.prototype.variant == "huvm-atc22"
    # here the prototype's lenders pay (+35.8 % on the matrix's model): never the best point under a bound
    assert all(v.best.variant != "huvm-atc22" for v in vs if v.bound is not None)
    agg = [line for line in out if line.startswith("points T=")]
    assert [line.split(":")[0] for line in agg] == [f"points T={V._t_name(t)}" for t in V.BOUNDS]
    for line, v in zip(agg, vs, strict=True):
        assert f"huvm {v.huvm.speedup:.3f}x geomean, worst lender {v.huvm.lender * 100:+.1f}% ({only})" in line
        assert f"prototype {v.prototype.speedup:.3f}x" in line
        assert line.endswith(f"best T-respecting {v.best.speedup:.3f}x ({v.best.variant} 1)")


def test_the_ensemble_redraws_a_stochastic_scenarios_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 2: a scenario with random parts (here the harvester's random access stream) has seed members
    besides the lender timings, and their spread is in its noise band: on this scenario the timings move nothing
    (steady lenders), the seeds do, so without the seed members the band falls back to the floor."""
    only = "h100/random/fit-0/steady"
    sc = next(s for s in M.scenarios("evaluation") if s.name == only)
    assert sc.random_parts == ("the harvester's random access stream",)
    assert V.members(sc) == [(f, 0) for f in V.TIMINGS] + [(1.0, s) for s in V.SEEDS] and V.SEEDS
    vs = V.judge("evaluation", [only])
    for v in vs:
        assert v.members == len(V.TIMINGS) + len(V.SEEDS)
        assert v.timing_noise == 0.0 and v.seed_noise > V.NOISE_FLOOR
        assert v.noise >= v.seed_noise > V.NOISE_FLOOR
    # the reported point is the matrix's (seed set 0): the ensemble moves the band, not the point
    monkeypatch.setattr(V, "SEEDS", ())
    alone = V.judge("evaluation", [only])
    assert [(v.huvm, v.prototype, v.best) for v in alone] == [(v.huvm, v.prototype, v.best) for v in vs]
    assert all(v.members == len(V.TIMINGS) and v.noise == V.NOISE_FLOOR and v.seed_noise == 0.0 for v in alone)


def test_a_deterministic_scenario_has_no_seed_spread() -> None:
    """A scenario without random parts (a recorded trace, the lenders' fixed shapes) runs no seed members and
    reports zero seed spread: re-drawn, it is the same scenario, with the same outcome."""
    only = "p3/streaming/2/spiky/uvm/2h"
    sc = next(s for s in M.scenarios("evaluation") if s.name == only)
    assert sc.random_parts == () and V.members(sc) == [(f, 0) for f in V.TIMINGS]
    again = next(s for s in M.scenarios("evaluation", seed=V.SEEDS[0]) if s.name == only)
    keys = [v for v in V.variants() if v.name == "stock" or v.name in V.noise_keys()]
    a, b = M.evaluate([sc], keys), M.evaluate([again], keys)
    assert all(a.outcome(only, k.name) == b.outcome(only, k.name) for k in keys)
    for v in V.judge("evaluation", [only]):
        assert v.members == len(V.TIMINGS) and v.seed_noise == 0.0 and v.seed_lender_noise == 0.0
        assert v.timing_noise > 0.0           # its spiky lenders' timing does move it
        assert "seeds - (no random part)" in v.noise_line()
