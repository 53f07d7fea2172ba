"""The control plane's extension points: backend kinds, huvmctl subcommands and moved module names that another
package adds (the lab, :mod:`huvmlab`), so that the control plane never imports it.

A package adds to a registry in one of two ways:

* by entry point (how an installed lab is found without the control plane naming it; ``pyctl/pyproject.toml``)::

      [project.entry-points."huvm.backends"]   # kind = a callable (config, live=...) -> Backend
      sim = "huvmlab.simbackend:open_backend"
      [project.entry-points."huvm.commands"]   # name = register(sub, parents), as huvm.cli's own subcommands
      experiment = "huvmlab.cli.experiment:register"
      [project.entry-points."huvm.moved"]      # old subpackage of huvm = its new home (huvm.moved)
      sim = "huvmlab.sim"

* or, in-process (tests, a lab not installed as a distribution), by calling :func:`register_backend` or
  :func:`register_command`; what is registered so wins over an entry point of the same name.

The control plane names its backend kinds (:data:`BACKEND_KINDS`: ``kernel`` it opens itself; ``sim`` is the
lab's simulated node) and opens any of them through :func:`open_backend`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from .errors import UsageError

if TYPE_CHECKING:
    from .backend import Backend

BACKEND_GROUP = "huvm.backends"
COMMAND_GROUP = "huvm.commands"

#: the backend kinds the control plane knows by name: the kernel device (its own) and the simulated node (the
#: lab's, registered under the same name)
BACKEND_KINDS: tuple[str, ...] = ("kernel", "sim")


class BackendOpener(Protocol):
    def __call__(self, config: str | None, *, live: bool = False) -> Backend: ...


#: register(sub, parents): adds one huvmctl subcommand (and its own subcommands) to ``sub``
CommandRegistrar = Callable[["argparse._SubParsersAction[Any]", Sequence[argparse.ArgumentParser]], None]

_backends: dict[str, BackendOpener] = {}
_commands: dict[str, CommandRegistrar] = {}


class BackendNotAvailable(UsageError):
    """A backend kind that no installed package provides (the lab not installed, a misspelt kind)."""


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def register_backend(kind: str, opener: BackendOpener) -> None:
    """Make ``kind`` openable with ``opener(config, live=...)`` in this process."""
    _backends[kind] = opener


def register_command(name: str, registrar: CommandRegistrar) -> None:
    """Add the huvmctl subcommand ``name`` (``registrar(sub, parents)`` adds it) in this process."""
    _commands[name] = registrar


def backend_opener(kind: str) -> BackendOpener:
    """The opener of backend kind ``kind``: registered in-process, else the entry point of that name."""
    if kind in _backends:
        return _backends[kind]
    ep = _entry_points(BACKEND_GROUP).get(kind)
    if ep is None:
        raise BackendNotAvailable(f"no package provides the {kind!r} backend (the simulated node is in huvmlab, "
                                  "installed with huvm: pip install huvm)" if kind == "sim" else
                                  f"no package provides the {kind!r} backend")
    opener: BackendOpener = ep.load()
    _backends[kind] = opener
    return opener


def open_backend(kind: str, config: str | None = None, *, live: bool = False) -> Backend:
    """A backend of kind ``kind`` (not ``kernel``: :func:`huvm.client.open_kernel` probes the device) built
    from ``config`` (for ``sim``: a node preset, a node file or an experiment file)."""
    return backend_opener(kind)(config, live=live)


def commands() -> dict[str, CommandRegistrar]:
    """The huvmctl subcommands other packages add: entry points of :data:`COMMAND_GROUP`, then in-process ones
    (in name order, after the control plane's own)."""
    found: dict[str, CommandRegistrar] = {name: ep.load() for name, ep in sorted(_entry_points(COMMAND_GROUP).items())}
    found.update(_commands)
    return found

