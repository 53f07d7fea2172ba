"""Policy: typed parsing, every class of bad input refused before sending, files with line/key, atomicity."""

from __future__ import annotations

from pathlib import Path

import pytest
from huvm import abi, policyfile
from huvm.client import Node
from huvm.errors import Conflict, InvalidValue, PolicyError, PolicyFileError
from huvm.policy import KEYS, format_value, parse_assignments, parse_value, preset_names
from huvm_testing import CoreNode
from hypothesis import given
from hypothesis import strategies as st

#: the budget's range as refusals word it, from the ABI's constants
TRAFFIC_RANGE = (f"0 (off) or {abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S}MB/s..{abi.lib.HUVM_MAX_MBYTE_PER_S}MB/s"
                 .replace("(", r"\(").replace(")", r"\)").replace(".", r"\."))


@pytest.fixture
def fake() -> CoreNode:
    return CoreNode(gpu_count=4, memory_bytes=16 << 30)


@pytest.fixture
def node(fake: CoreNode) -> Node:
    return Node(fake)


def sent(fake: CoreNode) -> int:
    return fake.calls.count(abi.lib.HUVM_IOCTL_SET_POLICY)


def test_deprecated_spellings_are_accepted_and_shown_canonically(node: Node, tmp_path: Path) -> None:
    """lend_limit, lend_reserve and lend_traffic (the keys before the policy field table) still set their
    fields, on the command line and in a file, for one release; output names the struct member."""
    before, after = node.set(["gpu.1.lend_limit=8GiB", "gpu.1.lend_reserve=512MiB", "gpu.1.lend_traffic=18GB/s"])
    s = after.settings(node.info())
    assert (s["gpu.1.lend_limit_bytes"], s["gpu.1.lend_reserve_bytes"]) == ("8GiB", "512MiB")
    assert s["gpu.1.lend_traffic_mbyte_per_s"] == "18GB/s" and not any(k.endswith("lend_traffic") for k in s)
    f = tmp_path / "p.toml"
    f.write_text('[gpu.1]\nlend_traffic = "20GB/s"\n')
    settings = policyfile.load(f, node.info()).settings
    assert [(x.key, x.value) for x in settings] == [("gpu.1.lend_traffic_mbyte_per_s", 20000)]


def test_set_typed_values(node: Node) -> None:
    before, after = node.set(["prefetch_chunks=32", "peer_select=fewest-lent", "nvlink_only=false",
                              "hysteresis_ms=16", "gpu.1.role=lender", "gpu.1.lend_limit_bytes=8GiB",
                              "gpu.all.lend_reserve_bytes=512MiB"])
    info = node.info()
    s = after.settings(info)
    assert s["prefetch_chunks"] == "32" and s["peer_select"] == "fewest-lent" and s["nvlink_only"] == "false"
    assert s["hysteresis_ms"] == "16"
    assert s["gpu.1.role"] == "lender" and s["gpu.1.lend_limit_bytes"] == "8GiB"
    assert all(s[f"gpu.{i}.lend_reserve_bytes"] == "512MiB" for i in range(4))
    assert after.generation == before.generation + 1
    assert after.preset_name == "custom"
    assert node.get_policy() == after


def test_gpu_flags_by_name(node: Node) -> None:
    """Per-GPU policy flags are set by name (the huvm preset's behaviours one by one), shown by name, and
    reach the module as the ABI's bits."""
    lib = abi.lib
    node.apply_preset("huvm")
    huvm = node.get_policy()
    assert huvm.gpus and all(g.flags == lib.HUVM_GPU_POLICY_FLAGS_KNOWN for g in huvm.gpus)
    _, after = node.set(["gpu.0.flags=lend-above-peak,prefetch_feedback", "gpu.1.flags=none"])
    info = node.info()
    assert after.gpus[0].flags == lib.HUVM_GPU_POLICY_LEND_ABOVE_PEAK | lib.HUVM_GPU_POLICY_PREFETCH_FEEDBACK
    assert after.gpus[1].flags == 0 and after.gpus[2].flags == lib.HUVM_GPU_POLICY_FLAGS_KNOWN
    s = after.settings(info)
    assert s["gpu.0.flags"] == "lend-above-peak,prefetch-feedback" and s["gpu.1.flags"] == "none"
    assert s["gpu.2.flags"] == "preevict-on-pressure,lend-above-peak,prefetch-feedback,prefetch-proportional"
    assert node.get_policy() == after
    assert ("gpu.1.flags", "none", "preevict-on-pressure,lend-above-peak,prefetch-feedback,prefetch-proportional") \
        in after.diff(huvm, info)


