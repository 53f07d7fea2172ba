"""The binding layer: constants and layouts from cffi, the metric table from the header, error mapping."""

from __future__ import annotations

import errno

import pytest
from huvm import abi, errors, header, metrics


def test_new_params_fills_header() -> None:
    for cmd, ctype in abi.PARAMS_TYPES.items():
        p = abi.new_params(cmd)
        assert p.hdr.abi_version == abi.lib.HUVM_ABI_VERSION
        assert p.hdr.size == abi.ffi.sizeof(ctype) == abi.lib.huvm_cmd_params_size(cmd)
        assert p.rmStatus == 0 and p.error_field == 0


def test_unknown_command_is_refused() -> None:
    with pytest.raises(ValueError, match="not a huvm ioctl"):
        abi.new_params(1)


def test_struct_fields_are_the_compiled_layout_with_the_header_comments() -> None:
    fields = header.struct_fields()
    for struct in ("huvm_policy_t", "huvm_gpu_counters_t", "HUVM_GET_INFO_PARAMS"):
        assert [f.name for f in fields[struct]] == [name for name, _ in abi.ffi.typeof(struct).fields]
    info = {f.name: f for f in fields["HUVM_GET_INFO_PARAMS"]}
    assert (info["links"].ctype, info["links"].dims) == ("huvm_link_t", (abi.MAX_GPUS, abi.MAX_GPUS))
    assert info["links"].comment.startswith("Out: links[a][b], a != b")
    policy = {f.name: f.comment for f in fields["huvm_policy_t"]}
    assert policy["hysteresis_ms"].endswith("nor onto a peer that itself evicted this recently")  # two lines


def test_field_comments_follow_c_tokens() -> None:
    text = """
/* typedef struct { int x; } fake_t; -- in a comment */
typedef struct {
    uint32_t a;             /* the a; with a semicolon */
    /* a comment on its own line belongs to no field */
    uint64_t b[4][N];       // line comment
    char     s[8];          /* spans
                               two lines */
    uint32_t c;
} one_t;
typedef struct { uint32_t d; /* d */ } two_t;
"""
    assert header.comments_of_fields(text) == {
        "one_t": {"a": "the a; with a semicolon", "b": "line comment", "s": "spans two lines", "c": ""},
        "two_t": {"d": "d"}}


def test_uuid_round_trip() -> None:
    raw = bytes(range(16))
    text = abi.uuid_str(raw)
    assert text == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert abi.uuid_bytes(text) == raw
    assert abi.uuid_bytes(text[4:]) == raw
    with pytest.raises(ValueError):
        abi.uuid_bytes("GPU-nothex")


def test_metric_table_from_header_comments() -> None:
    fields = {m.field for m in metrics.GPU_METRICS}
    # every counters-struct field with a `counter|gauge` comment is in the table, nothing else
    struct = header.struct_fields()["huvm_gpu_counters_t"]
    assert fields == {f.name for f in struct if f.comment.startswith(("counter", "gauge"))}
    m = metrics.by_field("gpu", "evict_to_peer")
    assert (m.kind, m.unit, m.prom_name) == ("counter", "chunks", "huvm_evict_to_peer_chunks_total")
    assert metrics.by_field("gpu", "lent_bytes").prom_name == "huvm_lent_bytes"
    assert metrics.by_field("gpu", "bytes_from_peer").prom_name == "huvm_from_peer_bytes_total"
    assert metrics.by_field("pair", "held_bytes").prom_name == "huvm_pair_held_bytes"
    hr = metrics.by_field("gpu", "host_reason")
    assert hr.length == abi.lib.HUVM_REASON_COUNT and hr.label == "reason"
    assert hr.label_values[abi.lib.HUVM_REASON_PEER_FULL] == "peer_full"
    names = [m.prom_name for m in metrics.METRICS]
    assert len(names) == len(set(names))


