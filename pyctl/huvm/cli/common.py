"""Shared CLI plumbing: consoles, JSON output, opening the node from the global options."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from .. import client


def _width() -> int | None:
    """Terminal width on a TTY; 160 columns when piped (rich's default of 80 wraps the wide tables)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return None
    return 160


out = Console(highlight=False, soft_wrap=False, width=_width())
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def print_jsonl(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def add_verb(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,  # type: ignore[type-arg]
             examples: Sequence[str], parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Add the subcommand ``name``: its ``description``, then ``examples`` (command lines, one a line) under
    "examples:" in the epilog, both laid out as written."""
    return sub.add_parser(name, parents=list(parents), help=help, description=description,  # type: ignore[no-any-return]
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def note(text: str) -> None:
    err.print(f"huvmctl: note: {text}", markup=False)


def open_node(args: argparse.Namespace, *, sim_live: bool = False) -> client.Node:
    node = client.open(args.backend, args.device, sim_config=args.sim_config, sim_fallback=args.sim_fallback,
                       sim_live=sim_live)
    if node.note:
        note(node.note)
    return node
