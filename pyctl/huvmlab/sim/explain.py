"""Why huvm is `behind` the best T-respecting point: the measured difference (issue 28; docs/policy.md, "Where
huvm is behind the best T-respecting point").

For each verdict whose best-gap is ``behind`` (:mod:`huvmlab.sim.verdict`), huvm's point at T and the best
point are run again on that scenario, and their per-run counters are set side by side: the harvesters'
makespan, fault stall and faults; chunks evicted to a peer and to host (of them, ahead of need by
pre-eviction); chunks fetched back from a peer; chunks prefetched; chunks given back by lenders; the worst
lender's slowdown; and which knob differs between the two points (preset, the bound T on every GPU, the
working lenders' guest-traffic budget, their lend reserve, the ``LEND_ABOVE_PEAK`` flag).

    huvmctl sim verdict --explain               # the verdict lines, then one explanation per `behind`
    huvmctl sim verdict --explain-doc docs/policy.md   # the table into policy.md (make eval-doc)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from huvm.policy import KEYS

from .errors import SimConfigError
from .matrix import Scenario, Variant, _run, evaluate, scenarios
from .verdict import Verdict, _t_name, huvm_at, variants

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


def explain(verdicts: Sequence[Verdict], half: str) -> list[Explanation]:
    """One :class:`Explanation` per ``behind`` verdict: huvm's point at its T and the verdict's best point, both
    run on the scenario of ``half`` at the matrix's cadence (the verdict's timing 1.0)."""
    by_name = {v.name: v for v in variants()}
    scs = {s.name: s for s in scenarios(half)}
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


DOC_BEGIN = "<!-- behind: begin (generated by huvmctl sim verdict --explain-doc; do not edit) -->"
DOC_END = "<!-- behind: end -->"


def doc_block(exps: Sequence[Explanation]) -> str:
    """The table between the markers: one row per `behind`, each cell huvm's value -> the best point's."""
    if not exps:
        return "\nNo scenario is `behind` the best T-respecting point.\n\n"
    head = ["scenario", "T", "gap", "best point", "knob (huvm -> best)"] + [w for w, _, _ in exps[0].fields()]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for e in exps:
        lines.append("| " + " | ".join([f"`{e.scenario}`", _t_name(e.bound), f"{e.gap:.3f}", f"`{e.best.variant}`",
                                        e.knob_text()] + [f"{a} -> {b}" for _, a, b in e.fields()]) + " |")
    return "\n" + "\n".join(lines) + "\n\n"
