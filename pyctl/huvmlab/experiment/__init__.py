"""Declarative experiments: a TOML file in, an output folder of data, plots and a report out.

    from huvm import experiment
    spec = experiment.load("pyctl/huvm/examples/consolidation.toml")
    result, files = experiment.run_to(spec, "out/demo")

See :mod:`huvm.experiment.spec` for the file format and docs/experiments.md for the outputs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from .executor import Executor, NodeRecord
from .output import write
from .report import markdown, rich_tables
from .results import ExperimentResult, RunKey, RunResult
from .runner import PlannedRun, executor_for, plan, run
from .spec import ExperimentSpec, load
from .summary import PolicyRow, policy_rows

__all__ = ["Executor", "ExperimentResult", "ExperimentSpec", "NodeRecord", "PlannedRun", "PolicyRow", "RunKey",
           "RunResult", "executor_for", "load", "plan", "policy_rows", "rich_tables", "run", "run_to"]


def run_to(spec: ExperimentSpec, outdir: str | Path,
           progress: Callable[[PlannedRun, int, int], None] | None = None,
           node: str | None = None) -> tuple[ExperimentResult, list[Path]]:
    """Run spec and write outdir/: data/*.parquet|csv, plots/*.png, summary.json, report.md, the spec. node:
    another node than the file's (``"sim-twin"``, :func:`run`)."""
    out = Path(outdir)
    res = run(spec, progress, out, node)
    if out.exists():
        for sub in ("data", "plots"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    from .plots import all_plots  # matplotlib: imported only where plots are drawn

    files = write(res, out)
    files += all_plots(res, out)
    (out / "experiment.toml").write_text(spec.doc.text)
    files.append(out / "experiment.toml")
    report = out / "report.md"
    report.write_text(markdown(res, spec.doc.text, files, out))
    files.append(report)
    return res, files
