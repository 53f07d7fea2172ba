"""huvmctl's --json output against its one JSON schema (huvm.jsonout): every document of every verb that
has one validates, with schema_version, sizes as integers in bytes, objects not arrays, named GPU lists,
flags and reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from huvm import jsonout
from huvm.cli import main
from pydantic import TypeAdapter, ValidationError

SIM = ("--sim",)
EXAMPLE = str(Path(jsonout.__file__).parent / "examples" / "consolidation.toml")
ANY_DOC: Any = TypeAdapter(jsonout.StatusDoc | jsonout.PolicyShowDoc | jsonout.StatsDoc  # type: ignore[operator]
                           | jsonout.StatsIntervalDoc | jsonout.VaSpacesDoc)


def docs(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main([*argv, "--json"]) == 0
    text = capsys.readouterr().out
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()]  # JSON lines (stats INTERVAL)


def validate(doc: dict[str, Any]) -> None:
    """Against the JSON Schema (jsonschema when installed), and always against the models it comes from."""
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(doc, jsonout.json_schema())
    ANY_DOC.validate_python(doc, strict=True)


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        ((*SIM, "status"), "status"),
        ((*SIM, "policy", "show"), "policy"),
        ((*SIM, "stats"), "stats"),
        ((*SIM, "--sim-config", EXAMPLE, "stats"), "stats"),
        ((*SIM, "--sim-config", EXAMPLE, "stats", "0.01", "2"), "stats-interval"),
        ((*SIM, "va-spaces"), "va-spaces"),
    ],
)
def test_documents_follow_the_schema(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], kind: str) -> None:
    out = docs(capsys, *argv)
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
    counters = status["stats"]["gpus"][0]
    assert "evict_to_peer_chunks" in counters["counters"] and "from_peer_bytes" in counters["counters"]
    assert isinstance(counters["host_reason_chunks"], dict) and "no_peer" in counters["host_reason_chunks"]


def test_a_wrong_document_is_refused() -> None:
    """The check can fail: a positional array, a size as text and a missing schema_version are refused."""
    good = {"schema_version": 1, "kind": "va-spaces",
            "va_spaces": [{"id": 1, "pid": 2, "uid": 0, "comm": "python", "gpus": [0, 1], "counters": {}}]}
    validate(good)
    for bad in ({**good, "schema_version": 2},
                {k: v for k, v in good.items() if k != "schema_version"},
                {**good, "va_spaces": [{**good["va_spaces"][0], "gpus": 3}]},          # a bitmask
                {**good, "va_spaces": [[1, 2, 0, "python", [0], {}]]}):                 # positional
        with pytest.raises((ValidationError, Exception)):
            validate(bad)


def test_json_schema_is_published() -> None:
    schema = jsonout.json_schema()
    text = json.dumps(schema)
    assert "schema_version" in text and "host_reason_chunks" in text and "lend_limit_bytes" in text
    doc = (Path(__file__).resolve().parents[2] / "docs" / "pyctl.md").read_text()
    assert "schema_version" in doc and "huvm.jsonout" in doc
