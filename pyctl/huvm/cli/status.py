"""huvmctl status | topology | va-spaces."""

from __future__ import annotations

import argparse

from .. import abi, jsonout, render
from ..topology import discover
from .common import open_node, out, print_json


def cmd_status(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info, policy, stats = node.info(), node.get_policy(), node.stats()
        if args.json:
            print_json(jsonout.dump(jsonout.StatusDoc.make(backend=node.backend.description, node=jsonout.node(info),
                                                      policy=jsonout.policy(policy, info),
                                                      stats=jsonout.stats(stats))))
            return 0
        out.print(f"[bold]huvm {abi.huvm_version_str(info.huvm_version)}[/bold] on {node.backend.description}: "
                  f"{info.backend_name} backend, nvidia-uvm {info.upstream_version}, ABI "
                  f"{abi.version_str(info.module_abi_version)} (tool {abi.version_str(abi.ABI_VERSION)})")
        out.print(f"policy: preset [bold]{policy.preset_name}[/bold], generation {policy.generation}; "
                  f"{len(info.gpus)} GPU(s), {len(info.links) // 2} peer link(s)")
        out.print(render.gpus_table(info, policy, stats))
        return 0


def cmd_topology(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info = node.info()
        topo = discover(info)
        if args.json:
            print_json(jsonout.dump(jsonout.topology(topo)))
            return 0
        out.print(render.topology_table(topo))
        out.print(render.links_table(info))
        for n in topo.notes:
            out.print(f"[dim]note: {n}[/dim]")
        return 0


def cmd_va_spaces(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        spaces = node.va_spaces()
        if args.json:
            print_json(jsonout.dump(jsonout.VaSpacesDoc.make(va_spaces=[
                jsonout.VaSpace(id=s.id, pid=s.pid, uid=s.uid, comm=s.comm, counters=dict(s.counters),
                                gpus=[i for i in range(64) if s.registered_gpus >> i & 1]) for s in spaces])))
            return 0
        from rich.table import Table

        t = Table(title=f"{len(spaces)} va_space(s)", title_justify="left")
        for col in ("id", "pid", "uid", "comm", "gpus"):
            t.add_column(col)
        fields = list(spaces[0].counters) if spaces else []
        for f in fields:
            t.add_column(f, justify="right")
        for s in spaces:
            t.add_row(str(s.id), str(s.pid), str(s.uid), s.comm, f"{s.registered_gpus:#x}",
                      *[str(s.counters[f]) for f in fields])
        out.print(t)
        return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("status", parents=parents, help="module/backend, versions, GPUs, policy summary",
                       description="Show the backend, versions, GPUs with their roles and lent/harvested "
                                   "memory, and the policy's preset and generation.")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("topology", parents=parents, help="GPUs by UUID with NVML data and the peer link matrix",
                       description="GPUs by UUID (NVML index, PCIe, NVLink when NVML is available) and the "
                                   "peer link matrix from the module.")
    p.set_defaults(func=cmd_topology)
    p = sub.add_parser("va-spaces", parents=parents, help="va_spaces with their counters")
    p.set_defaults(func=cmd_va_spaces)
