"""What the SimSource runs: a node and its tenants, from ``--sim-config``.

- nothing: huvm's shipped consolidation example (``huvm/examples/consolidation.toml``);
- an experiment file (``[experiment]``, ``[node]``, ``[[tenant]]``, as ``huvmctl experiment run`` takes):
  its node and tenants under its policy ``huvm`` (else its first): the tenants' GPU settings (role, lending
  limit and reserve) and the policy's own table applied, as ``huvmctl --sim --sim-config FILE`` does;
- a simulated node (a preset name such as ``aws-p3.8xlarge``, or a TOML file with a ``[node]`` table, as
  ``huvmctl --sim-config`` takes): that node with a default load, GPU 0 streaming over 1.5 times its
  memory and the other GPUs lending.

Everything is read through huvm's own loaders (:class:`huvm.tomlpos.TomlDoc`, :func:`huvmlab.parse_experiment`,
:class:`huvmlab.SimBackend`), so files mean the same here as for huvmctl, and a wrong one gets the same error:
``file:line: key: message``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huvm.tomlpos import TomlDoc

DEFAULT_EXAMPLE = "consolidation.toml"


@dataclass
class Scenario:
    """A node config (huvmlab.NodeConfig), its tenants (huvmlab.TenantSpec) and its policy: a whole
    huvm Policy (an experiment's), or per-GPU settings (``gpu.N.key=value`` words for huvm's policy parser)
    over the preset; named for the status line."""

    name: str
    config: Any
    tenants: list[Any]
    settings: list[str] = field(default_factory=list)
    policy_preset: str = "huvm"
    policy: Any = None


def example_path(name: str = DEFAULT_EXAMPLE) -> Path:
    import huvm

    return Path(huvm.__file__).resolve().parent / "examples" / name


def from_experiment(doc: TomlDoc) -> Scenario:
    """The node and tenants of an experiment file under its policy "huvm" (else its first), set up exactly as
    ``huvmctl --sim --sim-config FILE`` sets them up (:meth:`huvmlab.SimBackend.from_experiment`:
    every table checked, traces loaded, footprints and the policy checked against the node), not yet run."""
    from huvm.client import Node
    from huvmlab import SimBackend, parse_experiment

    name = parse_experiment(doc).name
    backend = SimBackend.from_experiment(doc, run=False)
    node = Node(backend)
    try:
        sim = backend.node
        return Scenario(f"{name} on {sim.config.name}", sim.config, list(sim.tenants),
                        policy_preset=str(sim.preset), policy=node.get_policy())
    finally:
        node.close()


def default_load(config: Any) -> list[Any]:
    """GPU 0 streams over 1.5x its usable memory (a harvester under pressure); the others run a small
    steady job and lend the rest."""
    from huvmlab import TenantSpec, workloads

    usable = int(config.usable_bytes(0))
    tenants = [TenantSpec(gpu=0, trace=workloads.streaming(usable * 3 // 2, passes=4), name="streaming",
                          steps=1000, role="harvester")]
    for g in range(1, int(config.gpu_count)):
        tenants.append(TenantSpec(gpu=g, trace=workloads.streaming(usable // 8, passes=2, name="steady"),
                                  name=f"steady{g}", background=True, role="lender"))
    return tenants


def load(sim_config: str | None) -> Scenario:
    """The scenario ``--sim-config`` names; huvm's ConfigError (file, line, key) when it is wrong."""
    if sim_config is None:
        path = example_path()
        if path.is_file():
            return from_experiment(TomlDoc(path))
        sim_config = "aws-p3.8xlarge"
    path = Path(sim_config)
    if path.is_file():
        doc = TomlDoc(path)  # huvm's TOML reading: errors as file:line (syntax, not UTF-8, not readable)
        if "tenant" in doc.data or "experiment" in doc.data:
            return from_experiment(doc)
    from huvmlab import SimBackend

    backend = SimBackend.from_config(sim_config)  # node presets and [node] files, huvm's way
    try:
        config = backend.node.config
        preset = str(backend.node.preset)
    finally:
        backend.close()
    tenants = default_load(config)
    roles = [f"gpu.{t.gpu}.role={t.role}" for t in tenants if t.role]
    return Scenario(f"streaming load on {config.name}", config, tenants, roles, preset)
