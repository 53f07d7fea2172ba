"""huvm-top driven by Textual's pilot over the FakeSource: tables, keys, the policy editor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from huvm_top import abi
from huvm_top.app import HuvmTop
from huvm_top.metrics import gpu_metrics, pair_metrics, reason_key, va_space_metrics
from huvm_top.model import Snapshot, SourceError, TraceEvent
from huvm_top.screens.help_screen import HelpScreen
from huvm_top.screens.policy_editor import PolicyEditor
from huvm_top.screens.preset_confirm import PresetConfirm
from huvm_top.sources.fake import FakeEvents, FakeSource
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Select, Static, TabbedContent

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
        # guests' traffic through gpu1: gpu0's 15 chunks/s evicted onto it, 2 MiB each, in MB/s
        assert cell(app, "gpus", "gpu1", "guest_traffic") == f"{15 * 2 * 1.048576:,.0f}"
        assert cell(app, "gpus", "gpu0", "guest_traffic") == "0"
        # the memory headline: 8 of 16 GiB used on gpu0, all its own; gpu1: 12 used, 1 of them lent
        assert cell(app, "gpus", "gpu0", "memory") == "\u2588" * 5 + "\u00b7" * 5 + "  50%"
        assert cell(app, "gpus", "gpu0", "own") == "8.0 GiB"
        assert cell(app, "gpus", "gpu1", "own") == "11.0 GiB" and cell(app, "gpus", "gpu1", "memory").endswith(" 75%")
        assert cell(app, "gpus", "gpu1", "memory").count("\u2588") == 8  # 7 own + 1 lent of 10 cells
        assert cell(app, "fallbacks", "gpu0", PEER_FULL) == "3.0"
        assert cell(app, "matrix", "own0", "hold1") == "1.0 GiB"
        assert cell(app, "matrix", "own0", "hold0") == "-"
        gpus = app.query_one("#gpus", DataTable)
        labels = [str(c.label) for c in gpus.columns.values()]
        assert labels[:6] == ["gpu", "name", "memory", "own", "lent", "harvested"]  # the headline first
        assert "evict_to_peer/s" in labels  # rate columns: names from the metric table
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


async def test_number_keys_ask_before_applying_a_preset_and_show_the_diff() -> None:
    fake = FakeSource()
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.policy is not None)
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, PresetConfirm))
        await pilot.pause()
        diff = str(app.screen.query_one("#confirm-diff", Static).render())
        assert "prefetch_mode" in diff and "multipath \u2192 off" in diff  # huvmctl's keys and values
        assert "gpu.0.role" in diff
        assert fake.sent == []  # nothing is sent before the answer
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, PresetConfirm))
        await pilot.pause(0.1)
        assert fake.sent == []
        await pilot.press("1")
        await until(pilot, lambda: isinstance(app.screen, PresetConfirm))
        await pilot.press("y")
        await until(pilot, lambda: len(fake.sent) == 1)
        assert fake.sent[0].node["preset"] == abi.preset_names().index("stock")
        await until(pilot, lambda: app.status_line.preset == abi.preset_names().index("stock"))
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, PresetConfirm))
        await pilot.press("enter")
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
        assert status_text(editor).startswith("not sent: gpu.2.lend_limit_bytes: 'lots'")  # huvmctl's key
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


async def test_editor_lend_traffic_with_its_range() -> None:
    """The guest-traffic budget is edited like lend_reserve_bytes: shown as huvm prints it (off, 18GB/s), its range
    from the ABI in the help, a value in the gap between 0 and the smallest budget refused before sending."""
    lo, hi = abi.define("HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S"), abi.define("HUVM_MAX_MBYTE_PER_S")
    fake = FakeSource()
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        names = [str(w.render()) for w in editor.query(".row .name")]
        helps = {n: str(h.render()) for n, h in zip(names, list(editor.query(".row .help")), strict=True)}
        assert helps["gpu.1.lend_traffic_mbyte_per_s"].startswith(f"0 (off) or {lo}MB/s..{hi}MB/s: ")
        assert editor.query_one("#g1-lend_traffic_mbyte_per_s", Input).value == "off"
        inp = editor.query_one("#g1-lend_traffic_mbyte_per_s", Input)
        inp.value = f"{lo - 1}"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert status_text(editor).startswith(
            f"not sent: gpu.1.lend_traffic_mbyte_per_s: '{lo - 1}': must be 0 (off) or {lo}MB/s")
        assert inp.has_class("-invalid") and fake.sent == []
        inp.value = "18GB/s"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(fake.sent) == 1)
        assert [g.lend_traffic_mbyte_per_s for g in fake.sent[0].gpus] == [0, 18000, 0, 0]
        await until(pilot, lambda: status_text(editor).startswith("applied: generation 2"))
        assert fake.get_policy().gpus[1].lend_traffic_mbyte_per_s == 18000


async def test_editor_shows_the_core_refusal_without_losing_the_edit() -> None:
    fake = FakeSource(memory_gib=16)
    app = HuvmTop(fake, interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        inp = await type_into(pilot, editor, "g1-lend_reserve_bytes", "1TiB")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "refused by the core" in status_text(editor))
        assert "gpu.1.lend_reserve_bytes" in status_text(editor)
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


def screen_text(app: HuvmTop) -> list[str]:
    """The screen as plain text lines (what export_screenshot draws, without the SVG)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      legacy_windows=False, safe_box=False, color_system="truecolor")
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text().splitlines()


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 50)])
async def test_headline_columns_are_on_screen(size: tuple[int, int]) -> None:
    app = HuvmTop(playback(), interval=0.05)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.refreshes >= 2)
        await pilot.pause(0.1)
        lines = screen_text(app)
        assert len(lines) == size[1] and all(len(line) <= size[0] for line in lines)
        header = next(line for line in lines if " memory " in line and " own" in line)
        assert header.split("\u2502")[1:6] and all(w in header for w in ("gpu", "name", "lent", "harvested"))
        row0 = next(line for line in lines if "fake0" in line)
        assert "8.0 GiB" in row0 and "\u2588" in row0 and "50%" in row0  # the bar and own bytes of gpu0
        # numbers are right-aligned: the own column's value ends where its label ends
        assert row0.index("8.0 GiB") + len("8.0 GiB") == header.index(" own") + len(" own")
        assert "graphs" in "".join(lines) and "processes" in "".join(lines)  # the views' tabs


