"""Verdicts against the prototype at a lender bound T (``make eval``'s verdict lines; docs/evaluation.md).

An admin bounds how much a lender may be slowed down (T). For each scenario and T in :data:`BOUNDS`:

* **huvm's point at T** is ``huvm`` with the bound T on every GPU (``lend_slowdown_max_pct``) and every working
  lender's guest-traffic budget sized for T (:func:`huvm.budget.lend_traffic_for`; the core clamps it to T/2);
  at T = none, plain ``huvm`` (its preset bound, 2 %). A point is (harvester speedup over
  stock, worst lender slowdown).
* **pareto**: huvm is *dominated* when the prototype (``huvm-atc22``) is faster beyond noise while its lenders
  are no worse off (their worst slowdown at most huvm's, within noise); otherwise ``ok``.
* **best-gap**: huvm's speedup over the best speedup among the points that keep every lender within T (the
  prototype, the prototype with budgets, huvm at every T, and huvm's other knob settings: lend reserves, no
  ``LEND_ABOVE_PEAK``); ``ok`` within noise, else ``behind``.
* **noise** per scenario: a small perturbation ensemble, the same scenario with the working lenders' clocks
  stretched by :data:`TIMINGS` (when their spikes fall) and, where the scenario has random parts (a random
  access stream, request arrivals, expert popularity, power-law gathers: ``Scenario.random_parts``), re-drawn
  with the seed sets :data:`SEEDS` (:func:`huvm.sim.matrix.scenarios`); the half-range of huvm's and the
  prototype's speedups (and worst lender slowdowns) over it, at least :data:`NOISE_FLOOR`. The reported point
  is the matrix's (timing 1, seed set 0); only the noise band comes from the ensemble.

    huvmctl sim verdict                 # the evaluation half's verdict lines and their summary
    huvmctl sim verdict --half tuning --spike-period 1000   # with the spiky lenders spiking every second
    huvmctl sim verdict --kind kv-serve --kind moe --all-levels   # workload kinds at every level
    huvmctl sim verdict --update-doc docs/evaluation.md   # the summary into docs/evaluation.md (make eval-doc)
    huvmctl sim verdict --explain       # then, per `behind`, the measured difference (:func:`explain`)
    huvmctl sim verdict --explain-doc docs/policy.md      # that table into docs/policy.md (make eval-doc)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from huvm.policy import KEYS

from .docblock import replace_block
from .errors import SimConfigError
from .matrix import HALVES, KIND_NAMES, Evaluation, Scenario, Variant, _run, evaluate, scenarios

#: the lender bounds T an admin may pick (None: no bound)
BOUNDS: tuple[float | None, ...] = (0.01, 0.02, 0.05, None)
#: the perturbation ensemble: the working lenders' clocks stretched by these factors (1.0: the scenario)
TIMINGS: tuple[float, ...] = (0.9, 1.0, 1.1)
#: and the scenario's random parts re-drawn with these seed sets (at timing 1.0; 0, the matrix's, is the
#: scenario itself): a scenario with random parts has 5 members, one without them 3
SEEDS: tuple[int, ...] = (1, 2)
#: the least noise a verdict allows: relative for speedups, absolute (slowdown fraction) for lenders
NOISE_FLOOR = 0.005
LENDER_NOISE_FLOOR = 0.002


def _t_name(t: float | None) -> str:
    return "none" if t is None else f"{t * 100:g}%"


def huvm_at(t: float | None) -> str:
    """The name of huvm's point for bound t."""
    return "huvm" if t is None else f"huvm@{_t_name(t)}"


def variants() -> list[Variant]:
    """Every point the verdicts compare: the presets, both with budgets for each T, and huvm's other knobs."""
    vs = [Variant("stock", "stock"), Variant("huvm-atc22", "huvm-atc22"), Variant("huvm", "huvm")]
    for t in BOUNDS:
        if t is not None:
            # the bound itself (lend_slowdown_max_pct, whole %) on every GPU, and the working lenders' budgets
            vs.append(Variant(huvm_at(t), "huvm", overrides=(("gpu.lend_slowdown_max_pct", round(t * 100)),),
                              lender_slowdown=t))
            vs.append(Variant(f"huvm-atc22@{_t_name(t)}", "huvm-atc22", lender_slowdown=t))
    vs += [Variant("huvm/reserve-25%", "huvm", lender_overrides=(("lend_reserve_bytes", 25, True),)),
           Variant("huvm/reserve-50%", "huvm", lender_overrides=(("lend_reserve_bytes", 50, True),)),
           Variant("huvm/no-peak", "huvm", overrides=(("gpu.flags", _no_peak_flags()),))]
    return vs


