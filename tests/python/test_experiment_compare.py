"""huvmctl experiment compare (issue 13 item 3): two output folders side by side, per policy and counter, with
relative errors; on synthetic result folders whose counts the test sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from huvm import jsonout
from huvm.cli import main
from huvm.errors import ConfigError
from huvmlab.experiment.compare import compare, format_rel, rel_error
from huvmlab.experiment.output import write
from huvmlab.experiment.results import CounterRow, ExperimentResult, RunKey, RunResult, TenantRow, TrafficRow


def folder(tmp_path: Path, name: str, counts: dict[str, dict[str, list[int]]], *, kind: str = "sim",
           scale: float = 1.0, links: dict[str, dict[tuple[str, str, str], int]] | None = None,
           repetitions: int = 1, experiment: str = "consolidation") -> Path:
    """An output folder: per policy, per metric, the value on each GPU (repetition r adds r to each)."""
    res = ExperimentResult(experiment, "", "aws-p3.8xlarge", None)
    for rep in range(repetitions):
        for policy, metrics in counts.items():
            key = RunKey(policy, None, rep)
            r = RunResult(key, 1_000_000_000, node={"kind": kind, "module": f"{kind} 1", "preset": "aws-p3.8xlarge",
                                                     "scale": scale, "gpus": 2})
            r.tenants.append(TenantRow(key, "job", 0, True, 10**9, {}, "harvester"))
            for metric, per_gpu in metrics.items():
                for gpu, v in enumerate(per_gpu):
                    r.counters.append(CounterRow(key, "gpu", gpu, -1, metric, v + rep))
            for (path, src, dst), b in (links or {}).get(policy, {}).items():
                r.traffic.append(TrafficRow(key, path, src, dst, b))
            res.runs.append(r)
    out = tmp_path / name
    write(res, out)
    return out


def rows(c: Any) -> dict[tuple[str, str], Any]:
    return {(r.policy, r.counter): r for r in c.rows}


def test_relative_errors_per_policy_and_counter(tmp_path: Path) -> None:
    a = folder(tmp_path, "a", {"stock": {"evict_to_host": [90, 10], "faults": [1000, 0]},
                               "huvm": {"evict_to_peer": [60, 4], "giveback": [0, 8], "faults": [500, 0]}},
               links={"huvm": {("gpu_to_gpu", "0", "1"): 4 << 20, ("host_to_gpu", "host", "0"): 6 << 20}})
    b = folder(tmp_path, "b", {"stock": {"evict_to_host": [110, 10], "faults": [900, 0]},
                               "huvm": {"evict_to_peer": [48, 0], "giveback": [0, 8], "fetch_from_peer": [3, 0]}},
               links={"huvm": {("gpu_to_gpu", "0", "1"): 2 << 20, ("gpu_to_gpu", "1", "0"): 2 << 20}})
    c = compare(a, b)
    r = rows(c)
    assert not c.normalized and c.a.node_kind == "sim"
    assert (r[("stock", "evict_to_host")].a, r[("stock", "evict_to_host")].b) == (100, 120)
    assert r[("stock", "evict_to_host")].rel_error == pytest.approx(0.2)
    assert r[("stock", "faults")].rel_error == pytest.approx(-0.1)
    assert r[("huvm", "evict_to_peer")].rel_error == pytest.approx(48 / 64 - 1)
    assert r[("huvm", "giveback")].rel_error == 0.0
    assert r[("huvm", "fetch_from_peer")].a == 0 and r[("huvm", "fetch_from_peer")].rel_error is None
    assert r[("huvm", "faults")].b == 0 and r[("huvm", "faults")].rel_error == -1.0
    # every compared counter is there for every policy, zeros included
    assert {k[1] for k in r if k[0] == "stock"} >= {"evict_to_peer", "evict_to_host", "preevict_to_peer",
                                                     "preevict_to_host", "fetch_from_peer", "fetch_from_host",
                                                     "giveback", "faults", "peer_bytes", "host_bytes"}
    # bytes per link: totals, then one row per direction that moved anything
    assert r[("huvm", "peer_bytes")].a == 4 << 20 and r[("huvm", "peer_bytes")].rel_error == 0.0
    assert r[("huvm", "host_bytes")].a == 6 << 20 and r[("huvm", "host_bytes")].rel_error == -1.0
    assert r[("huvm", "bytes gpu_to_gpu 0->1")].rel_error == pytest.approx(-0.5)
    assert r[("huvm", "bytes gpu_to_gpu 1->0")].rel_error is None
    assert ("stock", "bytes gpu_to_gpu 0->1") not in r
    assert [x.counter for x in compare(a, b, links=False).rows if x.counter.startswith("bytes ")] == []


def test_scaled_runs_are_compared_at_full_size(tmp_path: Path) -> None:
    a = folder(tmp_path, "sim", {"huvm": {"evict_to_peer": [256, 0]}})
    b = folder(tmp_path, "emu", {"huvm": {"evict_to_peer": [2, 1]}}, kind="emulated", scale=1 / 128)
    c = compare(a, b)
    r = rows(c)
    assert c.normalized and c.b.node_kind == "emulated" and c.b.scale == 1 / 128
    assert r[("huvm", "evict_to_peer")].b == 3 * 128 and r[("huvm", "evict_to_peer")].rel_error == 0.5
    assert any("scale factor" in n for n in c.notes)
    raw = rows(compare(a, b, raw=True))
    assert raw[("huvm", "evict_to_peer")].b == 3 and not compare(a, b, raw=True).normalized


def test_repetitions_are_averaged_and_unmatched_policies_noted(tmp_path: Path) -> None:
    a = folder(tmp_path, "a", {"stock": {"faults": [10, 0]}, "huvm": {"faults": [4, 0]}}, repetitions=3)
    b = folder(tmp_path, "b", {"stock": {"faults": [11, 1]}, "ideal": {"faults": [1, 0]}}, experiment="other")
    c = compare(a, b)
    r = rows(c)
    assert r[("stock", "faults")].a == 12  # (10 + 11 + 12) / 3 on GPU 0, (0 + 1 + 2) / 3 on GPU 1
    assert {k[0] for k in r} == {"stock"}
    assert "only in A: policy 'huvm'" in c.notes and "only in B: policy 'ideal'" in c.notes
    assert any("different experiment names" in n for n in c.notes)


def test_refusals(tmp_path: Path) -> None:
    a = folder(tmp_path, "a", {"stock": {"faults": [1, 0]}})
    b = folder(tmp_path, "b", {"huvm": {"faults": [1, 0]}})
    with pytest.raises(ConfigError, match="no policy in common"):
        compare(a, b)
    with pytest.raises(ConfigError, match="not an experiment output folder"):
        compare(a, tmp_path / "missing")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"no data/counters.parquet"):
        compare(a, tmp_path / "c")


def test_formatting() -> None:
    assert rel_error(0, 0) == 0.0 and rel_error(0, 1) is None and rel_error(4, 5) == 0.25
    assert format_rel(0.25) == "+25.0 %" and format_rel(None) == "n/a" and format_rel(-0.5) == "-50.0 %"
    assert format_rel(-0.0001) == "+0.0 %"


def test_cli_table_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = folder(tmp_path, "a", {"huvm": {"evict_to_peer": [100, 0]}})
    b = folder(tmp_path, "b", {"huvm": {"evict_to_peer": [1, 0]}}, kind="emulated", scale=0.01)
    assert main(["experiment", "compare", str(a), str(b)]) == 0
    out, _err = capsys.readouterr()
    line = next(x for x in out.splitlines() if "evict_to_peer" in x and "pre" not in x)
    assert [c.strip() for c in line.split("│")[1:-1]] == ["-", "huvm", "evict_to_peer", "100", "100", "+0.0 %"]
    assert f"B: {b} (consolidation, emulated node aws-p3.8xlarge, scale 0.01)" in out
    assert main(["experiment", "compare", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr()[0])
    jsonout.validate(doc)
    assert doc["kind"] == "experiment-compare" and doc["normalized"] is True
    row = next(r for r in doc["rows"] if r["counter"] == "evict_to_peer")
    assert row["a"] == 100 and row["b"] == 100 and row["rel_error"] == 0.0
    rc = main(["experiment", "compare", str(a), str(tmp_path / "nope")])
    _out, err = capsys.readouterr()
    assert rc != 0 and "not an experiment output folder" in err and "Traceback" not in err


def test_markdown_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = folder(tmp_path, "a", {"huvm": {"evict_to_peer": [100, 0]}})
    b = folder(tmp_path, "b", {"huvm": {"evict_to_peer": [1, 0]}}, kind="emulated", scale=0.01)
    assert main(["experiment", "compare", str(a), str(b), "--markdown", "--no-links"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "| policy | counter | A | B | B vs A |" and lines[1] == "|---|---|---|---|---|"
    assert "| huvm | evict_to_peer | 100 | 100 | +0.0 % |" in lines
    assert "| huvm | faults | 0 | 0 | +0.0 % |" in lines
    assert "- B: `consolidation` on the emulated node `aws-p3.8xlarge`, scale 0.01 (emulated 1)" in lines
    assert any(line.startswith("- counts divided by each run's scale factor") for line in lines)
