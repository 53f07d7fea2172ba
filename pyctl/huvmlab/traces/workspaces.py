"""cuBLAS workspaces of a DNN training step: device memory PyTorch takes from its caching allocator and keeps.

PyTorch (aten/src/ATen/cuda/CublasHandlePool.cpp) gives every (cuBLAS handle, stream) pair a workspace
allocated through the caching allocator, and keeps it for the life of the process (it is counted by
``torch.cuda.memory_allocated``). Handles are per thread: the forward pass and the optimizer run on the
Python thread, the backward pass on autograd's device thread, so a training step that runs matmuls in both
holds two workspaces. The size is ``CUBLAS_WORKSPACE_CONFIG``'s default: ``:4096:8`` (32 MiB) on compute
capability 9.0 (H100, H200), ``:4096:2:16:8`` (8 MiB + 128 KiB) elsewhere. ``addmm`` with a 1-D bias
goes through cuBLASLt (``gemm_and_bias``), whose workspace is a separate allocation per (handle, stream) of
``CUBLASLT_WORKSPACE_SIZE`` (default 1024 KiB).

cuDNN's and the attention kernels' scratch buffers are per call and freed with it; they are not modelled.
"""

from __future__ import annotations

import numpy as np

from .schema import Tables

#: compute capability of the GPUs a trace can be generated for (the roofline presets, and the H200)
GPU_CC: dict[str, tuple[int, int]] = {"V100": (7, 0), "A100": (8, 0), "H100": (9, 0), "H200": (9, 0)}
CUBLAS_WORKSPACE_SM90 = 4096 * 8 * 1024          # ":4096:8"
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"
CUBLASLT_WORKSPACE = 1024 * 1024                 # CUBLASLT_WORKSPACE_SIZE=1024 (KiB)

#: aten ops that run on a cuBLAS handle, and those that take the cuBLASLt path with a bias
BLAS_OPS = ("aten.mm.", "aten.addmm.", "aten.bmm.", "aten.baddbmm.", "aten.addbmm.", "aten.mv.", "aten.addmv.",
            "aten.addr.", "aten._addmm_activation.", "aten.dot.")
LT_OPS = ("aten.addmm.", "aten._addmm_activation.")
#: the thread each phase runs on: backward on autograd's device thread, the rest on the Python thread
PHASE_THREAD = {"fwd": "python", "opt": "python", "bwd": "autograd"}


def cublas_workspace_bytes(gpu: str) -> int:
    """One cuBLAS workspace on ``gpu`` (a key of :data:`GPU_CC`, any case)."""
    cc = GPU_CC.get(gpu.upper())
    if cc is None:
        raise KeyError(f"unknown GPU {gpu!r}; known: {', '.join(GPU_CC)}")
    return CUBLAS_WORKSPACE_SM90 if cc == (9, 0) else CUBLAS_WORKSPACE_DEFAULT


def workspaces(op_names: list[str], op_phases: list[str], gpu: str) -> list[tuple[str, int]]:
    """(label, bytes) of every workspace a step with these ops holds on ``gpu``."""
    out: list[tuple[str, int]] = []
    for thread in ("python", "autograd"):
        names = [n for n, p in zip(op_names, op_phases, strict=True) if PHASE_THREAD.get(p, "python") == thread]
        if any(n.startswith(BLAS_OPS) for n in names):
            out.append((f"cublas-{thread}", cublas_workspace_bytes(gpu)))
        if any(n.startswith(LT_OPS) for n in names):
            out.append((f"cublaslt-{thread}", CUBLASLT_WORKSPACE))
    return out


def add_workspaces(t: Tables, gpu: str) -> Tables:
    """Append the step's workspaces to raw tables as storages held before and after the trace (kind
    ``workspace``); call before :func:`huvmlab.traces.chunks.finalize`. Records them in ``meta``."""
    ws = workspaces(t.o_name, t.o_phase, gpu)
    n = len(ws)
    t.s_nbytes = np.concatenate([t.s_nbytes, np.array([b for _, b in ws], dtype=np.int64)])
    t.s_alloc_op = np.concatenate([t.s_alloc_op, np.full(n, -1, dtype=np.int32)])
    t.s_free_op = np.concatenate([t.s_free_op, np.full(n, -1, dtype=np.int32)])
    t.s_kind = [*t.s_kind, *(["workspace"] * n)]
    t.s_dtype = [*t.s_dtype, *(["uint8"] * n)]
    t.s_shape = [*t.s_shape, *(label for label, _ in ws)]
    t.s_addr = np.concatenate([t.s_addr, np.full(n, -1, dtype=np.int64)])
    t.meta = {**t.meta, "gpu": gpu.upper(), "workspace_bytes": int(sum(b for _, b in ws))}
    return t
