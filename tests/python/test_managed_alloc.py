"""The managed-memory allocator for PyTorch (issue 13, local node): the shim's C behaviour against a fake CUDA
runtime (compiled here: headers + a libcudart that records calls), the build against a real CUDA runtime
where one is installed (skipped otherwise), finding CUDA, and plugging into PyTorch (a fake torch)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from huvm.errors import UsageError
from huvm.experiment import managed_alloc as ma

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

FAKE_HEADER = """#pragma once
#include <stddef.h>
#include "crt/host_defines.h"
#define CUDART_VERSION {version}
typedef int cudaError_t;
typedef void *cudaStream_t;
enum {{ cudaSuccess = 0, cudaErrorMemoryAllocation = 2 }};
#define cudaMemAttachGlobal 0x01
enum cudaMemoryAdvise {{ cudaMemAdviseSetPreferredLocation = 3 }};
enum cudaMemLocationType {{ cudaMemLocationTypeDevice = 1 }};
struct cudaMemLocation {{ enum cudaMemLocationType type; int id; }};
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t err);
#if CUDART_VERSION >= 13000
cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise a, struct cudaMemLocation where);
#else
cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise a, int device);
#endif
"""

# a libcudart that records what the shim asks of it
FAKE_CUDART = r"""
#include <stdlib.h>
#include "cuda_runtime_api.h"
int current = 0, sets = 0, fail_next = 0, advised_device = -1;
size_t last_size = 0; unsigned last_flags = 0; void *last_freed = 0; static char heap[1 << 20];
cudaError_t cudaGetDevice(int *d) { *d = current; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { current = d; sets++; return cudaSuccess; }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags) {
    last_size = n; last_flags = flags;
    if (fail_next) { fail_next = 0; return cudaErrorMemoryAllocation; }
    *p = heap; return cudaSuccess; }
cudaError_t cudaFree(void *p) { last_freed = p; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "out of memory" : "no error"; }
#if CUDART_VERSION >= 13000
cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise a, struct cudaMemLocation w) {
    (void)p; (void)n; if (a == cudaMemAdviseSetPreferredLocation && w.type == cudaMemLocationTypeDevice)
    advised_device = w.id; return cudaSuccess; }
#else
cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise a, int d) {
    (void)p; (void)n; if (a == cudaMemAdviseSetPreferredLocation) advised_device = d; return cudaSuccess; }
