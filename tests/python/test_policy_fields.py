"""One declaration per policy field: the ABI header's table (HUVM_POLICY_FIELDS, HUVM_GPU_POLICY_FIELDS), the
core's descriptor array built from it, and everything in Python that reads it: the key table, the policy
model, the JSON documents, the policy file schema, error paths and huvm-top's editor. A row that names no
member of its struct, or a member of another size, does not compile."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from huvm import abi, errors, jsonout, policyfile
from huvm import policy as hp
from huvm.errors import PolicyError

ffi, lib = abi.ffi, abi.lib
UAPI = Path(__file__).resolve().parents[2] / "driver" / "include" / "uapi"
GIB = 1 << 30


def descriptors() -> list[Any]:
    out = []
    for i in range(lib.huvm_policy_field_count()):
        out.append(lib.huvm_policy_field(i))
    assert lib.huvm_policy_field(lib.huvm_policy_field_count()) == ffi.NULL
    return out


def test_key_table_is_the_core_descriptor_array() -> None:
    """Name, scope, order, struct offset and size, unit, range, special values, presets and error code of every
    key are the C descriptor's, and those are the struct's (offsetof/sizeof as cffi compiled them)."""
    ds = descriptors()
    assert list(hp.KEYS) == [ffi.string(d.name).decode() for d in ds]
    units = {v: k.removeprefix("HUVM_UNIT_").lower() for k, v in abi.constants("HUVM_UNIT_").items()}
    codes = abi.constants("HUVM_FIELD_")
    for d in ds:
        name = ffi.string(d.name).decode()
        spec = hp.KEYS[name]
        struct = "huvm_policy_t" if d.scope == lib.HUVM_POLICY_SCOPE_NODE else "huvm_gpu_policy_t"
        assert spec.scope == ("node" if struct == "huvm_policy_t" else "gpu")
        assert spec.name == spec.field == name
        assert d.offset == ffi.offsetof(struct, name)
        assert d.size == ffi.sizeof(dict(ffi.typeof(struct).fields)[name].type)
        assert (spec.lo, spec.hi, spec.unit, spec.code) == (d.min, d.max, units[d.unit], d.field)
        assert spec.presets == tuple(d.preset)
        assert spec.unlimited == bool(d.special & lib.HUVM_POLICY_FIELD_UNLIMITED)
        assert spec.off == bool(d.special & lib.HUVM_POLICY_FIELD_ZERO_OFF)
        prefix = "HUVM_FIELD_" if spec.scope == "node" else "HUVM_FIELD_GPU_"
        assert any(n.startswith(prefix) and v == d.field for n, v in codes.items()), name
    # node fields first, each scope in struct order
    scopes = [d.scope for d in ds]
    assert scopes == sorted(scopes)
    for scope in (lib.HUVM_POLICY_SCOPE_NODE, lib.HUVM_POLICY_SCOPE_GPU):
        offsets = [d.offset for d in ds if d.scope == scope]
        assert offsets == sorted(offsets)


def test_every_settable_struct_member_has_a_row() -> None:
    """The structs hold nothing settable beyond the table: the rest is key, bookkeeping or padding."""
    node = {f for f, _ in ffi.typeof("huvm_policy_t").fields} - {"generation", "preset", "gpu_count", "gpus"}
    gpu = {f for f, _ in ffi.typeof("huvm_gpu_policy_t").fields} - {"uuid", "pad"}
    assert node == set(hp.NODE_KEYS) and gpu == set(hp.GPU_KEYS)


def test_models_have_the_table_fields() -> None:
    """The policy model, huvm-top's model, the JSON documents and the policy file tables follow the table."""
    from huvm_top.model import GpuPolicy as TopGpuPolicy

    assert [f.name for f in dataclasses.fields(hp.Policy)] == ["generation", "preset", *hp.NODE_KEYS, "gpus"]
    assert {f.name for f in dataclasses.fields(hp.GpuPolicy)} == {"uuid", *hp.GPU_KEYS}
    assert {f.name for f in dataclasses.fields(TopGpuPolicy)} == {"uuid", *hp.GPU_KEYS}
    assert list(jsonout.PolicyDoc.model_fields) == ["generation", "preset", "gpus", *hp.NODE_KEYS]
    assert list(jsonout.GpuPolicy.model_fields) == ["index", "uuid", *hp.GPU_KEYS]
    assert set(hp.NODE_KEYS) <= set(policyfile.PolicyTable.model_fields)
    assert set(policyfile.GpuTable.model_fields) == {"index", *hp.GPU_KEYS, *hp.DEPRECATED_ALIASES}
    assert [k["key"] for k in hp.describe_keys()] == [*hp.NODE_KEYS, *(f"gpu.N.{k}" for k in hp.GPU_KEYS)]


def _node_core() -> Any:
    core = ffi.new("huvm_core_t *")
    lib.huvm_core_init(core, lib.HUVM_BACKEND_CORE, lib.HUVM_PRESET_HUVM)
    info = ffi.new("huvm_gpu_info_t *")
    info.uuid = bytes(range(1, 17))
    info.memory_bytes, info.free_bytes, info.flags = 16 * GIB, 16 * GIB, lib.HUVM_GPU_FLAG_PRESENT
    assert lib.huvm_core_set_gpu(core, 0, info) == lib.HUVM_NV_OK
    return core


