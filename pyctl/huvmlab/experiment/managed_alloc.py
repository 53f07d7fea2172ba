"""PyTorch on managed memory: RAPIDS RMM's pool over CUDA managed memory as PyTorch's CUDA allocator, so a
training script runs oversubscribed under nvidia-uvm (and huvm's peer tier) unchanged.

::

    huvmctl experiment managed-alloc run train.py --epochs 1    # the script, the pool installed first
    huvmctl experiment managed-alloc check                      # what it would use, or why not

The pool (``rmm.mr.PoolMemoryResource`` over ``rmm.mr.ManagedMemoryResource``, installed with
``rmm.allocators.torch.rmm_torch_allocator``) takes managed memory from CUDA in large pieces and hands
tensors out of them: no cudaMallocManaged or synchronizing cudaFree per tensor, and a freed tensor's pages
stay populated for the next. Measured on one NVIDIA H200 (driver 580.159.04, CUDA 13.0, PyTorch
2.11.0+cu130, RMM 26.10, 2026-11-27), GPT-2 medium B8 S1024 bf16: 0.130-0.134 s per step against PyTorch's
own 0.130 s, where one managed allocation per tensor took 5.6-5.8 s (docs/experiments.md).

RMM comes as an optional extra matching the CUDA major PyTorch was built with: ``pip install
'huvm[rmm-cu12]'`` or ``'huvm[rmm-cu13]'`` (:func:`rmm_package` picks the name; ``check`` prints it).
Options, as keyword arguments of :class:`PoolConfig` or environment variables (for a local node's tenant):
``HUVM_POOL_INITIAL`` / ``HUVM_POOL_MAXIMUM`` (sizes: ``"16GiB"``), ``HUVM_POOL_PREFERRED_LOCATION=1`` (advise
every piece the pool takes to prefer the GPU it serves) and ``HUVM_POOL_ACCESSED_BY=1,2`` (advise it
accessed by those GPUs: mapped there, so they read it over NVLink instead of faulting it over).
"""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from huvm.errors import DeviceUnavailable, HuvmError, UsageError

#: RMM's wheel per CUDA major version (PyPI publishes rmm-cu12 and rmm-cu13)
RMM_PACKAGES: dict[int, str] = {12: "rmm-cu12", 13: "rmm-cu13"}


class AllocatorUnavailable(DeviceUnavailable):
    """The managed pool cannot be installed here; ``reason``: no-torch, cpu-only, no-cuda, cuda-version,
    no-rmm, already-allocated."""


