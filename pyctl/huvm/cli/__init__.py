"""huvmctl: the huvm command line (thin: argument parsing and printing over the huvm library).

The control plane's subcommands are here (status, topology, va-spaces, policy, rates, stats, export, watch); the lab's
(experiment, sim, trace, calibrate, gpu-check) come from :mod:`huvmlab` through :func:`huvm.registry.commands`
(entry points), so this package never imports the lab.

Exit status: 0 success; 1 runtime error (device, module refusal, simulation failure); 2 usage error (bad
arguments, bad key/value, bad file, found before anything was sent). Errors are one line on stderr:
``huvmctl: error: ...``; so is an unexpected exception (a bug: "internal error ... please report it", exit
status 1), whose traceback ``--debug`` prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from .. import errors, registry

EPILOG = """examples:
  huvmctl status                              # the patched module on /dev/nvidia-uvm
  huvmctl --backend sim status                # a simulated node (no GPU needed)
  huvmctl --sim --sim-config dgx-a100 topology
  huvmctl policy set prefetch_chunks=16 gpu.1.role=lender
  huvmctl rates load out/calibration/h200-580.159.04.toml   # the rates the lender bound T weighs
  huvmctl stats --watch 1 --json
  huvmctl experiment run pyctl/huvm/examples/consolidation.toml --out out/demo
  huvmctl trace info bundled:llama-tiny
  huvmctl export --port 9400
  huvmctl calibrate --out out/calibration     # a real GPU's UVM costs -> a simulated node
  huvmctl gpu-check                           # PyTorch's allocator against huvm's managed pool on this GPU

backend selection: --backend auto (default, or $HUVM_BACKEND) uses the kernel module when the patched
module answers, else fails saying why; add --sim-fallback (or HUVM_SIM_FALLBACK=1) to fall back to the
simulated node with a note. --sim is short for --backend sim.

exit status: 0 ok, 1 runtime error, 2 usage error (nothing was sent). An internal error (a bug) is one
line too, exit status 1; --debug adds its traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"huvmctl: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from ..client import BACKENDS
    from . import export, policy, rates, stats, status, watch

    # Options every subcommand accepts (also before the subcommand). SUPPRESS keeps a subcommand's default
    # from overriding a value given globally.
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("backend")
    g.add_argument("--backend", choices=BACKENDS, default=argparse.SUPPRESS,
                   help="kernel module, simulated node, or auto (default: $HUVM_BACKEND or auto)")
    g.add_argument("--sim", dest="backend", action="store_const", const="sim", default=argparse.SUPPRESS,
                   help="same as --backend sim")
    g.add_argument("--device", metavar="PATH", default=argparse.SUPPRESS,
                   help="device of the kernel backend (default /dev/nvidia-uvm)")
    g.add_argument("--sim-config", metavar="FILE|PRESET", default=argparse.SUPPRESS,
                   help="simulated node: a node preset name or a TOML file")
    g.add_argument("--sim-fallback", action="store_true", default=argparse.SUPPRESS,
                   help="with --backend auto: use the simulated node if the module is not usable")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="on an internal error (a bug), also print the traceback")

    parser = _Parser(prog="huvmctl", description="Control and observe huvm, the peer-GPU eviction tier of "
                     "nvidia-uvm, on a real node or a simulated one.", epilog=EPILOG, parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    parents = [common]
    for register in (status.register, policy.register, rates.register, stats.register, export.register,
                     watch.register,
                     *registry.commands().values()):
        register(sub, parents)
    return parser


def _tool(parser: argparse.ArgumentParser, words: Sequence[str]) -> tuple[Callable[[Sequence[str]], int],
                                                                          list[str]] | None:
    """A tool subcommand (``huvmctl sim fidelity ...``: a parser with a ``tool`` default) named by words, and the
    words after its name, which go to the tool unparsed (its own options, its own --help); else None."""
    p, i = parser, 0
    while True:
        while i < len(words) and words[i].startswith("-"):  # global options before the subcommand
            action = p._option_string_actions.get(words[i].split("=", 1)[0])
            i += 2 if action is not None and action.nargs is None and "=" not in words[i] else 1
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or i >= len(words) or words[i] not in subs[0].choices:
            return None
        p = subs[0].choices[words[i]]
        i += 1
        tool = p.get_default("tool")
        if tool is not None:
            return tool, list(words[i:])


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"huvmctl {version('huvm')}"
    except Exception:
        return "huvmctl"


_DEFAULTS = {"backend": None, "device": None, "sim_config": None, "sim_fallback": False, "json": False}


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words  # known before parsing: the parser itself may be what fails
    try:
        # Inside the try: building the parser imports the package, which reads the ABI header.
        parser = build_parser()
        tool = _tool(parser, words)
        if tool is not None:
            return tool[0](tool[1])
        args = parser.parse_args(words)
        for k, v in _DEFAULTS.items():
            if not hasattr(args, k):
                setattr(args, k, v)
        rc: int = args.func(args)
        return rc
    except errors.UsageError as exc:
        _fail(str(exc))
        return 2
    except errors.HuvmError as exc:
        hint = getattr(exc, "hint", None)
        _fail(str(exc) + (f" (hint: {hint})" if hint else ""))
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Python flushes stdout at exit; point it at devnull so that does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        _fail(f"{str(exc.filename) + ': ' if exc.filename else ''}{exc.strerror or exc}")
        return 1
    except ImportError as exc:  # huvm's C extension not built, an optional package missing
        _fail(str(exc))
        return 1
    except Exception as exc:  # last resort: a bug in huvm, not bad input (that is a UsageError above)
        if debug:
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        _fail(f"internal error: {type(exc).__name__}{': ' + first if first else ''} (a huvm bug: please report it "
              f"with the command line{'' if debug else '; --debug prints the traceback'})")
        return 1


def _fail(message: str) -> None:
    sys.stderr.write(f"huvmctl: error: {message.splitlines()[0] if message else 'failed'}\n")


def run() -> NoReturn:
    sys.exit(main())
