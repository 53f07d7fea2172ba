"""The packages' structure (issue 15 item 11, issue 27 item 2): three layers, control plane (huvm) <- lab
(huvmlab) <- TUI (huvm_top), each importing only the layers below it; no import cycles among their modules,
counting name-based imports (importlib, runpy, ``python -m`` strings, module names in tables); the libraries
never import a command line; the TUI uses the libraries' public objects only; the lab adds itself to the
control plane by entry point (huvm.registry), and the lab's old names under huvm still work, deprecated."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"huvm": ROOT / "pyctl" / "huvm", "huvmlab": ROOT / "pyctl" / "huvmlab",
            "huvm_top": ROOT / "tui" / "huvm_top"}
#: the layers, bottom up: a module may import its own layer and those before it
LAYERS = ("huvm", "huvmlab", "huvm_top")
#: module-level functions that import the module their first argument names
_NAME_IMPORTERS = {"import_module", "__import__", "run_module", "find_spec"}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for top, pkg in PACKAGES.items():
        for path in pkg.rglob("*.py"):
            rel = path.relative_to(pkg)
            if rel.parts[0] == "build":
                continue
            parts = [top, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer(name: str) -> int:
    return LAYERS.index(name.split(".")[0])


def _is_cli(name: str) -> bool:
    return any(name == f"{top}.cli" or name.startswith(f"{top}.cli.") for top in PACKAGES) \
        or name.endswith(".__main__") or name in ("huvm_top.main",)


#: the libraries: every module but the command lines (huvm.cli, huvmlab.cli, __main__), the TUI (an
#: application) and the build scripts setup runs
LIBRARY = sorted(m for m in MODULES if not _is_cli(m) and layer(m) < 2 and m not in ("huvm._build", "huvm._uvm_build"))


def _module_of(text: str) -> str | None:
    """The module a dotted string names (``huvmlab.sim.fidelity``, ``huvmlab.simbackend:open_backend``), or
    None (a bare top-level name, ``"huvm"``, is a word more often than an import)."""
    name = text.split(":", 1)[0]
    return name if "." in name and name in MODULES else None


def imports_of(name: str) -> set[str]:
    """The modules of the three packages that module ``name`` imports anywhere in its text -- at the top or inside
    a function, by import statement or by name: importlib.import_module / __import__ / runpy / find_spec of a
    string or of an f-string on ``__package__`` / ``__name__``, and any string that is exactly a module's name
    (a ``python -m`` argument, a table of modules to load, an entry point's value)."""
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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            mod = _module_of(node.value)
            if mod is not None:
                found.add(mod)
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            arg = node.args[0]
            if fn in _NAME_IMPORTERS and isinstance(arg, ast.JoinedStr) and len(arg.values) == 2:
                head, tail = arg.values
                if isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Name) and \
                        isinstance(tail, ast.Constant) and isinstance(tail.value, str):
                    prefix = {"__package__": package, "__name__": name}.get(head.value.id)
                    if prefix is not None:
                        found.add(prefix + tail.value)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
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
    assert "huvmlab.sim.schema" in imports_of("huvmlab.experiment.spec")  # from ..sim.schema import NodeTable
    assert "huvm.tomlpos" in imports_of("huvmlab.experiment.spec")  # from huvm.tomlpos import ...
    assert "huvm.registry" in imports_of("huvm.client")
    assert "huvmlab.sim.fidelity" in imports_of("huvmlab.cli.tools")  # a table of modules run by name
    assert {"huvmlab.experiment.twin", "huvmlab.experiment.emulated"} <= imports_of("huvmlab.experiment")
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_name_based_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that reaches another only by name (as runner.py once reached twin.py) is an edge."""
    fake = tmp_path / "huvmlab" / "experiment"
    fake.mkdir(parents=True)
    (fake / "runner.py").write_text(
        "import importlib, subprocess, sys\n"
        "def f():\n"
        "    importlib.import_module(f'{__package__}.twin')\n"
        "    subprocess.run([sys.executable, '-m', 'huvmlab.experiment.emulated'])\n"
        "    __import__('huvm.policy')\n")
    monkeypatch.setitem(MODULES, "huvmlab.experiment.runner", fake / "runner.py")
    assert {"huvmlab.experiment.twin", "huvmlab.experiment.emulated", "huvm.policy"} <= \
        imports_of("huvmlab.experiment.runner")


def test_each_layer_imports_only_the_layers_below_it() -> None:
    """control plane (huvm) <- lab (huvmlab) <- TUI (huvm_top)."""
    upward = {m: sorted(d for d in deps if layer(d) > layer(m)) for m, deps in GRAPH.items()}
    assert {m: v for m, v in upward.items() if v} == {}


def test_the_control_plane_does_not_name_the_lab_at_all() -> None:
    """Not even in a string (an entry point, a module to import later: ``huvmlab.x``, ``"huvmlab"``; a message
    may say the package's name in prose): the lab adds itself by entry point."""
    named: dict[str, list[int]] = {}
    for m, path in MODULES.items():
        if layer(m) != 0:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in docstrings and (re.search(r"\bhuvmlab\.\w", n.value) or n.value == "huvmlab")]
        lines += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name | ast.alias | ast.ImportFrom)
                  and "huvmlab" in str(getattr(n, "id", None) or getattr(n, "name", None) or getattr(n, "module", ""))]
        if lines:
            named[m] = sorted(lines)
    assert named == {}