def _no_peak_flags() -> int:
    """The huvm preset's per-GPU flags without ``LEND_ABOVE_PEAK`` (the ``huvm/no-peak`` point: that knob
    alone differs)."""
    return _preset_value("flags", "huvm") & ~KEYS["flags"].choices()["lend-above-peak"]


@dataclass(frozen=True)
class Point:
    variant: str
    speedup: float
    lender: float           # worst lender slowdown as a fraction (0.02 = +2 %); 0 without a working lender


@dataclass(frozen=True)
class Verdict:
    scenario: str
    bound: float | None
    huvm: Point
    prototype: Point
    best: Point
    noise: float
    lender_noise: float
    #: the parts of the noise (half-ranges before the floors; speedups relative, lenders absolute): over the
    #: lender timings at the matrix's seeds, and over the seed sets at timing 1 (0.0: no random part)
    timing_noise: float = 0.0
    seed_noise: float = 0.0
    timing_lender_noise: float = 0.0
    seed_lender_noise: float = 0.0
    members: int = 0                # the ensemble's size (timings + seed sets)

    @property
    def dominated(self) -> bool:
        return (self.prototype.speedup > self.huvm.speedup * (1 + self.noise)
                and self.prototype.lender <= self.huvm.lender + self.lender_noise)

    @property
    def gap(self) -> float:
        return self.huvm.speedup / self.best.speedup

    @property
    def behind(self) -> bool:
        return self.gap < 1 - self.noise

    def line(self) -> str:
        return (f"verdict {self.scenario} T={_t_name(self.bound)}: pareto {'dominated' if self.dominated else 'ok'}, "
                f"best-gap {self.gap:.3f} {'behind' if self.behind else 'ok'}")

    def noise_line(self) -> str:
        """Where the scenario's noise band comes from: the whole ensemble, the lender timings, the seed sets."""
        seeds = (f"seeds {self.seed_noise * 100:.2f}% / {self.seed_lender_noise * 100:.2f}"
                 if self.members > len(TIMINGS) else "seeds - (no random part)")
        return (f"noise {self.scenario}: speedup {self.noise * 100:.2f}% / worst lender {self.lender_noise * 100:.2f} "
                f"points over {self.members} members (timing {self.timing_noise * 100:.2f}% / "
                f"{self.timing_lender_noise * 100:.2f}, {seeds})")

    def points_line(self) -> str:
        """The points the verdict compares: huvm's at T (harvester speedup over stock, worst lender slowdown), the
        prototype's, and the best point that keeps every lender within T (which variant it is)."""
        return (f"points {self.scenario} T={_t_name(self.bound)}: {self.huvm.variant} {_point_text(self.huvm)}, "
                f"prototype {_point_text(self.prototype)}, best {self.best.variant} {_point_text(self.best)}")


def _point_text(p: Point) -> str:
    return f"{p.speedup:.3f}x (worst lender {p.lender * 100:+.1f}%)"


def _point(ev: Evaluation, sc: str, v: str) -> Point:
    o = ev.outcome(sc, v)
    return Point(v, o.harvester_speedup, (o.lender_slowdown - 1) if o.lender_slowdown is not None else 0.0)


