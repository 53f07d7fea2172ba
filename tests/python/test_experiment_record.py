"""``[record] events`` in experiment files (huvmlab.experiment.recording): the table is validated (one-line errors
with the file's line), a simulated experiment records the simulator's USDT probes per run through the tracer of
``huvmctl trace record`` and writes each run's events as the trace schema's event table, the counters equal the
events (counters_vs_events, which mirrors huvm_account_*), the results carry the events across the emulated
node's boundary (resultio), and UVM's kprobe events are refused where there is no nvidia-uvm. Root and bcc are
needed for the recording test (a failure, not a skip, in CI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import require_or_skip
from huvm import bpf
from huvm.cli import main
from huvm.errors import ConfigError
from huvmlab import experiment
from huvmlab.experiment import recording, resultio
from huvmlab.experiment.results import CounterRow, ExperimentResult, RunEvents, RunKey, RunResult
from huvmlab.traces.events import read_events

HOST = 16
MIB = 1 << 20
CHUNK = 2 * MIB
EXAMPLES = Path(__file__).resolve().parents[2] / "pyctl" / "huvm" / "examples"

SMALL = """[experiment]
name = "rec"
policies = ["stock", "huvm"]
ideal = false

[node]
preset = "aws-p3.8xlarge"
gpu_memory_bytes = 3221225472
gpu_reserved_bytes = 268435456

[[tenant]]
name = "gpt2-small"
gpu = 0
trace = "bundled:gpt2-small"
steps = 2

[[tenant]]
name = "resnet-small"
gpu = 1
trace = "bundled:resnet-small"
steps = 2

