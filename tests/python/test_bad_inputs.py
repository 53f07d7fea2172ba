"""The corpus of bad inputs: every case exits non-zero with one line on stderr that names the file, key or
flag at fault, and nothing in an existing output folder changes.

The cases are the inputs users found (issue 15: tracebacks, silently accepted or coerced values, oversized
footprints) plus random bytes, random text and truncated copies of every file the tools read: policy files,
experiment files, simulated-node files (huvmctl and huvm-top), each Parquet table of a trace (junk, cut,
another table's schema, missing), a trace that is a file, a tenant's trace through every command that reads
an experiment file, a node preset name that is none, the ABI header ($HUVM_ABI_HEADER, both tools: huvm-top
through its console script), huvm-top's record files, and a --device that is not a device (both tools).
Each runs in a folder that already holds outputs (an experiment's, a trace, a saved policy, a huvm-top
record) at the paths the failing commands would write to; sizes, mtimes and SHA-256 of everything there
must be unchanged afterwards.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from huvm.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "pyctl" / "huvm" / "examples"
BUNDLED = ROOT / "pyctl" / "huvm" / "data" / "traces"
HEADER = ROOT / "driver" / "include" / "uapi" / "uvm_huvm_ioctl.h"
TABLES = ("ops", "storages", "accesses", "segments", "chunks")

NODE = '[node]\npreset = "aws-p3.8xlarge"\n'
POLICY = 'prefetch_chunks = 16\n\n[gpu.1]\nrole = "lender"\nlend_limit_bytes = "8GiB"\n'
EXPERIMENT = """[experiment]
name = "small"
policies = ["stock", "huvm"]

[node]
preset = "aws-p3.8xlarge"
gpu_count = 2

[[tenant]]
name = "harvester"
gpu = 0
trace = "bundled:bfs-small"
steps = 1

