"""The GPUs' links as both GPU step models price them: each link's latency an assumption
(`gpu.nvlink_latency_s`, `gpu.ib_latency_s`, registered with `wse_core.cost.assumptions`
here, as `gpu_kernels` registers `gpu.kernel_s`), the link a collective or a send runs on
(`link`), NCCL's ring all-reduce (`ring_allreduce_s`), the tensor-parallel all-reduce the
serving engines run (`tp_allreduce_s`) and a send between pipeline stages (`stage_hop_s`).
`wse_systems.gpu_layout` (training) and `wse_systems.serving.gpu_step` (serving) both read
them, so a crossing has one price (hunt jobs17 F: serving sent a stage's whole activation
over one GPU's InfiniBand link where training sent 1/tp over each GPU's own). This module
imports neither.

The latencies (hunt jobs17 B: unregistered, no `--assume`, listed beside no figure, while
they set up to half of a small model's decode step at tp 8): a GpuSpec holds its own
(`wse_systems.gpu`'s H100 and A100: `NVLINK_LATENCY_S`, `IB_LATENCY_S`), and
`--assume gpu.nvlink_latency_s=S` / `gpu.ib_latency_s=S` replaces them for every GPU priced
under it (`link`, `latency_s`). A read is noted without claiming that it moves the figure;
each pricer notes where it does (`gpu_step.step`: every all-reduce and hop it prices adds
the latency; `gpu.train_step`: where an end of the sweep moves the fastest step).

The tensor-parallel all-reduce (`tp_allreduce_s`), as vLLM runs it (vllm-project/vllm,
csrc/custom_all_reduce.cuh, `CustomAllreduce::allreduce`, and vllm/distributed/
device_communicators/custom_all_reduce.py, `should_custom_ar`): on 2, 4, 6 or 8 GPUs of one
fully NVLink-connected node (NVSwitch: DGX H100 and A100) a message under its buffer,
`CUSTOM_ALLREDUCE_MAX_BYTES` (8 MiB), runs as one custom kernel: one stage
(`cross_device_reduce_1stage`: each GPU reads the other p - 1 GPUs' whole buffers and sums)
at 2 GPUs, and below 512 KiB at up to 4 GPUs or 256 KiB at up to 8; else two stages
(`cross_device_reduce_2stage`: a reduce-scatter then an all-gather, each GPU reading
(p - 1) / p of the message in each). A stage is one synchronisation step at the link's
latency (its barrier's flag writes and the peers' reads that follow). Larger messages and
other group sizes go to NCCL, priced as its ring. TensorRT-LLM (whose H100 rows fit the
serving model) runs the same one-shot / two-shot kernels below its workspace
(NVIDIA/TensorRT-LLM, cpp/tensorrt_llm/common/customAllReduceUtils.h:
`getMaxRequiredWorkspaceSize`, 8,000,000 bytes past 2 GPUs; `AllReduceStrategyType`
ONESHOT / TWOSHOT, NCCL above), with thresholds tuned per size; vLLM's are the ones priced.
TensorRT-LLM fuses the all-reduce with the residual add and the next RMS norm
(`AllReduceFusionOp::RESIDUAL_RMS_NORM`), so its launch is the norm kernel's, among
`gpu_kernels.KERNELS_PER_LAYER`. Training (Megatron-LM) all-reduces through NCCL: its
rings stay `ring_allreduce_s` (its tensor-parallel messages are tens of MB).

    ring      2 (p - 1) / p x bytes / bw + 2 (p - 1) x latency     (NCCL; p <= 1: 0)
    one-shot  (p - 1) x bytes / bw + latency
    two-shot  2 (p - 1) / p x bytes / bw + 2 x latency
    hop       bytes / tp / bw + latency                            (1/tp on each GPU's link)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wse_core.cost.assumptions import active, register_system_constant
from wse_core.cost.mechanisms import Constant
from wse_core.cost.reads import read

if TYPE_CHECKING:
    from wse_systems.gpu import GpuSpec

__all__ = [
    "NVLINK_LATENCY_S",
    "NVLINK_LATENCY",
    "NVLINK_LATENCY_KEY",
    "IB_LATENCY_S",
    "IB_LATENCY",
    "IB_LATENCY_KEY",
    "LATENCY_KEYS",
    "CUSTOM_ALLREDUCE_SIZES",
    "CUSTOM_ALLREDUCE_MAX_BYTES",
    "latency_s",
    "link",
    "ring_allreduce_s",
    "tp_allreduce_s",
    "tp_allreduce_algorithm",
    "stage_hop_s",
]

# the scale both latencies are assumed at (NCCL 2.x, src/graph/tuning.cc: hwLat, baseLat)
_NCCL = "no vendor figure; NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc, hwLat) "
NVLINK_LATENCY_S = 1.0e-6  # s a synchronisation step over NVLink: `NVLINK_LATENCY`
NVLINK_LATENCY = Constant(
    units="s/step",
    mechanism="one synchronisation step of a collective among a node's GPUs over NVLink / "
    "NVSwitch: a ring's step (NCCL), a stage of the custom one-/two-shot all-reduce, a send "
    "between pipeline stages inside a node",
    basis="assumed",
    source=_NCCL + "prices a ring step on NVLink at 0.47, 1.9 and 3.4 us for its LL, LL128 "
    "and Simple protocols, after a base of 3.6-10 us a collective; 1 us: between LL and "
    "LL128, the protocols of small messages. The TensorRT-LLM rows do not identify it "
    "(trtllm_h100.fit_over_latency)",
    sweep=(0.5e-6, 1.0e-6, 2.0e-6, 5.0e-6),
    limits=(0.0, 1e-3),
)
IB_LATENCY_S = 5.0e-6  # s a step or a send over InfiniBand between nodes: `IB_LATENCY`
IB_LATENCY = Constant(
    units="s/step",
    mechanism="one step of a collective, or a send between pipeline stages, between nodes "
    "over InfiniBand (a NIC a GPU)",
    basis="assumed",
    source=_NCCL + "prices a ring step over the network at 2.7, 4.0 and 9.6 us for LL, LL128 "
    "and Simple; 5 us: between LL128 and Simple. No calibration row crosses nodes",
    sweep=(2.5e-6, 5.0e-6, 10.0e-6),
    limits=(0.0, 1e-2),
)
# `--assume gpu.nvlink_latency_s=S`, `--assume gpu.ib_latency_s=S` (hunt jobs17 B)
NVLINK_LATENCY_KEY = "gpu.nvlink_latency_s"
IB_LATENCY_KEY = "gpu.ib_latency_s"
register_system_constant(NVLINK_LATENCY_KEY, NVLINK_LATENCY, value=NVLINK_LATENCY_S)
register_system_constant(IB_LATENCY_KEY, IB_LATENCY, value=IB_LATENCY_S)
LATENCY_KEYS = (NVLINK_LATENCY_KEY, IB_LATENCY_KEY)

# vLLM's custom all-reduce (module docstring): the group sizes it runs and its buffer, bytes
CUSTOM_ALLREDUCE_SIZES = (2, 4, 6, 8)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
CUSTOM_ALLREDUCE_MAX_BYTES = 8192 * 1024  # CustomAllreduce(max_size=8192 * 1024)
# one stage below these bytes (`CustomAllreduce::allreduce`): (largest group, bytes)
_ONE_STAGE_BELOW = ((4, 512 * 1024), (8, 256 * 1024))


def latency_s(gpu: GpuSpec, in_node: bool) -> float:
    """The latency of a step on `gpu`'s link, NVLink inside a node or InfiniBand past it:
    the `--assume`d value where one is given, else the GPU's own (noted as read; whether it
    moves a figure is its pricer's to note: module docstring)."""
    key = NVLINK_LATENCY_KEY if in_node else IB_LATENCY_KEY
    value = float(active().get(key, gpu.nvlink_latency_s if in_node else gpu.ib_latency_s))
    read(key, value, moves=False)
    return value


