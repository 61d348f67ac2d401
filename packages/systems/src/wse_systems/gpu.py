"""The GPU cluster model beside the wafer model: A100 / H100 nodes and training steps, from
public figures and stated assumptions (nothing fitted here). Serving (whole requests on
tp x pp GPUs, bf16 or fp8) is `wse_systems.serving.gpus`, on these figures.

Public figures (per GPU unless noted; "assumption" where no vendor publishes the number):

| quantity | A100 SXM4 80GB | H100 SXM5 80GB | source |
| --- | --- | --- | --- |
| dense bf16/fp16 tensor peak | 312 TFLOP/s | 989 TFLOP/s | [1] (H100: 1,979 is 2:4 sparse) |
| dense fp8 tensor peak | none | 1,979 TFLOP/s | [1] (3,958 is 2:4 sparse) |
| fp32 peak, CUDA cores (no TF32) | 19.5 TFLOP/s | 67 TFLOP/s | [1] "FP32" (TF32: 156 / 494.5) |
| HBM bandwidth | 2.039 TB/s (HBM2e) | 3.35 TB/s (HBM3) | [1] |
| memory | 80 GiB | 80 GiB | [1] ("80GB": binary; nvidia-smi shows 81,559 MiB on H100) |
| NVLink, one direction | 300 GB/s (600 total) | 450 GB/s (900 total) | [1] |
| NVLink latency per step | 1 us | 1 us | assumption, `--assume gpu.nvlink_latency_s` [3] |
| InfiniBand per GPU, one direction | 25 GB/s (HDR) | 50 GB/s (NDR) | [2] (a NIC per GPU) |
| InfiniBand latency per step | 5 us | 5 us | assumption, `--assume gpu.ib_latency_s` [3] |
| board power (TDP) | 400 W | 700 W | [1] |
| node (8 GPUs) power, max | 6.5 kW | 10.2 kW | [2] |
| node power, idle | 1.6 kW | 2.6 kW | assumption: 25% of max (not published) |
| price per GPU-hour | $1.80 | $3.00 | assumption: typical 2024-25 cloud rates |
| CUDA compute capability | 8.0 | 9.0 | [4] (sets vLLM's all-reduce rule, `gpu_links`) |

[1] NVIDIA A100 Tensor Core GPU datasheet; NVIDIA H100 Tensor Core GPU datasheet.
[2] NVIDIA DGX A100 datasheet (8 x 200 Gb/s HDR ConnectX-6, 6.5 kW max); NVIDIA DGX H100
datasheet (8 x 400 Gb/s NDR ConnectX-7, ~10.2 kW max).
[3] `wse_systems.gpu_links` (`NVLINK_LATENCY`, `IB_LATENCY`: sweeps and NCCL's own tuning
model as the scale; hunt jobs17: they were no `--assume` key and listed beside no figure).
[4] NVIDIA CUDA C++ Programming Guide, "Compute Capabilities" (A100 8.0, H100 9.0).

Training (`train_step`, `train_floor`, `TrainStep`) is priced from these figures by
`wse_systems.gpu_train` (the fastest layout at an MFU, the assumptions read) and
`wse_systems.gpu_schedule` (one layout's step on Megatron-LM's 1F1B schedule: flops, kernel
floor, bubble, sends and gradient rings), over `wse_systems.gpu_layout`'s layouts and
`wse_systems.gpu_links`' links.

Contract: this module owns the GPUs' figures (`GpuSpec`, `A100`, `H100`, `GPUS`, `gpu_spec`)
and is the import path of the GPU training model: the names of `gpu_train`, `gpu_schedule`
and `gpu_layout` its callers import are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from wse_core.errors import SpecError, suggest

# first, as before the split: `gpu.kernel_s` registers before the links' latencies and
# `gpu.train_mfu`, the order the assumptions are listed in (`system_keys`)
from wse_systems.gpu_kernels import KERNEL_KEY as KERNEL_KEY
from wse_systems.gpu_layout import (
    BYTES_PER_PARAM_TRAIN,
    FP32_BYTES,
    GRAD_BUCKET_MIN_PARAMS,
    GRAD_BUCKET_PARAMS_PER_RANK,
    GRAD_BYTES,
    TRAIN_CONFIG,
    TRAIN_FLAGS,
    USABLE_MEMORY,
    WEIGHT_BYTES,
    GpuLayoutError,
    GpuMemoryError,
    TrainLayout,
    embedding_allreduce_s,
    min_train_gpus,
    ring_allreduce_s,
)
from wse_systems.gpu_layout import layouts as layouts  # read as `gpu.layouts` (tests)
from wse_systems.gpu_links import IB_LATENCY_S, NVLINK_LATENCY_S
from wse_systems.gpu_schedule import (
    AROUND_PASSES,
    GRAD_OVERLAP_SHARE,
    OPTIMIZER_KERNELS_PER_LAYER,
    TP_ALLREDUCES_PER_LAYER,
    TRAIN_PASSES,
    TrainFloor,
    TrainStep,
    layers_flops_per_token,
    stage_flops_per_token,
    train_floor,
    train_flops_per_token,
)
from wse_systems.gpu_train import TRAIN_MFU as TRAIN_MFU  # planning and tests read these here
from wse_systems.gpu_train import TRAIN_MFU_CONSTANT as TRAIN_MFU_CONSTANT
from wse_systems.gpu_train import TRAIN_MFU_KEY as TRAIN_MFU_KEY
from wse_systems.gpu_train import train_step
from wse_systems.transformer import DecoderShape

__all__ = ["GPUS", "WEIGHT_BYTES", "A100", "H100", "BYTES_PER_PARAM_TRAIN", "USABLE_MEMORY",
           "GRAD_BYTES", "FP32_BYTES", "TRAIN_CONFIG",
           "GpuSpec", "GpuMemoryError", "GpuLayoutError", "ModelShape", "TrainLayout",
           "TrainStep", "TrainFloor", "gpu_spec", "ring_allreduce_s", "train_flops_per_token",
           "stage_flops_per_token", "layers_flops_per_token", "embedding_allreduce_s",
           "GRAD_OVERLAP_SHARE", "TRAIN_FLAGS", "GRAD_BUCKET_MIN_PARAMS",
           "GRAD_BUCKET_PARAMS_PER_RANK",
           "train_step", "train_floor", "TRAIN_PASSES", "AROUND_PASSES",
           "OPTIMIZER_KERNELS_PER_LAYER", "TP_ALLREDUCES_PER_LAYER", "min_train_gpus"]  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU model and its node (figures and sources in the module docstring)."""

    name: str
    peak_flops: float  # dense bf16, flop/s
    peak_fp8_flops: float | None  # dense fp8, flop/s (None: no fp8 tensor cores)
    peak_fp32_flops: float  # fp32 on the CUDA cores (no TF32), flop/s: fp32 training's peak
    hbm_bytes_per_s: float
    memory_bytes: float
    nvlink_bytes_per_s: float  # per GPU, one direction
    nvlink_latency_s: float
    ib_bytes_per_s: float  # per GPU, one direction
    ib_latency_s: float
    board_power_w: float
    gpus_per_node: int
    node_power_w: float  # max
    node_idle_w: float
    usd_per_gpu_hour: float
    compute_capability: str  # CUDA's "major.minor": which of vLLM's all-reduce tables apply

    def power_w_per_gpu(self) -> tuple[float, float]:
        """(peak, idle) node power per GPU, watts: CPUs, NICs and fans included."""
        return self.node_power_w / self.gpus_per_node, self.node_idle_w / self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


