"""huvm-top's sources over the huvm library: LiveSource on the real policy core (huvmlab.corenode.CoreNode),
SimSource (a node under load), and the FakeSource's own contract."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from huvm import abi as habi
from huvm.client import Node
from huvm_testing import CoreNode
from huvm_top.app import HuvmTop
from huvm_top.model import PolicyRefused, SourceError
from huvm_top.rates import compute_rates
from huvm_top.screens.policy_editor import PolicyEditor
from huvm_top.sources.base import EventSource, StatsSource
from huvm_top.sources.fake import FakeEvents, FakeSource
from huvm_top.sources.live import LiveSource
from huvm_top.sources.sim import SimSource
from textual.widgets import DataTable, Input, Static


@pytest.fixture
def live() -> Iterator[LiveSource]:
    src = LiveSource(node=Node(CoreNode(4)))
    src.open()
    yield src
    src.close()


def test_sources_implement_the_protocols() -> None:
    assert isinstance(FakeSource(), StatsSource)
    assert isinstance(LiveSource(node=Node(CoreNode(2))), StatsSource)
    assert isinstance(FakeEvents(), EventSource)


def test_live_snapshot_carries_the_core_counters(live: LiveSource) -> None:
    assert live.node is not None
    p = habi.new_params(habi.lib.HUVM_IOCTL_TEST_EVENT)
    p.event, p.gpu, p.count = habi.lib.HUVM_TEST_EVENT_EVICT, 0, 7
    live.node.call(habi.lib.HUVM_IOCTL_TEST_EVENT, p)
    snap = live.snapshot()
    assert len(snap.gpus) == 4 and len(snap.free_bytes) == 4
    assert snap.gpus[0]["evict_to_peer"] + snap.gpus[0]["evict_to_host"] == 7
    assert snap.gpus[0]["evict_to_peer"] == int(p.to_peer)
    held = sum(snap.pairs[0][h]["held_bytes"] for h in range(4))
    assert held == snap.gpus[0]["harvested_bytes"] == int(p.to_peer) * habi.lib.HUVM_CHUNK_SIZE
    assert "host_reason[0]" in snap.gpus[0]  # arrays flattened by index


def test_live_policy_round_trip_and_presets(live: LiveSource) -> None:
    before = live.get_policy()
    assert len(before.gpus) == 4 and "prefetch_chunks" in before.node
    stock = live.preset("stock")
    assert stock.node["preset"] == habi.lib.HUVM_PRESET_STOCK and stock.generation == before.generation
    assert live.get_policy().generation == before.generation  # a preset is not applied by asking
    new = live.set_policy(stock)
    assert new.generation == before.generation + 1
    assert new.node["preset"] == habi.lib.HUVM_PRESET_STOCK
    with pytest.raises(SourceError, match="unknown preset"):
        live.preset("fastest")


def test_live_checks_name_the_field_before_sending(live: LiveSource) -> None:
    p = live.get_policy()
    p.node["prefetch_chunks"] = 0  # prefetching on, with zero chunks: contradictory
    errors = live.check_policy(p)
    assert [e.field for e in errors] == ["prefetch_chunks"]
    p = live.get_policy()
    p.gpus[2].lend_reserve_bytes = 1 << 40
    assert [e.field for e in live.check_policy(p)] == ["gpus[2].lend_reserve_bytes"]
    assert live.check_policy(live.get_policy()) == []


def test_live_core_refusal_names_the_field_and_applies_nothing(live: LiveSource) -> None:
    p = live.get_policy()
    gen = p.generation
    p.gpus[1].lend_reserve_bytes = 1 << 40
    with pytest.raises(PolicyRefused) as exc:
        live.set_policy(p)  # sent without the checks: the core itself refuses
    assert exc.value.field == "gpus[1].lend_reserve_bytes" and exc.value.by == "core"
    assert live.get_policy().generation == gen


def test_live_stale_generation_is_refused(live: LiveSource) -> None:
    p = live.get_policy()
    live.set_policy(live.get_policy())  # someone else changed the policy meanwhile
    with pytest.raises(PolicyRefused) as exc:
        live.set_policy(p)
    assert exc.value.field == "generation"


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_editor_over_the_core_refuses_with_the_field_named() -> None:
    src = LiveSource(node=Node(CoreNode(4)))
    app = HuvmTop(src, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        while app.policy is None:
            await pilot.pause(0.02)
        await pilot.press("p")
        while not isinstance(app.screen, PolicyEditor):
            await pilot.pause(0.02)
        editor = app.screen
        await pilot.pause()
        inp = editor.query_one("#g3-lend_reserve_bytes", Input)
        inp.value = "64GiB"
        await pilot.press("ctrl+s")
        await pilot.pause()
        status = str(editor.query_one("#policy-error", Static).render())
        assert status.startswith("not sent: gpu.3.lend_reserve_bytes: must be <= 16GiB (the GPU's memory)")
        assert inp.value == "64GiB" and inp.has_class("-invalid")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_editor_sets_lend_traffic_on_the_core() -> None:
    """The editor's budget reaches the policy core (huvm_gpu_policy_t.lend_traffic_mbyte_per_s) and is read
    back from it."""
    src = LiveSource(node=Node(CoreNode(4)))
    app = HuvmTop(src, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        while app.policy is None:
            await pilot.pause(0.02)
        await pilot.press("p")
        while not isinstance(app.screen, PolicyEditor):
            await pilot.pause(0.02)
        editor = app.screen
        await pilot.pause()
        editor.query_one("#g2-lend_traffic_mbyte_per_s", Input).value = "2.5GB/s"
        await pilot.press("ctrl+s")
        while "applied" not in str(editor.query_one("#policy-error", Static).render()):
            await pilot.pause(0.02)
        assert src.node is not None
        assert [g.lend_traffic_mbyte_per_s for g in src.node.get_policy().gpus] == [0, 0, 2500, 0]
        assert src.get_policy().gpus[2].lend_traffic_mbyte_per_s == 2500


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_editor_sets_the_lender_bound_t_on_the_core() -> None:
    """Issue 28 item 1: an admin edits a lender's slowdown bound T (huvm_gpu_policy_t.lend_slowdown_max_pct) in
    the editor: shown as the core holds it, a value out of 0..100 refused before sending with the field named,
    a valid one applied to that GPU alone and read back from the core."""
    src = LiveSource(node=Node(CoreNode(4)))
    assert src.node is not None
    src.node.apply_preset("huvm")
    app = HuvmTop(src, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        while app.policy is None:
            await pilot.pause(0.02)
        await pilot.press("p")
        while not isinstance(app.screen, PolicyEditor):
            await pilot.pause(0.02)
        editor = app.screen
        await pilot.pause()
        inp = editor.query_one("#g1-lend_slowdown_max_pct", Input)
        assert inp.value == "2"         # the huvm preset's bound
        inp.value = "101"
        await pilot.press("ctrl+s")
        await pilot.pause()
        status = str(editor.query_one("#policy-error", Static).render())
        assert status.startswith("not sent: gpu.1.lend_slowdown_max_pct: '101': must be <= 100"), status
        assert inp.has_class("-invalid")
        assert [g.lend_slowdown_max_pct for g in src.node.get_policy().gpus] == [2, 2, 2, 2]
        inp.value = "5"
        await pilot.press("ctrl+s")
        while "applied" not in str(editor.query_one("#policy-error", Static).render()):
            await pilot.pause(0.02)
        assert [g.lend_slowdown_max_pct for g in src.node.get_policy().gpus] == [2, 5, 2, 2]
        assert src.get_policy().gpus[1].lend_slowdown_max_pct == 5


def _moving(src: SimSource, key: str = "evict_to_peer") -> float:
    a = src.snapshot()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        b = src.snapshot()
        r = compute_rates(a, b)
        if not r.first and r.node_total(key) > 0:
            return r.node_total(key)
    raise AssertionError(f"{key} did not move")


def test_sim_source_runs_the_shipped_example() -> None:
    src = SimSource()
    info = src.open()
    try:
        assert info.description.startswith("sim: consolidation on aws-p3.8xlarge")
        assert len(info.gpus) == 4 and info.gpus[0].memory_bytes == (16 << 30) - (512 << 20)  # usable by UVM
        assert _moving(src) > 0
        snap = src.snapshot()
        assert sum(g["harvested_bytes"] for g in snap.gpus) > 0
        assert [v.comm for v in snap.va_spaces] == ["gpt2-medium", "steady", "idle", "rising"]  # the tenants
        assert snap.va_spaces[0].counters["harvested_bytes"] > 0
    finally:
        src.close()
    assert src.node is None


def test_sim_source_restarts_a_finished_scenario_with_the_users_policy() -> None:
    src = SimSource(speed=2000)  # the 40 s example ends within a tick
    src.open()
    try:
        p = src.get_policy()
        p.node["prefetch_chunks"] = 8
        src.set_policy(p)
        deadline = time.monotonic() + 20
        while src.restarts < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert src.restarts >= 1 and src.error is None
        assert src.get_policy().node["prefetch_chunks"] == 8
    finally:
        src.close()


def test_sim_source_default_load_on_a_node_preset() -> None:
    src = SimSource("dgx-a100")
    info = src.open()
    try:
        assert len(info.gpus) == 8 and "streaming load on dgx-a100-40g" in info.description
        roles = [g.role for g in src.get_policy().gpus]
        assert roles[0] == habi.lib.HUVM_ROLE_HARVESTER and set(roles[1:]) == {habi.lib.HUVM_ROLE_LENDER}
        assert _moving(src) > 0
    finally:
        src.close()


def test_sim_source_bad_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown node preset 'nope'"):
        SimSource("nope").open()
    bad = tmp_path / "bad.toml"
    bad.write_text('[experiment]\nname = "x"\n[node]\npreset = "aws-p3.8xlarge"\n[[tenant]]\ngpu = 9\n')
    with pytest.raises(SourceError) as exc:
        SimSource(str(bad)).open()
    assert "\n" not in str(exc.value)


EXPERIMENT = """[experiment]
name = "mine"
policies = ["stock", "huvm"]

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
lend_limit_bytes = "4GiB"

