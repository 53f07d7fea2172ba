"""The simulated node as a backend: ioctls go in-process to huvmlab.sim.SimNode (the core's own dispatch).

``sim_config`` selects the node: None (the default preset, :data:`DEFAULT_PRESET`), a preset name
(``aws-p3.8xlarge``, ``dgx-a100``, ``hgx-h100``, ...), or a TOML file whose ``[node]`` table (or top level)
is a :meth:`huvmlab.sim.config.NodeConfig.from_dict` mapping (``preset`` plus overrides such as
``gpu_memory_bytes``), optionally with ``policy_preset`` (stock, huvm-atc22, huvm). An experiment file
(one with ``[[tenant]]`` tables) also works: its node is built under its policy "huvm" (else its first
policy), its tenants run to
completion, and the commands then see the counters of that run (``huvmctl --sim --sim-config
examples/consolidation.toml stats --pairs``). Each process gets a fresh node: policy changes made by one
``huvmctl`` call do not outlive it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huvm.errors import ConfigError, HuvmError
from huvm.tomlpos import TomlDoc

from .sim import backend

DEFAULT_PRESET = "aws-p3.8xlarge"


class SimBackend(backend.SimBackend):
    """:class:`huvmlab.sim.backend.SimBackend` with the ways to open one."""

    @classmethod
    def from_config(cls, sim_config: str | None = None, *, live: bool = False) -> SimBackend:
        from .sim.config import NodeConfig
        from .sim.errors import SimConfigError
        from .sim.node import PRESET_IDS, SimNode

        policy_preset = "huvm"
        try:
            if sim_config is None or not (sim_config.endswith(".toml") or Path(sim_config).is_file()):
                cfg = NodeConfig.preset(sim_config or DEFAULT_PRESET)
            else:
                doc = TomlDoc(sim_config)
                if "tenant" in doc.data:
                    return cls.from_experiment(doc, run=not live)
                table = doc.data.get("node", doc.data)
                if not isinstance(table, dict):
                    raise doc.error("expected a [node] table", "node")
                table = dict(table)
                path = ("node",) if "node" in doc.data else ()
                policy_preset = table.pop("policy_preset", policy_preset)
                if not isinstance(policy_preset, str) or policy_preset not in PRESET_IDS:
                    raise doc.error(f"expected one of {', '.join(PRESET_IDS)}, got {policy_preset!r}",
                                    *path, "policy_preset")
                try:
                    cfg = NodeConfig.from_dict(table)
                except SimConfigError as exc:
                    raise doc.error(exc.reason, *path, *exc.path) from None
            return cls(SimNode(cfg, preset=policy_preset))
        except SimConfigError as exc:
            raise ConfigError(f"simulated node: {exc}") from None
        except HuvmError:
            raise

    @classmethod
    def from_experiment(cls, doc: TomlDoc, *, run: bool = True) -> SimBackend:
        """The node of an experiment file under its "huvm" policy (else its first), its tenants run to
        completion (run), or added and left at time 0 for :meth:`advance` to drive."""
        from .experiment.results import RunKey
        from .experiment.runner import PlannedRun, Runner
        from .experiment.spec import parse

        spec = parse(doc)
        runner = Runner(spec)
        policy = next((p for p in spec.policies if p.name == "huvm"), spec.policies[0])
        sim, _node, _tenants, _settings = runner.prepare(PlannedRun(RunKey(policy.name, None, 0), policy))
        if run:
            sim.run()
        backend = cls(sim)
        backend.experiment = spec
        return backend

    def tenant_dicts(self) -> list[dict[str, Any]] | None:
        """The tenants of the experiment this node came from, under every policy of it (ideal and the alone
        baselines included), as :func:`huvmlab.experiment.output.tenant_dicts`; None without an experiment."""
        if self.experiment is None:
            return None
        from .experiment.output import tenant_dicts
        from .experiment.runner import run

        return tenant_dicts(run(self.experiment))


def open_backend(config: str | None = None, *, live: bool = False) -> SimBackend:
    """The ``sim`` backend kind of :mod:`huvm.registry` (entry point ``huvm.backends: sim``)."""
    return SimBackend.from_config(config, live=live)