def _half_range(xs: Sequence[float], rel: bool) -> float:
    lo, hi = min(xs), max(xs)
    if rel:
        return (hi - lo) / 2 / (sorted(xs)[len(xs) // 2] or 1.0)
    return (hi - lo) / 2


def noise_keys() -> list[str]:
    """The points whose spread over the ensemble is a scenario's noise: the prototype's and huvm's at every T."""
    return ["huvm-atc22"] + [huvm_at(t) for t in BOUNDS]


#: an ensemble member: (lender timing, seed set); (1.0, 0) is the scenario itself
Member = tuple[float, int]
BASE: Member = (1.0, 0)


def members(sc: Scenario) -> list[Member]:
    """The scenario's ensemble: every lender timing at the matrix's seeds, then, when it has random parts, every
    other seed set at timing 1."""
    return [(f, 0) for f in TIMINGS] + ([(1.0, s) for s in SEEDS] if sc.random_parts else [])


def _spread(evs: dict[Member, Evaluation], sc: str, ms: Sequence[Member]) -> tuple[float, float]:
    """(relative speedup, absolute worst-lender) half-ranges over members ms, the widest of :func:`noise_keys`."""
    if len(ms) < 2:
        return 0.0, 0.0
    ens = {k: [_point(evs[m], sc, k) for m in ms] for k in noise_keys()}
    return (max(_half_range([p.speedup for p in ps], True) for ps in ens.values()),
            max(_half_range([p.lender for p in ps], False) for ps in ens.values()))


def judge(half: str, only: Sequence[str] = (), spike_period_ms: float | None = None,
          kinds: Sequence[str] | None = None, all_levels: bool = False) -> list[Verdict]:
    """Run the half under :func:`variants`, and every other member of the ensemble (:func:`members`) under
    stock and the :func:`noise_keys` points only, and judge every scenario and T; ``spike_period_ms``: the spiky
    lenders' cadence, ``kinds`` / ``all_levels``: which parts of the matrix (:func:`huvmlab.sim.matrix.scenarios`;
    None, False: the matrix's cadence, every kind at two levels)."""
    vs = variants()
    keyed = [v for v in vs if v.name == "stock" or v.name in noise_keys()]

    def build(timing: float, seed: int) -> list[Scenario]:
        return [s for s in scenarios(half, lender_timing=timing, spike_period_ms=spike_period_ms, kinds=kinds,
                                     all_levels=all_levels, seed=seed)
                if (not only or any(o in s.name for o in only)) and (seed == 0 or s.random_parts)]

    base = build(*BASE)
    evs: dict[Member, Evaluation] = {BASE: evaluate(base, vs, half=half)}
    for m in dict.fromkeys(m for sc in base for m in members(sc)):
        if m != BASE:
            evs[m] = evaluate(build(*m), keyed, half=half)
    out: list[Verdict] = []
    for sc in base:
        ms = members(sc)
        # the band is the widest of the whole ensemble's and its parts' (a relative half-range is taken about
        # each set's median: the parts' may be the wider)
        sp, lsp = _spread(evs, sc.name, ms)
        tnoise = _spread(evs, sc.name, [m for m in ms if m[1] == 0])
        snoise = _spread(evs, sc.name, [m for m in ms if m[0] == 1.0])
        noise = max(NOISE_FLOOR, sp, tnoise[0], snoise[0])
        lnoise = max(LENDER_NOISE_FLOOR, lsp, tnoise[1], snoise[1])
        ev = evs[BASE]
        points = [_point(ev, sc.name, v.name) for v in vs if v.name != "stock"]
        for t in BOUNDS:
            ok_points = [p for p in points if t is None or p.lender <= t + lnoise]
            best = max(ok_points, key=lambda p: p.speedup) if ok_points else _point(ev, sc.name, "stock")
            out.append(Verdict(sc.name, t, _point(ev, sc.name, huvm_at(t)), _point(ev, sc.name, "huvm-atc22"),
                               best, noise, lnoise, tnoise[0], snoise[0], tnoise[1], snoise[1], len(ms)))
    return out


def noise_summary(verdicts: Sequence[Verdict]) -> list[str]:
    """Over the scenarios: the ensemble's size and its noise band (median, widest), and where the seed sets widen
    it beyond the lender timings."""
    one = list({v.scenario: v for v in verdicts}.values())
    if not one:
        return []
    seeded = [v for v in one if v.members > len(TIMINGS)]
    wider = [v for v in seeded if v.seed_noise > max(v.timing_noise, NOISE_FLOOR)
             or v.seed_lender_noise > max(v.timing_lender_noise, LENDER_NOISE_FLOOR)]
    widest = max(one, key=lambda v: v.noise)
    med = sorted(v.noise for v in one)[len(one) // 2]
    return [f"noise: {len(one)} scenarios, {len(seeded)} with random parts ({len(TIMINGS)} lender timings + "
            f"{len(SEEDS)} seed sets; the others {len(TIMINGS)} timings); speedup band median {med * 100:.2f}%, "
            f"widest {widest.noise * 100:.2f}% ({widest.scenario}); the seeds widen it beyond the timings in "
            f"{len(wider)}" + (" (" + ", ".join(f"{v.scenario} {v.seed_noise * 100:.2f}% / "
                                                f"{v.seed_lender_noise * 100:.2f} points" for v in wider) + ")"
                               if wider else "")]


def points_summary(verdicts: Sequence[Verdict]) -> list[str]:
    """Per T, over the scenarios: huvm's point (geomean harvester speedup, worst lender slowdown and where), the
    prototype's, and the best T-respecting points (geomean speedup; which variants they were, most often first)."""
    lines = []
    for t in BOUNDS:
        vt = [v for v in verdicts if v.bound == t]
        if not vt:
            continue

        def geo(ps: Sequence[Point]) -> float:
            return math.exp(sum(math.log(p.speedup) for p in ps) / len(ps))

        def worst(ps: Sequence[tuple[str, Point]]) -> str:
            sc, p = max(ps, key=lambda x: x[1].lender)
            return f"worst lender {p.lender * 100:+.1f}% ({sc})"

        counts = Counter(v.best.variant for v in vt)
        by = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
        lines.append(f"points T={_t_name(t)}: huvm {geo([v.huvm for v in vt]):.3f}x geomean, "
                     f"{worst([(v.scenario, v.huvm) for v in vt])}; prototype {geo([v.prototype for v in vt]):.3f}x, "
                     f"{worst([(v.scenario, v.prototype) for v in vt])}; best T-respecting "
                     f"{geo([v.best for v in vt]):.3f}x ({by})")
    return lines


def summary(verdicts: Sequence[Verdict]) -> list[str]:
    lines = []
    for t in BOUNDS:
        vt = [v for v in verdicts if v.bound == t]
        dom = [v.scenario for v in vt if v.dominated]
        beh = [v for v in vt if v.behind]
        over = [v.scenario for v in vt if t is not None and v.huvm.lender > t + v.lender_noise]
        lines.append(f"T={_t_name(t)}: {len(vt)} scenarios, dominated in {len(dom)}"
                     + (f" ({', '.join(dom)})" if dom else "")
                     + f", behind the best T-respecting point in {len(beh)}"
                     + (" (" + ", ".join(f"{v.scenario} {v.gap:.3f} of {v.best.variant}" for v in beh) + ")"
                        if beh else "")
                     + (f", huvm's own lenders over T in {len(over)} ({', '.join(over)})" if over else ""))
    return lines


DOC_BEGIN = "<!-- verdicts: begin (generated by huvmctl sim verdict --update-doc; do not edit) -->"
DOC_END = "<!-- verdicts: end -->"


def doc_block(verdicts: Sequence[Verdict]) -> str:
    return "\n" + "\n".join(f"- {line}" for line in summary(verdicts) + noise_summary(verdicts)) + "\n\n"


# ---- why huvm is `behind` the best T-respecting point: the measured difference (issue 28; docs/policy.md,
# "Where huvm is behind the best T-respecting point"). For each verdict whose best-gap is `behind`, huvm's point
# at T and the best point are run again on that scenario and their per-run counters set side by side: the
# harvesters' makespan, fault stall and faults; chunks evicted to a peer and to host (of them, ahead of need by
# pre-eviction); chunks fetched back from a peer; chunks prefetched; chunks given back by lenders; the worst
# lender's slowdown; and which knob differs between the two points (preset, the bound T on every GPU, the working
# lenders' guest-traffic budget, their lend reserve, the LEND_ABOVE_PEAK flag).

_PRESET_INDEX = {"stock": 0, "huvm-atc22": 1, "huvm": 2}


def _preset_value(key: str, preset: str) -> int:
    """A GPU field's value in a preset, as the core exports it (the ABI header's policy field table)."""
    return KEYS[key].presets[_PRESET_INDEX[preset]]


def knobs(v: Variant) -> dict[str, str]:
    """A point's settings by knob, in words (the preset's own value where the point leaves it): what
    :func:`knob_diff` compares."""
    over = dict(v.overrides)
    lover = {f: (x, pct) for f, x, pct in v.lender_overrides}
    t = over.get("gpu.lend_slowdown_max_pct", _preset_value("lend_slowdown_max_pct", v.preset))
    flags = over.get("gpu.flags", _preset_value("flags", v.preset))
    peak = KEYS["flags"].choices()["lend-above-peak"]
    out = {"preset": v.preset, "T": f"{t}%" if t else "none",
           "budget": f"for {v.lender_slowdown * 100:g}%" if v.lender_slowdown is not None else "none",
           "reserve": "preset", "LEND_ABOVE_PEAK": "on" if flags & peak else "off"}
    if "lend_reserve_bytes" in lover:
        x, pct = lover["lend_reserve_bytes"]
        out["reserve"] = f"{x}%" if pct else f"{x} B"
    for k, x in v.overrides:
        if k not in ("gpu.lend_slowdown_max_pct", "gpu.flags"):
            out[k] = str(x)
    return out


def knob_diff(a: Variant, b: Variant) -> list[tuple[str, str, str]]:
    """The knobs whose settings differ between points a and b: (knob, a's, b's)."""
    ka, kb = knobs(a), knobs(b)
    return [(k, ka.get(k, "preset"), kb.get(k, "preset")) for k in dict.fromkeys([*ka, *kb])
            if ka.get(k, "preset") != kb.get(k, "preset")]


@dataclass(frozen=True)
class Breakdown:
    """One run of a scenario under one point, measured (chunks are 2 MiB)."""

    variant: str
    speedup: float              # over stock
    makespan_ns: int            # the harvesters'
    fault_stall_ns: int         # the harvesters' (with the evictions their faults waited for)
    faults: int                 # the harvesters'
    evict_to_peer: int          # every GPU's
    evict_to_host: int
    preevict_to_peer: int       # of evict_to_peer, ahead of need
    preevict_to_host: int       # of evict_to_host, ahead of need
    fetch_from_peer: int
    prefetch: int               # host to the faulting GPU, and host to a peer on its behalf
    giveback: int
    lender: float | None        # worst lender slowdown as a fraction; None without a working lender


@dataclass(frozen=True)
class Explanation:
    scenario: str
    bound: float | None
    gap: float
    huvm: Breakdown
    best: Breakdown
    diff: tuple[tuple[str, str, str], ...]

    def knob_text(self) -> str:
        return "; ".join(f"{k} {a} -> {b}" for k, a, b in self.diff) or "no knob"

    def fields(self) -> list[tuple[str, str, str]]:
        """(what, huvm's, the best point's) for every measured quantity."""
        h, b = self.huvm, self.best
        return [("makespan ms", _ms(h.makespan_ns), _ms(b.makespan_ns)),
                ("fault stall ms", _ms(h.fault_stall_ns), _ms(b.fault_stall_ns)),
                ("faults", str(h.faults), str(b.faults)),
                ("to peer (pre)", f"{h.evict_to_peer} ({h.preevict_to_peer})",
                 f"{b.evict_to_peer} ({b.preevict_to_peer})"),
                ("to host (pre)", f"{h.evict_to_host} ({h.preevict_to_host})",
                 f"{b.evict_to_host} ({b.preevict_to_host})"),
                ("from peer", str(h.fetch_from_peer), str(b.fetch_from_peer)),
                ("prefetch", str(h.prefetch), str(b.prefetch)),
                ("give-back", str(h.giveback), str(b.giveback)),
                ("lender", _pct(h.lender), _pct(b.lender))]

    def line(self) -> str:
        return (f"why {self.scenario} T={_t_name(self.bound)}: {self.gap:.3f} of {self.best.variant} "
                f"({self.knob_text()}): "
                + ", ".join(f"{w} {a} -> {b}" for w, a, b in self.fields()))


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{round(x * 100, 1) + 0.0:+.1f}%"


def measure(sc: Scenario, vs: Sequence[Variant]) -> dict[str, Breakdown]:
    """Run the scenario under stock and every point in vs; each point's :class:`Breakdown`."""
    ev = evaluate([sc], [Variant("stock", "stock"), *vs])
    out: dict[str, Breakdown] = {}
    for v in vs:
        o = ev.outcome(sc.name, v.name)
        res = _run(sc, v)
        hv = [res.tenants[i] for i in sc.harvesters]
        out[v.name] = Breakdown(
            v.name, o.harvester_speedup, o.harvest_makespan_ns, sum(t.fault_stall_ns for t in hv),
            sum(t.faults for t in hv), res.counter_total("evict_to_peer"), res.counter_total("evict_to_host"),
            res.counter_total("preevict_to_peer"), res.counter_total("preevict_to_host"),
            res.counter_total("fetch_from_peer"),
            res.counter_total("prefetch_local") + res.counter_total("prefetch_to_peer"),
            res.counter_total("giveback"),
            None if o.lender_slowdown is None else o.lender_slowdown - 1)
    return out


def explain(verdicts: Sequence[Verdict], half: str, all_levels: bool = False) -> list[Explanation]:
    """One :class:`Explanation` per ``behind`` verdict: huvm's point at its T and the verdict's best point, both
    run on the scenario of ``half`` at the matrix's cadence (the verdict's timing 1.0); ``all_levels``: the
    verdicts were judged with the workload kinds at every level (:func:`judge`)."""
    by_name = {v.name: v for v in variants()}
    scs = {s.name: s for s in scenarios(half, all_levels=all_levels)}
    out: list[Explanation] = []
    for vd in verdicts:
        if not vd.behind:
            continue
        if vd.scenario not in scs:
            raise SimConfigError(f"no scenario {vd.scenario!r} in the {half} half", field="scenario")
        if vd.best.variant not in by_name:
            raise SimConfigError(f"unknown point {vd.best.variant!r}", field="variant")
        a, b = by_name[huvm_at(vd.bound)], by_name[vd.best.variant]
        m = measure(scs[vd.scenario], [a, b])
        out.append(Explanation(vd.scenario, vd.bound, vd.gap, m[a.name], m[b.name], tuple(knob_diff(a, b))))
    return out


EXPLAIN_BEGIN = "<!-- behind: begin (generated by huvmctl sim verdict --explain-doc; do not edit) -->"
EXPLAIN_END = "<!-- behind: end -->"


def explain_block(exps: Sequence[Explanation]) -> str:
    """The table between the markers: one row per `behind`, each cell huvm's value -> the best point's."""
    if not exps:
        return "\nNo scenario is `behind` the best T-respecting point.\n\n"
    head = ["scenario", "T", "gap", "best point", "knob (huvm -> best)"] + [w for w, _, _ in exps[0].fields()]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for e in exps:
        lines.append("| " + " | ".join([f"`{e.scenario}`", _t_name(e.bound), f"{e.gap:.3f}", f"`{e.best.variant}`",
                                        e.knob_text()] + [f"{a} -> {b}" for _, a, b in e.fields()]) + " |")
    return "\n" + "\n".join(lines) + "\n\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl sim verdict", description=__doc__.split("\n\n")[0])
    ap.add_argument("--half", choices=HALVES, default="evaluation")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="only the scenarios whose name contains it (repeatable)")
    ap.add_argument("--spike-period", type=float, default=None, metavar="MS",
                    help="the spiky lenders spike every MS ms (1..60000; default: the matrix's cadence)")
    ap.add_argument("--kind", action="append", default=[], choices=KIND_NAMES,
                    help="only this part of the matrix (repeatable): base, or a workload kind")
    ap.add_argument("--all-levels", action="store_true",
                    help="the workload kinds at every oversubscription level (8 each, not 2: a larger matrix)")
    ap.add_argument("--update-doc", metavar="FILE", help="write the summary between FILE's verdict markers")
    ap.add_argument("--explain", action="store_true",
                    help="per `behind`, run huvm's point and the best point again and print what differs")
    ap.add_argument("--explain-doc", metavar="FILE",
                    help="write that table between FILE's `behind` markers (docs/policy.md)")
    args = ap.parse_args(argv)
    explanations: list[Explanation] = []
    try:
        if (args.update_doc or args.explain_doc) and (args.only or args.half != "evaluation" or
                                                      args.spike_period is not None or args.kind or
                                                      args.all_levels):
            raise SimConfigError("--update-doc and --explain-doc take the whole evaluation half at the matrix's "
                                 "cadence", field="update_doc")
        if (args.explain or args.explain_doc) and args.spike_period is not None:
            raise SimConfigError("--explain runs the matrix's cadence: no --spike-period", field="spike_period")
        verdicts = judge(args.half, args.only, args.spike_period, args.kind or None, args.all_levels)
        if verdicts and (args.explain or args.explain_doc):
            explanations = explain(verdicts, args.half, args.all_levels)
        if args.explain_doc and verdicts:
            changed = replace_block(args.explain_doc, EXPLAIN_BEGIN, EXPLAIN_END, explain_block(explanations))
            print(f"{args.explain_doc}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
        if args.update_doc and verdicts:
            changed = replace_block(args.update_doc, DOC_BEGIN, DOC_END, doc_block(verdicts))
            print(f"{args.update_doc}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
        if (args.update_doc or args.explain_doc) and verdicts:
            return 0
    except (OSError, SimConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not verdicts:
        print("error: no scenario matches", file=sys.stderr)
        return 2
    for i, v in enumerate(verdicts):
        print(v.points_line())
        print(v.line())
        if i + 1 == len(verdicts) or verdicts[i + 1].scenario != v.scenario:
            print(v.noise_line())
    print()
    for line in points_summary(verdicts) + summary(verdicts) + noise_summary(verdicts):
        print(line)
    if args.explain:
        print()
        for e in explanations:
            print(e.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
