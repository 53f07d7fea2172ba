"""Declarative experiments: a TOML file in, an output folder of data, plots and a report out.

    from huvmlab import experiment
    spec = experiment.load("pyctl/huvm/examples/consolidation.toml")
    result, files = experiment.run_to(spec, "out/demo")

See :mod:`huvmlab.experiment.spec` for the file format and docs/experiments.md for the outputs.
"""

from __future__ import annotations

from pathlib import Path

from . import twin  # noqa: F401  (adds the executor of --node sim-twin to runner's table)
from .executor import Executor, NodeRecord
from .report import rich_tables
from .results import ExperimentResult, RunKey, RunResult
from .runner import KIND_EXECUTORS, PlannedRun, executor_for, plan, run, run_to
from .spec import ExperimentSpec, load
from .summary import PolicyRow, policy_rows

__all__ = ["Executor", "ExperimentResult", "ExperimentSpec", "NodeRecord", "PlannedRun", "PolicyRow", "RunKey",
           "RunResult", "executor_for", "load", "plan", "policy_rows", "rich_tables", "run", "run_to"]


def _emulated(spec: ExperimentSpec, outdir: Path | None) -> Executor:
    """The emulated node's executor, imported when an experiment asks for it (emulated.py is also the guest's
    ``python -m`` entry point: imported with the package, runpy would run a second copy)."""
    from .emulated import EmulatedExecutor

    return EmulatedExecutor(spec, outdir)


KIND_EXECUTORS["emulated"] = _emulated
