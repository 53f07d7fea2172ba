"""huvmctl policy show | set | preset | apply | diff | save | keys | lender-budget."""

from __future__ import annotations

import argparse

from .. import budget, jsonout, policyfile, render
from ..client import Node
from ..policy import Policy, describe_keys, parse_assignments, preset_names
from ..units import format_rate
from .common import open_node, out, print_json


def _report(node: Node, before: Policy, after: Policy, args: argparse.Namespace, *, applied: bool) -> int:
    info = node.info()
    changes = before.diff(after, info)
    if args.json:
        print_json(jsonout.dump(jsonout.PolicyChangeDoc.make(
            applied=applied, generation=after.generation, preset=after.preset_name,
            changes=jsonout.changes(before, after, info))))
        return 0
    out.print(render.diff_table(changes, "before", "after" if applied else "would be"))
    if applied:
        out.print(f"applied: generation {after.generation}, preset {after.preset_name}")
    else:
        out.print("dry run: nothing sent")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info, policy = node.info(), node.get_policy()
        if args.json:
            print_json(jsonout.dump(jsonout.PolicyShowDoc.make(policy=jsonout.policy(policy, info))))
        elif args.toml:
            out.print(policyfile.dumps(policy, info), markup=False, end="")
        else:
            out.print(render.policy_table(policy, info))
        return 0


