"""huvmctl experiment run FILE | sim run CONFIG | sim presets."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from huvm.cli.common import add_verb, err, out, print_json

from .tools import add_tools


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *a: Any, **kw: Any) -> int:
        return 0

    def update(self, *a: Any, **kw: Any) -> None:
        return None


def _progress(enabled: bool) -> Any:
    if not enabled:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True)


def _run(args: argparse.Namespace, outdir: Path | None) -> int:
    from .. import experiment

    spec = experiment.load(args.file)
    show = not args.json and not args.no_progress and err.is_terminal
    t0 = time.monotonic()
    with _progress(show) as bar:
        task = bar.add_task(spec.name, total=len(experiment.plan(spec)))

        def tick(run: experiment.PlannedRun, i: int, n: int) -> None:
            bar.update(task, completed=i, total=n, description=f"{spec.name}: {run.key.run_id}")

        node = getattr(args, "node", None)
        if outdir is None:
            res = experiment.run(spec, tick, node=node)
            files: list[Path] = []
        else:
            res, files = experiment.run_to(spec, outdir, tick, node)
        bar.update(task, completed=len(res.runs), total=len(res.runs))
    elapsed = time.monotonic() - t0
    if args.json:
        from huvm import jsonout

        from ..experiment.output import summary_dict

        d = summary_dict(res)
        print_json(jsonout.dump(jsonout.ExperimentDoc.make(
            experiment=d["experiment"], node=d["node"], sweep_key=d["sweep_key"], results=d["results"],
            tenants=d["tenants"], notes=d["notes"], files=[str(f) for f in files], node_record=d["node_record"])))
        return 0
    for table in experiment.rich_tables(res):
        out.print(table)
    kind = res.runs[0].node.get("kind", "sim") if res.runs else spec.node_kind
    what = {"sim": "simulated", "emulated": "emulated", "local": "local"}.get(kind, kind)
    if node is not None:
        what = f"simulated (the emulated node's twin, granularity {res.runs[0].node.get('granularity', 1):g})" \
            if res.runs else "simulated"
    out.print(f"{len(res.runs)} {what} runs in {elapsed:.1f} s (wall clock)")
    if outdir is not None:
        out.print(f"report: {outdir / 'report.md'}")
        out.print(f"plots:  {outdir / 'plots'}/ ({', '.join(f.name for f in files if f.suffix == '.png')})")
        out.print(f"data:   {outdir / 'data'}/ (Parquet and CSV: results, runs, tenants, counters, traffic, "
                  "samples)")
    return 0


def cmd_experiment_run(args: argparse.Namespace) -> int:
    outdir = Path(args.out) if args.out else Path("out") / Path(args.file).stem
    return _run(args, outdir)


def cmd_experiment_compare(args: argparse.Namespace) -> int:
    from ..experiment.compare import compare, format_count, format_rel

    c = compare(args.run_a, args.run_b, raw=args.raw, links=args.links)
    if args.markdown:
        from ..experiment.compare import markdown

        print(markdown(c), end="")
        return 0
    if args.json:
        from huvm import jsonout

        print_json(jsonout.dump(jsonout.ExperimentCompareDoc.make(**c.to_dict())))
        return 0
    from rich.table import Table

    def side(name: str, s: Any) -> str:
        scale = "" if s.scale == 1.0 else f", scale {s.scale:g}"
        return f"{name}: {s.path} ({s.experiment}, {s.node_kind} node {s.node}{scale})"

    out.print(side("A", c.a), soft_wrap=True, markup=False)
    out.print(side("B", c.b), soft_wrap=True, markup=False)
    t = Table(title="B against A per policy (B vs A: relative error)", title_justify="left")
    for i, h in enumerate(("sweep", "policy", "counter", "A", "B", "B vs A")):
        t.add_column(h, justify="left" if i < 3 else "right")
    for r in c.rows:
        t.add_row("-" if r.sweep_value is None else r.sweep_value, r.policy, r.counter, format_count(r.a),
                  format_count(r.b), format_rel(r.rel_error))
    out.print(t)
    for n in c.notes:
        out.print(f"note: {n}")
    return 0


def cmd_sim_run(args: argparse.Namespace) -> int:
    return _run(args, None)


def cmd_sim_presets(args: argparse.Namespace) -> int:
    from huvm import jsonout
    from huvm.units import format_size

    from ..sim.config import PRESET_ALIASES, PRESETS

    doc = jsonout.SimPresetsDoc.make(presets=[
        jsonout.SimPreset(name=n, gpu_count=len(c.gpus), gpu_name=c.gpus[0].name.split(" #")[0],
                          memory_bytes=c.gpus[0].memory_bytes, nvswitch=c.nvswitch,
                          aliases=[a for a, t in PRESET_ALIASES.items() if t == n], source=c.source)
        for n, c in PRESETS.items()])
    if args.json:
        print_json(jsonout.dump(doc))
        return 0
    from rich.table import Table

    t = Table(title="Simulated node presets", title_justify="left")
    for col in ("name", "gpus", "gpu", "memory", "aliases"):
        t.add_column(col)
    for r in doc.presets:
        t.add_row(r.name, str(r.gpu_count), r.gpu_name, format_size(r.memory_bytes), ", ".join(r.aliases))
    out.print(t)
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "experiment", help="run a declarative experiment (TOML) into an output folder",
                 description="Run an experiment file on its node ([node] kind: the simulated node, the "
                             "emulated one in qemu, or this machine's GPUs): every policy (and the "
                             "unlimited-memory ideal), sweep value and repetition; write data "
                             "(Parquet, CSV), plots (PNG) and report.md. Compare two runs' counters.",
                 examples=["huvmctl experiment run pyctl/huvm/examples/consolidation.toml",
                           "huvmctl experiment run pyctl/huvm/examples/spare-memory-sweep.toml --out out/fig9",
                           "huvmctl experiment run pyctl/huvm/examples/two-harvesters-emulated.toml --node sim-twin "
                           "--out out/th-twin",
                           "huvmctl experiment compare out/th-twin out/two-harvesters-emulated"])
    es = p.add_subparsers(dest="experiment_cmd", metavar="{run,compare,managed-alloc}", required=True)
    q = es.add_parser("run", parents=parents, help="run FILE")
    q.add_argument("file", metavar="FILE")
    q.add_argument("--out", metavar="DIR", help="output folder (default: out/<file stem>)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.add_argument("--node", metavar="sim-twin", help="run elsewhere than the file's node: sim-twin runs an "
                                                      "emulated file on the simulator at the emulated node's "
                                                      "granularity (its simulated twin, the cross-check's reference)")
    q.set_defaults(func=cmd_experiment_run)
    q = es.add_parser("compare", parents=parents, help="two runs' counters side by side (e.g. sim vs emulated)",
                      description="Put two output folders of an experiment side by side, per policy: evictions "
                                  "to peer/host, pre-evictions, fetch-backs, give-backs, faults and bytes per "
                                  "link, with each counter's relative error (B vs A; A is the reference).")
    q.add_argument("run_a", metavar="RUN_A", help="output folder (the reference)")
    q.add_argument("run_b", metavar="RUN_B", help="output folder")
    q.add_argument("--raw", action="store_true", help="compare counts as recorded (default: divided by each "
                                                       "run's scale factor when the scales differ)")
    q.add_argument("--no-links", dest="links", action="store_false", help="totals only, no row per link")
    q.add_argument("--markdown", action="store_true", help="a Markdown table (for the docs' cross-check)")
    q.set_defaults(func=cmd_experiment_compare)
    add_tools("experiment", es)

    p = add_verb(sub, "sim", help="the simulated node: run a scenario, list node presets, the simulator's tools",
                 description="Run a scenario (an experiment file) on the simulated node and print "
                             "per-policy runtimes, counters and ratios to ideal, writing nothing; list the node "
                             "presets; run the simulator's tools (each with its own options: huvmctl sim TOOL "
                             "--help).",
                 examples=["huvmctl sim run pyctl/huvm/examples/consolidation.toml", "huvmctl sim presets",
                           "huvmctl sim fidelity --markdown", "huvmctl sim matrix --half evaluation"])
    ss = p.add_subparsers(dest="sim_cmd", metavar="{run,presets,fidelity,matrix,verdict,replicate,calibrate,bench}",
                          required=True)
    q = ss.add_parser("run", parents=parents, help="run CONFIG and print the comparison")
    q.add_argument("file", metavar="CONFIG")
    q.add_argument("--no-progress", action="store_true")
    q.set_defaults(func=cmd_sim_run)
    q = ss.add_parser("presets", parents=parents, help="list the simulated node presets")
    q.set_defaults(func=cmd_sim_presets)
    add_tools("sim", ss)
