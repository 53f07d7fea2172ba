"""huvm-top --record / --replay: the record file round-trips snapshots, and a replay shows what was seen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from huvm_top.app import HuvmTop, main
from huvm_top.model import PolicyRefused, SourceError
from huvm_top.record import FORMAT, Recorder, ReplaySource
from huvm_top.sources.fake import FakeSource
from textual.widgets import DataTable


def record(path: Path, n: int) -> FakeSource:
    fake = FakeSource()
    rec = Recorder(path)
    rec.header(fake.open(), fake.get_policy())
    for _ in range(n):
        rec.add(fake.snapshot())
    rec.close()
    return fake


def test_record_round_trips_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    rec = Recorder(path)
    fake = FakeSource()
    info, policy = fake.open(), fake.get_policy()
    policy.gpus[1].lend_traffic_mbyte_per_s = 18000  # every per-GPU field is kept
    rec.header(info, policy)
    snaps = [fake.snapshot() for _ in range(3)]
    for s in snaps:
        rec.add(s)
    rec.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["format"] == FORMAT
    replay = ReplaySource(path)
    rinfo = replay.open()
    assert rinfo.gpus == info.gpus and rinfo.description.startswith("replay of run.jsonl: fake node")
    assert replay.get_policy() == policy
    assert [replay.snapshot() for _ in range(3)] == snaps
    assert replay.finished and replay.snapshot() == snaps[-1]  # the end holds the last one
    with pytest.raises(PolicyRefused, match="read-only"):
        replay.set_policy(policy)
    assert replay.check_policy(policy)[0].message == "a replay is read-only"


def test_bad_records_are_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"format": "something else"}\n')
    with pytest.raises(SourceError, match=r"junk.jsonl:1: not a huvm-top record"):
        ReplaySource(junk).open()
    path = tmp_path / "run.jsonl"
    record(path, 2)
    with path.open("a") as f:
        f.write("{not json\n")
    with pytest.raises(SourceError, match=r"run.jsonl:4: not JSON"):
        ReplaySource(path).open()
    empty = tmp_path / "empty.jsonl"
    record(empty, 0)
    with pytest.raises(SourceError, match="no snapshots"):
        ReplaySource(empty).open()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_app_records_and_a_replay_shows_the_same(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    app = HuvmTop(FakeSource(), interval=0.05, recorder=Recorder(path))
    async with app.run_test(size=(200, 50)) as pilot:
        while app.refreshes < 4:
            await pilot.pause(0.02)
        app.paused = True
        await pilot.pause(0.2)
        seen = app.query_one("#gpus", DataTable).get_row("gpu0")
        recorded = app.recorder.count if app.recorder else 0
    assert len(path.read_text().splitlines()) == recorded + 1 >= 5

    replay = ReplaySource(path)
    app2 = HuvmTop(replay, interval=0.05)
    async with app2.run_test(size=(200, 50)) as pilot:
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        while not replay.finished and loop.time() < end:
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert app2.query_one("#gpus", DataTable).get_row("gpu0") == seen
        assert "replay of run.jsonl" in str(app2.status_line.render())


def test_cli_replay_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--replay", str(tmp_path / "missing.jsonl")]) == 1
    assert capsys.readouterr().err.startswith("huvm-top: error: ")
    assert main(["--replay", "x.jsonl", "--sim"]) == 2
    assert main(["--fake", "--record", str(tmp_path / "no" / "dir.jsonl")]) == 1
    assert "cannot write the record" in capsys.readouterr().err


def test_record_keeps_trace_events_and_replay_skips_them(tmp_path: Path) -> None:
    from huvm_top.model import TraceEvent

    path = tmp_path / "run.jsonl"
    fake = FakeSource()
    rec = Recorder(path)
    rec.header(fake.open(), fake.get_policy())
    snaps = [fake.snapshot()]
    rec.add(snaps[0])
    rec.add_events([TraceEvent(5, "evict", 0, 2, 5, 2097152, 0x1000), TraceEvent(6, "fetch", 1, 2, 0, 4096, 0)])
    snaps.append(fake.snapshot())
    rec.add(snaps[1])
    rec.close()
    ev = [json.loads(line) for line in path.read_text().splitlines() if '"ev"' in line]
    assert rec.events == 2 and ev == [{"ev": [[5, "evict", 0, 2, 5, 2097152, 4096], [6, "fetch", 1, 2, 0, 4096, 0]]}]
    replay = ReplaySource(path)
    replay.open()
    assert replay.snapshots == snaps