def test_field_names() -> None:
    lib = abi.lib
    assert errors.field_name(0) is None
    assert errors.field_name(lib.HUVM_FIELD_PREFETCH_STRIDE) == "prefetch_stride"
    assert errors.field_name(lib.HUVM_FIELD_HDR_SIZE) == "hdr.size"
    f = lib.HUVM_FIELD_GPU_BASE + 2 * lib.HUVM_FIELD_GPU_STRIDE + lib.HUVM_FIELD_GPU_LEND_RESERVE
    assert errors.field_name(f) == "gpus[2].lend_reserve_bytes"
    f = lib.HUVM_FIELD_GPU_BASE + lib.HUVM_FIELD_GPU_ROLE
    assert errors.field_name(f) == "gpus[0].role"


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        ("HUVM_NV_ERR_INSUFFICIENT_PERMISSIONS", errors.PermissionDenied),
        ("HUVM_NV_ERR_NOT_COMPATIBLE", errors.AbiMismatch),
        ("HUVM_NV_ERR_INVALID_PARAM_STRUCT", errors.AbiMismatch),
        ("HUVM_NV_ERR_OUT_OF_RANGE", errors.InvalidValue),
        ("HUVM_NV_ERR_INVALID_ARGUMENT", errors.InvalidValue),
        ("HUVM_NV_ERR_GPU_UUID_NOT_FOUND", errors.UnknownGpu),
        ("HUVM_NV_ERR_STATE_IN_USE", errors.Conflict),
        ("HUVM_NV_ERR_NOT_SUPPORTED", errors.NotSupported),
        ("HUVM_NV_ERR_INVALID_STATE", errors.HuvmError),
    ],
)
def test_status_mapping(status: str, cls: type[errors.HuvmError]) -> None:
    code = getattr(abi.lib, status)
    field = abi.lib.HUVM_FIELD_GPU_BASE + abi.lib.HUVM_FIELD_GPU_LEND_LIMIT
    exc = errors.from_status(code, "SET_POLICY", field, module_abi_version=(2 << 16))
    assert type(exc) is cls
    assert exc.status == code and exc.command == "SET_POLICY"
    assert status.removeprefix("HUVM_") in str(exc)
    if isinstance(exc, errors.InvalidValue):
        assert exc.field == "gpus[0].lend_limit_bytes"
    if isinstance(exc, errors.AbiMismatch):
        assert exc.module_abi_version == 2 << 16 and "module ABI 2.0" in str(exc)


def test_errno_mapping() -> None:
    assert isinstance(errors.from_errno(errno.EPERM, "GET_INFO", "/dev/x"), errors.PermissionDenied)
    assert isinstance(errors.from_errno(errno.EACCES, "GET_INFO", "/dev/x"), errors.PermissionDenied)
    assert isinstance(errors.from_errno(errno.ENOTTY, "GET_INFO", "/dev/x"), errors.NotSupported)
    e = errors.from_errno(errno.EIO, "GET_INFO", "/dev/x")
    assert type(e) is errors.HuvmError and e.errno == errno.EIO and "/dev/x" in str(e)


def test_check_passes_ok_and_raises_refusal() -> None:
    cmd = abi.lib.HUVM_IOCTL_SET_POLICY
    p = abi.new_params(cmd)
    assert errors.check(cmd, p) is p
    p.rmStatus = abi.lib.HUVM_NV_ERR_OUT_OF_RANGE
    p.error_field = abi.lib.HUVM_FIELD_HYSTERESIS_MS
    with pytest.raises(errors.InvalidValue) as info:
        errors.check(cmd, p)
    assert info.value.field == "hysteresis_ms"
    assert "SET_POLICY" in str(info.value)


def test_config_error_message_names_file_line_key() -> None:
    e = errors.PolicyFileError("expected an integer", file="p.toml", line=3, key="prefetch_chunks")
    assert str(e) == "p.toml:3: prefetch_chunks: expected an integer"
    assert isinstance(e, errors.UsageError) and isinstance(e, errors.PolicyError)
    assert (e.file, e.line, e.key) == ("p.toml", 3, "prefetch_chunks")
