"""The TOML files' schemas (issue 15, item 4): where each key is (a real TOML parser, not line patterns), and
typed, ranged, located errors ``file:line: key: message`` for experiment, policy and node files."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvm import abi, policyfile
from huvm.errors import ConfigError, PolicyError
from huvm.policy import KEYS
from huvm.tomlpos import TomlDoc
from huvmlab.experiment.spec import load
from huvmlab.simbackend import SimBackend

# Text that line patterns misread: header- and key-like lines inside multi-line strings, a quoted key
# with a dot, a table written in two parts, an array of tables nested in another, values on several lines.
TRICKY = '''description = """
[node]
gpu = 3
"""
"a.b" = 1
[t]
x = [1,
  2]
[other]
z = 'q = 1'
[t.u]
y = { p = 1, q = { r = 2 } }
[[arr]]
k = 1
[[arr]]
k = 2
[[arr.sub]]
m = 1
[gpu."GPU-abc"]
role = "x"
'''


def test_key_lines_follow_the_toml_grammar() -> None:
    doc = TomlDoc("tricky.toml", TRICKY)
    assert doc.data["description"].startswith("[node]")
    lines = {key: doc.line(*key.split("/")) for key in (
        "description", "a.b", "t", "t/x", "t/x/1", "other/z", "t/u", "t/u/y", "t/u/y/q/r", "arr", "arr/0/k",
        "arr/1", "arr/1/k", "arr/1/sub/0/m", "gpu/GPU-abc/role")}
    assert lines == {"description": 1, "a.b": 5, "t": 6, "t/x": 7, "t/x/1": 8, "other/z": 10, "t/u": 11,
                     "t/u/y": 12, "t/u/y/q/r": 12, "arr": 13, "arr/0/k": 14, "arr/1": 15, "arr/1/k": 16,
                     "arr/1/sub/0/m": 18, "gpu/GPU-abc/role": 20}
    assert doc.line("node") is None and doc.line("gpu", "GPU-abc", "lend_limit_bytes") == 19  # nearest table
    # arrays' entries in brackets, tables' keys dotted
    assert doc.key_name("arr", "1", "sub", "0", "m") == "arr[1].sub[0].m"
    assert doc.key_name("gpu", "0", "role") == "gpu.0.role"


@pytest.mark.parametrize(("text", "line"), [("a = 1\na = 2\n", 2), ("[t]\nx = 1\n[t]\n", 3), ("a = [1,\n=]\n", 2),
                                            ("x = 1979-02-30\n", 1)])
def test_toml_syntax_errors_name_the_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError, match="TOML syntax") as info:
        TomlDoc("bad.toml", text)
    assert info.value.line == line and info.value.file == "bad.toml"


EXPERIMENT = '''[experiment]
name = "small"
description = """
[[tenant]]
steps = "one"
"""
policies = ["stock", "huvm", "tuned"]

[node]
preset = "aws-p3.8xlarge"
gpu_count = 2

[[tenant]]
name = "harvester"
gpu = 0
trace = "bundled:bfs-small"
steps = 1

[[tenant]]
name = "lender"
gpu = 1
trace = "bundled:lender-idle"
steps = 0
role = "lender"

[policy.tuned]
preset = "huvm"
prefetch_chunks = 8

[sweep]
key = "prefetch_chunks"
values = [
  4,
  8,
]
'''
MAX_STEPS = abi.lib.HUVM_SIM_MAX_STEPS
MAX_STATIC = abi.lib.HUVM_SIM_MAX_OP_NS


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "message"),
    [
        ("steps = 1\n", f"steps = {MAX_STEPS + 1}\n", 17, "tenant[0].steps",
         f"{MAX_STEPS + 1}: must be <= {MAX_STEPS}"),
        ("steps = 1\n", "steps = 1.5\n", 17, "tenant[0].steps", "expected an integer, got 1.5"),
        ("steps = 0\n", f"steps = 0\nstatic = {MAX_STATIC + 1}\n", 24, "tenant[1].static",
         f"{MAX_STATIC + 1}: must be <= {MAX_STATIC}"),
        ("steps = 0\n", 'steps = 0\nstatic = "257TiB"\n', 24, "tenant[1].static", "257TiB: must be <= 256TiB"),
        ("steps = 0\n", 'steps = 0\nstart_ms = inf\n', 24, "tenant[1].start_ms", "expected a finite number"),
        ("gpu = 1\n", f"gpu = {abi.MAX_GPUS}\n", 21, "tenant[1].gpu", f"must be <= {abi.MAX_GPUS - 1}"),
        ("gpu = 1\n", "", 19, "tenant[1].gpu", "missing required key"),
        ('role = "lender"', 'role = "lenders"', 24, "tenant[1].role", "expected one of none, harvester, lender, both"),
        ('role = "lender"', 'lend_limit_bytes = "8gb"', 24, "tenant[1].lend_limit_bytes", "ambiguous unit 'gb'"),
        ("prefetch_chunks = 8", "prefetch_chunks = 65", 28, "policy.tuned.prefetch_chunks",
         f"65: must be <= {abi.lib.HUVM_PREFETCH_MAX_CHUNKS}"),
        ("prefetch_chunks = 8", "preevict_chunks = 70000", 28, "policy.tuned.preevict_chunks",
         f"70000: must be <= {abi.lib.HUVM_PREEVICT_MAX_CHUNKS}"),
        ("prefetch_chunks = 8", "[policy.tuned.gpu.0]\nrole = 2", 29, "policy.tuned.gpu.0.role", "got 2"),
        ("gpu_count = 2", 'gpu_count = 2\ngpu_memory_bytes = "1MiB"', 12, "node.gpu_memory_bytes",
         "1MiB: must be >= 2MiB"),
        ("gpu_count = 2", "gpu_count = 2\n[node.costs]\nfault_batch_max = 0", 13, "node.costs.fault_batch_max",
         "0: must be >= 1"),
        ("gpu_count = 2", "gpu_count = 2\n[node.costs]\nprefetch_threshold = 101", 13,
         "node.costs.prefetch_threshold", "101: must be <= 100"),
        ("gpu_count = 2", 'gpu_count = 2\ngpus = [{ name = "a", memory_bytes = 1 }]', 12, "node.gpus[0].memory_bytes",
         "1: must be >= 2097152"),
        ('"huvm", "tuned"]', '"huvm", "tuned", "huvm"]', 7, "experiment.policies[3]", "listed twice"),
        ("  8,\n", "  4,\n", 32, "sweep.values", "distinct"),
        ("  8,\n", '  "8",\n', 34, "sweep.values[1]", "expected an integer, got '8'"),
        ("  8,\n", "  { prefetch_chunks = 99 },\n", 34, "sweep.values[1].prefetch_chunks", "99: must be <= 64"),
        ('key = "prefetch_chunks"', 'key = "tenant.lender.steps"\npolicies = ["huvm"]', 35, "sweep.values[1]",
         "expected an integer"),
    ],
)
def test_experiment_errors_name_file_line_key_and_limit(tmp_path: Path, old: str, new: str, line: int, key: str,
                                                        message: str) -> None:
    assert old in EXPERIMENT
    f = tmp_path / "e.toml"
    text = EXPERIMENT.replace(old, new, 1)
    if "tenant.lender.steps" in new:
        text = text.replace("  8,\n", '  "8",\n')
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(f)
    err = info.value
    assert (err.file, err.line, err.key) == (str(f), line, key), str(err)
    assert message in err.reason, str(err)
    assert str(err) == f"{f}:{line}: {key}: {err.reason}" and "\n" not in str(err)


def test_the_first_error_in_the_file_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.replace("steps = 0\n", 'steps = -1\nmanaged = "no"\n').replace("gpu = 0\n", "gpu = -1\n"))
    with pytest.raises(ConfigError) as info:
        load(f)
    assert (info.value.line, info.value.key) == (15, "tenant[0].gpu")


def test_the_example_experiment_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT)
    spec = load(f)
    assert [t.name for t in spec.tenants] == ["harvester", "lender"]
    assert spec.tenants[1].gpu_settings == (("role", "lender"),)
    assert spec.sweep is not None and spec.sweep.values == (4, 8)
    assert [p.name for p in spec.policies] == ["stock", "huvm", "tuned"]


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        ('[gpu.0]\nrole = "harvester"\nlend_reserve_bytes = "1GiB"\n\n'
         '[gpu.1]\nrole = "lender"\nlend_limit_bytes = -1\n', 7,
         "gpu.1.lend_limit_bytes", "-1: must be >= 0"),
        ('peer_usage_max_pct = 0\n', 1, "peer_usage_max_pct", "0: must be >= 1"),
        ('preevict_batch = 4097\n', 1, "preevict_batch", f"4097: must be <= {abi.lib.HUVM_PREEVICT_MAX_BATCH}"),
        ('hysteresis_ms = 1.0\n', 1, "hysteresis_ms", "expected an integer, got 1.0"),
        ('[gpu.0]\nindex = "zero"\n', 2, "gpu.0.index", "expected an integer"),
        ('gpu = 3\n', 1, "gpu", "expected a table, got 3"),
        ('[gpu.0.extra]\nrole = "lender"\n', 1, "gpu.0.extra",
         "unknown table (known: index, role, flags, lend_limit_bytes"),
    ],
)
def test_policy_file_errors(tmp_path: Path, text: str, line: int, key: str, message: str) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    node = SimBackend.from_config("aws-p3.8xlarge")
    from huvm.client import Node

    with Node(node) as n, pytest.raises(PolicyError) as info:
        policyfile.load(f, n.info())
    err = info.value
    assert (getattr(err, "line", None), err.key) == (line, key), str(err)
    assert message in str(err) and str(err).startswith(f"{f}:{line}: {key}: "), str(err)


@pytest.mark.parametrize(
    ("line", "key", "message"),
    [
        ("gpu_count = 17", "node.gpu_count", f"17: must be <= {abi.lib.HUVM_SIM_MAX_GPUS}"),
        ("nvlink_generation = 5", "node.nvlink_generation", "NVLink generation 5 is not 1..4"),
        ("nvlink_mbyte_per_s_per_link = 0", "node.nvlink_mbyte_per_s_per_link", "0: must be >= 1"),
        ('host_memory_bytes = "1gb"', "node.host_memory_bytes", "ambiguous unit"),
        ("topology = [[1]]", "node.topology[0][0]", "expected a string, got 1"),
        ("[node.costs]\npopulate_ns = 2000000000", "node.costs.populate_ns",
         f"2000000000: must be <= {abi.lib.HUVM_SIM_MAX_COST_NS}"),
    ],
)
def test_node_file_errors(tmp_path: Path, line: str, key: str, message: str) -> None:
    f = tmp_path / "n.toml"
    f.write_text('[node]\npreset = "aws-p3.8xlarge"\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        SimBackend.from_config(str(f))
    err = info.value
    assert err.key == key and err.line == 3 + line.count("\n"), str(err)
    assert message in err.reason, str(err)


# ---- every limit is the core's and the simulator's own (issue 15, item 10) ----
# Each test finds the limit by asking the compiled C code, so a bound changed in a header and not followed
# by Python (a hand copy) fails here.

def _core_verdict(**values: int) -> int:
    """huvm_policy_validate's error field for the huvm preset with values set (0: accepted), on a core
    that knows no GPU (so no GPU's memory bounds the pre-eviction reserve)."""
    ffi, lib = abi.ffi, abi.lib
    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_SIM, lib.HUVM_PRESET_HUVM)
    p = ffi.new("huvm_policy_t *")
    assert lib.huvm_policy_preset(lib.HUVM_PRESET_HUVM, core, p) == lib.HUVM_NV_OK
    for name, value in values.items():
        setattr(p, name, value)
    err = ffi.new("uint32_t *")
    lib.huvm_policy_validate(core, p, err)
    return int(err[0])


