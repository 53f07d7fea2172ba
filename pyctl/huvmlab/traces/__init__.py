"""Workload traces: DNN training steps, graph analytics and lender footprints (docs/traces.md).

Importing this package needs only numpy and pyarrow; torch and transformers (the ``traces`` extra)
are imported when a DNN trace is generated.
"""

from .cli import add_gen_arguments, cli_gen, cli_info, print_info
from .gen import BUNDLED, LARGE, GenSpec, bundled, bundled_dir, generate, generate_set, info
from .refs import resolve
from .roofline import PRESETS, GpuPreset, preset
from .schema import CHUNK_BYTES, SCHEMA_VERSION, TraceFormatError
from .trace import SimTrace, Trace, TraceInfo, load

__all__ = [
    "BUNDLED", "CHUNK_BYTES", "LARGE", "PRESETS", "SCHEMA_VERSION", "GenSpec", "GpuPreset", "SimTrace", "Trace",
    "TraceFormatError", "TraceInfo", "add_gen_arguments", "bundled", "bundled_dir", "cli_gen", "cli_info",
    "generate", "generate_set", "info", "load", "preset", "print_info", "resolve",
]
