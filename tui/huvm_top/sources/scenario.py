"""What the SimSource runs: a node and its tenants, from ``--sim-config``.

- nothing: huvm's shipped consolidation example (``huvm/examples/consolidation.toml``);
- an experiment file (``[experiment]``, ``[node]``, ``[[tenant]]``, as ``huvmctl experiment run`` takes):
  its node and tenants, with the tenants' GPU settings (role, lending limit and reserve) applied;
- a simulated node (a preset name such as ``aws-p3.8xlarge``, or a TOML file with a ``[node]`` table, as
  ``huvmctl --sim-config`` takes): that node with a default load, GPU 0 streaming over 1.5 times its
  memory and the other GPUs lending.

Everything is read through huvm's own loaders (:mod:`huvm.experiment.spec`, :mod:`huvm.simbackend`,
:mod:`huvm.traces`), so files mean the same here as for huvmctl.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huvm import errors as herr

DEFAULT_EXAMPLE = "consolidation.toml"


@dataclass
class Scenario:
    """A node config (huvm.sim.NodeConfig), its tenants (huvm.sim.TenantSpec) and per-GPU settings
    (``gpu.N.key=value`` words for huvm's policy parser), named for the status line."""

    name: str
    config: Any
    tenants: list[Any]
    settings: list[str] = field(default_factory=list)
    policy_preset: str = "huvm"


def example_path(name: str = DEFAULT_EXAMPLE) -> Path:
    import huvm

    return Path(huvm.__file__).resolve().parent / "examples" / name


def _is_experiment(path: Path) -> bool:
    import tomllib

    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError):  # TOMLDecodeError, UnicodeDecodeError
        return False  # huvm's loaders report the problem with file and line
    return "experiment" in data or "tenant" in data


def from_experiment(path: Path) -> Scenario:
    from huvm import traces
    from huvm.experiment import spec as es
    from huvm.sim.config import NodeConfig
    from huvm.sim.tenants import TenantSpec

    spec = es.load(path)
    if spec.real_node:
        raise herr.ConfigError("node.preset = \"real\": huvm-top --sim needs a simulated node", file=str(path))
    config = NodeConfig.from_dict({"preset": spec.node_preset, **spec.node_options})
    tenants = []
    settings: list[str] = []
    loaded: dict[str, Any] = {}
    for t in spec.tenants:
        trace = None
        if t.trace:
            if t.trace not in loaded:
                ref = t.trace
                src = traces.bundled(ref.split(":", 1)[1]) if ref.startswith("bundled:") else Path(ref)
                loaded[ref] = traces.load(src).to_sim_events(config.gpu_preset)
            trace = loaded[t.trace]
        tenants.append(TenantSpec(gpu=t.gpu, trace=trace, name=t.name, steps=max(t.steps, 1),
                                  background=t.steps == 0, static_bytes=t.static_bytes, start_ns=t.start_ns,
                                  managed=t.managed))
        settings += [f"gpu.{t.gpu}.{k}={v}" for k, v in t.gpu_settings]
    return Scenario(f"{spec.name} on {config.name}", config, tenants, settings)


def default_load(config: Any) -> list[Any]:
    """GPU 0 streams over 1.5x its usable memory (a harvester under pressure); the others run a small
    steady job and lend the rest."""
    from huvm.sim import workloads
    from huvm.sim.tenants import TenantSpec

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
            return from_experiment(path)
        sim_config = "aws-p3.8xlarge"
    path = Path(sim_config)
    if path.is_file() and _is_experiment(path):
        return from_experiment(path)
    from huvm.simbackend import SimBackend

    backend = SimBackend.from_config(sim_config)  # node presets and [node] files, huvm's way
    try:
        config = backend.node.config
        preset = str(backend.node.preset)
    finally:
        backend.close()
    tenants = default_load(config)
    roles = [f"gpu.{t.gpu}.role={t.role}" for t in tenants if t.role]
    return Scenario(f"streaming load on {config.name}", config, tenants, roles, preset)