@dataclass(frozen=True)
class PoolConfig:
    """The pool's sizes (None: RMM's defaults; the maximum is unlimited, so it can oversubscribe) and advice."""

    initial_bytes: int | None = None
    maximum_bytes: int | None = None
    preferred_location: bool = False
    accessed_by: tuple[int, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PoolConfig:
        from huvm.units import parse_size

        e = os.environ if env is None else env

        def size(key: str) -> int | None:
            v = e.get(key, "").strip()
            if not v:
                return None
            try:
                return int(parse_size(v))
            except ValueError as exc:
                raise UsageError(f"{key}={v}: {exc}") from None

        acc = e.get("HUVM_POOL_ACCESSED_BY", "").strip()
        try:
            accessed = tuple(int(x) for x in acc.split(",") if x.strip()) if acc else ()
        except ValueError:
            raise UsageError(f"HUVM_POOL_ACCESSED_BY={acc}: a comma-separated list of CUDA device ordinals") from None
        return cls(initial_bytes=size("HUVM_POOL_INITIAL"), maximum_bytes=size("HUVM_POOL_MAXIMUM"),
                   preferred_location=e.get("HUVM_POOL_PREFERRED_LOCATION", "") == "1", accessed_by=accessed)


def cuda_major(cuda_version: str | None) -> int:
    """The major of PyTorch's ``torch.version.cuda`` ("13.0" -> 13); refuses a CPU-only build (None)."""
    if not cuda_version:
        raise AllocatorUnavailable("PyTorch is a CPU-only build: the managed pool needs a CUDA build of PyTorch",
                                   reason="cpu-only")
    try:
        return int(cuda_version.split(".")[0])
    except ValueError:
        raise AllocatorUnavailable(f"PyTorch reports CUDA {cuda_version!r}: not a CUDA version",
                                   reason="cuda-version") from None


def rmm_package(cuda_version: str | None) -> str:
    """The RMM wheel for PyTorch's CUDA version: ``rmm-cu12`` or ``rmm-cu13``."""
    major = cuda_major(cuda_version)
    if major not in RMM_PACKAGES:
        raise AllocatorUnavailable(f"PyTorch is built with CUDA {cuda_version}: RMM publishes wheels for CUDA "
                                   f"{' and '.join(str(k) for k in RMM_PACKAGES)} only", reason="cuda-version")
    return RMM_PACKAGES[major]


def _import(name: str) -> Any:
    return importlib.import_module(name)


def check(importer: Callable[[str], Any] = _import) -> str:
    """Everything the pool needs, before anything is allocated: returns the RMM package in use, or raises
    :class:`AllocatorUnavailable` with one line saying what is missing."""
    try:
        torch = importer("torch")
    except ImportError:
        raise AllocatorUnavailable("PyTorch is not installed in this Python", reason="no-torch") from None
    cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
    pkg = rmm_package(cuda_version)
    if not torch.cuda.is_available():
        raise AllocatorUnavailable(f"CUDA is not available to PyTorch {torch.__version__} (no GPU or no driver "
                                   "visible: torch.cuda.is_available() is False)", reason="no-cuda")
    try:
        importer("rmm")
        importer("rmm.allocators.torch")
    except ImportError:
        raise AllocatorUnavailable(f"RAPIDS RMM is not installed: pip install 'huvm[{pkg}]' (PyTorch "
                                   f"{torch.__version__} is built with CUDA {cuda_version})",
                                   reason="no-rmm") from None
    if torch.cuda.is_initialized() and torch.cuda.memory_reserved() > 0:
        raise AllocatorUnavailable(_ALREADY, reason="already-allocated")
    return pkg


_ALREADY = ("GPU memory was already allocated through PyTorch's own allocator: install the managed pool before "
            "the first CUDA tensor (huvmctl experiment managed-alloc run SCRIPT)")


def _advising(rmm: Any, upstream: Any, config: PoolConfig, device: int, cuda_version: str | None,
              importer: Callable[[str], Any]) -> Any:
    """``upstream`` wrapped so that every piece the pool takes is advised (cudaMemAdvise, once per piece)."""
    rt = importer("cuda.bindings.runtime")
    new_api = cuda_major(cuda_version) >= 13  # CUDA 13's cudaMemAdvise takes a cudaMemLocation

    def where(dev: int) -> Any:
        if not new_api:
            return dev
        loc = rt.cudaMemLocation()
        loc.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
        loc.id = dev
        return loc

    def advise(ptr: int, size: int) -> None:
        todo = [(rt.cudaMemoryAdvise.cudaMemAdviseSetPreferredLocation, device)] if config.preferred_location else []
        todo += [(rt.cudaMemoryAdvise.cudaMemAdviseSetAccessedBy, d) for d in config.accessed_by]
        for advice, dev in todo:
            err = rt.cudaMemAdvise(ptr, size, advice, where(dev))
            if isinstance(err, tuple):
                err = err[0]
            if int(err) != 0:
                raise HuvmError(f"cudaMemAdvise({advice}, device {dev}) on {size} bytes failed: error {int(err)}")

    def allocate(size: int, *stream: Any) -> int:
        ptr = int(upstream.allocate(size, *stream))
        advise(ptr, size)
        return ptr

    def deallocate(ptr: int, size: int, *stream: Any) -> None:
        upstream.deallocate(ptr, size, *stream)

    return rmm.mr.CallbackMemoryResource(allocate, deallocate)


def enable(config: PoolConfig | None = None, *, importer: Callable[[str], Any] = _import) -> str:
    """Make PyTorch allocate CUDA memory from RMM's managed-memory pool (call before any CUDA tensor exists).
    Returns the RMM package in use; raises :class:`AllocatorUnavailable` (one line) where it cannot."""
    config = config or PoolConfig()
    pkg = check(importer)
    torch = importer("torch")
    rmm = importer("rmm")
    device = int(torch.cuda.current_device())
    upstream: Any = rmm.mr.ManagedMemoryResource()
    if config.preferred_location or config.accessed_by:
        upstream = _advising(rmm, upstream, config, device, torch.version.cuda, importer)
    pool = rmm.mr.PoolMemoryResource(upstream, initial_pool_size=config.initial_bytes,
                                     maximum_pool_size=config.maximum_bytes)
    rmm.mr.set_current_device_resource(pool)
    alloc = importer("rmm.allocators.torch").rmm_torch_allocator
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError:  # "Can't swap an already initialized allocator"
        raise AllocatorUnavailable(_ALREADY, reason="already-allocated") from None
    return str(pkg)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="huvmctl experiment managed-alloc",
                                 description="Run PyTorch on RMM's managed-memory pool (docs/experiments.md).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="say which RMM package the pool uses here, or why it cannot")
    r = sub.add_parser("run", help="run a Python script with the pool installed (HUVM_POOL_* set its options)")
    r.add_argument("script")
    r.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    try:
        if ns.cmd == "check":
            print(f"managed pool: {check()} (RAPIDS RMM over CUDA managed memory)")
            return 0
        enable(PoolConfig.from_env())
    except HuvmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    sys.argv = [ns.script, *ns.args]
    runpy.run_path(ns.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
