"""The lab's tools as huvmctl subcommands: each runs a module's own ``main(argv)`` with the words after it.

They were ``python -m`` entry points (``python -m huvm.sim.fidelity --markdown``); now one entry point, huvmctl,
has them (``huvmctl sim fidelity --markdown``), and the old names run them for one release with a notice
(:mod:`huvmlab.cli.legacy`). huvmctl's ``main`` hands every word after the tool's name to the tool unparsed
(``--help`` included: the tool's own help), so each tool keeps its own options.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence

#: (huvmctl words, module whose main(argv) runs, words put before the user's, help)
TOOLS: tuple[tuple[tuple[str, str], str, tuple[str, ...], str], ...] = (
    (("sim", "fidelity"), "huvmlab.sim.fidelity", (), "the simulator against the measured costs (docs/simulator.md)"),
    (("sim", "matrix"), "huvmlab.sim.matrix", (), "the evaluation matrix of policies and scenarios"),
    (("sim", "verdict"), "huvmlab.sim.verdict", (), "the matrix's verdict per claim"),
    (("sim", "replicate"), "huvmlab.sim.replicate", (), "the published experiments replicated on the simulator"),
    (("sim", "calibrate"), "huvmlab.sim.calibrate", (), "the simulator's calibration tables"),
    (("sim", "bench"), "huvmlab.sim.bench", (), "the simulator's own speed on a Llama-7B-sized trace"),
    (("trace", "large"), "huvmlab.traces.cli", ("large",), "generate the large trace set into OUTDIR"),
    (("trace", "bundled"), "huvmlab.traces.cli", ("bundled",), "regenerate the bundled traces into OUTDIR"),
    (("experiment", "managed-alloc"), "huvmlab.experiment.managed_alloc", (),
     "run a PyTorch script on RMM's managed pool (check: which RMM package this PyTorch needs)"),
)

#: the command each old ``python -m`` name became (:mod:`huvmlab.cli.legacy`)
REPLACES: dict[str, str] = {
    "huvm.sim.fidelity": "huvmctl sim fidelity", "huvm.sim.matrix": "huvmctl sim matrix",
    "huvm.sim.verdict": "huvmctl sim verdict", "huvm.sim.replicate": "huvmctl sim replicate",
    "huvm.sim.calibrate": "huvmctl sim calibrate", "huvm.sim.bench": "huvmctl sim bench",
    "huvm.traces": "huvmctl trace gen|info|large|bundled",
    "huvm.experiment.managed_alloc": "huvmctl experiment managed-alloc",
    "huvm.experiment.gpucheck": "huvmctl gpu-check",
    "huvm.experiment.emulated": "huvmctl experiment run (an emulated experiment file)",
}


def runner(module: str, prefix: Sequence[str]) -> Callable[[Sequence[str]], int]:
    def run(argv: Sequence[str]) -> int:
        main: Callable[[list[str]], int | None] = importlib.import_module(module).main
        return int(main([*prefix, *argv]) or 0)

    return run


def add_tools(group: str, sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the tools under ``huvmctl GROUP`` to that subcommand's subparsers ``sub``."""
    for (g, name), module, prefix, help in TOOLS:
        if g != group:
            continue
        q = sub.add_parser(name, help=help, add_help=False,
                           description=f"{help}; `huvmctl {g} {name} --help` for its options")
        q.add_argument("args", nargs=argparse.REMAINDER, metavar="...", help="its options")
        run = runner(module, prefix)
        q.set_defaults(tool=run, func=lambda a, run=run: run(a.args))