[[tenant]]
name = "lender"
gpu = 1
trace = "bundled:lender-idle"
steps = 0
"""


def exp(old: str, new: str) -> str:
    """The small experiment with one line changed (old must be in it)."""
    assert old in EXPERIMENT
    return EXPERIMENT.replace(old, new, 1)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    names: str  # what the one line must name: the file, key or flag
    files: dict[str, str | bytes] = field(default_factory=dict)  # written under in/ before the run
    tool: str = "huvmctl"  # or "huvm-top"
    env: dict[str, str] = field(default_factory=dict)  # set: the case runs in a fresh process
    setup: Callable[[Path], None] | None = None


def _junk(seed: int, n: int = 400) -> bytes:
    return random.Random(seed).randbytes(n)


def _text(seed: int, n: int = 400) -> str:
    r = random.Random(seed)
    return "".join(r.choice('abc xyz 0123 = [] {} ". , # \' \n\t\\') for _ in range(n))


def _garbage(valid: str, seed: int) -> dict[str, str | bytes]:
    """Three bad versions of a valid text file: random bytes, random text, the file cut and followed by junk."""
    return {"junk": _junk(seed), "text": _text(seed), "cut": valid.encode()[: len(valid) // 2] + _junk(seed, 64)}


def _bad_trace(table: str, how: str) -> Callable[[Path], None]:
    """in/bad.trace: the bundled bfs-small trace with one table replaced by junk, cut in half, swapped with
    another table (a valid Parquet file of the wrong schema) or missing; "file": in/bad.trace is a file of
    random bytes, not a directory."""

    def setup(work: Path) -> None:
        d = work / "in" / "bad.trace"
        if how == "file":
            d.write_bytes(_junk(9, 2000))
            return
        shutil.copytree(BUNDLED / "bfs-small.trace", d)
        f = d / f"{table}.parquet"
        other = d / f"{TABLES[(TABLES.index(table) + 1) % len(TABLES)]}.parquet"
        if how == "junk":
            f.write_bytes(_junk(len(table)))
        elif how == "cut":
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        elif how == "swap":
            f.write_bytes(other.read_bytes())
        else:
            f.unlink()

    return setup


CASES: list[Case] = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


# ---- item 1: inputs that raised tracebacks ----
for kind, valid in (("policy", POLICY), ("node", NODE), ("exp", EXPERIMENT)):
    latin1 = valid.replace("16", "16 # caf\xe9").encode("latin-1") if kind == "policy" else \
        (valid + "# caf\xe9\n").encode("latin-1")
    argv = {"policy": ("--sim", "policy", "apply", "in/f.toml"), "node": ("--sim", "--sim-config", "in/f.toml",
            "status"), "exp": ("experiment", "run", "in/f.toml", "--out", "out/demo")}[kind]
    add(Case(f"not-utf8-{kind}", argv, "in/f.toml", {"f.toml": latin1}))
add(
    Case("not-utf8-policy-diff", ("--sim", "policy", "diff", "in/f.toml"), "in/f.toml", {"f.toml": b"\xff\xfe"}),
    Case("not-utf8-sim-run", ("sim", "run", "in/f.toml"), "in/f.toml", {"f.toml": b"[experiment]\n\xc3("}),
    Case("gpu-memory-ambiguous-unit", ("--sim", "--sim-config", "in/n.toml", "status"), "gpu_memory_bytes",
         {"n.toml": NODE + 'gpu_memory_bytes = "3gb"\n'}),
    Case("start-ms-negative", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[0].start_ms",
         {"e.toml": exp("steps = 1\n", "steps = 1\nstart_ms = -100\n")}),
    Case("start-ms-nan", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[0].start_ms",
         {"e.toml": exp("steps = 1\n", "steps = 1\nstart_ms = nan\n")}),
    Case("steps-huge", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[0].steps",
         {"e.toml": exp("steps = 1\n", "steps = 100000000000\n")}),
    Case("steps-float", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[0].steps",
         {"e.toml": exp("steps = 1\n", "steps = 1e11\n")}),
    Case("export-port-range", ("--sim", "export", "--port", "99999"), "--port"),
    Case("export-port-negative", ("--sim", "export", "--port", "-1"), "--port"),
    Case("export-addr", ("--sim", "export", "--port", "0", "--addr", "no.such.host.invalid"), "--addr"),
    Case("trace-gen-batch-negative", ("trace", "gen", "gpt2-small", "out/gpt2.trace", "--batch", "-1"), "--batch"),
)

# ---- item 2: silent acceptance and coercion ----
for value in ('"4"', "4.7", "true"):
    add(Case(f"gpu-count-{value.strip(chr(34))}", ("--sim", "--sim-config", "in/n.toml", "status"), "gpu_count",
             {"n.toml": NODE + f"gpu_count = {value}\n"}),
        Case(f"exp-gpu-count-{value.strip(chr(34))}", ("sim", "run", "in/e.toml"), "node.gpu_count",
             {"e.toml": exp("gpu_count = 2", f"gpu_count = {value}")}))
for assignment in ("prefetch_chunks=1_0", "prefetch_chunks=0b11", "prefetch_chunks=+8", "hysteresis_ms=0x10",
                   "gpu.1.lend_limit_bytes=8gb", "gpu.1.lend_limit_bytes=8G", "gpu.1.lend_limit_bytes=1e9"):
    add(Case(f"set-{assignment}", ("--sim", "policy", "set", assignment), assignment.split("=")[0]))
for line, key in (('prefetch_chunks = "16"', "prefetch_chunks"), ('nvlink_only = "true"', "nvlink_only"),
                  ('peer_select = 1', "peer_select"), ('[gpu.1]\nlend_limit_bytes = "8gb"', "gpu.1.lend_limit_bytes"),
                  ('[gpu.1]\nlend_reserve_bytes = "1G"', "gpu.1.lend_reserve_bytes")):
    add(Case(f"policy-file-{key}-{line.split()[-1]}", ("--sim", "policy", "apply", "in/p.toml"), key,
             {"p.toml": line + "\n"}))
for value, key in (('"-5"', "gpu_reserved_bytes"), ('"2Gi"', "gpu_reserved_bytes"),
                   ("-1", "host_memory_bytes"), ('"yes"', "nvswitch"), ("5", "name"), ('"zz"', "gpu_preset"),
                   ('"stock "', "policy_preset"), ("9", "gpu_count"), ("0", "gpu_count")):
    add(Case(f"node-{key}-{value}", ("--sim", "--sim-config", "in/n.toml", "status"), key,
             {"n.toml": NODE + f"{key} = {value}\n"}))
add(
    Case("stats-count-negative", ("--sim", "stats", "--watch", "1", "--count", "-1"), "--count"),
    Case("stats-count-without-watch", ("--sim", "stats", "--count", "3"), "--count"),
    Case("stats-watch-nan", ("--sim", "stats", "--watch", "nan"), "--watch"),
    Case("stats-watch-inf", ("--sim", "stats", "--watch", "inf", "--count", "1"), "--watch"),
    Case("trace-gen-seconds-zero", ("trace", "gen", "lender-idle", "out/gpt2.trace", "--seconds", "0"), "--seconds"),
    Case("trace-gen-mem-zero", ("trace", "gen", "lender-idle", "out/gpt2.trace", "--mem-gib", "0"), "--mem-gib"),
    Case("trace-gen-batch-zero", ("trace", "gen", "gpt2-small", "out/gpt2.trace", "--batch", "0"), "--batch"),
    Case("watch-timeout-negative", ("--sim", "watch", "--timeout", "-1"), "--timeout"),
    Case("watch-timeout-nan", ("--sim", "watch", "--timeout", "nan"), "--timeout"),
    Case("static-ambiguous-unit", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[1].static",
         {"e.toml": exp("steps = 0\n", 'steps = 0\nstatic = "8gb"\n')}),
    Case("static-oversized", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[1].static",
         {"e.toml": exp("steps = 0\n", 'steps = 0\nstatic = "100GiB"\n')}),
    Case("static-oversized-together", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "tenant[2].static",
         {"e.toml": exp("steps = 0\n", 'steps = 0\nstatic = "8GiB"\n')
          + '\n[[tenant]]\nname = "idle"\ngpu = 1\nstatic = "8GiB"\nsteps = 0\n'}),
    Case("static-fills-a-traced-gpu", ("sim", "run", "in/e.toml"), "tenant[0].static",
         {"e.toml": exp("steps = 1\n", 'steps = 1\nstatic = "15872MiB"\n')}),
    Case("static-sweep-oversized", ("experiment", "run", "in/e.toml", "--out", "out/demo"), "sweep.values",
         {"e.toml": exp("steps = 0\n", 'steps = 0\nstatic = "1GiB"\n')
          + '\n[sweep]\nkey = "tenant.lender.static"\nvalues = ["1GiB", "20GiB"]\n'}),
    Case("repetitions-float", ("sim", "run", "in/e.toml"), "experiment.repetitions",
         {"e.toml": exp('policies = ["stock", "huvm"]', 'policies = ["stock", "huvm"]\nrepetitions = 1.0')}),
)

# ---- random bytes, random text and cut copies of every file the tools read ----
for how, data in _garbage(POLICY, 1).items():
    add(Case(f"random-policy-apply-{how}", ("--sim", "policy", "apply", "in/r.toml"), "in/r.toml", {"r.toml": data}),
        Case(f"random-policy-diff-{how}", ("--sim", "policy", "diff", "in/r.toml"), "in/r.toml", {"r.toml": data}))
for how, data in _garbage(EXPERIMENT, 2).items():
    add(Case(f"random-experiment-{how}", ("experiment", "run", "in/r.toml", "--out", "out/demo"), "in/r.toml",
             {"r.toml": data}),
        Case(f"random-sim-run-{how}", ("sim", "run", "in/r.toml"), "in/r.toml", {"r.toml": data}),
        Case(f"random-top-experiment-{how}", ("--sim", "--sim-config", "in/r.toml"), "in/r.toml", {"r.toml": data},
             tool="huvm-top"))
for how, data in _garbage(NODE + "gpu_count = 2\n", 3).items():
    add(Case(f"random-node-{how}", ("--sim", "--sim-config", "in/r.toml", "status"), "in/r.toml", {"r.toml": data}),
        Case(f"random-node-save-{how}", ("--sim", "--sim-config", "in/r.toml", "policy", "save", "out/policy.toml"),
             "in/r.toml", {"r.toml": data}),
        Case(f"random-top-node-{how}", ("--sim", "--sim-config", "in/r.toml", "--record", "out/rec.jsonl"),
             "in/r.toml", {"r.toml": data}, tool="huvm-top"))
for table in TABLES:
    for how in ("junk", "cut", "swap", "missing"):
        add(Case(f"random-trace-{table}-{how}", ("trace", "info", "in/bad.trace"), f"{table}.parquet",
                 setup=_bad_trace(table, how)))
add(Case("random-trace-file", ("trace", "info", "in/bad.trace"), "in/bad.trace", setup=_bad_trace("ops", "file")))
# a tenant's trace, through every command that reads an experiment file
BAD_TRACE_EXP: dict[str, str | bytes] = {"e.toml": exp('trace = "bundled:bfs-small"', 'trace = "bad.trace"')}
for how in ("junk", "swap", "file"):
    add(Case(f"random-tenant-trace-{how}", ("experiment", "run", "in/e.toml", "--out", "out/demo"),
             "in/e.toml:12: tenant[0].trace", BAD_TRACE_EXP, setup=_bad_trace("ops", how)),
        Case(f"random-tenant-trace-sim-run-{how}", ("sim", "run", "in/e.toml"), "in/e.toml:12: tenant[0].trace",
             BAD_TRACE_EXP, setup=_bad_trace("ops", how)),
        Case(f"random-tenant-trace-sim-config-{how}", ("--sim", "--sim-config", "in/e.toml", "status"),
             "in/e.toml:12: tenant[0].trace", BAD_TRACE_EXP, setup=_bad_trace("ops", how)),
        Case(f"random-tenant-trace-top-{how}", ("--sim", "--sim-config", "in/e.toml", "--record", "out/rec.jsonl"),
             "in/e.toml:12: tenant[0].trace", BAD_TRACE_EXP, tool="huvm-top", setup=_bad_trace("ops", how)))
# a node preset name that is not one (random text where a preset or a file is expected)
PRESET_COMMANDS: dict[str, tuple[str, ...]] = {"huvmctl": ("status",), "huvm-top": ()}
for tool, tail in PRESET_COMMANDS.items():
    add(Case(f"random-preset-name-{tool}", ("--sim", "--sim-config", _text(11, 24).strip() or "x", *tail),
             "unknown node preset", tool=tool))
HEADERS: dict[str, str | bytes] = {"junk": _junk(5, 3000), "text": _text(5),
                                   "markers": "/* HUVM_ABI_BEGIN */\n" + _text(6) + "\n/* HUVM_ABI_END */\n"}
for how, data in HEADERS.items():
    header_env = {"HUVM_ABI_HEADER": "in/h.h"}
    add(Case(f"random-abi-header-{how}", ("--sim", "status"), "in/h.h", {"h.h": data}, env=header_env),
        Case(f"random-abi-header-keys-{how}", ("policy", "keys"), "in/h.h", {"h.h": data}, env=header_env),
        Case(f"random-abi-header-top-{how}", ("--sim", "--record", "out/rec.jsonl"), "in/h.h", {"h.h": data},
             tool="huvm-top", env=header_env))
RECORDS: dict[str, str | bytes] = {"junk": _junk(7), "text": _text(7), "list": "[1, 2]\n",
                                   "json": '{"format": "huvm-top-record", "version": 9}\n'}
for how, data in RECORDS.items():
    add(Case(f"random-record-{how}", ("--replay", "in/r.jsonl"), "in/r.jsonl", {"r.jsonl": data}, tool="huvm-top"))
add(Case("device-is-a-file", ("--backend", "kernel", "--device", "in/dev", "status"), "in/dev", {"dev": _junk(8)}),
    Case("device-is-a-folder", ("--backend", "kernel", "--device", "in", "status"), "in: "),
    Case("top-device-is-a-file", ("--backend", "kernel", "--device", "in/dev", "--no-wait"), "in/dev",
         {"dev": _junk(8)}, tool="huvm-top"))


# ---- the harness ----

def _outputs(work: Path) -> None:
    """An output folder as earlier runs leave it, at the paths the failing commands would write to."""
    demo = work / "out" / "demo"
    for sub in ("data", "plots"):
        (demo / sub).mkdir(parents=True)
    (demo / "report.md").write_text("# an earlier report\n")
    (demo / "summary.json").write_text("{}\n")
    (demo / "experiment.toml").write_text(EXPERIMENT)
    (demo / "data" / "results.csv").write_text("policy,runtime_s\nstock,1.0\n")
    (demo / "plots" / "runtime.png").write_bytes(b"\x89PNG earlier")
    shutil.copytree(BUNDLED / "gpt2-small.trace", work / "out" / "gpt2.trace")
    (work / "out" / "policy.toml").write_text(POLICY)
    (work / "out" / "rec.jsonl").write_text('{"format": "earlier"}\n')


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def _run(case: Case, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    if case.env:  # read once per process (the ABI header): a fresh one
        exe = Path(sys.executable).parent / case.tool
        env = {k: v for k, v in os.environ.items() if not k.startswith("HUVM_")} | case.env
        r = subprocess.run([str(exe), *case.argv], capture_output=True, text=True, env=env, timeout=120, check=False)
        return r.returncode, r.stdout, r.stderr
    if case.tool == "huvm-top":
        top = pytest.importorskip("huvm_top.main")  # the console script's entry point
        rc = top.main(list(case.argv))
    else:
        rc = main(list(case.argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HUVM_BACKEND", "HUVM_SIM_FALLBACK", "HUVM_DEVICE", "HUVM_ABI_HEADER"):
        monkeypatch.delenv(var, raising=False)


def test_the_corpus_is_large_and_names_are_unique() -> None:
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    for name, data in case.files.items():
        (tmp_path / "in" / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    if case.setup:
        case.setup(tmp_path)
    _outputs(tmp_path)
    before = _snapshot(tmp_path / "out")
    try:
        rc, out, err = _run(case, capsys)
    except SystemExit as exc:  # argparse refusals exit 2 from inside main()
        out, err = capsys.readouterr()
        rc = int(exc.code or 0)
    assert rc != 0, f"accepted: {out}"
    assert err.count("\n") == 1 and err.startswith(f"{case.tool}: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert case.names in err, err
    assert _snapshot(tmp_path / "out") == before, "the output folder changed"


def test_huvm_top_unexpected_exception_is_one_line(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    top = pytest.importorskip("huvm_top.app")
    from huvm_top import cli

    def broken(args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "make_sources", broken)
    assert top.main(["--sim"]) == 1
    err = capsys.readouterr().err
    assert err == ("huvm-top: error: internal error: RuntimeError: boom (a huvm bug: please report it with the "
                   "command line; --debug prints the traceback)\n")
    assert top.main(["--sim", "--debug"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err
