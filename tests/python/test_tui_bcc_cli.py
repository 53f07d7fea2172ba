"""huvm-top: the bcc event source (program text; a real USDT attach when root and bcc are here) and the
command line (exit codes, one-line errors)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from conftest import require_or_skip
from huvm_top import abi, cli
from huvm_top.app import main
from huvm_top.model import SourceError
from huvm_top.sources import bcc as bccmod


def test_program_has_one_probe_per_event() -> None:
    usdt = bccmod.program("usdt")
    tp = bccmod.program("tracepoint")
    for i, name in enumerate(abi.event_names()):
        assert f"int on_{name}(struct pt_regs *ctx)" in usdt
        assert f"TRACEPOINT_PROBE(huvm, huvm_{name})" in tp  # driver/uvm/uvm_huvm_trace.h's names
        assert f"return record(ctx, {i}," in usdt
    for n in range(1, 6):  # five arguments: gpu, peer, reason, bytes, va
        assert f"bpf_usdt_readarg({n}, ctx" in usdt
    assert f"BPF_PERCPU_ARRAY(counts, u64, {len(abi.event_names())})" in usdt
    assert "k.slot = bpf_log2l(bytes);" in tp and "args->va" in tp


def test_bcc_refuses_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("bcc") is None:
        with pytest.raises(SourceError, match="python3-bpfcc"):
            bccmod.BccSource("usdt").start()
        return
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SourceError, match="needs root"):
        bccmod.BccSource("usdt").start()


def test_bcc_tracepoint_mode_without_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    require_or_skip(importlib.util.find_spec("bcc") is not None, "bcc (python3-bpfcc) not installed")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    from huvm import bpf

    monkeypatch.setattr(bpf, "tracepoints_present", lambda: False)  # the tracer of huvm.bpf checks
    with pytest.raises(SourceError, match="no huvm tracepoints"):
        bccmod.BccSource("tracepoint").start()


@pytest.mark.timeout(120)
def test_bcc_counts_usdt_events_of_the_core() -> None:
    """A known workload (a prime number of evictions, bcc style) through the real core in this process;
    the probes in huvm's extension must see exactly those."""
    require_or_skip(importlib.util.find_spec("bcc") is not None, "bcc (python3-bpfcc) not installed")
    require_or_skip(os.geteuid() == 0, "attaching BPF programs needs root")
    from huvm import abi as habi
    from huvm.client import Node
    from huvm_testing import CoreNode

    src = bccmod.BccSource("usdt")
    try:
        src.start()
    except SourceError as exc:
        require_or_skip(False, f"cannot attach: {exc}")
    try:
        node = Node(CoreNode(4))
        p = habi.new_params(habi.lib.HUVM_IOCTL_TEST_EVENT)
        p.event, p.gpu, p.count, p.va = habi.lib.HUVM_TEST_EVENT_EVICT, 0, 7, 0x7F0000000000
        node.call(habi.lib.HUVM_IOCTL_TEST_EVENT, p)
        events = []
        for _ in range(20):
            events += src.poll(100)
            if len(events) >= 7:
                break
        assert [e.name for e in events] == ["evict"] * 7, (src.counts(), src.lost(), src.description)
        assert all(e.gpu == 0 and e.bytes == habi.lib.HUVM_CHUNK_SIZE for e in events)
        assert sum(e.peer != habi.lib.HUVM_DEST_HOST for e in events) == int(p.to_peer)
        assert src.counts()["evict"] == 7 and src.counts()["fetch"] == 0
        hist = src.histograms()["evict"]
        assert hist[habi.lib.HUVM_CHUNK_SIZE.bit_length()] == 7 and sum(hist) == 7
    finally:
        src.close()
    assert src.poll(10) == []


def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--interval", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("huvm-top: error: argument --interval") and err.count("\n") == 1
    assert main(["--backend", "gpu"]) == 2
    assert main(["--sim", "--device", "/dev/x"]) == 2
    assert main(["--pid", "1"]) == 2
    assert main(["--help"]) == 0
    assert "huvm-top --sim" in capsys.readouterr().out


def test_cli_missing_device_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nvidia-uvm"
    assert main(["--backend", "kernel", "--device", str(missing), "--no-wait"]) == 1  # (without it: waits)
    err = capsys.readouterr().err
    assert err.startswith("huvm-top: error: ") and str(missing) in err and err.count("\n") == 1


def test_cli_picks_sources() -> None:
    src, ev = cli.make_sources(cli.parse_args(["--fake", "--bcc"]))
    assert type(src).__name__ == "FakeSource" and type(ev).__name__ == "FakeEvents"
    src, ev = cli.make_sources(cli.parse_args(["--sim", "--interval", "0.5"]))
    try:
        assert type(src).__name__ == "SimSource" and ev is None
    finally:
        src.close()