@pytest.mark.parametrize("key", [k for k, s in KEYS.items() if s.kind == "int" and s.scope == "node"])
def test_policy_key_ranges_are_the_cores(key: str) -> None:
    """The node's integer keys (a GPU entry's ranges: tests/c/test_policy.c, policy_gpu_entries)."""
    spec = KEYS[key]
    field = getattr(abi.lib, f"HUVM_FIELD_{spec.field.upper()}")
    # the other fields of a prefetch window kept small, so that only this one can be refused
    others = {"prefetch_chunks": 1, "prefetch_stride": 1, "prefetch_mode": abi.lib.HUVM_PREFETCH_OFF} \
        if key.startswith("prefetch_") else {}
    assert _core_verdict(**{**others, spec.field: spec.hi}) == 0, f"the core refuses {key}={spec.hi}"
    assert _core_verdict(**{**others, spec.field: spec.hi + 1}) == field, f"the core accepts {key}={spec.hi + 1}"
    assert _core_verdict(**{**others, spec.field: spec.lo}) == 0
    if spec.lo > 0:
        assert _core_verdict(**{**others, spec.field: spec.lo - 1}) == field


def test_policy_key_bounds_are_not_hand_copies() -> None:
    """huvm/policy.py declares no key: its one KeySpec(...) builds each key from the core's descriptor (the ABI
    header's policy field table), so a bound is never a hand copy (tests/python/test_policy_fields.py compares
    the two)."""
    import ast

    import huvm.policy

    tree = ast.parse(Path(huvm.policy.__file__).read_text())
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "KeySpec"]
    assert len(calls) == 1 and not isinstance(calls[0].args[0], ast.Constant)
    assert (KEYS["peer_usage_max_pct"].lo, KEYS["peer_usage_max_pct"].hi) == \
        (abi.lib.HUVM_PEER_USAGE_PCT_MIN, abi.lib.HUVM_PEER_USAGE_PCT_MAX)


def test_tenant_limits_are_the_simulators() -> None:
    from huvmlab.experiment.spec import MAX_STATIC_BYTES, MAX_STEPS
    from huvmlab.sim import NodeConfig, SimNode, TenantSpec
    from huvmlab.sim.errors import SimConfigError

    def refused(**kw: int) -> bool:
        sim = SimNode(NodeConfig.preset("aws-p3.8xlarge"))
        try:
            sim.add_tenant(TenantSpec(gpu=0, **({"static_bytes": 1 << 21} | kw)))  # type: ignore[arg-type]
        except SimConfigError:
            return True
        finally:
            sim.close()
        return False

    assert not refused(steps=MAX_STEPS) and refused(steps=MAX_STEPS + 1)
    assert not refused(static_bytes=MAX_STATIC_BYTES) and refused(static_bytes=MAX_STATIC_BYTES + 1)
