"""huvm-top driven by Textual's pilot over the FakeSource: tables, keys, the policy editor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from huvm_top import abi
from huvm_top.app import HuvmTop
from huvm_top.metrics import gpu_metrics, pair_metrics, reason_key, va_space_metrics
from huvm_top.model import Snapshot, SourceError, TraceEvent
from huvm_top.screens.help_screen import HelpScreen
from huvm_top.screens.policy_editor import PolicyEditor
from huvm_top.sources.fake import FakeEvents, FakeSource
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Select, Static

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
GIB = 1 << 30
PEER_FULL = reason_key(abi.reason_names().index("peer_full"))


def _snap(t_s: int, evict: int, faults: int, lent: int, peer_full: int, held: int) -> Snapshot:
    def gpu(i: int) -> dict[str, int]:
        g = {m.key: 0 for m in gpu_metrics()}
        if i == 0:
            g.update(evict_to_peer=evict, faults=faults, harvested_bytes=held, **{PEER_FULL: peer_full})
        if i == 1:
            g.update(lent_bytes=lent)
        return g

    pairs = [[{m.key: 0 for m in pair_metrics()} for _ in range(2)] for _ in range(2)]
    pairs[0][1].update(held_bytes=held, evict_chunks=evict)
    return Snapshot(t_s * 1_000_000_000, 1, (gpu(0), gpu(1)), tuple(tuple(r) for r in pairs), (8 * GIB, 4 * GIB))


def playback() -> FakeSource:
    # 2 s apart: evict_to_peer 100 -> 130 (15/s), faults 1000 -> 1100 (50/s), peer_full 4 -> 10 (3/s)
    return FakeSource(gpus=2, snapshots=[_snap(1, 100, 1000, GIB, 4, 512 << 20), _snap(3, 130, 1100, GIB, 10, GIB)])


async def until(pilot: Pilot[int], cond: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached")
        await pilot.pause(0.02)


def cell(app: HuvmTop, table_id: str, row: str, col: str) -> str:
    return str(app.screen_stack[0].query_one(f"#{table_id}", DataTable).get_cell(row, col))


async def test_tables_show_rates_and_gauges() -> None:
    app = HuvmTop(playback(), interval=0.05)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.refreshes >= 2)
        assert cell(app, "gpus", "gpu0", "name") == "fake0"
        assert cell(app, "gpus", "gpu0", "evict_to_peer") == "15"
        assert cell(app, "gpus", "gpu0", "faults") == "50"
        assert cell(app, "gpus", "gpu0", "harvested_bytes") == "1.0 GiB"
        assert cell(app, "gpus", "gpu1", "lent_bytes") == "1.0 GiB"
        assert cell(app, "gpus", "gpu1", "evict_to_peer") == "0"
        assert cell(app, "gpus", "gpu0", "memory") == "8.0 GiB/16.0 GiB"
        assert cell(app, "fallbacks", "gpu0", PEER_FULL) == "3.0"
        assert cell(app, "matrix", "own0", "hold1") == "1.0 GiB"
        assert cell(app, "matrix", "own0", "hold0") == "-"
        gpus = app.query_one("#gpus", DataTable)
        labels = [str(c.label) for c in gpus.columns.values()]
        assert "evict_to_peer/s" in labels and "lent_bytes" in labels  # names from the metric table
        status = str(app.status_line.render())
        assert "fake node (2 GPUs)" in status and "policy gen 1 (huvm)" in status


async def test_process_table_follows_the_va_spaces() -> None:
    app = HuvmTop(FakeSource(), interval=0.05)
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: app.refreshes >= 3)
        table = app.processes
        assert table.row_count == 2
        assert cell(app, "processes", "va1", "comm") == "job0" and cell(app, "processes", "va1", "gpus") == "0"
        # the fake's job0 is GPU 0's data: the same rates in both tables
        assert cell(app, "processes", "va1", "evict_to_peer") == cell(app, "gpus", "gpu0", "evict_to_peer") != "0"
        assert cell(app, "processes", "va2", "harvested_bytes") == cell(app, "gpus", "gpu1", "harvested_bytes")
        # the most harvested process first
        assert list(table.rows)[0].value == "va2"


async def test_matrix_metric_key_cycles_through_pair_metrics() -> None:
    app = HuvmTop(playback(), interval=0.05)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.refreshes >= 2)
        assert app.matrix.metric.key == "held_bytes"
        await pilot.press("m")
        assert app.matrix.metric.key == "evict_chunks"
        assert cell(app, "matrix", "own0", "hold1") == "15"
        assert "evict_chunks/s" in str(app.matrix.border_title)


async def test_space_pauses_and_resumes() -> None:
    app = HuvmTop(FakeSource(), interval=0.2)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.refreshes >= 2)
        await pilot.press("space")
        assert app.paused and "PAUSED" in str(app.status_line.render())
        await pilot.pause(0.3)
        n = app.refreshes
        await pilot.pause(0.5)
        assert app.refreshes == n
        await pilot.press("space")
        await until(pilot, lambda: app.refreshes > n)


async def test_number_keys_apply_presets() -> None:
    fake = FakeSource()
    app = HuvmTop(fake, interval=5)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.policy is not None)
        await pilot.press("1")
        await until(pilot, lambda: len(fake.sent) == 1)
        assert fake.sent[0].node["preset"] == abi.preset_names().index("stock")
        await until(pilot, lambda: app.status_line.preset == abi.preset_names().index("stock"))
        await pilot.press("3")
        await until(pilot, lambda: len(fake.sent) == 2)
        assert fake.sent[1].node["preset"] == abi.preset_names().index("huvm")


async def open_editor(app: HuvmTop, pilot: Pilot[int]) -> PolicyEditor:
    await until(pilot, lambda: app.policy is not None)
    await pilot.press("p")
    await until(pilot, lambda: isinstance(app.screen, PolicyEditor))
    await pilot.pause()
    assert isinstance(app.screen, PolicyEditor)
    return app.screen


async def type_into(pilot: Pilot[int], editor: PolicyEditor, wid: str, text: str) -> Input:
    inp = editor.query_one(f"#{wid}", Input)
    inp.focus()
    await pilot.pause()
    inp.value = ""
    await pilot.press(*text)
    assert inp.value == text
    return inp


def status_text(editor: PolicyEditor) -> str:
    return str(editor.query_one("#policy-error", Static).render())


async def test_editor_refuses_out_of_range_value_naming_the_field_and_keeps_the_edit() -> None:
    fake = FakeSource()
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        hyst = await type_into(pilot, editor, "f-hysteresis_ms", "75")
        inp = await type_into(pilot, editor, "f-prefetch_chunks", "999")
        await pilot.press("ctrl+s")
        await pilot.pause()
        text = status_text(editor)
        assert text.startswith("not sent: prefetch_chunks:") and "must be <= 64" in text
        assert inp.has_class("-invalid") and editor.focused is inp
        assert inp.value == "999" and hyst.value == "75"  # nothing of the edit is lost
        assert fake.sent == [] and app.screen is editor
        # what does not parse is refused the same way
        await type_into(pilot, editor, "f-prefetch_chunks", "8")
        limit = await type_into(pilot, editor, "g2-lend_limit_bytes", "lots")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert status_text(editor).startswith("not sent: gpus[2].lend_limit_bytes: 'lots'")
        assert limit.value == "lots" and fake.sent == []
        # fix it: the same form applies, with every edit made
        await type_into(pilot, editor, "g2-lend_limit_bytes", "8GiB")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(fake.sent) == 1)
        assert fake.sent[0].node["prefetch_chunks"] == 8 and fake.sent[0].node["hysteresis_ms"] == 75
        assert fake.sent[0].gpus[2].lend_limit_bytes == 8 * GIB
        await until(pilot, lambda: status_text(editor).startswith("applied: generation 2"))
        assert not inp.has_class("-invalid")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, PolicyEditor))
        assert app.policy is not None and app.policy.generation == 2


async def test_editor_shows_the_core_refusal_without_losing_the_edit() -> None:
    fake = FakeSource(memory_gib=16)
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        inp = await type_into(pilot, editor, "g1-lend_reserve_bytes", "1TiB")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "refused by the core" in status_text(editor))
        assert "gpus[1].lend_reserve_bytes" in status_text(editor)
        assert inp.value == "1TiB" and inp.has_class("-invalid")
        assert fake.sent == [] and app.screen is editor


async def test_preset_switcher_fills_the_form_without_sending() -> None:
    fake = FakeSource()
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        assert editor.query_one("#f-prefetch_mode", Select).value == abi.enum_names("HUVM_PREFETCH_").index("multipath")
        editor.query_one("#preset-switch", Select).value = "stock"
        await until(pilot, lambda: "preset stock loaded" in status_text(editor))
        assert editor.query_one("#f-prefetch_mode", Select).value == 0
        assert editor.query_one("#g0-role", Select).value == abi.role_names().index("none")
        assert fake.sent == []
        # main-screen keys do nothing in the editor (no preset applied behind the user's back)
        editor.query_one("#g0-role", Select).focus()
        await pilot.press("2")
        await pilot.pause(0.1)
        assert fake.sent == [] and app.screen is editor
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(fake.sent) == 1)
        assert fake.sent[0].node["preset"] == abi.preset_names().index("stock")


async def test_event_log_counts_and_histogram() -> None:
    evs = [TraceEvent(i, name, 0, 2, 0, 2097152, 0x1000) for i, name in enumerate(["evict", "evict", "fetch"])]
    app = HuvmTop(FakeSource(), FakeEvents(evs), interval=5)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.event_log.lines == 3)
        summary = str(app.event_log.summary.render())
        assert "evict=2 fetch=1" in summary
        assert "2097152 -> 4194303" in summary
        await pilot.press("c")
        assert app.event_log.lines == 0


class RootlessEvents(FakeEvents):
    def start(self) -> None:
        raise SourceError("tracing needs root (bcc attaches BPF programs)")


async def test_tracing_that_cannot_start_leaves_the_rest_running() -> None:
    app = HuvmTop(FakeSource(), RootlessEvents(), interval=0.05)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: "tracing off" in str(app.event_log.border_subtitle))
        assert "needs root" in str(app.event_log.border_subtitle)
        n = app.refreshes
        await until(pilot, lambda: app.refreshes > n + 1)
        assert app.return_code is None


async def test_help_lists_the_metric_table() -> None:
    app = HuvmTop(FakeSource(), interval=5)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        table = app.screen.query_one("#help-metrics", DataTable)
        assert table.row_count == len(gpu_metrics()) + len(pair_metrics()) + len(va_space_metrics())
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_source_that_cannot_open_exits_with_status_1() -> None:
    app = HuvmTop(FakeSource(fail_open="/dev/nvidia-uvm does not exist"), interval=5)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.return_code is not None)
    assert app.return_code == 1
