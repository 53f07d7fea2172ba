"""The library's structure (issue 15, item 11): the library never imports the CLI, and its modules import
one another without cycles, so each layer can be used (and tested) without the ones above it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pyctl" / "huvm"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        if "build" in path.relative_to(PACKAGE).parts[:1]:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_cli(name: str) -> bool:
    return name == "huvm.cli" or name.startswith("huvm.cli.") or name.endswith(".__main__")


#: the library: every module but the command line (huvm.cli, __main__) and the build scripts run by setup
LIBRARY = sorted(m for m in MODULES if not _is_cli(m) and m not in ("huvm._build", "huvm._uvm_build"))


def imports_of(name: str) -> set[str]:
    """The huvm modules that module name imports anywhere in its text (at the top or inside a function)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_of_every_form() -> None:
    assert {"huvm.abi", "huvm.header", "huvm.schema", "huvm.errors"} <= imports_of("huvm.policy")  # from . import
    assert "huvm.sim.schema" in imports_of("huvm.experiment.spec")  # from ..sim.schema import NodeTable
    assert "huvm.simbackend" in imports_of("huvm.client")  # inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_does_not_import_the_cli() -> None:
    offenders = {m: sorted(filter(_is_cli, imports_of(m))) for m in LIBRARY}
    assert {m: v for m, v in offenders.items() if v} == {}


def test_no_import_cycle_among_library_modules() -> None:
    graph = {m: imports_of(m) & set(LIBRARY) for m in LIBRARY}
    assert cycles(graph) == []


def test_importing_every_library_module_loads_no_cli_module() -> None:
    code = ("import importlib, sys\n"
            f"for name in {LIBRARY!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m == 'huvm.cli' or m.startswith('huvm.cli.')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_test_doubles_are_not_in_the_package() -> None:
    assert "huvm.testing" not in MODULES
    assert "huvm.corenode" in MODULES  # a bare core as a backend; the tests' kernel stand-in builds on it
