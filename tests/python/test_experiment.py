"""Experiments: the file format (errors with file/line/key), runs on the simulator, outputs, determinism."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from huvm.errors import ConfigError, PolicyError
from huvmlab import experiment
from huvmlab.experiment.spec import load

EXAMPLES = Path(__file__).resolve().parents[2] / "pyctl" / "huvm" / "examples"

SMALL = """
[experiment]
name = "small"
policies = ["stock", "huvm-atc22", "huvm", "tuned"]
ideal = true

[node]
preset = "aws-p3.8xlarge"
gpu_count = 2
gpu_memory_bytes = 3221225472
gpu_reserved_bytes = 268435456

[[tenant]]
name = "gpt2"
gpu = 0
trace = "bundled:gpt2-small"
steps = 1
role = "harvester"

[[tenant]]
name = "llama"
gpu = 1
trace = "bundled:llama-tiny"
steps = 0
role = "lender"

[policy.tuned]
preset = "huvm"
prefetch_chunks = 4
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_small_experiment_outputs(tmp_path: Path) -> None:
    spec = load(write(tmp_path, SMALL))
    assert [r.key.run_id for r in experiment.plan(spec)] == ["ideal#0", "stock#0", "huvm-atc22#0", "huvm#0",
                                                             "tuned#0"]
    seen: list[str] = []
    res, files = experiment.run_to(spec, tmp_path / "out", lambda run, i, n: seen.append(f"{i}/{n}"))
    assert seen == ["0/5", "1/5", "2/5", "3/5", "4/5"]
    out = tmp_path / "out"
    for rel in ("report.md", "summary.json", "experiment.toml", "plots/runtime.png", "plots/ratio_to_ideal.png",
                "plots/traffic.png", "plots/memory.png", "data/results.parquet", "data/results.csv",
                "data/tenants.parquet", "data/counters.parquet", "data/traffic.csv", "data/samples.parquet"):
        assert (out / rel).is_file(), rel
        assert (out / rel) in files
    assert (out / "plots/runtime.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r.policy: r for r in experiment.policy_rows(res)}
    assert list(rows) == ["stock", "huvm-atc22", "huvm", "tuned", "ideal"]
    ideal, stock = rows["ideal"], rows["stock"]
    assert ideal.ratio_to_ideal == 1.0 and ideal.evict_to_host == 0 and ideal.evict_to_peer == 0
    assert stock.evict_to_peer == 0 and stock.evict_to_host > 0  # stock never uses a peer
    assert stock.runtime_s > ideal.runtime_s
    assert rows["huvm"].evict_to_peer > 0
    # the custom policy's setting reached the simulated module
    tuned = res.run("tuned")
    assert tuned is not None and tuned.policy_settings["prefetch_chunks"] == "4"
    assert tuned.policy_settings["gpu.0.role"] == "harvester" and tuned.policy_settings["gpu.1.role"] == "lender"
    results = pq.read_table(out / "data/results.parquet").to_pylist()
    assert [r["policy"] for r in results] == list(rows)
    counters = pq.read_table(out / "data/counters.parquet").to_pylist()
    peer = sum(c["value"] for c in counters if c["run_id"] == "huvm#0" and c["metric"] == "evict_to_peer")
    assert peer == rows["huvm"].evict_to_peer
    report = (out / "report.md").read_text()
    assert "| stock |" in report and "| huvm-atc22 |" in report and "| ideal |" in report
    assert "![runtime](plots/runtime.png)" in report


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_file_twice_gives_identical_outputs(tmp_path: Path) -> None:
    f = write(tmp_path, SMALL.replace('"huvm", "tuned"', '"huvm"').split("[policy.tuned]")[0])
    experiment.run_to(load(f), tmp_path / "a")
    experiment.run_to(load(f), tmp_path / "b")
    a, b = digest(tmp_path / "a"), digest(tmp_path / "b")
    assert a == b and len(a) > 10


def test_repetitions_and_sweep(tmp_path: Path) -> None:
    text = SMALL.replace('name = "small"', 'name = "sweep"\nrepetitions = 2') + """
[sweep]
key = "prefetch_chunks"
values = [{ prefetch_mode = "off", prefetch_chunks = 0 }, 8]
policies = ["huvm"]
"""
    spec = load(write(tmp_path, text))
    ids = [r.key.run_id for r in experiment.plan(spec)]
    assert ids.count("huvm@0#0") == 1 and "huvm@8#1" in ids and "stock@0#1" in ids
    assert not any(i.startswith("stock@8") for i in ids)  # unswept policies run once per repetition
    res, files = experiment.run_to(spec, tmp_path / "out")
    assert (tmp_path / "out/plots/sweep.png") in files
    r0, r1 = res.run("huvm", 0, 0), res.run("huvm", 0, 1)
    assert r0 is not None and r1 is not None
    assert r0.foreground_runtime_ns() == r1.foreground_runtime_ns()  # deterministic repetitions
    assert r0.policy_settings["prefetch_mode"] == "off"
    p8 = res.run("huvm", 8, 0)
    assert p8 is not None and p8.policy_settings["prefetch_chunks"] == "8"
    rows = experiment.policy_rows(res)
    assert {(r.sweep_value, r.policy) for r in rows} >= {(0, "stock"), (8, "stock"), (8, "huvm"), (8, "ideal")}


@pytest.mark.parametrize(
    ("patch", "line", "key", "match"),
    [
        (('preset = "aws-p3.8xlarge"', 'preset = "cray-1"'), 8, "node.preset", "unknown node preset"),
        (('steps = 1\n', 'steps = "one"\n'), 17, "tenant[0].steps", "expected an integer"),
        (('gpu = 1\n', 'gpu = 5\n'), 22, "tenant[1].gpu", "not in 0..1"),
        (('role = "lender"', 'role = "boss"'), 25, "tenant[1].role", "expected one of none, harvester"),
        (('prefetch_chunks = 4', 'prefetch_chunks = 400'), 29, "policy.tuned.prefetch_chunks", "400: must be <= 64"),
        (('prefetch_chunks = 4', 'prefetch_chunsk = 4'), 29, "policy.tuned.prefetch_chunsk", "unknown key"),
        (('"huvm", "tuned"]', '"huvm", "tuned", "fast"]'), 4, "experiment.policies[4]", "unknown policy 'fast'"),
        (('trace = "bundled:llama-tiny"', 'trace = "bundled:llama-huge"'), 23, "tenant[1].trace", "llama-huge"),
        (('[[tenant]]\nname = "llama"', '[[tenant]]\nname = "gpt2"'), 21, "tenant[1].name", "duplicate"),
        (('ideal = true', 'ideal = "yes"'), 5, "experiment.ideal", "true/false"),
        (('gpu_count = 2', 'gpu_count = 2\ncolour = "red"'), 10, "node.colour", "unknown key (known: preset, name"),
        (('steps = 0', 'steps = 0\nsize = 3'), 25, "tenant[1].size", "unknown key"),
    ],
)
def test_bad_experiment_files(tmp_path: Path, patch: tuple[str, str], line: int, key: str, match: str) -> None:
    assert patch[0] in SMALL
    f = write(tmp_path, SMALL.replace(patch[0], patch[1], 1))
    started: list[str] = []
    with pytest.raises((ConfigError, PolicyError)) as info:
        experiment.run(load(f), lambda run, i, n: started.append(run.key.run_id))
    assert started == []  # refused before the first run
    err = info.value
    assert match in str(err), str(err)
    assert str(f) in str(err)
    assert getattr(err, "line", None) == line, str(err)
    assert getattr(err, "key", None) == key, str(err)


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    f = write(tmp_path, SMALL.replace('steps = 0', 'steps = = 0'))
    with pytest.raises(ConfigError, match="TOML syntax") as info:
        load(f)
    assert info.value.line == 24


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_shipped_examples_parse(name: str) -> None:
    spec = load(EXAMPLES / name)
    plan = experiment.plan(spec)
    assert plan and spec.tenants and spec.policies
    assert {"stock", "huvm-atc22", "huvm"} <= {p.name for p in spec.policies}