def test_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def test_the_libraries_do_not_import_a_command_line() -> None:
    offenders = {m: sorted(filter(_is_cli, GRAPH[m])) for m in LIBRARY}
    assert {m: v for m, v in offenders.items() if v} == {}


def test_the_tui_uses_the_libraries_public_objects_only() -> None:
    """huvm_top imports the control plane's public modules (no _private one, no huvm.cli) and, from the lab,
    only the names huvmlab exports (huvmlab.__all__)."""
    import huvmlab

    bad: list[str] = []
    for m, path in MODULES.items():
        if layer(m) != 2:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                top = node.module.split(".")[0]
                if top == "huvmlab" and (node.module != "huvmlab" or
                                         any(a.name not in huvmlab.__all__ for a in node.names)):
                    bad.append(f"{m}: from {node.module} import {', '.join(a.name for a in node.names)}")
                elif top == "huvm" and (any(p.startswith("_") for p in node.module.split(".")) or
                                        _is_cli(node.module) or any(a.name.startswith("_") for a in node.names)):
                    bad.append(f"{m}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                bad += [f"{m}: import {a.name}" for a in node.names if a.name.split(".")[0] in ("huvm", "huvmlab")
                        and (a.name.startswith("huvmlab.") or "._" in a.name or _is_cli(a.name))]
    assert bad == []


def test_the_lab_adds_itself_by_entry_point_only() -> None:
    """Every huvm.* entry point of pyctl/pyproject.toml names a lab module (and the object exists)."""
    import importlib

    project = tomllib.loads((ROOT / "pyctl" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = {g: eps for g, eps in project["entry-points"].items() if g.startswith("huvm.")}
    assert {"huvm.backends", "huvm.commands", "huvm.moved", "huvm.moved_main"} <= set(groups)
    for group, eps in groups.items():
        for name, value in eps.items():
            module, _, attr = value.partition(":")
            assert module.split(".")[0] == "huvmlab" and module in MODULES, (group, name, value)
            obj = importlib.import_module(module)
            assert not attr or callable(getattr(obj, attr)), (group, name, value)
    # what is registered is what huvm.registry finds in this environment's metadata
    from huvm import registry

    assert set(registry.commands()) == set(groups["huvm.commands"])
    assert registry.backend_opener("sim") is importlib.import_module("huvmlab.simbackend").open_backend


def test_importing_every_library_module_loads_no_cli_module() -> None:
    code = ("import importlib, sys\n"
            f"for name in {LIBRARY!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('huvm', 'huvmlab') and\n"
            "             (m.split('.')[1:2] == ['cli'])))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_importing_the_control_plane_loads_no_lab_module() -> None:
    control = [m for m in LIBRARY if layer(m) == 0]
    code = ("import importlib, sys\n"
            f"for name in {control!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'huvmlab'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_test_doubles_are_not_in_the_packages() -> None:
    assert "huvm.testing" not in MODULES and "huvmlab.testing" not in MODULES
    assert "huvmlab.corenode" in MODULES  # a bare core as a backend; the tests' kernel stand-in builds on it


# ---- the lab's old names (huvm.moved), for one release ----

def _py(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT, env=env)


@pytest.mark.parametrize(("old", "instead", "usage"), [
    ("huvm.sim.calibrate", "huvmctl sim calibrate", "[--markdown]"),
    ("huvm.traces", "huvmctl trace gen|info|large|bundled", "{gen,info,large,bundled}"),
])
def test_python_m_of_an_old_name_runs_the_tool_after_one_notice_line(old: str, instead: str, usage: str) -> None:
    r = _py("-m", old, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"huvm: `python -m {old}` is deprecated and goes in the next release: use `{instead}`\n"
    assert r.stdout.startswith("usage:") and usage in r.stdout


def test_importing_an_old_name_gives_the_lab_module_with_a_deprecation_warning() -> None:
    r = _py("-W", "always::DeprecationWarning", "-c",
            "import huvm.sim.config as old, huvmlab.sim.config as new\n"
            "from huvm.experiment import run\n"
            "import huvmlab.experiment\n"
            "print(old is new, run is huvmlab.experiment.run)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True True"
    assert "DeprecationWarning: huvm.sim.config moved to huvmlab.sim.config; the old name goes in the next " \
           "release" in r.stderr
    r = _py("-c", "import huvm.no_such_module")
    assert r.returncode == 1 and "No module named 'huvm.no_such_module'" in r.stderr


def test_huvmctl_runs_the_lab_tools_with_their_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    from huvm.cli import main

    with pytest.raises(SystemExit) as info:
        main(["sim", "calibrate", "--help"])
    assert info.value.code == 0
    assert "[--markdown]" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["--debug", "trace", "large", "--help"])  # global options before it; the tool's own words after
    assert info.value.code == 0
    assert "outdir" in capsys.readouterr().out


def test_a_backend_kind_nobody_provides_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Without the lab's entry point (a control plane installed alone) ``--sim`` says so in one line, exit 2;
    an in-process registration (register_backend) opens it again."""
    from huvm import registry
    from huvm.cli import main

    monkeypatch.setattr(registry, "_backends", {})
    monkeypatch.setattr(registry, "_entry_points", lambda group: {})
    with pytest.raises(registry.BackendNotAvailable, match="no package provides the 'sim' backend"):
        registry.open_backend("sim")
    assert main(["--sim", "status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("huvmctl: error: no package provides the 'sim' backend") and err.count("\n") == 1

    from huvmlab.simbackend import open_backend

    registry.register_backend("sim", open_backend)
    assert main(["--sim", "status"]) == 0