[policy.huvm]
prefetch_chunks = 4
"""


def test_sim_source_runs_an_experiment_as_huvmctl_does(tmp_path: Path) -> None:
    """huvm-top --sim-config EXPERIMENT: the node, tenants and policy of `huvmctl --sim --sim-config` (the
    tenants' GPU settings and the [policy.huvm] table included)."""
    from huvm import client

    f = tmp_path / "exp.toml"
    f.write_text(EXPERIMENT)
    with client.open("sim", sim_config=str(f), sim_live=True) as node:
        want = node.get_policy()
    assert want.prefetch_chunks == 4 and want.gpus[1].lend_limit_bytes == 4 << 30
    src = SimSource(str(f))
    info = src.open()
    try:
        assert info.description.startswith("sim: mine on aws-p3.8xlarge") and len(info.gpus) == 2
        got = src.node.get_policy() if src.node else None
        assert got is not None and got.gpus == want.gpus
        assert (got.prefetch_chunks, got.prefetch_mode, got.preset) == (4, want.prefetch_mode, want.preset)
        assert [v.comm for v in src.snapshot().va_spaces] == ["harvester", "lender"]
    finally:
        src.close()


@pytest.mark.parametrize(("text", "where"), [
    (EXPERIMENT.replace("steps = 1\n", "steps = = 1\n"), ":13: TOML syntax"),  # through huvm's TOML reader
    (EXPERIMENT.replace("steps = 1\n", "steps = 1\nstatic = \"100GiB\"\n"), ":14: tenant[0].static"),
    (EXPERIMENT.replace("prefetch_chunks = 4", "prefetch_chunks = 65"), ":24: policy.huvm.prefetch_chunks"),
    (EXPERIMENT.encode().replace(b'"mine"', b'"m\xe9"'), ":2: not UTF-8"),
])
def test_sim_source_bad_experiment_names_file_line_and_key(tmp_path: Path, text: str | bytes, where: str) -> None:
    f = tmp_path / "exp.toml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SourceError) as exc:
        SimSource(str(f)).open()
    msg = str(exc.value)
    assert msg.startswith(f"{f}{where}") and "\n" not in msg, msg


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_app_over_the_sim_shows_nonzero_rates() -> None:
    app = HuvmTop(SimSource(), interval=0.2)
    async with app.run_test(size=(200, 50)) as pilot:
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        while loop.time() < end and not (app.rates and app.rates.gpus[0]["evict_to_peer"] > 0):
            await pilot.pause(0.05)
        table = app.query_one("#gpus", DataTable)
        assert table.get_cell("gpu0", "name") == "V100-SXM2-16G\u2026"  # "Tesla V100-SXM2-16GB #0", shortened
        assert app.rates is not None and app.rates.gpus[0]["evict_to_peer"] > 0
        assert str(table.get_cell("gpu0", "evict_to_peer")) not in ("0", "-")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_app_waits_for_the_kernel_module_and_follows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The "module" is the real policy core behind a kernel backend whose device is a file in tmp_path:
    # absent = not loaded. huvm-top starts first, waits, attaches when the node appears (inotify wakes it, well
    # before the fallback wait, stretched here to 8 s so that a loaded machine cannot pass for inotify), waits
    # again when it goes away and attaches again when it is back.
    import functools

    import huvm_top.app
    from huvm.attach import attach
    from huvm.backend import KernelBackend

    monkeypatch.setattr(huvm_top.app, "WAIT_S", 8.0)
    WAIT_S = huvm_top.app.WAIT_S

    core = CoreNode(2)
    dev = tmp_path / "nvidia-uvm"
    att = attach("kernel", str(dev), backend_factory=functools.partial(KernelBackend, ioctl_fn=core.fake_ioctl()))
    src = LiveSource(attachment=att)
    app = HuvmTop(src, interval=0.05)
    loop = asyncio.get_running_loop()

    async def until(cond: object, timeout: float = 10.0) -> float:
        start = loop.time()
        while not cond():  # type: ignore[operator]
            assert loop.time() - start < timeout, "condition not reached"
            await pilot.pause(0.02)
        return loop.time() - start

    async with app.run_test(size=(120, 40)) as pilot:
        await until(lambda: app.waiting is not None)
        assert app.waiting == "module not loaded, waiting" and app.refreshes == 0
        await pilot.pause(0.3)  # the worker is in its wait now
        dev.touch()
        took = await until(lambda: app.refreshes >= 1)  # (the bare core's clock stands still: one refresh)
        assert took < WAIT_S * 0.75 and app.info is not None and len(app.info.gpus) == 2
        assert app.gpu_table.row_count == 2
        dev.unlink()
        await until(lambda: app.waiting is not None)
        dev.touch()
        n = app.refreshes
        await until(lambda: app.waiting is None and app.refreshes > n)
        assert app.return_code is None


def test_cli_waits_unless_told_not_to(tmp_path: Path) -> None:
    from huvm_top import cli

    missing = str(tmp_path / "nvidia-uvm")
    src, _ = cli.make_sources(cli.parse_args(["--backend", "kernel", "--device", missing]))
    src.close()  # made, not failed: the app waits for the module
    with pytest.raises(cli.CliError, match="does not exist"):
        cli.make_sources(cli.parse_args(["--backend", "kernel", "--device", missing, "--no-wait"]))
    with pytest.raises(cli.CliError, match="nothing to wait for"):
        cli.make_sources(cli.parse_args(["--backend", "kernel", "--device", str(tmp_path / "no" / "dev")]))