async def test_waits_for_the_module_then_attaches() -> None:
    fake = FakeSource(absent=1 << 30)  # not there until absent goes to 0
    app = HuvmTop(fake, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: fake.waits >= 3)
        await pilot.pause(0.05)
        text = "\n".join(screen_text(app))
        assert "module not loaded, waiting" in text and "does not exist" in text
        assert app.return_code is None and app.refreshes == 0
        fake.absent = 0  # the module is loaded
        await until(pilot, lambda: app.refreshes >= 2)  # attached once the node was there
        assert fake.waits >= 2 and app.waiting is None
        assert "module not loaded" not in "\n".join(screen_text(app))


async def test_enter_on_a_gpu_shows_its_detail() -> None:
    app = HuvmTop(playback(), interval=0.05)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.refreshes >= 2)
        app.gpu_table.focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.query_one("#views", TabbedContent).active == "tab-detail")
        assert app.detail.gpu == 1
        await pilot.pause(0.1)
        head = str(app.detail.header.render())
        assert "gpu1" in head and "fake1" in head and "lent 1.0 GiB" in head and "own 11.0 GiB" in head
        t = app.detail.table
        assert str(t.get_cell("lent_bytes", "value")) == "1.0 GiB"
        assert t.row_count >= len(gpu_metrics())


async def test_graphs_per_gpu_with_a_scale() -> None:
    app = HuvmTop(FakeSource(), interval=0.05)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.refreshes >= 5)
        graphs = app.graphs
        assert graphs.metric.key == "faults"
        names = {w.id for w in graphs.query(".graph-row")}
        assert names == {"graph-node", "graph-gpu0", "graph-gpu1", "graph-gpu2", "graph-gpu3"}
        lo_hi = graphs.scale("gpu0")
        assert lo_hi is not None and lo_hi[1] >= lo_hi[0]
        assert graphs.history.series("faults", 0)[-1] == app.rates.gpus[0]["faults"]  # type: ignore[union-attr]
        await pilot.press("g")
        assert graphs.metric.key == "evict_to_peer" and "evict_to_peer/s" in str(graphs.border_title)


async def test_processes_sort_and_filter() -> None:
    app = HuvmTop(FakeSource(), interval=0.05)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.refreshes >= 3)
        table = app.processes
        assert [r.value for r in table.rows] == ["va2", "va1"]  # most harvested first
        while table.sort_key != "pid":
            await pilot.press("s")
        await pilot.pause()
        assert [r.value for r in table.rows] == ["va1", "va2"]
        assert app.query_one("#views", TabbedContent).active == "tab-processes"
        await pilot.press("slash")
        await pilot.press(*"job1")
        await pilot.pause()
        assert [r.value for r in table.rows] == ["va2"] and "filter: job1" in str(table.border_subtitle)
        await pilot.press("escape")
        assert app.focused is table
        await pilot.press("3")  # main-screen keys work again once the filter is left
        await until(pilot, lambda: isinstance(app.screen, PresetConfirm))


async def test_event_log_filter_and_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    evs = [TraceEvent(i, name, i % 2, 2, 0, 2097152, 0x1000) for i, name in
           enumerate(["evict", "evict", "fetch", "evict"])]
    app = HuvmTop(FakeSource(), FakeEvents(evs), interval=5)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.event_log.lines == 4)
        app.query_one("#views", TabbedContent).active = "tab-events"
        await pilot.press("slash")
        await pilot.press(*"evict gpu1")
        await pilot.pause()
        shown = app.event_log.shown()
        assert app.event_log.lines == len(shown) == 2 and all(line.split()[1:3] == ["evict", "gpu1"] for line in shown)
        await pilot.press("enter")
        await pilot.press("w")
        await pilot.pause()
        saved = list(tmp_path.glob("huvm-top-events-*.log"))
        assert len(saved) == 1 and saved[0].read_text().splitlines() == app.event_log.shown()


async def test_editor_names_fields_by_huvmctl_keys_with_ranges() -> None:
    from huvm import policy as hp

    app = HuvmTop(FakeSource(), interval=5)
    async with app.run_test(size=(160, 60)) as pilot:
        editor = await open_editor(app, pilot)
        names = [str(w.render()) for w in editor.query(".row .name")][1:]  # after "load preset"
        assert names[: len(hp.NODE_KEYS)] == list(hp.NODE_KEYS)
        gpu_names = names[len(hp.NODE_KEYS):]
        assert gpu_names[:3] == ["gpu.0.role", "gpu.0.flags", "gpu.0.lend_limit_bytes"]
        for name in gpu_names:
            sel, key = hp.split_key(name)
            assert sel is not None and key in hp.GPU_KEYS  # what `huvmctl policy set` takes
        helps = {n: str(h.render()) for n, h in zip(names, list(editor.query(".row .help"))[1:], strict=True)}
        assert helps["prefetch_chunks"].startswith("0..64:")
        assert helps["gpu.0.lend_limit_bytes"].startswith("0..unlimited:")
        assert "multipath" in helps["prefetch_mode"]
