"""huvmctl's --json output against its one JSON schema (huvm.jsonout): every document of every verb
validates against the published JSON Schema (jsonschema) and the models, with schema_version, sizes as
integers in bytes, objects not arrays, named GPU lists, flags and reasons; no verb prints JSON any other
way."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from huvm import abi, jsonout
from huvm.cli import main
from huvm_testing import small_experiment
from pydantic import ValidationError

SIM = ("--sim",)
EXAMPLE = str(Path(jsonout.__file__).parent / "examples" / "consolidation.toml")
#: huvmctl's subcommands: the control plane's (huvm/cli) and the lab's (huvmlab/cli)
CLIS = (Path(jsonout.__file__).parent / "cli", Path(jsonout.__file__).parents[1] / "huvmlab" / "cli")
RECORD = str(Path(jsonout.__file__).parent / "data" / "calibration" / "h200-580.159.04.json")
SMALL = small_experiment("bundled:lender-idle")


def docs(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main([*argv, "--json"]) == 0
    text = capsys.readouterr().out
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()]  # JSON lines (stats INTERVAL)


def validate(doc: dict[str, Any]) -> None:
    """Against the JSON Schema (jsonschema when installed), and always against the models it comes from."""
    jsonschema.validate(doc, jsonout.json_schema())
    jsonout.validate(doc)


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        ((*SIM, "status"), "status"),
        ((*SIM, "policy", "show"), "policy"),
        ((*SIM, "stats"), "stats"),
        ((*SIM, "--sim-config", EXAMPLE, "stats"), "stats"),
        ((*SIM, "--sim-config", EXAMPLE, "stats", "0.01", "2"), "stats-interval"),
        ((*SIM, "va-spaces"), "va-spaces"),
        ((*SIM, "topology"), "topology"),
        ((*SIM, "policy", "set", "prefetch_chunks=8", "gpu.1.role=lender", "gpu.1.lend_limit_bytes=8GiB",
          "gpu.1.lend_traffic_mbyte_per_s=18GB/s"), "policy-change"),
        ((*SIM, "policy", "preset", "stock", "--dry-run"), "policy-change"),
        ((*SIM, "policy", "apply", "{policy}"), "policy-change"),
        ((*SIM, "policy", "diff", "{policy}"), "policy-diff"),
        ((*SIM, "policy", "lender-budget", "1", "--max-slowdown", "2%", "--hbm", "900GB/s"), "lender-budget"),
        ((*SIM, "rates", "set", "1", "--hbm", "900GB/s"), "gpu-rates"),
        ((*SIM, "rates", "show"), "gpu-rates"),
        (("policy", "keys"), "policy-keys"),
        (("sim", "presets"), "sim-presets"),
        (("sim", "run", "{experiment}"), "experiment"),
        (("experiment", "run", "{experiment}", "--out", "{out}"), "experiment"),
        (("trace", "info", "bundled:bfs-small"), "trace-info"),
        (("--sim-config", "{experiment}", "trace", "record", "--out", "{out}.parquet"), "trace-record"),
        (("calibrate", "--record", RECORD, "--out", "{out}"), "calibrate"),
        (("gpu-check",), "gpu-check"),  # no GPU here: the document says so
    ],
)
def test_documents_follow_the_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...],
                                     kind: str) -> None:
    (tmp_path / "p.toml").write_text('preset = "huvm-atc22"\n[gpu.1]\nrole = "lender"\nlend_limit_bytes = "4GiB"\n')
    (tmp_path / "e.toml").write_text(SMALL)
    files = {"policy": str(tmp_path / "p.toml"), "experiment": str(tmp_path / "e.toml"), "out": str(tmp_path / "o")}
    out = docs(capsys, *(a.format(**files) for a in argv))
    assert out
    for doc in out:
        assert doc["schema_version"] == jsonout.SCHEMA_VERSION and doc["kind"] == kind
        validate(doc)


def test_schema_rules(capsys: pytest.CaptureFixture[str]) -> None:
    (status,) = docs(capsys, *SIM, "status")
    gpu = status["node"]["gpus"][0]
    assert isinstance(gpu["memory_bytes"], int) and gpu["flags"] == ["present", "replayable_faults", "pma_eviction"]
    entry = status["policy"]["gpus"][0]
    assert entry["lend_limit_bytes"] is None and isinstance(entry["lend_reserve_bytes"], int)  # unlimited: null
    assert entry["lend_traffic_mbyte_per_s"] == 0  # a rate in MB/s; 0: no budget
    counters = status["stats"]["gpus"][0]
    assert "evict_to_peer_chunks" in counters["counters"] and "from_peer_bytes" in counters["counters"]
    assert isinstance(counters["host_reason_chunks"], dict) and "no_peer" in counters["host_reason_chunks"]
    assert "lender_busy" in counters["host_reason_chunks"]  # every HUVM_REASON_* by its core name


def test_a_wrong_document_is_refused() -> None:
    """The check can fail: a positional array, a size as text and a missing schema_version are refused."""
    good: dict[str, Any] = {"schema_version": 1, "kind": "va-spaces",
            "va_spaces": [{"id": 1, "pid": 2, "uid": 0, "comm": "python", "gpus": [0, 1], "counters": {}}]}
    validate(good)
    change = {"schema_version": 1, "kind": "policy-diff", "file": "p.toml",
              "changes": [{"key": "gpu.1.lend_limit_bytes", "old": None, "new": 8 << 30}]}
    validate(change)
    schema = jsonout.json_schema()
    for bad in ({**good, "schema_version": 2},
                {k: v for k, v in good.items() if k != "schema_version"},
                {**good, "kind": "va_spaces"},
                {**good, "va_spaces": [{**good["va_spaces"][0], "gpus": 3}]},          # a bitmask
                {**good, "va_spaces": [[1, 2, 0, "python", [0], {}]]},                 # positional
                {**change, "changes": [["gpu.1.lend_limit_bytes", None, 8 << 30]]},   # positional
                {**change, "changes": [{"key": "x", "old": None, "new": [8, "GiB"]}]}):  # not a plain value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        with pytest.raises(ValidationError):
            jsonout.validate(bad)


def test_json_schema_is_published() -> None:
    schema = jsonout.json_schema()
    text = json.dumps(schema)
    assert "schema_version" in text and "host_reason_chunks" in text and "lend_limit_bytes" in text
    doc = (Path(__file__).resolve().parents[2] / "docs" / "pyctl.md").read_text()
    assert "schema_version" in doc and "huvm.jsonout" in doc


def test_watch_events_follow_the_schema(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    import huvm.watch
    from huvm.watch import Event

    def events(self: object, timeout: float | None = None) -> Any:
        yield Event("module", "add", "nvidia_uvm")
        yield Event("device", "remove", str(tmp_path / "nvidia-uvm"))

    monkeypatch.setattr(huvm.watch.Watcher, "events", events)
    out = docs(capsys, "watch", "--device", str(tmp_path / "nvidia-uvm"), "--timeout", "0.01")
    assert [(d["kind"], d["source"], d["action"]) for d in out] == [("watch-event", "module", "add"),
                                                                     ("watch-event", "device", "remove")]
    for doc in out:
        validate(doc)


def test_policy_changes_carry_typed_values(capsys: pytest.CaptureFixture[str]) -> None:
    (doc,) = docs(capsys, *SIM, "policy", "set", "--dry-run", "gpu.1.role=lender", "gpu.1.lend_limit_bytes=8GiB",
                  "nvlink_only=false", "gpu.2.lend_traffic_mbyte_per_s=1.5TB/s")
    changes = {c["key"]: (c["old"], c["new"]) for c in doc["changes"]}
    assert changes["gpu.1.lend_limit_bytes"] == (None, 8 << 30)  # unlimited -> 8 GiB, in bytes
    assert changes["gpu.1.role"][1] == "lender" and changes["nvlink_only"] == (True, False)
    assert changes["gpu.2.lend_traffic_mbyte_per_s"] == (0, 1_500_000)  # a rate: in MB/s, 0 for no budget
    (keys,) = docs(capsys, "policy", "keys")
    by_key = {k["key"]: k for k in keys["keys"]}
    assert by_key["gpu.N.lend_limit_bytes"]["type"] == "size" and by_key["gpu.N.lend_limit_bytes"]["max"] is None
    assert by_key["preevict_chunks"]["max"] == abi.lib.HUVM_PREEVICT_MAX_CHUNKS
    traffic = by_key["gpu.N.lend_traffic_mbyte_per_s"]
    assert (traffic["type"], traffic["min"], traffic["max"], traffic["off_allowed"]) == (
        "rate", abi.lib.HUVM_LEND_TRAFFIC_MIN_MBYTE_PER_S, abi.lib.HUVM_MAX_MBYTE_PER_S, True)
    assert not by_key["gpu.N.lend_limit_bytes"]["off_allowed"]


def test_every_kind_is_tested_and_every_verb_prints_through_the_models() -> None:
    """Each document kind appears in the cases above, and every print_json/print_jsonl of the CLI prints
    jsonout.dump(...) of a model: no verb has JSON of its own."""
    text = Path(__file__).read_text()
    kinds = {cls.model_fields["kind"].json_schema_extra["const"] for cls in jsonout.DOCUMENTS}  # type: ignore[index]
    assert {k for k in kinds if f'"{k}"' not in text} == set()
    paths = [p for cli in CLIS for p in cli.glob("*.py")]
    assert {"experiment.py", "stats.py", "trace.py", "calibrate.py"} <= {p.name for p in paths}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("print_json", "print_jsonl"):
                arg = node.args[0]
                assert isinstance(arg, ast.Call) and ast.unparse(arg.func) == "jsonout.dump", \
                    f"{path.name}:{node.lineno}: {ast.unparse(node)}"


def test_experiment_compare_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``experiment compare`` of two runs of one file: kind "experiment-compare", every counter equal."""
    (tmp_path / "e.toml").write_text(SMALL)
    for name in ("a", "b"):
        assert main(["experiment", "run", str(tmp_path / "e.toml"), "--out", str(tmp_path / name), "--json"]) == 0
    capsys.readouterr()
    (doc,) = docs(capsys, "experiment", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert doc["kind"] == "experiment-compare"
    validate(doc)
    assert doc["rows"] and all(r["rel_error"] == 0.0 for r in doc["rows"])  # deterministic: the same counts


def test_stats_tenants_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``stats --run DIR`` of an experiment's output folder: kind "stats-tenants", and the tenants of a
    simulated node from an experiment file ride in its "stats" document."""
    (tmp_path / "e.toml").write_text(SMALL)
    assert main(["experiment", "run", str(tmp_path / "e.toml"), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    (doc,) = docs(capsys, "stats", "--run", str(tmp_path / "o"))
    assert doc["kind"] == "stats-tenants" and doc["tenants"]
    validate(doc)
    (stats,) = docs(capsys, *SIM, "--sim-config", str(tmp_path / "e.toml"), "stats")
    assert stats["kind"] == "stats" and stats["tenants"]
    validate(stats)


def test_host_reasons_are_named_in_every_document() -> None:
    """host_reason[] is an object of the reasons an eviction to host can have, in the snapshot (counts)
    and in an interval (rates, by huvm.stats' rule): never summed under a key that does not say so, and
    without ``peer``, which is not a reason to go to host (the exporter's label values are the same)."""
    from huvm.metrics import GPU_METRICS, REASON_NAMES, host_reasons
    from huvm.stats import GpuCounters, StatsSnapshot

    def snap(t_ns: int, no_peer: int) -> StatsSnapshot:
        values: dict[str, Any] = {m.field: (0,) * m.length if m.length else 0 for m in GPU_METRICS}
        values["host_reason"] = tuple(no_peer if n == "no_peer" else 0 for n in REASON_NAMES)
        return StatsSnapshot(t_ns, 1, (GpuCounters(0, values),), ())

    a, b = snap(1_000_000_000, 4), snap(3_000_000_000, 14)
    names = set(REASON_NAMES) - {"peer"}
    assert names == set(host_reasons().values()) and "no_peer" in names
    interval = jsonout.dump(jsonout.stats_interval(b.delta(a)))
    jsonschema.validate(interval, jsonout.json_schema())
    g = interval["gpus"][0]
    assert set(g["host_reason_chunks_per_s"]) == names and g["host_reason_chunks_per_s"]["no_peer"] == 5.0
    assert sum(g["host_reason_chunks_per_s"].values()) == 5.0
    assert not [k for k in g["rates"] if "reason" in k]
    counts = jsonout.dump(jsonout.stats(b))["gpus"][0]["host_reason_chunks"]
    assert set(counts) == names and counts["no_peer"] == 14