def link(gpu: GpuSpec, in_node: bool) -> tuple[float, float]:
    """(bytes/s, latency s) of a GPU's own link: NVLink inside a node, else InfiniBand
    (the latency in force: `latency_s`)."""
    bw = gpu.nvlink_bytes_per_s if in_node else gpu.ib_bytes_per_s
    return bw, latency_s(gpu, in_node)


def ring_allreduce_s(nbytes: float, p: int, bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce of `nbytes` over `p` GPUs: 2(p-1)/p bytes/bw + 2(p-1) latency."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) / p * nbytes / bytes_per_s + 2 * (p - 1) * latency_s


def tp_allreduce_algorithm(nbytes: float, p: int) -> str:
    """How a tensor-parallel group of `p` GPUs of a node all-reduces `nbytes` in a serving
    engine (module docstring): "one-shot", "two-shot", "ring" (NCCL), or "none" at p 1."""
    if p <= 1:
        return "none"
    if p not in CUSTOM_ALLREDUCE_SIZES or nbytes >= CUSTOM_ALLREDUCE_MAX_BYTES:
        return "ring"
    one = p == 2 or any(p <= most and nbytes < below for most, below in _ONE_STAGE_BELOW)
    return "one-shot" if one else "two-shot"


def tp_allreduce_s(nbytes: float, p: int, bytes_per_s: float, latency_s: float) -> float:
    """A tensor-parallel group's all-reduce of `nbytes` over `p` GPUs of one node as the
    serving engines run it (`tp_allreduce_algorithm`, module docstring): one-shot
    (p - 1) bytes / bw + 1 latency, two-shot 2 (p - 1) / p bytes / bw + 2 latencies, else
    NCCL's ring (`ring_allreduce_s`)."""
    how = tp_allreduce_algorithm(nbytes, p)
    if how == "one-shot":
        return (p - 1) * nbytes / bytes_per_s + latency_s
    if how == "two-shot":
        return 2 * (p - 1) / p * nbytes / bytes_per_s + 2 * latency_s
    return ring_allreduce_s(nbytes, p, bytes_per_s, latency_s)


def stage_hop_s(gpu: GpuSpec, nbytes: float, *, tp: int, in_node: bool) -> float:
    """One send of `nbytes` of activations (or their gradients) between pipeline stages,
    split over the tp ranks, 1/tp over each GPU's own link, plus its latency: NVLink where
    both stages sit in one node, else InfiniBand (Megatron's scatter-gather p2p; vLLM's
    `send_tensor_dict(..., all_gather_group=tp_group)`: each rank sends 1/tp, the receiver
    all-gathers over NVLink, not priced)."""
    bw, lat = link(gpu, in_node)
    return nbytes / tp / bw + lat
