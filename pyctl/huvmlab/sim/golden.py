"""Fixed scenarios whose full results fingerprint the simulator (``python -m huvmlab.sim.golden``).

A speed change to the C model must leave every result bit-identical: each scenario's result (every tenant
figure and step end, every counter of GET_STATS, the traffic per path, the memory samples; the wall time
left out) is hashed (SHA-256 of its canonical JSON) and compared with the digests recorded in
``tests/python/sim_golden.json`` (tests/python/test_sim_golden.py). The scenarios cover the paths the bench
times (the oversubscribed harvester, the resident fast path, the Llama-7B step on 8 GPUs and with 7 lenders)
and the others the model has: PCIe switches and the hybrid cube-mesh (dgx-1, some pairs without a peer
path), remote mapping, the prototype's preset, spiky lenders giving memory back, host-resident chunks.

A change that is meant to change the model (a fix, a new cost) re-records the digests:
``python -m huvmlab.sim.golden --write tests/python/sim_golden.json``; ``--dump DIR`` writes each scenario's
full result as JSON, to diff two builds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import workloads
from .config import GIB, MIB, NodeConfig
from .scenario import SimResult, run_scenario
from .tenants import TenantSpec


def _over() -> SimResult:
    node2 = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(4 * GIB, 0)
    hot = workloads.hot_cold(6 * GIB, 200_000, chunks_per_op=16)
    return run_scenario(node2, [TenantSpec(0, hot, role="harvester"),
                                TenantSpec(1, static_bytes=1 * GIB, role="lender")], "huvm",
                        sample_interval_ns=1_000_000)


def _resident() -> SimResult:
    node2 = NodeConfig.preset("aws-p3.8xlarge").subset(2).with_gpu_memory(4 * GIB, 0)
    return run_scenario(node2, [TenantSpec(0, workloads.streaming(2 * GIB, 800, chunks_per_op=64))], "stock",
                        sample_interval_ns=1_000_000)


def _llama8() -> SimResult:
    llama = workloads.llama7b_step()
    return run_scenario("hgx-h100", [TenantSpec(g, llama, name=f"llama{g}") for g in range(8)], "huvm",
                        sample_interval_ns=10_000_000)


def _llama1() -> SimResult:
    llama = workloads.llama7b_step()
    return run_scenario("hgx-h100", [TenantSpec(0, llama, name="llama", role="harvester")] +
                        [TenantSpec(g, static_bytes=8 * GIB + g * 512 * MIB, role="lender") for g in range(1, 8)],
                        "huvm", sample_interval_ns=10_000_000)


def _dgx1(policy: str, overrides: dict[str, int] | None = None,
          traffic_mbyte_per_s: int | None = None) -> Callable[[], SimResult]:
    """Two streaming harvesters on a 4-GPU dgx-1 (PCIe switches, a pair without NVLink) beside a spiky and a
    steady managed lender that loop in the background (with a guest-traffic budget when given)."""
    def run() -> SimResult:
        node = NodeConfig.preset("dgx-1").subset(4).with_gpu_memory(2 * GIB, 256 * MIB)
        usable = 2 * GIB - 256 * MIB
        horizon = 400_000_000
        return run_scenario(node, [
            TenantSpec(0, workloads.streaming(3 * GIB, 6, chunks_per_op=8), role="harvester"),
            TenantSpec(1, workloads.random_access(int(2.5 * GIB), 1500, chunks_per_op=8), role="harvester"),
            TenantSpec(2, workloads.lender("spiky", usable, horizon), background=True, role="lender",
                       lend_traffic_mbyte_per_s=traffic_mbyte_per_s),
            TenantSpec(3, workloads.lender("steady", usable, horizon), background=True, role="lender",
                       host_resident=True, lend_traffic_mbyte_per_s=traffic_mbyte_per_s),
        ], policy, policy_overrides=overrides, sample_interval_ns=5_000_000)
    return run


#: name -> the scenario; every one runs in well under a second.
SCENARIOS: dict[str, Callable[[], SimResult]] = {
    "bench-oversubscribed": _over,
    "bench-resident": _resident,
    "bench-llama7b-8gpu": _llama8,
    "bench-llama7b-1+7": _llama1,
    "dgx1-huvm": _dgx1("huvm"),
    "dgx1-huvm-atc22": _dgx1("huvm-atc22"),
    "dgx1-huvm-remote-map": _dgx1("huvm", {"fetch_mode": 1}),
    "dgx1-stock": _dgx1("stock"),
    "dgx1-huvm-traffic-budget": _dgx1("huvm", traffic_mbyte_per_s=2_000),
}


def canonical(res: SimResult) -> dict[str, Any]:
    """The result as JSON data, without the wall time (the only figure that is not the model's). Figures of
    tenants' collectives and op records are left out where a scenario has none (all of the recorded ones), so
    that their digests stay those of the model without them."""
    d = res.to_dict(samples=True)
    del d["wall_s"]
    traffic = d.get("traffic", {})
    if "collective" in traffic and not any(any(row) for row in traffic["collective"]):
        del traffic["collective"]
    for t in d.get("tenants", ()):
        for key, empty in (("link_stall_ns", 0), ("op_end_ns", [])):
            if key in t and t[key] == empty:
                del t[key]
    return d


def digest(res: SimResult) -> str:
    text = json.dumps(canonical(res), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def summary(res: SimResult) -> dict[str, Any]:
    """A few headline figures next to the digest (a readable first clue when a digest differs)."""
    return {"sim_time_ns": res.sim_time_ns, "touches": res.touches,
            "runtime_ns": [t.runtime_ns for t in res.tenants], "faults": [t.faults for t in res.tenants],
            "evict_to_peer": res.counter_total("evict_to_peer"), "evict_to_host": res.counter_total("evict_to_host")}


def record(names: list[str] | None = None, dump: Path | None = None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in names or list(SCENARIOS):
        res = SCENARIOS[name]()
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"{name}.json").write_text(json.dumps(canonical(res), sort_keys=True, indent=1) + "\n")
        out[name] = {"sha256": digest(res), "summary": summary(res)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m huvmlab.sim.golden", description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="PATH", help="record the digests into PATH")
    ap.add_argument("--check", metavar="PATH", help="compare with the digests recorded in PATH (exit 1 on a "
                    "difference)")
    ap.add_argument("--dump", metavar="DIR", help="write each scenario's full result as JSON into DIR")
    ap.add_argument("scenario", nargs="*", help=f"scenarios (default: all of {', '.join(SCENARIOS)})")
    args = ap.parse_args(argv)
    unknown = [s for s in args.scenario if s not in SCENARIOS]
    if unknown:
        print(f"golden: unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    got = record(args.scenario or None, Path(args.dump) if args.dump else None)
    bad = 0
    want: dict[str, Any] = {}
    if args.check:
        try:
            want = json.loads(Path(args.check).read_text())
        except (OSError, ValueError) as exc:
            print(f"golden: cannot read {args.check}: {exc}", file=sys.stderr)
            return 2
    for name, g in got.items():
        flag = ""
        if args.check:
            w = want.get(name)
            flag = " same" if w and w["sha256"] == g["sha256"] else " DIFFERS"
            bad += flag == " DIFFERS"
        print(f"{name:<24} {g['sha256'][:16]}{flag}")
    if args.write:
        Path(args.write).write_text(json.dumps(got, sort_keys=True, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
