"""huvmlab.tracerec / `huvmctl trace record`: bcc on the USDT probes of the in-process simulator writes one Parquet
row per event, and the rows counted per event (and per GPU pair) equal the simulator's counters (the mapping of
tests/vm/guest/test_tracepoints.py); the event schema and metadata; the refusal paths. Root and bcc
(python3-bpfcc) are needed for the recording tests (a failure, not a skip, in CI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import require_or_skip
from huvm import bpf
from huvm.cli import main
from huvmlab import tracerec
from huvmlab.traces.events import EVENT_SCHEMA, read_events

HOST = 16
CHUNK = 2 << 20
EXAMPLE = Path(__file__).resolve().parents[2] / "pyctl" / "huvm" / "examples" / "consolidation.toml"


def _require_bpf() -> None:
    require_or_skip(os.geteuid() == 0, "attaching USDT probes needs root")
    require_or_skip(bpf.bcc_available(), "bcc (python3-bpfcc) is not importable")


def _scenario() -> dict[str, Any]:
    """The scenario of test_sim_usdt.py (every kind of movement), run in this process."""
    from huvm_testing import usdt_scenario
    from huvmlab.sim import run_scenario

    node, tenants = usdt_scenario()
    stats: dict[str, Any] = run_scenario(node, tenants, "huvm").stats
    return stats


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[tracerec.RecordResult[dict[str, Any]], Path]:
    _require_bpf()   # a failure in CI
    out = tmp_path_factory.mktemp("rec") / "events.parquet"
    return tracerec.record(out, mode="usdt", during=_scenario), out


@pytest.mark.timeout(180)
def test_recorded_events_equal_the_counters(recorded: tuple[tracerec.RecordResult[dict[str, Any]], Path]) -> None:
    _require_bpf()
    res, out = recorded
    assert res.value is not None
    gpus, pairs = res.value["gpus"], res.value["pairs"]
    f = read_events(out)
    assert f.lost == res.lost == 0      # a small run: the perf buffer keeps up
    rows = f.table.to_pylist()
    per: dict[str, int] = {}
    for r in rows:
        per[r["event"]] = per.get(r["event"], 0) + 1
    assert per == res.per_event and len(rows) == res.rows
    assert {k: v for k, v in f.counts.items() if v} == per      # the kernel's counts: nothing dropped

    def ctr(name: str) -> int:
        return sum(int(g[name]) for g in gpus)

    assert per.get("evict", 0) == ctr("evict_to_peer") + ctr("evict_to_host") - ctr("preevict_to_peer") \
        - ctr("preevict_to_host")
    assert per.get("preevict", 0) == ctr("preevict_to_peer") + ctr("preevict_to_host")
    assert per.get("fetch", 0) == ctr("fetch_from_peer") + ctr("fetch_from_host") + ctr("remote_map")
    assert per.get("giveback", 0) == ctr("giveback")
    assert per.get("prefetch", 0) == ctr("prefetch_local") + ctr("prefetch_to_peer")
    assert per.get("policy", 0) == 1
    assert all(per.get(n, 0) > 0 for n in bpf.event_names()), per     # every kind of movement happened
    # Per GPU pair, from the rows' gpu/peer columns.
    n = len(gpus)
    for g in range(n):
        for h in range(n):
            if g == h:
                continue
            moved = sum(1 for r in rows if r["event"] in ("evict", "preevict") and (r["gpu"], r["peer"]) == (g, h))
            assert moved == pairs[g][h]["evict_chunks"], (g, h)
            assert sum(1 for r in rows if r["event"] == "giveback" and (r["gpu"], r["peer"]) == (h, g)) \
                == pairs[g][h]["giveback_chunks"], (g, h)
        host = sum(1 for r in rows if r["event"] in ("evict", "preevict") and (r["gpu"], r["peer"]) == (g, HOST))
        assert host == gpus[g]["evict_to_host"], g
        for reason, v in enumerate(gpus[g]["host_reason"]):
            assert sum(1 for r in rows if r["event"] in ("evict", "preevict") and r["gpu"] == g
                       and r["peer"] == HOST and r["reason"] == reason) == v, (g, reason)


def test_event_file_schema_and_columns(recorded: tuple[tracerec.RecordResult[dict[str, Any]], Path]) -> None:
    _require_bpf()
    res, out = recorded
    f = read_events(out)
    assert f.table.schema.remove_metadata().equals(EVENT_SCHEMA)
    assert "USDT" in f.source and str(os.getpid()) in f.source
    rows = f.table.to_pylist()
    ts = [r["ts_ns"] for r in rows]
    assert ts == sorted(ts) and ts[0] > 0
    assert {r["pid"] for r in rows} == {os.getpid()} and all(r["comm"] for r in rows)
    assert all(r["uvm_gpu"] is None and r["uvm_peer"] is None for r in rows)   # USDT: no UVM ids
    chunk_rows = [r for r in rows if r["event"] != "policy"]
    assert all(r["bytes"] == CHUNK and r["va"] % CHUNK == 0 and r["va"] > 0 for r in chunk_rows)
    [pol] = [r for r in rows if r["event"] == "policy"]
    assert (pol["gpu"], pol["peer"]) == (HOST, HOST) and pol["reason_name"] in ("huvm", "custom")
    assert {r["reason_name"] for r in rows if r["event"] == "giveback"} == {"giveback"}
    assert {r["reason_name"] for r in rows if r["event"] == "fetch"} <= {"moved", "remote_map"}
    assert all(r["reason_name"] is None for r in rows if r["event"] == "prefetch")


@pytest.mark.timeout(180)
def test_count_and_event_filter(tmp_path: Path) -> None:
    _require_bpf()
    out = tmp_path / "ev.parquet"
    res = tracerec.record(out, mode="usdt", events=("fetch", "giveback"), count=25, during=_scenario)
    f = read_events(out)
    assert res.rows == f.table.num_rows == 25
    assert set(f.table.column("event").to_pylist()) <= {"fetch", "giveback"}
    assert set(f.counts) == {"fetch", "giveback"} and f.counts["fetch"] > 25     # the kernel counted them all
    assert not (tmp_path / "ev.parquet.part").exists()


@pytest.mark.timeout(300)
def test_cli_records_an_experiment_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _require_bpf()
    out = tmp_path / "sim.parquet"
    assert main(["trace", "record", "--out", str(out), "--sim-config", str(EXAMPLE), "--events", "policy,giveback"]) \
        == 0
    line = capsys.readouterr().out
    f = read_events(out)
    per = f.per_event()
    assert set(per) <= {"policy", "giveback"} and per["policy"] >= 1
    assert line.startswith(f"{out}: {f.table.num_rows} events") and f"lost {f.lost}" in line


def test_refuses_without_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(bpf, "bcc_available", lambda: True)
    with pytest.raises(bpf.TracingUnavailable, match="needs root"):
        tracerec.record(tmp_path / "x.parquet", mode="usdt", during=lambda: None)
    assert main(["trace", "record", "--out", str(tmp_path / "x.parquet"), "--sim-config", str(EXAMPLE)]) == 1
    err = capsys.readouterr().err
    assert err == "huvmctl: error: tracing needs root (bcc attaches BPF programs)\n"
    assert not list(tmp_path.iterdir())


def test_refuses_without_bcc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bpf, "bcc_available", lambda: False)
    assert main(["trace", "record", "--out", str(tmp_path / "x.parquet"), "--pid", str(os.getpid())]) == 1
    assert "python3-bpfcc" in capsys.readouterr().err


def test_refuses_without_tracepoints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(bpf, "bcc_available", lambda: True)
    monkeypatch.setattr(bpf, "tracepoints_present", lambda: False)
    assert main(["trace", "record", "--out", str(tmp_path / "x.parquet"), "--tracepoints", "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("huvmctl: error: no huvm tracepoints") and err.count("\n") == 1


def test_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.parquet"
    assert main(["trace", "record", "--out", str(out), "--events", "evict,bogus"]) != 0
    err = capsys.readouterr().err
    assert "unknown event bogus" in err and "evict, preevict" in err and err.count("\n") == 1
    with pytest.raises(Exception, match="unknown events bogus, nope"):
        bpf.parse_events("bogus,evict,nope")
    assert bpf.parse_events("fetch,evict") == ("evict", "fetch")
    out.write_bytes(b"keep")
    assert main(["trace", "record", "--out", str(out), "--sim-config", str(EXAMPLE)]) == 2
    assert "exists (--force overwrites it)" in capsys.readouterr().err
    assert out.read_bytes() == b"keep"
    assert main(["trace", "record", "--out", str(tmp_path / "y.parquet"), "--sim-config", "dgx-a100"]) == 2
    assert "needs an experiment file" in capsys.readouterr().err
    for bad in (["--pid", "1", "--tracepoints"], ["--duration", "-1"], ["--count", "2", "--duration", "1"]):
        with pytest.raises(SystemExit) as exc:   # argparse's usage errors
            main(["trace", "record", "--out", str(tmp_path / "y.parquet"), *bad])
        assert exc.value.code == 2, bad
    capsys.readouterr()
    with pytest.raises(tracerec.OutputExists):
        tracerec.record(out, mode="usdt")


def test_read_events_rejects_other_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from huvmlab.traces import TraceFormatError

    p = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), p)
    with pytest.raises(TraceFormatError, match="not a huvm event table"):
        read_events(p)


_BUSY = """
import sys
from huvm import bpf
from huvmlab.sim import run_scenario
from huvm_testing import usdt_scenario
bpf.default_library()             # the probes are mapped before the parent attaches
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[1])):
    node, tenants = usdt_scenario()
    run_scenario(node, tenants, "huvm")