A100 = GpuSpec(
    name="A100-SXM4-80GB",
    peak_flops=312e12,
    peak_fp8_flops=None,
    peak_fp32_flops=19.5e12,
    hbm_bytes_per_s=2.039e12,
    memory_bytes=80 * 2**30,
    nvlink_bytes_per_s=300e9,
    nvlink_latency_s=NVLINK_LATENCY_S,
    ib_bytes_per_s=25e9,
    ib_latency_s=IB_LATENCY_S,
    board_power_w=400.0,
    gpus_per_node=8,
    node_power_w=6500.0,
    node_idle_w=0.25 * 6500.0,
    usd_per_gpu_hour=1.80,
    compute_capability="8.0",
)
H100 = GpuSpec(
    name="H100-SXM5-80GB",
    peak_flops=989e12,
    peak_fp8_flops=1979e12,
    peak_fp32_flops=67e12,
    hbm_bytes_per_s=3.35e12,
    memory_bytes=80 * 2**30,
    nvlink_bytes_per_s=450e9,
    nvlink_latency_s=NVLINK_LATENCY_S,
    ib_bytes_per_s=50e9,
    ib_latency_s=IB_LATENCY_S,
    board_power_w=700.0,
    gpus_per_node=8,
    node_power_w=10200.0,
    node_idle_w=0.25 * 10200.0,
    usd_per_gpu_hour=3.00,
    compute_capability="9.0",
)
GPUS: Mapping[str, GpuSpec] = MappingProxyType({"a100": A100, "h100": H100})


def gpu_spec(name: str) -> GpuSpec:
    """The GPU called `name` ("a100" or "h100"); unknown is a SpecError."""
    key = name.lower()
    if key not in GPUS:
        raise SpecError(f"unknown GPU {name!r}{suggest(key, GPUS)}; use one of {list(GPUS)}")
    return GPUS[key]


class ModelShape:
    """Kept for `ModelShape.of(config)` callers: the GPU model reads any
    `wse_systems.transformer.DecoderShape` (a `wse_models.ModelConfig`) directly."""

    @staticmethod
    def of(config: DecoderShape) -> DecoderShape:
        """`config` itself (its counts are `wse_systems.transformer`'s formula)."""
        return config
