"""Per-op compute time from FLOPs and bytes: a roofline per GPU preset.

``t_op = max(flops / (EFF_COMPUTE * peak(dtype, op)), bytes / (EFF_MEMORY * hbm_bw)) + OP_OVERHEAD``

Peak numbers are the vendors' dense (no-sparsity) datasheet figures:

* V100 SXM2 16/32 GB: FP32 15.7 TFLOP/s, FP16 tensor 125 TFLOP/s, HBM2 900 GB/s.
  https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
  V100 has no bf16 tensor cores; bf16 GEMMs run at roughly the FP32 rate, modelled as FP32.
* A100 SXM4 80 GB: FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s, HBM2e 2039 GB/s.
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
* H100 SXM5 80 GB: FP32 67, TF32 494.5, BF16/FP16 989.5 TFLOP/s (half the "with sparsity" figures),
  HBM3 3.35 TB/s. https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet

Assumptions (not measured here; no GPU was available): 60 % of peak compute, 80 % of peak memory
bandwidth, 5 us fixed cost per op (launch and tail). fp32 matmuls use the FP32 rate (PyTorch's default
``allow_tf32=False`` for cuBLAS); fp32 convolutions use TF32 where the GPU has it (cuDNN's default
``allow_tf32=True``). Ops with a measured time (``ops.fixed_ns >= 0``) keep it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EFF_COMPUTE = 0.60
EFF_MEMORY = 0.80
OP_OVERHEAD_NS = 5_000


@dataclass(frozen=True)
class GpuPreset:
    name: str
    mem_bytes: int
    fp32_flops: float
    tf32_flops: float  # == fp32_flops where the GPU has no TF32
    half_flops: float  # fp16 / bf16 tensor-core rate
    bf16_tensor: bool
    hbm_bytes_s: float


PRESETS: dict[str, GpuPreset] = {
    "v100": GpuPreset("V100-SXM2-16GB", 16 << 30, 15.7e12, 15.7e12, 125e12, False, 900e9),
    "a100": GpuPreset("A100-SXM4-80GB", 80 << 30, 19.5e12, 156e12, 312e12, True, 2039e9),
    "h100": GpuPreset("H100-SXM5-80GB", 80 << 30, 67e12, 494.5e12, 989.5e12, True, 3350e9),
}


def preset(name: str) -> GpuPreset:
    """Look up a preset: 'V100', 'a100', 'h100-sxm', 'v100-16gb' ... (prefix before '-' matters)."""
    key = name.strip().lower().split("-")[0].split("_")[0]
    if key not in PRESETS:
        raise KeyError(f"unknown GPU preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return PRESETS[key]


def op_times_ns(gpu: str, names: list[str], dtypes: list[str], flops: npt.NDArray[np.int64],
                nbytes: npt.NDArray[np.int64], fixed_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Estimated time of each op in ns on ``gpu`` (see module doc)."""
    g = preset(gpu)
    half = np.array([d in ("torch.float16", "torch.bfloat16", "float16", "bfloat16") for d in dtypes])
    bf16 = np.array([d in ("torch.bfloat16", "bfloat16") for d in dtypes])
    conv = np.array(["convolution" in n for n in names])
    peak = np.full(len(names), g.fp32_flops)
    peak[conv] = g.tf32_flops
    peak[half] = g.half_flops
    if not g.bf16_tensor:
        peak[bf16] = g.fp32_flops
    t_c = flops.astype(np.float64) / (EFF_COMPUTE * peak) * 1e9
    t_m = nbytes.astype(np.float64) / (EFF_MEMORY * g.hbm_bytes_s) * 1e9
    t = np.maximum(t_c, t_m) + OP_OVERHEAD_NS
    out: npt.NDArray[np.uint64] = np.rint(t).astype(np.uint64)
    meas = fixed_ns >= 0
    out[meas] = fixed_ns[meas].astype(np.uint64)
    return out
