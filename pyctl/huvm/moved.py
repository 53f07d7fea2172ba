"""The lab's old names under ``huvm`` (``huvm.sim``, ``huvm.experiment``, ``huvm.traces``, ...), for one release.

The simulator, traces, experiments and calibration moved to the lab package :mod:`huvmlab` (issue 27), which
builds on the control plane :mod:`huvm`, never the reverse. What users already type keeps working until the
next release:

* ``import huvm.sim.config`` (or ``from huvm.experiment import run``) gives the lab's module itself (the same
  object as ``huvmlab.sim.config``) and a :class:`DeprecationWarning`;
* ``python -m huvm.sim.fidelity ...`` prints one line on stderr naming what replaces it (``huvmctl sim
  fidelity``) and runs the lab's module as ``__main__``.

The control plane does not name the lab: the table of old and new names is the lab's, declared as entry points
of the group :data:`GROUP` (``pyctl/pyproject.toml``), and read only when a name under ``huvm.`` that the
control plane does not have is imported. :func:`install` (called by ``huvm/__init__.py``) puts the finder first
on :data:`sys.meta_path`, so that ``huvm.sim.config`` is never loaded a second time from the lab's directory.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import CodeType, ModuleType

#: the entry point group of the moved names: name = the old subpackage of huvm, value = its new home
GROUP = "huvm.moved"
#: the entry point group of the lab's runner of the old ``python -m`` names (one entry, ``run``)
MAIN_GROUP = "huvm.moved_main"

_HERE = os.path.dirname(os.path.abspath(__file__))
_table: dict[str, str] | None = None


def table() -> dict[str, str]:
    """{old name: new name} of the moved subpackages and modules (``{"huvm.sim": "huvmlab.sim", ...}``)."""
    global _table
    if _table is None:
        from importlib import metadata

        _table = {f"huvm.{ep.name}": ep.value for ep in metadata.entry_points(group=GROUP)}
    return _table


def new_name(fullname: str) -> str | None:
    """Where the module ``fullname`` (``huvm.sim.fidelity``) lives now, or None (not a moved name)."""
    parts = fullname.split(".")
    if len(parts) < 2 or parts[0] != "huvm" or parts[1].startswith("_"):  # no private module moved
        return None
    # the control plane's own modules are found by the path finder, without reading the table
    if os.path.exists(os.path.join(_HERE, parts[1] + ".py")) or \
            os.path.exists(os.path.join(_HERE, parts[1], "__init__.py")):
        return None
    target = table().get(f"huvm.{parts[1]}")
    return None if target is None else ".".join([target, *parts[2:]])


def _notice(old: str) -> None:
    warnings.warn(f"{old} moved to {new_name(old)}; the old name goes in the next release",
                  DeprecationWarning, stacklevel=3)


def run_main(old: str) -> None:
    """``python -m OLD``: the lab's runner of its old ``python -m`` names (notice, then the new module as
    ``__main__``), else one line saying the name is gone."""
    from importlib import metadata

    runner = next((ep for ep in metadata.entry_points(group=MAIN_GROUP) if ep.name == "run"), None)
    if runner is None or new_name(old) is None:
        sys.stderr.write(f"huvm: `python -m {old}` is gone: the lab package (huvmlab) is not installed\n")
        raise SystemExit(1)
    runner.load()(old, new_name(old))


class _Loader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        # the import system returns what sys.modules holds under the name after this: the lab's module itself
        _notice(self.old)
        sys.modules[self.old] = importlib.import_module(self.new)

    def get_code(self, fullname: str) -> CodeType:
        """runpy (``python -m huvm.sim.fidelity``) runs this code as ``__main__``."""
        old = fullname.removesuffix(".__main__") if fullname.endswith(".__main__") else fullname
        return compile(f"from huvm.moved import run_main\nrun_main({old!r})\n", f"<huvm.moved: {old}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("huvm."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(fullname, new),
                                              is_package=real.submodule_search_locations is not None)


_FINDER = _Finder()


def install() -> None:
    """Put the finder of the old names first on sys.meta_path (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