def test_lend_traffic_rates(node: Node) -> None:
    """gpu.N.lend_traffic_mbyte_per_s: MB/s bare, or a decimal rate unit; off/none/0 for no budget; shown in the largest
    exact unit, and reaching the module's entry as lend_traffic_mbyte_per_s."""
    lo = abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S
    _, after = node.set(["gpu.1.lend_traffic_mbyte_per_s=18GB/s", "gpu.2.lend_traffic_mbyte_per_s=500 MB/s",
                         f"gpu.3.lend_traffic_mbyte_per_s={lo}"])
    assert [g.lend_traffic_mbyte_per_s for g in after.gpus] == [0, 18000, 500, lo]
    s = after.settings(node.info())
    assert (s["gpu.0.lend_traffic_mbyte_per_s"], s["gpu.1.lend_traffic_mbyte_per_s"],
            s["gpu.2.lend_traffic_mbyte_per_s"]) == ("off", "18GB/s", "500MB/s")
    assert node.get_policy() == after  # what the module holds
    _, after = node.set(["gpu.1.lend_traffic_mbyte_per_s=off", "gpu.2.lend_traffic_mbyte_per_s=none",
                         "gpu.3.lend_traffic_mbyte_per_s=0"])
    assert all(g.lend_traffic_mbyte_per_s == 0 for g in after.gpus)
    _, after = node.set([f"gpu.all.lend_traffic_mbyte_per_s={abi.lib.HUVM_MAX_MBYTE_PER_S}"])  # the struct field
    assert all(g.lend_traffic_mbyte_per_s == abi.lib.HUVM_MAX_MBYTE_PER_S for g in after.gpus)


def test_lend_traffic_round_trip_on_the_simulated_node() -> None:
    """`huvmctl policy set gpu.1.lend_traffic_mbyte_per_s=18GB/s` on the simulator: the C simulator's own policy holds
    18000 MB/s for GPU 1, and reading the policy back shows 18GB/s."""
    from huvmlab.simbackend import SimBackend

    backend = SimBackend.from_config("aws-p3.8xlarge")
    with Node(backend) as n:
        n.set(["gpu.1.lend_traffic_mbyte_per_s=18GB/s"])
        got = n.get_policy()
        assert got.settings(n.info())["gpu.1.lend_traffic_mbyte_per_s"] == "18GB/s"
        assert got.gpus[1].lend_traffic_mbyte_per_s == 18000
        raw = backend.node.get_policy()
        assert [int(raw.gpus[i].lend_traffic_mbyte_per_s) for i in range(4)] == [0, 18000, 0, 0]