def cmd_set(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info = node.info()
        settings = parse_assignments(args.assignments, info)
        before, new = node.plan(settings, info=info)
        after = new if args.dry_run else node.set_policy(new)
        return _report(node, before, after, args, applied=not args.dry_run)


def cmd_preset(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        before, new = node.plan([], preset=args.name)
        after = new if args.dry_run else node.set_policy(new)
        return _report(node, before, after, args, applied=not args.dry_run)


def cmd_apply(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info = node.info()
        pf = policyfile.load(args.file, info)
        before, new = node.plan(pf.settings, preset=pf.preset, info=info)
        after = new if args.dry_run else node.set_policy(new)
        return _report(node, before, after, args, applied=not args.dry_run)


def cmd_diff(args: argparse.Namespace) -> int:
    args.dry_run = True
    with open_node(args) as node:
        info = node.info()
        pf = policyfile.load(args.file, info)
        before, new = node.plan(pf.settings, preset=pf.preset, info=info)
        if args.json:
            print_json(jsonout.dump(jsonout.PolicyDiffDoc.make(file=args.file,
                                                               changes=jsonout.changes(before, new, info))))
        else:
            out.print(render.diff_table(before.diff(new, info), "current", args.file))
        return 0


def cmd_save(args: argparse.Namespace) -> int:
    with open_node(args) as node:
        info = node.info()
        policyfile.save(args.file, node.get_policy(), info)
        out.print(f"wrote {args.file}")
        return 0


def cmd_lender_budget(args: argparse.Namespace) -> int:
    target = budget.parse_slowdown(args.max_slowdown)
    hbm = budget.parse_hbm(args.hbm) if args.hbm is not None else None
    with open_node(args) as node:
        info = node.info()
        topo = None
        if hbm is None:
            from ..topology import discover

            topo = discover(info)
        budgets = budget.plan(info, args.gpus, target, hbm_mbyte_per_s=hbm, topology=topo)
        before, new = node.plan(budget.settings(budgets, info), info=info)
        after = new if args.dry_run else node.set_policy(new)
        if args.json:
            print_json(jsonout.dump(jsonout.LenderBudgetDoc.make(
                max_slowdown=target, share=budgets[0].share,
                budgets=[jsonout.LenderBudgetRow(gpu=b.gpu, uuid=b.uuid, hbm_mbyte_per_s=b.hbm_mbyte_per_s,
                                                 hbm_source=b.hbm_source,
                                                 lend_traffic_mbyte_per_s=b.lend_traffic_mbyte_per_s)
                         for b in budgets],
                applied=not args.dry_run, generation=after.generation, preset=after.preset_name,
                changes=jsonout.changes(before, after, info))))
            return 0
        out.print(render.lender_budget_table(budgets, info, before, target))
        roles = {e.uuid.lower(): e.role_name for e in after.gpus}
        idle = [f"GPU {b.gpu} ({roles[b.uuid.lower()]})" for b in budgets
                if roles.get(b.uuid.lower()) in ("none", "harvester")]
        if idle:
            out.print(f"note: not lending now, {', '.join(idle)}: a budget applies once the role is lender or both")
        if not before.diff(after, info):
            out.print("no change: the budgets are already set")
        elif args.dry_run:
            out.print("dry run: nothing sent")
        else:
            out.print(f"applied: generation {after.generation}, preset {after.preset_name}")
        return 0


def cmd_keys(args: argparse.Namespace) -> int:
    if args.json:
        print_json(jsonout.dump(jsonout.policy_keys()))
        return 0
    keys = describe_keys()
    from rich.table import Table

    t = Table(title="Policy keys (presets: " + ", ".join(preset_names()) + ")", title_justify="left")
    for col in ("key", "type", "values", "meaning"):
        t.add_column(col)
    for k in keys:
        if k["choices"]:
            values = " | ".join(k["choices"])
        elif k["type"] == "size":
            values = "size or unlimited" if k["unlimited_allowed"] else "size"
        elif k["type"] == "rate":
            values = ("0 (off) or " if k["off_allowed"] else "") + f"{format_rate(k['min'])}..{format_rate(k['max'])}"
        else:
            values = f"{k['min']}..{k['max']}" if k["type"] == "int" else "true|false"
        t.add_row(k["key"], k["type"], values, k["help"])
    out.print(t)
    return 0


EXAMPLES = """examples:
  huvmctl policy show
  huvmctl policy set prefetch_chunks=16 prefetch_stride=2 peer_select=fewest-lent
  huvmctl policy set gpu.0.role=harvester gpu.1.lend_limit_bytes=8GiB gpu.all.lend_reserve_bytes=1GiB
  huvmctl policy set gpu.1.lend_traffic_mbyte_per_s=18GB/s   # guests' traffic budget; =off: none
  huvmctl policy lender-budget 1 3 --max-slowdown 2%   # the budget from a slowdown target and NVML's HBM
  huvmctl policy preset huvm-atc22 --dry-run
  huvmctl policy save current.toml && huvmctl policy diff tuned.toml && huvmctl policy apply tuned.toml
"""


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("policy", help="show or change the policy",
                       description="Show or change the policy. Every change is checked (unknown key, type, "
                                   "range, contradictions) and validated by the policy core before it is "
                                   "sent, then applied atomically by the module.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = p.add_subparsers(dest="policy_cmd", metavar="{show,set,preset,apply,diff,save,keys,lender-budget}",
                          required=True)
    q = ps.add_parser("show", parents=parents, help="the policy now in force")
    q.add_argument("--toml", action="store_true", help="print as a policy file")
    q.set_defaults(func=cmd_show)
    q = ps.add_parser("set", parents=parents, help="set KEY=VALUE ... (see `policy keys`)")
    q.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    q.add_argument("-n", "--dry-run", action="store_true", help="check and show the change, send nothing")
    q.set_defaults(func=cmd_set)
    q = ps.add_parser("preset", parents=parents, help="switch to a preset: " + ", ".join(preset_names())
                      + " (huvm: ours, recommended, alias default; the module starts at stock)")
    q.add_argument("name", metavar="NAME")
    q.add_argument("-n", "--dry-run", action="store_true")
    q.set_defaults(func=cmd_preset)
    q = ps.add_parser("apply", parents=parents, help="apply a policy file (TOML)")
    q.add_argument("file", metavar="FILE")
    q.add_argument("-n", "--dry-run", action="store_true")
    q.set_defaults(func=cmd_apply)
    q = ps.add_parser("diff", parents=parents, help="what applying FILE would change")
    q.add_argument("file", metavar="FILE")
    q.set_defaults(func=cmd_diff)
    q = ps.add_parser("save", parents=parents, help="write the current policy to FILE (TOML)")
    q.add_argument("file", metavar="FILE")
    q.set_defaults(func=cmd_save)
    q = ps.add_parser("keys", parents=parents, help="list the settable keys")
    q.set_defaults(func=cmd_keys)
    q = ps.add_parser("lender-budget", parents=parents,
                      help="set lenders' guest-traffic budget (gpu.N.lend_traffic_mbyte_per_s) for a slowdown target",
                      description="Set each GPU's guest-traffic budget so that guests' copies take at most the "
                                  "share 1 - 1/(1 + target) of its HBM bandwidth (a memory-bound lender then "
                                  "runs at most target slower; docs/policy.md, 'Lender target'). The HBM "
                                  "bandwidth comes from NVML (bus width x max memory clock) or --hbm. All "
                                  "GPUs are set in one policy change, or none.")
    q.add_argument("gpus", nargs="+", metavar="GPU", help="an index, a UUID (or a unique prefix) or all")
    q.add_argument("--max-slowdown", required=True, metavar="SHARE",
                   help="the lender's target slowdown: 2%% or 0.02")
    q.add_argument("--hbm", metavar="RATE", help="HBM bandwidth of every GPU named (900GB/s); default: NVML's")
    q.add_argument("-n", "--dry-run", action="store_true", help="compute and show, send nothing")
    q.set_defaults(func=cmd_lender_budget)
