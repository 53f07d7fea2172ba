"""PyTorch on RMM's managed-memory pool (issue 25; huvmlab.experiment.managed_alloc): the RMM package per CUDA
major, the refusals (CPU-only PyTorch, no CUDA, RMM missing, memory already allocated), the pool and its
advice, and ``run``, all against fake torch / rmm / cuda-python modules (no GPU here)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from huvm.errors import UsageError
from huvmlab.experiment import managed_alloc as ma


class FakeTorch(types.SimpleNamespace):
    def __init__(self, cuda_version: str | None = "13.0", available: bool = True, reserved: int = 0,
                 initialized: bool = False, swap_error: bool = False) -> None:
        self.swapped: list[Any] = []

        def change(alloc: Any) -> None:
            if swap_error:
                raise RuntimeError("Can't swap an already initialized allocator")
            self.swapped.append(alloc)

        super().__init__(
            __version__=f"2.11.0+cu{cuda_version.replace('.', '')}" if cuda_version else "2.13.0+cpu",
            version=types.SimpleNamespace(cuda=cuda_version),
            cuda=types.SimpleNamespace(is_available=lambda: available, is_initialized=lambda: initialized,
                                       memory_reserved=lambda: reserved, current_device=lambda: 0,
                                       memory=types.SimpleNamespace(change_current_allocator=change)))


class FakeRmm:
    """rmm, rmm.allocators.torch and cuda.bindings.runtime, recording what is built."""

    def __init__(self) -> None:
        self.current: Any = None
        self.advised: list[tuple[int, int, str, Any]] = []
        rec = self

        class Managed:
            def allocate(self, size: int, *stream: Any) -> int:
                return 0x1000

            def deallocate(self, ptr: int, size: int, *stream: Any) -> None:
                pass

        class Pool:
            def __init__(self, upstream: Any, initial_pool_size: int | None, maximum_pool_size: int | None) -> None:
                self.upstream, self.initial, self.maximum = upstream, initial_pool_size, maximum_pool_size

        class Callback:
            def __init__(self, allocate: Any, deallocate: Any) -> None:
                self.allocate, self.deallocate = allocate, deallocate

        def set_current(mr: Any) -> None:
            rec.current = mr

        self.rmm = types.SimpleNamespace(mr=types.SimpleNamespace(
            ManagedMemoryResource=Managed, PoolMemoryResource=Pool, CallbackMemoryResource=Callback,
            set_current_device_resource=set_current))
        self.torch_alloc = types.SimpleNamespace(rmm_torch_allocator="rmm-torch-allocator")

        class Loc:
            type: Any = None
            id: int = -1

        def advise(ptr: int, size: int, advice: str, where: Any) -> tuple[int]:
            rec.advised.append((ptr, size, advice, where if isinstance(where, int) else ("loc", where.id)))
            return (0,)

        self.runtime = types.SimpleNamespace(
            cudaMemLocation=Loc, cudaMemLocationType=types.SimpleNamespace(cudaMemLocationTypeDevice="dev"),
            cudaMemoryAdvise=types.SimpleNamespace(cudaMemAdviseSetPreferredLocation="preferred",
                                                   cudaMemAdviseSetAccessedBy="accessed-by"),
            cudaMemAdvise=advise)


def importer(torch: Any, rmm: FakeRmm | None) -> Any:
    mods: dict[str, Any] = {"torch": torch} if torch is not None else {}
    if rmm is not None:
        mods.update({"rmm": rmm.rmm, "rmm.allocators.torch": rmm.torch_alloc, "cuda.bindings.runtime": rmm.runtime})

    def imp(name: str) -> Any:
        if name not in mods:
            raise ImportError(name)
        return mods[name]

    return imp


@pytest.mark.parametrize(("cuda", "pkg"), [("12.8", "rmm-cu12"), ("12.1", "rmm-cu12"), ("13.0", "rmm-cu13")])
def test_rmm_package_follows_pytorchs_cuda_major(cuda: str, pkg: str) -> None:
    assert ma.rmm_package(cuda) == pkg


def test_rmm_package_refuses_cpu_builds_and_other_majors() -> None:
    with pytest.raises(ma.AllocatorUnavailable, match="CPU-only") as e:
        ma.rmm_package(None)
    assert e.value.reason == "cpu-only"
    with pytest.raises(ma.AllocatorUnavailable, match="CUDA 11.8: RMM publishes wheels for CUDA 12 and 13 only"):
        ma.rmm_package("11.8")


@pytest.mark.parametrize(("torch", "rmm", "reason", "text"), [
    (None, None, "no-torch", "PyTorch is not installed"),
    (FakeTorch(cuda_version=None), FakeRmm(), "cpu-only", "CPU-only build"),
    (FakeTorch(available=False), FakeRmm(), "no-cuda", "CUDA is not available"),
    (FakeTorch(cuda_version="13.0"), None, "no-rmm", "pip install 'huvm[rmm-cu13]'"),
    (FakeTorch(cuda_version="12.8"), None, "no-rmm", "pip install 'huvm[rmm-cu12]'"),
    (FakeTorch(initialized=True, reserved=2 << 20), FakeRmm(), "already-allocated", "already allocated"),
])
def test_refusals_are_one_line(torch: Any, rmm: FakeRmm | None, reason: str, text: str) -> None:
    with pytest.raises(ma.AllocatorUnavailable) as e:
        ma.enable(importer=importer(torch, rmm))
    assert e.value.reason == reason and text in str(e.value) and "\n" not in str(e.value)


def test_enable_installs_the_managed_pool() -> None:
    torch, rmm = FakeTorch(), FakeRmm()
    assert ma.enable(ma.PoolConfig(initial_bytes=1 << 34), importer=importer(torch, rmm)) == "rmm-cu13"
    pool = rmm.current
    assert pool.initial == 1 << 34 and pool.maximum is None  # unlimited: it may oversubscribe
    assert type(pool.upstream).__name__ == "Managed"  # no advice asked: the managed resource itself
    assert torch.swapped == ["rmm-torch-allocator"]


def test_enable_refuses_when_pytorch_already_allocated() -> None:
    with pytest.raises(ma.AllocatorUnavailable, match="before the first CUDA tensor") as e:
        ma.enable(importer=importer(FakeTorch(swap_error=True), FakeRmm()))
    assert e.value.reason == "already-allocated"


@pytest.mark.parametrize(("cuda", "where"), [("13.0", ("loc", 0)), ("12.8", 0)])
def test_pool_pieces_are_advised_once_each(cuda: str, where: Any) -> None:
    torch, rmm = FakeTorch(cuda_version=cuda), FakeRmm()
    ma.enable(ma.PoolConfig(preferred_location=True, accessed_by=(1,)), importer=importer(torch, rmm))
    up = rmm.current.upstream
    assert up.allocate(64 << 20) == 0x1000
    other = ("loc", 1) if isinstance(where, tuple) else 1
    assert rmm.advised == [(0x1000, 64 << 20, "preferred", where), (0x1000, 64 << 20, "accessed-by", other)]


def test_pool_config_from_the_environment() -> None:
    c = ma.PoolConfig.from_env({"HUVM_POOL_INITIAL": "16GiB", "HUVM_POOL_PREFERRED_LOCATION": "1",
                                "HUVM_POOL_ACCESSED_BY": "1,2"})
    assert c == ma.PoolConfig(initial_bytes=16 << 30, preferred_location=True, accessed_by=(1, 2))
    assert ma.PoolConfig.from_env({}) == ma.PoolConfig()
    with pytest.raises(UsageError, match="HUVM_POOL_MAXIMUM=16G"):
        ma.PoolConfig.from_env({"HUVM_POOL_MAXIMUM": "16G"})
    with pytest.raises(UsageError, match="HUVM_POOL_ACCESSED_BY"):
        ma.PoolConfig.from_env({"HUVM_POOL_ACCESSED_BY": "gpu1"})


def test_run_installs_before_the_script_and_refuses_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys, json\nprint(json.dumps(sys.argv))\n")
    calls: list[ma.PoolConfig] = []
    def enable(config: ma.PoolConfig) -> str:
        calls.append(config)
        return "rmm-cu13"

    monkeypatch.setattr(ma, "enable", enable)
    monkeypatch.setenv("HUVM_POOL_INITIAL", "1GiB")
    argv = sys.argv[:]
    try:
        assert ma.main(["run", str(script), "--epochs", "1"]) == 0
    finally:
        sys.argv = argv
    assert calls == [ma.PoolConfig(initial_bytes=1 << 30)]
    assert capsys.readouterr().out.strip() == f'["{script}", "--epochs", "1"]'

    def refuse(config: ma.PoolConfig) -> str:
        raise ma.AllocatorUnavailable("CUDA is not available to PyTorch 2.13.0+cpu", reason="no-cuda")

    monkeypatch.setattr(ma, "enable", refuse)
    assert ma.main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err == "error: CUDA is not available to PyTorch 2.13.0+cpu\n"


def test_check_on_this_machine_says_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    """The project's venv has the CPU build of PyTorch: one line, exit 1 (or no torch at all)."""
    assert ma.main(["check"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