def test_gpu_by_uuid_prefix(node: Node) -> None:
    uuid = node.info().gpus[2].uuid
    _, after = node.set([f"gpu[{uuid[:12]}].role=harvester"])
    assert after.gpu_by_uuid(uuid) is not None and after.gpu_by_uuid(uuid).role_name == "harvester"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ("no_such_key=1", "unknown key"),                       # unknown key
        ("gpu.0.colour=red", "unknown key"),
        ("role=lender", "per-GPU key"),
        ("prefetch_chunks=many", "expected an integer"),         # wrong type
        ("prefetch_chunks=+8", "decimal digits"),                # one integer grammar: decimal digits only
        ("prefetch_chunks=1_0", "decimal digits"),
        ("prefetch_chunks=0b11", "decimal digits"),
        ("hysteresis_ms=0x10", "decimal digits"),
        ("gpu.0.lend_limit_bytes=8gb", "ambiguous unit 'gb'"),        # one size grammar: KiB.. or kB.., nothing else
        ("gpu.0.lend_limit_bytes=8G", "ambiguous unit 'G'"),
        ("gpu.0.lend_limit_bytes=1e9", "not a size"),
        ("nvlink_only=maybe", "expected a boolean"),
        ("peer_select=fastest", "expected one of"),
        ("gpu.0.lend_limit_bytes=lots", "not a size"),
        ("prefetch_chunks=65", "prefetch_chunks=65: must be <= 64"),      # out of range: the limit named
        ("prefetch_stride=0", "prefetch_stride=0: must be >= 1"),
        ("peer_usage_max_pct=0", "peer_usage_max_pct=0: must be >= 1"),
        ("hysteresis_ms=60001", "hysteresis_ms=60001: must be <= 60000"),
        ("gpu.9.role=lender", "unknown GPU"),                   # unknown GPU
        ("gpu.0.lend_reserve_bytes=17GiB", "gpu.0.lend_reserve_bytes=17GiB: must be <= 16GiB"),  # the core: capacity
        ("prefetch_chunks", "KEY=VALUE"),
        ("gpu.0.flags=turbo", "unknown flag 'turbo'"),          # flags: names only
        ("gpu.0.flags=1", "unknown flag '1'"),
        ("flags=none", "per-GPU key"),
        # rates: 0 or MIN..MAX
        ("gpu.0.lend_traffic_mbyte_per_s=50", f"gpu.0.lend_traffic_mbyte_per_s=50: must be {TRAFFIC_RANGE}"),
        ("gpu.0.lend_traffic_mbyte_per_s=104MB/s", f"gpu.0.lend_traffic_mbyte_per_s=104MB/s: must be {TRAFFIC_RANGE}"),
        ("gpu.0.lend_traffic_mbyte_per_s=17TB/s", f"gpu.0.lend_traffic_mbyte_per_s=17TB/s: must be {TRAFFIC_RANGE}"),
        ("gpu.0.lend_traffic_mbyte_per_s=-1", f"gpu.0.lend_traffic_mbyte_per_s=-1: must be {TRAFFIC_RANGE}"),
        ("gpu.0.lend_traffic_mbyte_per_s=18GiB/s", "unknown unit 'GiB/s'"),            # rates are decimal, MB = 10^6 B
        ("gpu.0.lend_traffic_mbyte_per_s=8Gbps", "unknown unit 'Gbps'"),
        ("gpu.0.lend_traffic_mbyte_per_s=fast", "not a rate"),
        ("gpu.0.lend_traffic_mbyte_per_s=0.5MB/s", "not a whole number of MB/s"),
        ("lend_traffic_mbyte_per_s=off", "per-GPU key"),
    ],
)
def test_bad_input_refused_before_sending(node: Node, fake: CoreNode, item: str, match: str) -> None:
    before = node.get_policy()
    with pytest.raises(PolicyError, match=match):
        node.set([item])
    assert sent(fake) == 0
    assert node.get_policy() == before


def test_contradictory_combinations(node: Node, fake: CoreNode) -> None:
    with pytest.raises(PolicyError, match="contradictory: set to"):
        node.set(["prefetch_chunks=4", "prefetch_chunks=8"])
    with pytest.raises(PolicyError, match=r"^prefetch_chunks=0: must be more than 0 while prefetch_mode is local"):
        node.set(["prefetch_mode=local", "prefetch_chunks=0"])
    assert sent(fake) == 0


LEND_NOTHING = r"^gpu\.1\.lend_limit_bytes=0: must be more than 0 while gpu\.1\.role is {role} .*lends nothing"


@pytest.mark.parametrize("role", ["lender", "both"])
def test_lender_lending_nothing_refused_in_one_command_or_two(node: Node, fake: CoreNode, role: str) -> None:
    """The core's verdict on the whole policy, not on the keys of one command: the same refusal whether
    role and lend_limit_bytes come together, limit first, or role first."""
    with pytest.raises(PolicyError, match=LEND_NOTHING.format(role=role)) as one:
        node.set([f"gpu.1.role={role}", "gpu.1.lend_limit_bytes=0"])
    assert one.value.key == "gpu.1.lend_limit_bytes"
    node.set([f"gpu.1.role={role}"])  # a lender (lend_limit_bytes unlimited): fine
    with pytest.raises(PolicyError, match=LEND_NOTHING.format(role=role)):
        node.set(["gpu.1.lend_limit_bytes=0"])  # second command
    node.set(["gpu.1.role=harvester", "gpu.1.lend_limit_bytes=0"])  # a harvester lends nothing anyway: fine
    with pytest.raises(PolicyError, match=LEND_NOTHING.format(role=role)):
        node.set([f"gpu.1.role={role}"])  # the limit from an earlier command, the role now
    assert node.get_policy().gpu_by_uuid(node.info().gpus[1].uuid).role_name == "harvester"  # type: ignore[union-attr]
    assert sent(fake) == 2


def test_core_rules_checked_locally(node: Node, fake: CoreNode) -> None:
    # chunks * stride beyond the core's 1 GiB prefetch window: the limit is the core's, found by asking it
    with pytest.raises(PolicyError) as info:
        node.set(["prefetch_chunks=64", "prefetch_stride=16"])
    assert info.value.key == "prefetch_stride"
    assert str(info.value).startswith("prefetch_stride=16: must be <= 8 with prefetch_chunks=64")
    node.set(["prefetch_chunks=64", "prefetch_stride=8"])  # the named limit is accepted
    # a reserve of pre-evicted chunks larger than a GPU (16 GiB: 8192 chunks of 2 MiB)
    for value in ("9000", "65536"):
        with pytest.raises(PolicyError, match=rf"^preevict_chunks={value}: must be <= 8192 \(") as info:
            node.set([f"preevict_chunks={value}"])
        assert "NV_ERR" not in str(info.value)
    node.set(["preevict_chunks=8192"])
    assert sent(fake) == 2