[[tenant]]
name = "idle"
gpu = 2
trace = "bundled:lender-idle"
steps = 0
{record}
"""


def _spec(tmp_path: Path, record: str) -> Any:
    f = tmp_path / "rec.toml"
    f.write_text(SMALL.format(record=record))
    return experiment.load(f)


# ---- the [record] table ------------------------------------------------------------------------------------

def test_record_table_parsed(tmp_path: Path) -> None:
    spec = _spec(tmp_path, '[record]\nevents = ["fetch", "evict"]')
    assert spec.record_events == ("evict", "fetch")   # huvm_events.h's order
    assert _spec(tmp_path, '[record]\nevents = ["all"]').record_events == bpf.event_names()
    assert _spec(tmp_path, "").record_events == ()


@pytest.mark.parametrize(("record", "line", "message"), [
    ('[record]\nevents = ["evict", "bogus"]', 29, "record.events[1]: unknown event 'bogus' (events: evict,"),
    ('[record]\nevents = ["uvm_fault"]', 29, "record.events[0]: 'uvm_fault' is a kprobe on nvidia-uvm: a simulated"),
    ('[record]\nevents = []', 29, "record.events: needs at least 1"),
    ('[record]\nevents = ["all", "evict"]', 29, "\"all\" (every huvm event) stands alone"),
    ('[record]\nevent = ["evict"]', 28, "record"),
])
def test_record_table_refused(tmp_path: Path, record: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _spec(tmp_path, record)
    text = str(exc.value)
    assert f"rec.toml:{line}:" in text and message in text and "\n" not in text, text


def test_record_refused_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "rec.toml"
    f.write_text(SMALL.format(record='[record]\nevents = ["evict", "nope"]'))
    assert main(["experiment", "run", str(f), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown event 'nope'" in err and "Traceback" not in err


def test_record_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(bpf, "bcc_available", lambda: True)
    spec = _spec(tmp_path, '[record]\nevents = ["evict"]')
    with pytest.raises(bpf.TracingUnavailable, match="needs root"):
        experiment.run(spec)


# ---- counters against events ---------------------------------------------------------------------------------

def _run(counters: dict[tuple[int, str], int], rows: list[dict[str, Any]], names: tuple[str, ...],
         window: tuple[int, int] | None = None) -> RunResult:
    key = RunKey("huvm", None, 0)
    r = RunResult(key, 1, counters=[CounterRow(key, "gpu", g, -1, m, v) for (g, m), v in counters.items()])
    r.events = RunEvents(rows, 0, {n: sum(1 for x in rows if x["event"] == n) for n in names}, "test", window)
    return r


def _ev(name: str, gpu: int, peer: int, reason: int = 0, nbytes: int = CHUNK, ts: int = 10) -> dict[str, Any]:
    return {"ts_ns": ts, "event": name, "gpu": gpu, "peer": peer, "reason": reason, "bytes": nbytes}


def test_counters_vs_events_kernel_rules() -> None:
    """The kernel's events: page runs from a peer count no chunk (the release does), page runs from the host
    count whole 2 MiB, pre-evictions count as evictions too, give-backs on the lender."""
    from huvm import abi

    lib = abi.lib
    rows = [_ev("evict", 0, 1), _ev("evict", 0, 2), _ev("evict", 0, HOST, 1),
            _ev("preevict", 0, 1), _ev("preevict", 0, HOST, 2),
            _ev("fetch", 0, 1, lib.HUVM_FETCHED_PAGES, 64 * 1024), _ev("fetch", 0, 1, lib.HUVM_FETCHED_PAGES, CHUNK),
            _ev("fetch", 0, 1, lib.HUVM_FETCHED_RELEASED, CHUNK),
            _ev("fetch", 0, HOST, lib.HUVM_FETCHED_PAGES, 5 * MIB), _ev("fetch", 0, HOST, lib.HUVM_FETCHED_PAGES, MIB),
            _ev("giveback", 2, 0, 9)]
    names = ("evict", "preevict", "fetch", "giveback")
    good = {(0, "evict_to_peer"): 3, (0, "evict_to_host"): 2, (0, "preevict_to_peer"): 1,
            (0, "preevict_to_host"): 1, (0, "fetch_from_peer"): 1, (0, "fetch_from_host"): 2, (2, "giveback"): 1}
    assert recording.counters_vs_events(_run(good, rows, names)) == []
    bad = dict(good)
    bad[(0, "fetch_from_peer")] = 2
    assert recording.counters_vs_events(_run(bad, rows, names)) == \
        ["huvm#0: GPU0 fetch_from_peer: counter 2, events 1"]
    # a counter with no event at all is a mismatch too
    extra = {**good, (1, "evict_to_host"): 4}
    assert recording.counters_vs_events(_run(extra, rows, names)) == ["huvm#0: GPU1 evict_to_host: counter 4, events 0"]
    # only metrics whose events were all recorded are checked (preevict not recorded: evict_to_* not checked)
    only_fetch = [r for r in rows if r["event"] == "fetch"]
    assert recording.counters_vs_events(_run({(0, "fetch_from_peer"): 1, (0, "fetch_from_host"): 2,
                                              (0, "evict_to_peer"): 99}, only_fetch, ("fetch",))) == []
    # the counters' window: an event outside it is not counted
    late = [*rows, _ev("giveback", 2, 0, 9, ts=99)]
    assert recording.counters_vs_events(_run(good, late, names, window=(0, 50))) == []
    assert recording.counters_vs_events(_run(good, late, names)) == ["huvm#0: GPU2 giveback: counter 1, events 2"]


def test_events_survive_resultio() -> None:
    key = RunKey("huvm", None, 0)
    r = RunResult(key, 5)
    rows = [{"ts_ns": 1, "event": "evict", "gpu": 0, "peer": 1, "reason": 0, "reason_name": "peer",
             "bytes": CHUNK, "va": 1 << 40, "pid": 7, "comm": "t", "uvm_gpu": 1, "uvm_peer": 2}]
    r.events = RunEvents(rows, 3, {"evict": 4}, "bcc: tracepoints huvm:*", (0, 9))
    res = ExperimentResult("x", "", "n", None)
    res.runs.append(r)
    back = resultio.loads(resultio.dumps(res)).runs[0].events
    assert back == r.events
    plain = ExperimentResult("x", "", "n", None)
    plain.runs.append(RunResult(key, 5))
    assert resultio.loads(resultio.dumps(plain)).runs[0].events is None


# ---- recording a simulated experiment ------------------------------------------------------------------------

@pytest.mark.timeout(300)
def test_sim_experiment_records_events(tmp_path: Path) -> None:
    require_or_skip(os.geteuid() == 0, "attaching USDT probes needs root")
    require_or_skip(bpf.bcc_available(), "bcc (python3-bpfcc) is not importable")
    spec = _spec(tmp_path, '[record]\nevents = ["evict", "preevict", "fetch", "giveback", "prefetch"]')
    out = tmp_path / "out"
    res, files = experiment.run_to(spec, out)
    assert [r.key.run_id for r in res.runs] == ["stock#0", "huvm#0"]
    huvm = res.runs[1]
    assert huvm.events is not None and huvm.events.lost == 0
    per_file = {}
    for r in res.runs:
        assert r.events is not None
        f = read_events(out / "data" / "events" / f"{r.key.run_id}.parquet")
        per = f.per_event()
        per_file[r.key.run_id] = per
        assert f.lost == 0 and {k: v for k, v in f.counts.items() if v} == per
        assert f.table.num_rows == len(r.events.rows) and "USDT" in f.source
        assert recording.counters_vs_events(r) == [], r.key.run_id
    # the huvm run moved data to peers, stock to the host only
    assert per_file["huvm#0"].get("evict", 0) + per_file["huvm#0"].get("preevict", 0) > 0
    stock_rows = res.runs[0].events.rows if res.runs[0].events else []
    assert stock_rows and all(x["peer"] == HOST for x in stock_rows if x["event"] == "evict")
    # data/events.parquet: every run's rows with the run columns
    import pyarrow.parquet as pq

    allt = pq.read_table(out / "data" / "events.parquet")
    assert allt.num_rows == sum(len(r.events.rows) for r in res.runs if r.events)
    assert set(allt.column("run_id").to_pylist()) == {"stock#0", "huvm#0"}
    assert (out / "data" / "events.csv").is_file()
    report = (out / "report.md").read_text()
    assert "recorded events (evict, preevict, fetch, giveback, prefetch; bcc: USDT" in report
    assert "counters vs events: every run's counters equal its recorded events" in report
    # and the check can fail: one event fewer is a mismatch
    assert huvm.events is not None
    first = next(i for i, x in enumerate(huvm.events.rows) if x["event"] in ("evict", "preevict"))
    fewer = huvm.events.rows[:first] + huvm.events.rows[first + 1:]
    assert recording.counters_vs_events(huvm, fewer)


# ---- UVM's kprobe events -------------------------------------------------------------------------------------

def test_uvm_events_names_and_program() -> None:
    assert bpf.parse_events("uvm_make_resident,evict,uvm_fault") == ("evict", "uvm_fault", "uvm_make_resident")
    assert "uvm_fault" not in bpf.parse_events(None)   # the default: huvm's events
    text = bpf.program("tracepoint", ("evict", "uvm_fault", "uvm_make_resident"))
    assert "TRACEPOINT_PROBE(huvm, huvm_evict)" in text
    assert "int on_uvm_fault(struct pt_regs *ctx)" in text and "int on_uvm_make_resident(struct pt_regs *ctx)" in text
    assert "PT_REGS_SP(ctx) + 16" in text   # cause, the 8th argument, on the stack
    with pytest.raises(bpf.TracingUnavailable, match="kprobe"):
        bpf.program("usdt", ("uvm_fault",))


def test_uvm_events_refused_without_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_text("ffffffff81000000 T _stext\nffffffffc0a00000 T uvm_va_block_make_resident_copy\t[nvidia_uvm]\n")
    monkeypatch.setattr(bpf, "KALLSYMS", kallsyms)
    bpf.check_kprobes(("uvm_make_resident", "evict"))    # there
    with pytest.raises(bpf.TracingUnavailable, match="no uvm_va_block_service_locked in .*nvidia-uvm is not loaded"):
        bpf.check_kprobes(("uvm_fault",))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(bpf, "bcc_available", lambda: True)
    assert main(["trace", "record", "--out", str(tmp_path / "x.parquet"), "--events", "uvm_fault", "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("huvmctl: error: no uvm_va_block_service_locked in") and err.count("\n") == 1
    sim = EXAMPLES / "consolidation.toml"
    assert main(["trace", "record", "--out", str(tmp_path / "y.parquet"), "--events", "uvm_fault",
                 "--sim-config", str(sim)]) == 2
    assert "kprobes on the loaded nvidia-uvm" in capsys.readouterr().err
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["trace", "record", "--out", str(tmp_path / "z.parquet"), "--events", "uvm_make_resident"]) == 1
    assert "needs root" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.parquet"))


def test_uvm_record_rows() -> None:
    """A kprobe record becomes a row with no huvm GPU and UVM's cause named."""
    from huvmlab import tracerec

    rec = bpf.Record(5, "uvm_make_resident", -1, -1, 4, 8192, 0, 9, "kworker", 1, None)
    (row,) = tracerec.rows_of([rec])
    assert row["reason_name"] == "eviction" and row["gpu"] == -1 and row["uvm_gpu"] == 1 and row["bytes"] == 8192
    (row,) = tracerec.rows_of([bpf.Record(5, "uvm_fault", -1, -1, 0, 0, 0, 9, "t", 0, None)])
    assert row["reason_name"] is None