def _bad_value(spec: hp.KeySpec) -> int | None:
    """A value outside the row's range, or None when the type holds none."""
    top = (1 << (8 * ffi.sizeof("uint64_t" if spec.hi > 0xFFFFFFFF or spec.unlimited else "uint32_t"))) - 1
    if spec.kind == "flags":
        return spec.hi + 1
    if spec.hi < top:
        return spec.hi + 1
    if spec.lo > 0:
        return spec.lo - 1
    return None


@pytest.mark.parametrize("key", list(hp.KEYS))
def test_validation_errors_name_the_field_of_the_table(key: str) -> None:
    """Each field out of its row's range: the core refuses it naming the row's error code, which decodes to the
    member name (gpus[0].member for a GPU field); a value of the row's range other than the preset's passes."""
    spec = hp.KEYS[key]
    core = _node_core()
    p = ffi.new("huvm_policy_t *")
    assert lib.huvm_policy_preset(lib.HUVM_PRESET_HUVM, core, p) == lib.HUVM_NV_OK
    bad = _bad_value(spec)
    if bad is None:
        pytest.skip(f"{key}: every value of its type is in range")
    target = p if spec.scope == "node" else p.gpus[0]
    setattr(target, key, bad)
    field = ffi.new("uint32_t *")
    status = lib.huvm_policy_validate(core, p, field)
    assert status in (lib.HUVM_NV_ERR_OUT_OF_RANGE, lib.HUVM_NV_ERR_INVALID_ARGUMENT)
    assert errors.field_name(field[0]) == (key if spec.scope == "node" else f"gpus[0].{key}")


def test_presets_are_the_table_columns() -> None:
    """Every preset holds its row's value (huvm's lend reserve: the GPU's share, computed)."""
    core = _node_core()
    for column, preset in enumerate((lib.HUVM_PRESET_STOCK, lib.HUVM_PRESET_ATC22, lib.HUVM_PRESET_HUVM)):
        p = ffi.new("huvm_policy_t *")
        assert lib.huvm_policy_preset(preset, core, p) == lib.HUVM_NV_OK
        for key in hp.NODE_KEYS:
            assert getattr(p, key) == hp.KEYS[key].presets[column], (preset, key)
        for key in hp.GPU_KEYS:
            if preset == lib.HUVM_PRESET_HUVM and key == "lend_reserve_bytes":
                assert p.gpus[0].lend_reserve_bytes == GIB  # 5 % of 16 GiB, at least 1 GiB
                continue
            assert getattr(p.gpus[0], key) == hp.KEYS[key].presets[column], (preset, key)


def test_deprecated_spellings_name_the_canonical_key() -> None:
    for alias, key in hp.DEPRECATED_ALIASES.items():
        assert hp.key_spec(alias) is hp.KEYS[key]
        assert key in hp.KEYS and alias not in hp.KEYS


CC = shutil.which("gcc") or shutil.which("cc")


def compile_row(row: str) -> subprocess.CompletedProcess[str]:
    src = f'#include "uvm_huvm_ioctl.h"\n#define ROWS(X) {row}\nROWS(HUVM_ABI_ASSERT_NODE_FIELD)\n'
    assert CC is not None
    return subprocess.run([CC, "-std=gnu11", "-fsyntax-only", "-I", str(UAPI), "-x", "c", "-"], input=src,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_a_row_and_its_struct_cannot_drift() -> None:
    """The header's asserts over the table: a correct row compiles; a row naming no member of huvm_policy_t,
    one of another size, or a preset value outside its range does not."""
    ok = compile_row('X(HYSTERESIS_MS, hysteresis_ms, uint32_t, MS, 0, HUVM_HYSTERESIS_MAX_MS, 0, "", 0, 0, 5)')
    assert ok.returncode == 0, ok.stderr
    missing = compile_row('X(HYSTERESIS_MS, lender_bound_ms, uint32_t, MS, 0, 100, 0, "", 0, 0, 5)')
    assert missing.returncode != 0 and "lender_bound_ms" in missing.stderr
    size = compile_row('X(HYSTERESIS_MS, hysteresis_ms, uint64_t, MS, 0, HUVM_HYSTERESIS_MAX_MS, 0, "", 0, 0, 5)')
    assert size.returncode != 0 and "huvm_policy_t row hysteresis_ms" in size.stderr
    preset = compile_row('X(HYSTERESIS_MS, hysteresis_ms, uint32_t, MS, 0, 10, 0, "", 0, 0, 11)')
    assert preset.returncode != 0 and "huvm_policy_t row hysteresis_ms" in preset.stderr


def test_zero_off_is_the_rows_for_any_unit() -> None:
    """HUVM_POLICY_FIELD_ZERO_OFF on a number (not only a rate): 0, "off" and "none" pass besides min..max,
    on the command line and in a file; the rest of the range holds."""
    spec = dataclasses.replace(hp.KEYS["peer_usage_max_pct"], off=True)
    assert [hp.parse_value(spec, v, spec.name) for v in ("off", "none", "0", "1", "100")] == [0, 0, 0, 1, 100]
    with pytest.raises(PolicyError, match="must be <= 100"):
        hp.parse_value(spec, "101", spec.name)
    from pydantic import TypeAdapter, ValidationError

    file_value = TypeAdapter(hp.value_type(spec))
    assert [file_value.validate_python(v) for v in (0, "off", 100)] == [0, 0, 100]
    with pytest.raises(ValidationError, match="101: must be <= 100"):
        file_value.validate_python(101)
