"""A managed-memory allocator for PyTorch: build the shim (``alloc/huvm_managed_alloc.c``) and plug it in, so
a training script runs oversubscribed on a local node without changes.

::

    python -m huvm.experiment.managed_alloc build --out build/managed-alloc     # where CUDA's headers are
    python -m huvm.experiment.managed_alloc run --lib build/managed-alloc/libhuvm_managed_alloc.so train.py ...

``run`` installs the allocator (torch.cuda.memory.CUDAPluggableAllocator + change_current_allocator, before
the script allocates anything) and runs the script as ``__main__``: a local node's tenant is then
``command = ["python", "-m", "huvm.experiment.managed_alloc", "run", "--lib", LIB, "train.py"]``.

The shim is built against the CUDA runtime's headers and libcudart: from the pip wheels PyTorch itself
depends on (``nvidia-cuda-runtime-cu12`` has cuda_runtime_api.h and libcudart.so.12; its headers include
``crt/host_defines.h``, which CUDA 12 ships in ``nvidia-cuda-nvcc-cu12`` and CUDA 13 in
``nvidia-cuda-crt``), from a CUDA toolkit (``CUDA_HOME``, ``/usr/local/cuda``), or from roots given with
``--cuda-root`` / ``HUVM_CUDA_ROOTS`` (each with include/ and lib/). It is built only where such a stack
exists: ``build --if-available`` says so and exits 0 elsewhere.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import DeviceUnavailable, HuvmError, UsageError

SOURCE = Path(__file__).resolve().parent / "alloc" / "huvm_managed_alloc.c"
LIB_NAME = "libhuvm_managed_alloc.so"
MALLOC_FN, FREE_FN = "huvm_managed_malloc", "huvm_managed_free"
#: the pip wheels that carry the runtime's headers and library, and the compiler-internal headers they include
WHEEL_PACKAGES = ("nvidia.cuda_runtime", "nvidia.cuda_nvcc", "nvidia.cuda_crt")


class CudaNotFound(DeviceUnavailable):
    """No CUDA runtime headers/library to build the shim against."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="no-cuda",
                         hint="pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 (CUDA 12), or "
                              "nvidia-cuda-runtime nvidia-cuda-crt (CUDA 13), or set CUDA_HOME")


@dataclass(frozen=True)
class CudaRuntime:
    include_dirs: tuple[Path, ...]  # cuda_runtime_api.h, and crt/host_defines.h
    lib_dir: Path
    lib: str  # libcudart's file name (libcudart.so.12)


def _wheel_roots() -> list[Path]:
    out: list[Path] = []
    for name in WHEEL_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            out += [Path(p) for p in spec.submodule_search_locations]
    return out


def candidate_roots(roots: Sequence[str | Path] = ()) -> list[Path]:
    """Where to look, in order: the given roots, HUVM_CUDA_ROOTS, the installed wheels, CUDA_HOME/CUDA_PATH,
    /usr/local/cuda."""
    env = [p for p in os.environ.get("HUVM_CUDA_ROOTS", "").split(os.pathsep) if p]
    home = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return [Path(p) for p in (*roots, *env)] + _wheel_roots() + [Path(p) for p in (*home, "/usr/local/cuda")]


def find_cuda(roots: Sequence[str | Path] = (), *, default_places: bool = True) -> CudaRuntime:
    """The CUDA runtime to build against; CudaNotFound naming what is missing."""
    places = candidate_roots(roots) if default_places else [Path(p) for p in roots]
    api = crt = lib_dir = None
    lib = ""
    for root in places:
        inc = root / "include"
        if api is None and (inc / "cuda_runtime_api.h").is_file():
            api = inc
        if crt is None and (inc / "crt" / "host_defines.h").is_file():
            crt = inc
        for d in (root / "lib", root / "lib64"):
            if lib_dir is None and d.is_dir():
                libs = sorted(p.name for p in d.glob("libcudart.so*"))
                if libs:
                    lib_dir, lib = d, min(libs, key=len)  # libcudart.so, else the soname (libcudart.so.12)
    looked = ", ".join(str(p) for p in places) or "nowhere"
    if api is None:
        raise CudaNotFound(f"no CUDA runtime headers (cuda_runtime_api.h) under {looked}")
    if crt is None:
        raise CudaNotFound(f"the CUDA runtime headers in {api} need crt/host_defines.h, found under none of {looked}")
    if lib_dir is None:
        raise CudaNotFound(f"no libcudart.so under {looked}")
    return CudaRuntime(tuple(dict.fromkeys((api, crt))), lib_dir, lib)


def compile_command(cuda: CudaRuntime, out: Path, cc: str = "cc") -> list[str]:
    """The compiler line: a shared object exporting the two entry points, linked to libcudart (rpath to it)."""
    return [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
            *(f"-I{d}" for d in cuda.include_dirs), str(SOURCE), "-o", str(out), f"-L{cuda.lib_dir}",
            f"-l:{cuda.lib}", f"-Wl,-rpath,{cuda.lib_dir}"]


def build(out_dir: str | Path, cuda: CudaRuntime | None = None, *, cc: str | None = None) -> Path:
    """Compile the shim into out_dir; returns the library's path."""
    cuda = cuda or find_cuda()
    compiler = cc or os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise CudaNotFound(f"no C compiler {compiler!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lib = out / LIB_NAME
    r = subprocess.run(compile_command(cuda, lib, compiler), capture_output=True, text=True, check=False)
    if r.returncode != 0:
        first = next((line for line in r.stderr.splitlines() if "error" in line), r.stderr.strip()[:200])
        raise HuvmError(f"building {LIB_NAME} failed: {first}")
    return lib


def enable(lib: str | Path) -> None:
    """Make PyTorch allocate CUDA memory through the shim (call before anything is allocated on a GPU)."""
    path = Path(lib)
    if not path.is_file():
        raise UsageError(f"{path}: no such allocator library (python -m huvm.experiment.managed_alloc build)")
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        raise UsageError("PyTorch is not installed in this Python") from None
    try:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(str(path), MALLOC_FN, FREE_FN)
        torch.cuda.memory.change_current_allocator(alloc)
    except (AttributeError, RuntimeError) as exc:  # a CPU-only build; CUDA memory already allocated
        raise UsageError(f"PyTorch {getattr(torch, '__version__', '?')} cannot take the allocator: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} (a CUDA build of "
                         "PyTorch is needed, and no GPU memory may be allocated before)") from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m huvm.experiment.managed_alloc",
                                 description="Build or use huvm's managed-memory allocator for PyTorch.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile the allocator")
    b.add_argument("--out", default="build/managed-alloc", help="output folder (default: build/managed-alloc)")
    b.add_argument("--cuda-root", action="append", default=[], metavar="DIR",
                   help="a folder with include/ and lib/ (repeatable; searched first)")
    b.add_argument("--if-available", action="store_true", help="without a CUDA runtime, say so and exit 0")
    r = sub.add_parser("run", help="run a Python script with the allocator installed")
    r.add_argument("--lib", default=str(Path("build/managed-alloc") / LIB_NAME), help="the built library")
    r.add_argument("script")
    r.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "build":
            try:
                cuda = find_cuda(ns.cuda_root)
            except CudaNotFound as exc:
                if ns.if_available:
                    print(f"managed allocator not built: {exc}")
                    return 0
                raise
            print(build(ns.out, cuda))
            return 0
        enable(ns.lib)
    except HuvmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.argv = [ns.script, *ns.args]
    runpy.run_path(ns.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
