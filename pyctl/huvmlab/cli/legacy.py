"""The old ``python -m huvm.X`` names of the lab's tools, for one release (entry point ``huvm.moved_main: run``,
called by :func:`huvm.moved.run_main`): one line on stderr naming the huvmctl subcommand that replaces the old
name, then the lab's module runs as ``__main__`` with the same arguments."""

from __future__ import annotations

import runpy
import sys

from .tools import REPLACES


def run(old: str, new: str) -> None:
    instead = REPLACES.get(old, "huvmctl --help")
    sys.stderr.write(f"huvm: `python -m {old}` is deprecated and goes in the next release: use `{instead}`\n")
    runpy.run_module(new, run_name="__main__", alter_sys=True)
