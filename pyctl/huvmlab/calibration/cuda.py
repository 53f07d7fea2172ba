"""The real backend: the CUDA C benchmark ``huvm_calibrate.cu`` (shipped with the package), built with nvcc on
the target into a cache folder once per source and compiler, run as a child process that prints JSON.

Why CUDA C and nvcc rather than cupy or PyTorch: the tests need managed memory, prefetches, pinned copies and
kernels with one thread per page; nvcc comes with every CUDA toolkit (the one package a GPU machine used for
CUDA work has), a plain C program has no Python wheel to match to the driver, and it is the program the
shipped H200 record (``huvm/data/calibration/h200-580.159.04.json``) was measured with. NVML (nvidia-ml-py, a
dependency of huvm) adds the driver version, PCIe link, peak HBM bandwidth and the GPU's other processes.

nvcc is looked for in: the ``nvcc`` argument (``huvmctl calibrate --nvcc``), ``$NVCC``, ``$CUDA_HOME/bin``,
``$CUDA_PATH/bin``, ``PATH``, ``/usr/local/cuda/bin``. The build goes to ``$XDG_CACHE_HOME/huvm/calibrate``
(``~/.cache/huvm/calibrate``) unless a folder is given.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from huvm.topology import hbm_mbyte_per_s

from .backend import CalibrationRefused, GpuProcess, GpuState, Plan, Samples

SOURCE = Path(__file__).resolve().parent / "huvm_calibrate.cu"
#: the benchmark's exit statuses (huvm_calibrate.cu)
EXIT_USAGE, EXIT_REFUSED, EXIT_CUDA, EXIT_NO_DEVICE = 2, 3, 4, 5
CUDA_HINT = "install the CUDA toolkit (nvcc), or give its compiler with --nvcc or CUDA_HOME"


def find_nvcc(nvcc: str | None = None) -> Path:
    """The nvcc to build with; CalibrationRefused (no-cuda) naming where it looked."""
    env = os.environ
    places: list[str] = []
    if nvcc:
        places.append(nvcc)
    if env.get("NVCC"):
        places.append(env["NVCC"])
    places += [str(Path(env[v]) / "bin" / "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)]
    on_path = shutil.which("nvcc")
    if on_path:
        places.append(on_path)
    places.append("/usr/local/cuda/bin/nvcc")
    for p in places[:1] if nvcc else places:  # an nvcc given is the one to use
        found = shutil.which(p)
        if found:
            return Path(found)
    looked = nvcc if nvcc else ", ".join(dict.fromkeys(places))
    raise CalibrationRefused(f"no CUDA compiler: nvcc not found ({looked})", reason="no-cuda", hint=CUDA_HINT)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "huvm" / "calibrate"


def build(nvcc: Path, out_dir: Path | None = None, *, timeout_s: float = 600, flags: Sequence[str] = ()) -> Path:
    """The benchmark built by nvcc with flags (cached by the source's, the compiler's and the flags' identity);
    its path."""
    try:
        version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60,
                                 check=False).stdout
    except OSError as exc:
        raise CalibrationRefused(f"{nvcc}: {exc.strerror or exc}", reason="no-cuda", hint=CUDA_HINT) from None
    key = hashlib.sha256(SOURCE.read_bytes() + str(nvcc).encode() + version.encode()
                         + "\0".join(flags).encode()).hexdigest()[:16]
    folder = out_dir or cache_dir()
    exe = folder / f"huvm-calibrate-{key}"
    if exe.is_file() and os.access(exe, os.X_OK):
        return exe
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CalibrationRefused(f"build folder {folder}: {exc.strerror or exc}", reason="no-cuda") from None
    tmp = folder / f".{exe.name}.{os.getpid()}"
    try:
        r = subprocess.run([str(nvcc), "-O2", *flags, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True,
                           timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise CalibrationRefused(f"nvcc took more than {timeout_s:g} s", reason="no-cuda") from None
    if r.returncode != 0 or not tmp.is_file():
        lines = (r.stderr or r.stdout).strip().splitlines()
        first = next((ln for ln in lines if "error" in ln.lower()),
                     lines[0] if lines else f"exit status {r.returncode}")
        tmp.unlink(missing_ok=True)
        raise CalibrationRefused(f"building the benchmark with {nvcc} failed: {first.strip()}", reason="no-cuda",
                                 hint=CUDA_HINT)
    os.replace(tmp, exe)
    return exe


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _q(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_* (NotSupported, NoPermission, ...): the field stays unknown
        return None


def _bus(bus_id: str) -> str:
    """A PCI bus id without its domain, lower case: CUDA's 0000:3b:00.0 and NVML's 00000000:3B:00.0 agree."""
    return bus_id.strip().lower().split(":", 1)[-1]


class CudaBackend:
    """The CUDA C benchmark on this machine's GPUs. ``nvml_module`` replaces ``import pynvml`` (tests);
    ``executable`` skips the build (a prebuilt benchmark, or the tests' stand-in)."""

    def __init__(self, *, nvcc: str | None = None, build_dir: Path | None = None, timeout_s: float = 1800,
                 nvml_module: ModuleType | None = None, executable: Path | None = None) -> None:
        self._nvcc = nvcc
        self._build_dir = build_dir
        self._timeout_s = timeout_s
        self._nvml_module = nvml_module
        self._exe = executable
        self.method = "CUDA C microbenchmarks (huvm_calibrate.cu)"

    # ---- the benchmark ----

    def executable(self) -> Path:
        if self._exe is None:
            nvcc = find_nvcc(self._nvcc)
            self._exe = build(nvcc, self._build_dir)
            self.method = f"CUDA C microbenchmarks (huvm_calibrate.cu, {nvcc})"
        return self._exe

    def _call(self, *args: str) -> dict[str, Any]:
        exe = self.executable()
        try:
            r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=self._timeout_s,
                               check=False)
        except subprocess.TimeoutExpired:
            raise CalibrationRefused(f"the benchmark ran more than {self._timeout_s:g} s ({args[0]})",
                                     reason="benchmark-failed") from None
        except OSError as exc:
            raise CalibrationRefused(f"{exe}: {exc.strerror or exc}", reason="benchmark-failed") from None
        lines = r.stderr.strip().splitlines()
        why = (lines[-1] if lines else f"exit status {r.returncode}").removeprefix("huvm-calibrate: error: ")
        if r.returncode == EXIT_NO_DEVICE:
            reason = "no-cuda" if "insufficient" in why or "driver" in why.lower() else "no-gpu"
            raise CalibrationRefused(f"CUDA: {why}", reason=reason)
        if r.returncode == EXIT_REFUSED:
            raise CalibrationRefused(f"the benchmark refused an allocation: {why}", reason="no-memory")
        if r.returncode != 0:
            raise CalibrationRefused(f"the benchmark failed ({args[0]}): {why}", reason="benchmark-failed")
        try:
            data = json.loads(r.stdout)
        except json.JSONDecodeError as exc:
            raise CalibrationRefused(f"the benchmark printed no JSON ({exc.msg})", reason="benchmark-failed") from None
        if not isinstance(data, dict):
            raise CalibrationRefused("the benchmark printed no JSON object", reason="benchmark-failed")
        return data

    # ---- NVML ----

    def _nvml(self) -> ModuleType | None:
        try:
            nvml = self._nvml_module or importlib.import_module("pynvml")
            nvml.nvmlInit()
        except Exception:  # not installed, no driver: NVML adds nothing
            return None
        return nvml

    def _check_driver(self) -> None:
        """No GPU at all: NVML loads and lists none, or there is neither NVML nor /dev/nvidiactl."""
        nvml = self._nvml()
        if nvml is None:
            if not Path("/dev/nvidiactl").exists():
                raise CalibrationRefused("no NVIDIA GPU: NVML cannot load and there is no /dev/nvidiactl",
                                         reason="no-gpu")
            return
        try:
            count = _q(nvml.nvmlDeviceGetCount)
        finally:
            _q(nvml.nvmlShutdown)
        if count == 0:
            raise CalibrationRefused("no NVIDIA GPU: NVML lists none", reason="no-gpu")

    def probe(self, gpu: int) -> GpuState:
        self._check_driver()
        p = self._call("probe", str(gpu))
        rt = int(p.get("runtime_version", 0))
        cuda = f"{rt // 1000}.{rt % 1000 // 10}"
        drv = int(p.get("driver_api_version", 0))
        driver, hbm, hbm_source = f"CUDA driver API {drv // 1000}.{drv % 1000 // 10}", None, ""
        gen = width = None
        processes: tuple[GpuProcess, ...] | None = None
        nvml = self._nvml()
        if nvml is not None:
            try:
                driver = _text(_q(nvml.nvmlSystemGetDriverVersion) or driver)
                handle = None
                for i in range(_q(nvml.nvmlDeviceGetCount) or 0):
                    h = _q(nvml.nvmlDeviceGetHandleByIndex, i)
                    pci = _q(nvml.nvmlDeviceGetPciInfo, h)
                    if pci is not None and _bus(_text(pci.busId)) == _bus(str(p.get("pci_bus_id", ""))):
                        handle = h
                        break
                if handle is not None:
                    hbm = hbm_mbyte_per_s(_q(nvml.nvmlDeviceGetMemoryBusWidth, handle),
                                          _q(nvml.nvmlDeviceGetMaxClockInfo, handle,
                                             getattr(nvml, "NVML_CLOCK_MEM", 2)))
                    hbm_source = "nvml" if hbm else ""
                    gen = _q(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
                    width = _q(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
                    processes = self._processes(nvml, handle)
            finally:
                _q(nvml.nvmlShutdown)
        if not hbm:
            khz, bits = int(p.get("memory_clock_khz", 0)), int(p.get("memory_bus_width_bits", 0))
            hbm = khz * bits * 2 // 8 // 1000 or None
            hbm_source = "cuda" if hbm else ""
        return GpuState(index=gpu, name=str(p["name"]), memory_total_bytes=int(p["memory_total_bytes"]),
                        memory_free_bytes=int(p["memory_free_bytes"]), driver=driver, cuda=cuda,
                        gpu_count=int(p["device_count"]), hbm_mbyte_per_s=hbm, hbm_source=hbm_source,
                        pcie_gen=gen, pcie_width=width, processes=processes,
                        info={"pci_bus_id": p.get("pci_bus_id"), "multiprocessors": p.get("multiprocessors"),
                              "concurrent_managed_access": p.get("concurrent_managed_access")})

    @staticmethod
    def _processes(nvml: ModuleType, handle: Any) -> tuple[GpuProcess, ...] | None:
        seen: dict[int, GpuProcess] = {}
        lists = [_q(getattr(nvml, fn, None), handle) for fn in ("nvmlDeviceGetComputeRunningProcesses",
                                                                 "nvmlDeviceGetGraphicsRunningProcesses")]
        if all(x is None for x in lists):
            return None
        for proc in (x for lst in lists if lst for x in lst):
            pid = int(proc.pid)
            if pid == os.getpid() or pid in seen:
                continue
            used = getattr(proc, "usedGpuMemory", None)
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            seen[pid] = GpuProcess(pid, name, int(used) if isinstance(used, int) else None)
        return tuple(seen.values())

    def run(self, plan: Plan) -> Samples:
        d = self._call("run", str(plan.gpu), str(plan.size_bytes), str(plan.repeat), str(plan.max_alloc_bytes),
                       ",".join(map(str, plan.concurrencies)), str(plan.serial_regions),
                       str(plan.block_regions))
        tests = d.get("tests")
        blocks = d.get("block_fault_us")
        if not isinstance(tests, dict) or not isinstance(blocks, dict):
            raise CalibrationRefused("the benchmark's JSON lacks tests or block_fault_us", reason="benchmark-failed")
        return Samples(tests={k: tuple(float(x) for x in v) for k, v in tests.items()},
                       block_fault_us={int(k): tuple(float(x) for x in v) for k, v in blocks.items()})