def test_same_value_twice_is_fine(node: Node) -> None:
    _, after = node.set(["prefetch_chunks=4", "prefetch_chunks=4"])
    assert after.prefetch_chunks == 4


def test_presets(node: Node) -> None:
    assert list(preset_names()) == ["stock", "huvm-atc22", "huvm"]
    _, after = node.apply_preset("stock")
    assert after.preset_name == "stock"
    assert all(g.role_name == "none" for g in after.gpus)
    _, after = node.apply_preset("huvm-atc22")
    assert (after.preset_name, after.peer_select, after.prefetch_chunks, after.prefetch_stride,
            after.preevict_chunks, after.peer_usage_max_pct) == ("huvm-atc22", 1, 16, 2, 50, 85)
    _, after = node.apply_preset("prototype")  # alias
    assert after.preset_name == "huvm-atc22"
    with pytest.raises(PolicyError, match="unknown preset"):
        node.apply_preset("fastest")


def test_conflict_on_concurrent_change(node: Node) -> None:
    current, new = node.plan(parse_assignments(["prefetch_chunks=8"], node.info()))
    node.set(["prefetch_chunks=4"])  # someone else changes the policy meanwhile
    with pytest.raises(Conflict):
        node.set_policy(new)
    assert node.get_policy().prefetch_chunks == 4


def test_module_refusal_is_typed_and_atomic(node: Node) -> None:
    # bypass local validation: a raw policy with a bad second GPU entry is refused whole by the core
    current = node.get_policy()
    gpus = list(current.gpus)
    from dataclasses import replace

    gpus[0] = replace(gpus[0], role=abi.lib.HUVM_ROLE_HARVESTER)
    gpus[2] = replace(gpus[2], lend_reserve_bytes=64 << 30)
    bad = replace(current, prefetch_chunks=8, gpus=tuple(gpus))
    with pytest.raises(InvalidValue) as info:
        node.set_policy(bad)
    assert info.value.field == "gpus[2].lend_reserve_bytes"
    assert node.get_policy() == current  # nothing half-applied


def test_lend_traffic_refused_by_the_core_is_named(node: Node) -> None:
    """A budget under HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S sent past the local checks: the module's refusal
    names gpus[1].lend_traffic_mbyte_per_s; the local mirror of the core words it as huvmctl's key."""
    from dataclasses import replace

    from huvm.mirror import Mirror

    current = node.get_policy()
    gpus = list(current.gpus)
    gpus[1] = replace(gpus[1], lend_traffic_mbyte_per_s=abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S - 1)
    bad = replace(current, gpus=tuple(gpus))
    with pytest.raises(InvalidValue) as info:
        node.set_policy(bad)
    assert info.value.field == "gpus[1].lend_traffic_mbyte_per_s"
    assert node.get_policy() == current
    with pytest.raises(PolicyError,
                       match=rf"^gpu\.1\.lend_traffic_mbyte_per_s=104MB/s: must be {TRAFFIC_RANGE}$") as err:
        Mirror(node.info(), current).validate(bad)
    assert err.value.key == "gpu.1.lend_traffic_mbyte_per_s"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.toml"
    p.write_text(text)
    return p


def test_policy_file_apply_and_round_trip(node: Node, tmp_path: Path) -> None:
    info = node.info()
    f = write(tmp_path, '''
preset = "huvm-atc22"
prefetch_chunks = 8

[gpu.0]
role = "harvester"
lend_traffic_mbyte_per_s = "18GB/s"

[gpu.1]
lend_traffic_mbyte_per_s = 500

[gpu.all]
lend_reserve_bytes = "1GiB"
flags = ["lend-above-peak"]
''')
    pf = policyfile.load(f, info)
    assert pf.preset == "huvm-atc22"
    before, after = node.apply(pf.settings, preset=pf.preset)
    assert after.prefetch_chunks == 8 and after.prefetch_stride == 2  # from the preset
    assert after.gpus[0].role_name == "harvester"
    assert [g.lend_traffic_mbyte_per_s for g in after.gpus] == [18000, 500, 0, 0]
    assert all(g.flags == abi.lib.HUVM_GPU_POLICY_LEND_ABOVE_PEAK for g in after.gpus)
    saved = tmp_path / "saved.toml"
    policyfile.save(saved, after, info)
    pf2 = policyfile.load(saved, info)
    _, new = node.plan(pf2.settings)
    assert new.diff(after, info) == []


