"""The simulator's results are fixed by its model, not by how fast it computes them: fixed scenarios
(huvmlab.sim.golden) must give bit-identical results (every tenant figure, counter, traffic figure and memory
sample) to the digests recorded in tests/python/sim_golden.json. A change meant to change the model re-records
them (`python -m huvmlab.sim.golden --write tests/python/sim_golden.json`) and says so in its commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huvmlab.sim import golden

RECORDED = Path(__file__).resolve().parent / "sim_golden.json"


def test_recorded_digests_cover_every_scenario() -> None:
    assert sorted(json.loads(RECORDED.read_text())) == sorted(golden.SCENARIOS)


@pytest.mark.parametrize("name", list(golden.SCENARIOS))
def test_scenario_is_bit_identical(name: str) -> None:
    want = json.loads(RECORDED.read_text())[name]
    res = golden.SCENARIOS[name]()
    # the headline figures first: a readable difference where there is one
    assert golden.summary(res) == want["summary"]
    assert golden.digest(res) == want["sha256"]


def test_digest_sees_one_nanosecond() -> None:
    res = golden.SCENARIOS["bench-resident"]()
    assert "wall_s" not in golden.canonical(res)
    changed = type(res)(**{**res.__dict__, "sim_time_ns": res.sim_time_ns + 1})
    assert golden.digest(changed) != golden.digest(res)
    # the wall time is not part of it
    assert golden.digest(type(res)(**{**res.__dict__, "wall_s": res.wall_s + 1.0})) == golden.digest(res)


def test_cli_check_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert golden.main(["--check", str(RECORDED), "bench-resident"]) == 0
    assert "same" in capsys.readouterr().out
    wrong = tmp_path / "g.json"
    wrong.write_text(json.dumps({"bench-resident": {"sha256": "0" * 64, "summary": {}}}))
    assert golden.main(["--check", str(wrong), "bench-resident"]) == 1
    assert "DIFFERS" in capsys.readouterr().out
    assert golden.main(["no-such"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert golden.main(["--check", str(tmp_path / "bad.json"), "bench-resident"]) == 2
