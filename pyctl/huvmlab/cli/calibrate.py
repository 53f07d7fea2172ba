"""huvmctl calibrate: measure a real GPU with the tests of huvmlab.sim.measured (huvmlab.calibration does the work),
write the calibration record and the simulator's node TOML, and print the node against the nearest preset."""

from __future__ import annotations

import argparse
from pathlib import Path

from huvm import argtypes, jsonout
from huvm.cli.common import add_verb, note, out, print_json
from huvm.errors import ConfigError, UsageError
from huvm.units import format_size, human_bytes, parse_size
from rich.table import Table

from .. import calibration
from ..sim.measured import CalibrationRecordError

DEFAULT_OUT = "out/calibration"


def _size(text: str) -> int:
    try:
        v = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    lo, hi = calibration.MIN_SIZE, calibration.MAX_SIZE
    if not lo <= v <= hi or v % (2 << 20):
        raise argparse.ArgumentTypeError(f"must be a multiple of 2MiB in {format_size(lo)}..{format_size(hi)}, "
                                         f"got {text}")
    return v


#: the options of a measurement and their defaults (None in the parser: --record refuses any that is given)
MEASURE_DEFAULTS = {"gpu": 0, "size": calibration.DEFAULT_SIZE, "repeat": calibration.DEFAULT_REPEAT, "note": None,
                    "nvcc": None, "build_dir": None, "timeout": 1800.0}


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.backend is not None or args.sim_config is not None or args.device is not None:
        raise UsageError("calibrate measures this machine's GPU through CUDA: not with --backend, --sim, "
                         "--sim-config or --device")
    given = [k for k in MEASURE_DEFAULTS if getattr(args, k) is not None]
    if args.record is not None and given:
        raise UsageError(f"--record uses a record, measuring nothing: not with "
                         f"{', '.join('--' + k.replace('_', '-') for k in given)}")
    for k, v in MEASURE_DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.record is not None:
        try:
            cal = calibration.from_records(args.record)
        except CalibrationRecordError as exc:
            raise ConfigError(str(exc)) from None
        name = args.name or calibration.default_name(cal.measurement.gpu_name, cal.measurement.driver)
        if args.out is not None:
            calibration.check_output(args.out, name, force=args.force, record=False)
    else:
        out_dir = args.out or DEFAULT_OUT
        calibration.check_output(out_dir, args.name, force=args.force)  # before building anything
        backend = calibration.default_backend(nvcc=args.nvcc, build_dir=args.build_dir, timeout_s=args.timeout)
        # the default name comes from the GPU: probe (allocates nothing), check the files, then measure
        state = backend.probe(args.gpu)
        name = args.name or calibration.default_name(state.name, state.driver)
        calibration.check_output(out_dir, name, force=args.force)

        def started(state: calibration.GpuState, plan: calibration.Plan) -> None:
            if not args.json:
                note(f"measuring GPU {plan.gpu} ({state.name}, {human_bytes(state.memory_free_bytes)} free): "
                     f"{human_bytes(plan.size_bytes)} buffers, {plan.repeat} repetitions")

        cal = calibration.measure(backend, args.gpu, size_bytes=args.size, repeat=args.repeat, note=args.note,
                                  state=state, on_start=started)
    rec_file = toml_file = None
    if args.record is None or args.out is not None:
        rec_file, toml_file = calibration.write(cal, args.out or DEFAULT_OUT, name, record=args.record is None)
    cfg = cal.node(name)
    preset = calibration.nearest_preset(cfg)
    rows = calibration.compare(cfg, preset)
    m = cal.measurement
    if args.json:
        print_json(jsonout.dump(jsonout.CalibrateDoc.make(
            source=cal.source, gpu_name=m.gpu_name, driver=m.driver, node=cfg.name,
            record_file=str(rec_file) if rec_file else None, node_file=str(toml_file) if toml_file else None,
            nearest_preset=preset, rows=[vars(r) for r in rows], notes=cal.notes)))
        return 0
    t = Table(title=f"{m.gpu_name} (driver {m.driver}) against the nearest preset, {preset}", title_justify="left")
    for col in ("constant", "unit", "this node", preset, "node / preset"):
        t.add_column(col, justify="left" if col in ("constant", "unit") else "right")
    for r in rows:
        t.add_row(r.what, r.unit, f"{r.node:,}", f"{r.preset:,}", "-" if r.ratio is None else f"{r.ratio:.2f}")
    out.print(t)
    for n in cal.notes:
        out.print(f"note: {n}", markup=False)
    if rec_file:
        out.print(f"record: {rec_file}", markup=False)
    if toml_file:
        out.print(f"node:   {toml_file}  (huvmctl --sim --sim-config {toml_file} status)", markup=False)
    return 0


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    p = add_verb(sub, "calibrate", parents=parents,
                 help="measure a real GPU's UVM costs; write a calibration record and a simulator node",
                 description="Measure one GPU of this machine with huvm's CUDA C microbenchmarks (built with nvcc "
                             "on first use): pinned copies, prefetches, demand faults (docs/pyctl.md, \"calibrate\"). "
                             "Writes NAME.json (the calibration record, huvm-calibration/1) and NAME.toml (a "
                             "simulated node for --sim-config) into --out, and prints the node's costs next to the "
                             "nearest preset's. Refuses a GPU without CUDA, a busy GPU (more than 10% of its "
                             "memory in use), and a --size above half its free memory. --record FILE skips the "
                             "measurement and uses a record (no GPU needed); several --record pool their samples "
                             "(runs move from day to day: pool a few).",
                 examples=["huvmctl calibrate --gpu 0 --out out/calibration",
                           "huvmctl calibrate --size 512MiB --repeat 5 --note 'DGX A100, GPU 3'",
                           "huvmctl calibrate --record pyctl/huvm/data/calibration/h200-580.159.04.json --json",
                           "huvmctl calibrate --record run1/h200-580.159.04.json --record run2/h200-580.159.04.json "
                           "--out out/calibration --name h200-pooled",
                           "huvmctl --sim --sim-config out/calibration/h200-580.159.04.toml status"])
    p.add_argument("--gpu", type=argtypes.count(0, 1023), default=None, metavar="N",
                   help="CUDA device index (default 0; CUDA_VISIBLE_DEVICES applies)")
    p.add_argument("--out", metavar="DIR", default=None, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--name", metavar="NAME", default=None,
                   help="output file names NAME.json, NAME.toml (default: GPU-DRIVER, e.g. h200-580.159.04)")
    p.add_argument("--size", type=_size, default=None, metavar="SIZE",
                   help="buffer of the rate tests (default 1GiB; at most half the GPU's free memory)")
    p.add_argument("--repeat", type=argtypes.count(1, calibration.MAX_REPEAT), default=None,
                   metavar="N", help=f"samples per test (default {calibration.DEFAULT_REPEAT})")
    p.add_argument("--note", metavar="TEXT", default=None, help="added to the record's host description")
    p.add_argument("--nvcc", metavar="PATH", default=None,
                   help="the CUDA compiler (default: $NVCC, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin)")
    p.add_argument("--build-dir", type=Path, metavar="DIR", default=None,
                   help="where the benchmark is built (default ~/.cache/huvm/calibrate)")
    p.add_argument("--timeout", type=argtypes.seconds(86400), default=None, metavar="S",
                   help="give up on the benchmark after S seconds (default 1800)")
    p.add_argument("--record", metavar="FILE", default=None, action="append",
                   help="use this calibration record instead of measuring (writes only NAME.toml, with --out); "
                        "given more than once, the records are pooled (one GPU model and driver: each test's "
                        "samples together)")
    p.add_argument("--force", action="store_true", help="overwrite NAME.json / NAME.toml")
    p.set_defaults(func=cmd_calibrate)