@pytest.mark.parametrize(
    ("text", "line", "key", "match"),
    [
        ("prefetch_chunks = 8\nbogus = 1\n", 2, "bogus", "unknown key"),
        ("prefetch_chunks = \"eight\"\n", 1, "prefetch_chunks", "expected an integer"),
        ("\n\nprefetch_stride = 99\n", 3, "prefetch_stride", "99: must be <= 16"),
        ("nvlink_only = 3\n", 1, "nvlink_only", "boolean"),
        ("[gpu.0]\nrole = \"harvester\"\nlend_reserve_bytes = \"20GiB\"\n", 3, "gpu.0.lend_reserve_bytes",
         "must be <= 16GiB"),
        ("[gpu.1]\nrole = \"lender\"\nlend_limit_bytes = 0\n", 3, "gpu.1.lend_limit_bytes", "0: must be more than 0"),
        ("[gpu.7]\nrole = \"lender\"\n", 2, "gpu.7.role", "unknown GPU"),
        ("prefetch_chunks = 4\n[gpu.0]\nrole = \"lender\"\n[gpu.\"0\"]\n", None, None, "TOML syntax"),
        ("prefetch_chunks = 4\nprefetch_chunks = 5\n", 2, None, "TOML syntax"),
        ("preset = \"warp\"\n", 1, "preset", "unknown preset"),
        ("prefetch_chunks = 64\nprefetch_stride = 16\n", 2, "prefetch_stride", "16: must be <= 8"),
        ("[tuning]\nx = 1\n", 1, "tuning", "unknown table"),
        ("[gpu.0]\nflags = [\"lend-above-peak\", \"warp\"]\n", 2, "gpu.0.flags", "unknown flag 'warp'"),
        ("[gpu.0]\nflags = 3\n", 2, "gpu.0.flags", "expected flag names"),
        ("[gpu.1]\nlend_traffic_mbyte_per_s = 50\n", 2, "gpu.1.lend_traffic_mbyte_per_s",
         f"50: must be {TRAFFIC_RANGE}"),
        ("[gpu.1]\nlend_traffic_mbyte_per_s = \"18GiB/s\"\n", 2, "gpu.1.lend_traffic_mbyte_per_s",
         "unknown unit 'GiB/s'"),
        ("[gpu.1]\nlend_traffic_mbyte_per_s = true\n", 2, "gpu.1.lend_traffic_mbyte_per_s", "expected a rate"),
    ],
)
def test_policy_file_errors_name_file_line_key(node: Node, fake: CoreNode, tmp_path: Path, text: str,
                                               line: int | None, key: str | None, match: str) -> None:
    f = write(tmp_path, text)
    before = node.get_policy()
    with pytest.raises(PolicyError, match=match) as info:
        pf = policyfile.load(f, node.info())
        node.apply(pf.settings, preset=pf.preset)
    err = info.value
    assert isinstance(err, PolicyFileError) or "TOML" in str(err)
    assert str(f) in str(err)
    if line is not None:
        assert getattr(err, "line", None) == line, str(err)
    if key is not None:
        assert err.key == key
    assert sent(fake) == 0 and node.get_policy() == before


def test_missing_policy_file(node: Node, tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="No such file"):
        policyfile.load(tmp_path / "nope.toml", node.info())


# ---- property: what is printed parses back to the same value --------------------------------------------



@given(st.sampled_from(sorted(KEYS)), st.data())
def test_format_parse_round_trip(key: str, data: st.DataObject) -> None:
    spec = KEYS[key]
    if spec.kind == "enum":
        value = data.draw(st.sampled_from(sorted(spec.choices().values())))
    elif spec.kind == "bytes":
        value = data.draw(st.one_of(st.integers(0, 1 << 50), st.integers(0, 1 << 20).map(lambda n: n << 20)))
        if spec.unlimited and data.draw(st.booleans()):
            value = abi.UNLIMITED
    elif spec.kind == "rate":
        value = data.draw(st.one_of(st.just(0), st.integers(spec.lo, spec.hi)))
    else:
        value = data.draw(st.integers(spec.lo, min(spec.hi, 1 << 20)))
    assert parse_value(spec, format_value(spec, value), key) == value
