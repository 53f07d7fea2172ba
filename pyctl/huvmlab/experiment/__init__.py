"""Declarative experiments: a TOML file in, an output folder of data, plots and a report out.

    from huvmlab import experiment
    spec = experiment.load("pyctl/huvm/examples/consolidation.toml")
    result, files = experiment.run_to(spec, "out/demo")

See :mod:`huvmlab.experiment.spec` for the file format and docs/experiments.md for the outputs.
"""

from __future__ import annotations

# emulated and twin add the executors of the emulated node kind and of --node sim-twin to runner's tables
from . import emulated, twin  # noqa: F401
from .executor import Executor, NodeRecord
from .report import rich_tables
from .results import ExperimentResult, RunKey, RunResult
from .runner import PlannedRun, executor_for, plan, run, run_to
from .spec import ExperimentSpec, load
from .summary import PolicyRow, policy_rows

__all__ = ["Executor", "ExperimentResult", "ExperimentSpec", "NodeRecord", "PlannedRun", "PolicyRow", "RunKey",
           "RunResult", "executor_for", "load", "plan", "policy_rows", "rich_tables", "run", "run_to"]