"""


@pytest.mark.timeout(300)
def test_cuts_mid_stream_split_every_event_once() -> None:
    """RunRecorder.cut while the node is busy (an experiment's runs end while give-backs and fetches are still
    firing; here another process runs scenarios while this one cuts): each segment's kernel counts equal its
    rows (nothing dropped), and the segments together hold every event exactly once. A cut that drains first
    and reads the counts after (or the reverse) puts an event that fires between the two on one side only."""
    _require_bpf()
    import subprocess
    import sys

    names = ("evict", "preevict", "fetch", "giveback", "prefetch")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.Popen([sys.executable, "-c", _BUSY, "12"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    rec = tracerec.RunRecorder(names, "usdt")
    rec.tracer = bpf.Tracer("usdt", child.pid, None, names, page_cnt=1024)
    segments = []
    try:
        rec.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        while child.poll() is None:
            segments.append(rec.cut())
        segments.append(rec.cut())
        total = rec.tracer.counts()
    finally:
        rec.close()
        child.kill()
        child.wait()
    assert child.returncode == 0
    busy_cuts = [s for s in segments if s.rows]
    assert len(busy_cuts) >= 3, f"only {len(busy_cuts)} cuts saw events: the test cut nothing mid-stream"
    for i, s in enumerate(segments):
        rows: dict[str, int] = {}
        for r in s.rows:
            rows[r["event"]] = rows.get(r["event"], 0) + 1
        assert s.lost == 0, f"segment {i}: {s.lost} dropped"
        assert {k: v for k, v in s.counts.items() if v} == rows, f"segment {i}: counts {s.counts} rows {rows}"
    assert sum(len(s.rows) for s in segments) == sum(total.values()) > 0