#endif
"""


def fake_cuda(root: Path, version: int) -> Path:
    inc = root / "include"
    (inc / "crt").mkdir(parents=True)
    (inc / "crt" / "host_defines.h").write_text("#pragma once\n")
    (inc / "cuda_runtime_api.h").write_text(FAKE_HEADER.format(version=version))
    (root / "lib").mkdir()
    src = root / "fake_cudart.c"
    src.write_text(FAKE_CUDART)
    # a soname of its own per version, as libcudart.so.12 has: each test's shim finds its own copy
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", f"-Wl,-soname,libcudart.so.{version}",
                    f"-I{inc}", str(src), "-o", str(root / "lib" / f"libcudart.so.{version}")], check=True)
    return root


@needs_cc
@pytest.mark.parametrize("version", [12090, 13000])
def test_the_shim_allocates_managed_memory_on_the_device(tmp_path: Path, version: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_cuda(tmp_path / "cuda", version)
    cuda = ma.find_cuda([root], default_places=False)
    lib_path = ma.build(tmp_path / "out", cuda)
    assert lib_path.name == ma.LIB_NAME
    assert cuda.lib == f"libcudart.so.{version}"
    cudart = ctypes.CDLL(str(root / "lib" / cuda.lib))  # the copy the shim was linked to (rpath)
    shim = ctypes.CDLL(str(lib_path))
    malloc, free = getattr(shim, ma.MALLOC_FN), getattr(shim, ma.FREE_FN)
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

    def var(name: str, kind: Any = ctypes.c_int) -> Any:
        return kind.in_dll(cudart, name).value

    monkeypatch.delenv("HUVM_ALLOC_PREFERRED_LOCATION", raising=False)
    p = malloc(3 << 20, 2, None)
    assert p is not None
    # cudaMallocManaged(size, cudaMemAttachGlobal) on device 2, then the caller's device (0) is current again
    assert var("last_size", ctypes.c_size_t) == 3 << 20 and var("last_flags", ctypes.c_uint) == 1
    assert var("current") == 0 and var("sets") == 2 and var("advised_device") == -1
    free(p, 3 << 20, 2, None)
    assert var("last_freed", ctypes.c_void_p) == p
    monkeypatch.setenv("HUVM_ALLOC_PREFERRED_LOCATION", "1")
    assert malloc(4096, 1, None) is not None and var("advised_device") == 1
    ctypes.c_int.in_dll(cudart, "fail_next").value = 1
    assert malloc(4096, 0, None) is None  # PyTorch turns NULL into its out-of-memory error
    assert malloc(0, 0, None) is None


@needs_cc
def test_the_shim_builds_against_an_installed_cuda_runtime(tmp_path: Path) -> None:
    try:
        cuda = ma.find_cuda()
    except ma.CudaNotFound as exc:
        pytest.skip(f"no CUDA runtime here: {exc}")
    lib = ma.build(tmp_path, cuda)
    shim = ctypes.CDLL(str(lib))
    assert hasattr(shim, ma.MALLOC_FN) and hasattr(shim, ma.FREE_FN)
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=False).stdout
    if out:
        assert {line.split()[-1] for line in out.splitlines()} == {ma.MALLOC_FN, ma.FREE_FN}


def test_find_cuda_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ma.CudaNotFound, match="no CUDA runtime headers"):
        ma.find_cuda([tmp_path], default_places=False)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime_api.h").write_text("")
    with pytest.raises(ma.CudaNotFound, match="crt/host_defines.h") as info:
        ma.find_cuda([tmp_path], default_places=False)
    assert "nvidia-cuda-nvcc-cu12" in (info.value.hint or "")
    # crt/ in a second root, as the wheels split them
    other = tmp_path / "nvcc"
    (other / "include" / "crt").mkdir(parents=True)
    (other / "include" / "crt" / "host_defines.h").write_text("")
    with pytest.raises(ma.CudaNotFound, match="no libcudart.so"):
        ma.find_cuda([tmp_path, other], default_places=False)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudart.so.12").write_text("")
    (tmp_path / "lib" / "libcudart.so.12.9.79").write_text("")
    cuda = ma.find_cuda([tmp_path, other], default_places=False)
    assert cuda.include_dirs == (tmp_path / "include", other / "include") and cuda.lib == "libcudart.so.12"
    cmd = ma.compile_command(cuda, tmp_path / "x.so")
    assert f"-I{other / 'include'}" in cmd and "-l:libcudart.so.12" in cmd and "-Werror" in cmd


def test_build_cli_skips_cleanly_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ma, "candidate_roots", lambda roots=(): [tmp_path])
    assert ma.main(["build", "--out", str(tmp_path / "o"), "--if-available"]) == 0
    assert "managed allocator not built: no CUDA runtime headers" in capsys.readouterr().out
    assert ma.main(["build", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA runtime headers") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_enable_and_run_plug_into_pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / ma.LIB_NAME
    with pytest.raises(UsageError, match="no such allocator library"):
        ma.enable(lib)
    lib.write_text("")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UsageError, match="PyTorch is not installed"):
        ma.enable(lib)
    calls: list[Any] = []
    torch = types.ModuleType("torch")
    memory = types.SimpleNamespace(
        CUDAPluggableAllocator=lambda *a: ("allocator", *a),
        change_current_allocator=lambda a: calls.append(a))
    torch.cuda = types.SimpleNamespace(memory=memory)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    ma.enable(lib)
    assert calls == [("allocator", str(lib), "huvm_managed_malloc", "huvm_managed_free")]
    # run: the allocator is in place before the script's first line, which gets its own argv
    script = tmp_path / "train.py"
    script.write_text("import sys, torch\nSEEN.extend([list(sys.argv), len(CALLS)])\n")
    seen: list[Any] = []
    monkeypatch.setattr(ma.runpy, "run_path", lambda path, run_name: exec(  # noqa: S102 - the test's own script
        Path(path).read_text(), {"SEEN": seen, "CALLS": calls, "__name__": run_name}))
    monkeypatch.setattr(sys, "argv", ["x"])
    assert ma.main(["run", "--lib", str(lib), str(script), "--epochs", "2"]) == 0
    assert seen == [[str(script), "--epochs", "2"], 2]


def test_enable_refuses_clearly_where_pytorch_cannot_take_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / ma.LIB_NAME
    lib.write_text("")

    def cpu_only(*a: Any) -> Any:
        raise AttributeError("module 'torch._C' has no attribute '_cuda_customAllocator'")

    torch = types.ModuleType("torch")
    torch.__version__ = "2.13.0+cpu"  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(  # type: ignore[attr-defined]
        CUDAPluggableAllocator=cpu_only, change_current_allocator=cpu_only))
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(UsageError, match=r"PyTorch 2.13.0\+cpu cannot take the allocator: .*a CUDA build"):
        ma.enable(lib)
