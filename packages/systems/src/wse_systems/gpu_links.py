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

The tensor-parallel all-reduce (`tp_allreduce_s`), as vLLM runs it with torch symmetric
memory on, its default in v0.11.0 (`VLLM_ALLREDUCE_USE_SYMM_MEM=1`, vllm-project/vllm PR
#25070; off again for a while after PR #26925, October 2025) and in the current tree (2026;
the tables below are the same in both; review 82: the rule priced was vLLM <= 0.10's, the
custom kernel below 8 MiB and NCCL past it). `CudaCommunicator.all_reduce`
(vllm/distributed/device_communicators/cuda_communicator.py) tries, for a tensor-parallel
group of 2, 4, 6 or 8 GPUs of one fully NVLink-connected node (NVSwitch: DGX H100, A100):
1. vLLM's custom kernel (custom_all_reduce.py, `should_custom_ar`: bytes < its max size):
   `CUSTOM_ALLREDUCE_MAX_BYTES` (8 MiB, `max_size=8192 * 1024`), lowered where symmetric
   memory runs to all_reduce_utils.py's `CUSTOM_ALL_REDUCE_MAX_SIZES` for the GPU's compute
   capability (`CUSTOM_ALLREDUCE_SYMM_MAX_BYTES`; H100, 9.0: 64, 32 MiB, 512, 256 KiB at 2,
   4, 6, 8 GPUs, so 8, 8 MiB, 512, 256 KiB); one stage (csrc/custom_all_reduce.cuh,
   `CustomAllreduce::allreduce`, `cross_device_reduce_1stage`: each GPU reads the other
   p - 1 GPUs' whole buffers and sums) at 2 GPUs, and below 512 KiB at up to 4 or 256 KiB
   at up to 8; else two stages (`cross_device_reduce_2stage`: a reduce-scatter then an
   all-gather, each GPU reading (p - 1) / p of the message in each). At 8 H100s the kernel
   runs only below 256 KiB, always one stage.
2. torch symmetric memory (symm_mem.py, `SymmMemCommunicator.should_use_symm_mem`: bf16,
   bytes <= all_reduce_utils.py's `SYMM_MEM_ALL_REDUCE_MAX_SIZES`, `SYMM_MEM_MAX_BYTES`; H100:
   64, 32, 64, 64 MiB at 2, 4, 6, 8; `<=` since PR #42993, `<` before): PyTorch's
   `multimem_all_reduce_` at 4, 6 or 8 H100s (`_WORLD_SIZES_MULTIMEM["9.0"]`; NVSwitch
   multicast, pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu,
   `multimem_all_reduce_kernel`: each GPU reduces its 1/p of the message with
   `multimem.ld_reduce`, the switch reading it from all p GPUs, and stores the sum with
   `multimem.st` to all p; each GPU's link carries (p + 1) / p of the message each way,
   between an entry and an exit barrier) and `two_shot_all_reduce_` at 2
   (`two_shot_all_reduce_kernel_inplace`: each GPU reads its 1/p from the peers and writes
   the sum back to them, (p - 1) / p each way, two barriers). Every call copies the message
   into its buffer and the sum out (`SymmMemCommunicator.all_reduce`: two copies, each a
   read and a write of the message in HBM, at the HBM bandwidth), where the custom kernel
   reads its inputs in place inside CUDA graphs (registered buffers: decode steps). A GPU
   whose capability has no table (A100, 8.0) runs without it: the custom kernel to 8 MiB.
3. NCCL (pynccl), priced as its ring, past those and at other group sizes.
Every stage or barrier is one synchronisation step at the link's latency; every byte moves
at the link's bandwidth, one direction (NVSwitch's reduction rate for multimem is not
published: priced at the link's, as the other kernels are). Not priced: the custom kernel's
copy into its IPC buffer outside CUDA graphs (prefill-sized steps), the compile passes
of later releases' -O2 (FlashInfer's fused all-reduce + RMS norm, one-shot on H100 up to
0.5, 2, 32 MiB at 8, 4, 2 GPUs; sequence parallelism), NCCL's own NVLS algorithm, and
`VLLM_USE_NCCL_SYMM_MEM` (off by default). TensorRT-LLM (whose H100 rows fit the serving
model) runs one-shot / two-shot kernels below its workspace (NVIDIA/TensorRT-LLM,
cpp/tensorrt_llm/common/customAllReduceUtils.h: `getMaxRequiredWorkspaceSize`, 8,000,000
bytes past 2 GPUs; `AllReduceStrategyType` ONESHOT / TWOSHOT, NCCL above), with thresholds
tuned per size; vLLM's are the ones priced, fitted rows included. TensorRT-LLM fuses the
all-reduce with the residual add and the next RMS norm (`AllReduceFusionOp::
RESIDUAL_RMS_NORM`), so its launch is the norm kernel's, among
`gpu_kernels.KERNELS_PER_LAYER`. Training (Megatron-LM) all-reduces through NCCL: its rings
stay `ring_allreduce_s` (its tensor-parallel messages are tens of MB).

    ring           2 (p - 1) / p x bytes / bw + 2 (p - 1) x latency   (NCCL; p <= 1: 0)
    one-shot       (p - 1) x bytes / bw + latency
    two-shot       2 (p - 1) / p x bytes / bw + 2 x latency
    multimem       (p + 1) / p x bytes / bw + 2 x latency + 4 x bytes / HBM
    symm two-shot  (p - 1) / p x bytes / bw + 2 x latency + 4 x bytes / HBM
    hop            bytes / tp / bw + latency                          (1/tp on each GPU's link)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
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
    "CUSTOM_ALLREDUCE_SYMM_MAX_BYTES",
    "SYMM_MEM_MAX_BYTES",
    "SYMM_MEM_MULTIMEM_SIZES",
    "latency_s",
    "link",
    "ring_allreduce_s",
    "tp_allreduce_s",
    "tp_allreduce_algorithm",
    "tp_allreduce_rule",
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
_MIB = 1024 * 1024  # bytes
# where symmetric memory runs (a compute capability with a table), bytes a group size:
# vllm/distributed/device_communicators/all_reduce_utils.py, `CUSTOM_ALL_REDUCE_MAX_SIZES`
# (the custom kernel's cap, taken with its buffer: `min`) and `SYMM_MEM_ALL_REDUCE_MAX_SIZES`;
# symm_mem.py `_WORLD_SIZES_MULTIMEM` (multimem; two-shot at the other sizes). The same
# in vLLM v0.11.0 and the current tree (stored commits b250ac3d, 00d618aa; module docstring)
CUSTOM_ALLREDUCE_SYMM_MAX_BYTES = MappingProxyType(
    {"9.0": MappingProxyType({2: 64 * _MIB, 4: 32 * _MIB, 6: _MIB // 2, 8: _MIB // 4})}
)
SYMM_MEM_MAX_BYTES = MappingProxyType(
    {"9.0": MappingProxyType({2: 64 * _MIB, 4: 32 * _MIB, 6: 64 * _MIB, 8: 64 * _MIB})}
)
SYMM_MEM_MULTIMEM_SIZES = MappingProxyType({"9.0": (4, 6, 8)})
# messages through HBM a symmetric-memory all-reduce: copied in and out, each a read + a write
_SYMM_COPIES = 4


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


def tp_allreduce_algorithm(nbytes: float, p: int, capability: str) -> str:
    """How a tensor-parallel group of `p` GPUs of a node, of CUDA compute `capability`
    ("9.0": H100), all-reduces `nbytes` of bf16 activations in vLLM (module docstring):
    "one-shot" or "two-shot" (its custom kernel), "multimem" or "symm two-shot" (torch
    symmetric memory), "ring" (NCCL), or "none" at p 1."""
    if p <= 1:
        return "none"
    symm = SYMM_MEM_MAX_BYTES.get(capability, {}).get(p)
    custom_max = CUSTOM_ALLREDUCE_MAX_BYTES
    if symm is not None:  # symmetric memory runs: the custom kernel's cap is lowered
        custom_max = min(CUSTOM_ALLREDUCE_SYMM_MAX_BYTES[capability][p], custom_max)
    if p in CUSTOM_ALLREDUCE_SIZES and nbytes < custom_max:
        one = p == 2 or any(p <= most and nbytes < below for most, below in _ONE_STAGE_BELOW)
        return "one-shot" if one else "two-shot"
    if symm is not None and nbytes <= symm:
        return "multimem" if p in SYMM_MEM_MULTIMEM_SIZES[capability] else "symm two-shot"
    return "ring"


def _sizes(table: Mapping[int, int]) -> str:
    """ "8 MiB at 2 and 4, 512 KiB at 6, ...": a table's caps by group size, equal ones joined."""
    by: dict[int, list[str]] = {}
    for p, cap in table.items():
        by.setdefault(cap, []).append(str(p))
    shown = {cap: f"{cap // _MIB} MiB" if cap >= _MIB else f"{cap // 1024} KiB" for cap in by}
    return ", ".join(f"{shown[cap]} at {_listed(ps)}" for cap, ps in by.items())


def _listed(items: list[str]) -> str:
    """["2", "6", "8"] -> "2, 6 and 8"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def tp_allreduce_rule(gpu: GpuSpec) -> str:
    """The tensor-parallel all-reduce priced on `gpu`'s node, in words, with the vLLM
    release that runs it (`tp_allreduce_algorithm`, for a plan's assumptions)."""
    cap = gpu.compute_capability
    if cap not in SYMM_MEM_MAX_BYTES:
        return (
            "vLLM runs it (v0.11.0 and current; no symmetric memory on compute capability "
            f"{cap}): its custom one-/two-shot kernel below 8 MiB, NCCL's ring past it"
        )
    custom = {p: min(c, CUSTOM_ALLREDUCE_MAX_BYTES)
              for p, c in CUSTOM_ALLREDUCE_SYMM_MAX_BYTES[cap].items()}  # fmt: skip
    multimem = SYMM_MEM_MULTIMEM_SIZES[cap]
    two = [str(p) for p in SYMM_MEM_MAX_BYTES[cap] if p not in multimem]
    return (
        f"vLLM runs it (v0.11.0 and current, symmetric memory on by default) on {gpu.name}: its "
        f"custom one-/two-shot kernel below {_sizes(custom)} GPUs, then torch symmetric "
        f"memory (multimem at {_listed([str(p) for p in multimem])} GPUs, two-shot at "
        f"{_listed(two)}) up to {_sizes(SYMM_MEM_MAX_BYTES[cap])}, NCCL's ring past it"
    )


def tp_allreduce_s(gpu: GpuSpec, nbytes: float, p: int) -> float:
    """A tensor-parallel group's all-reduce of `nbytes` over `p` of `gpu`'s NVLink-connected
    GPUs as vLLM runs it (`tp_allreduce_algorithm`; the formulas in the module docstring), at
    the NVLink bandwidth and the latency in force (`link`)."""
    how = tp_allreduce_algorithm(nbytes, p, gpu.compute_capability)
    if how == "none":
        return 0.0
    bw, lat = link(gpu, True)
    copies = _SYMM_COPIES * nbytes / gpu.hbm_bytes_per_s
    if how == "one-shot":
        return (p - 1) * nbytes / bw + lat
    if how == "two-shot":
        return 2 * (p - 1) / p * nbytes / bw + 2 * lat
    if how == "multimem":
        return (p + 1) / p * nbytes / bw + 2 * lat + copies
    if how == "symm two-shot":
        return (p - 1) / p * nbytes / bw + 2 * lat + copies
    return ring_allreduce_s(nbytes, p, bw, lat)


def stage_hop_s(gpu: GpuSpec, nbytes: float, *, tp: int, in_node: bool) -> float:
    """One send of `nbytes` of activations (or their gradients) between pipeline stages,
    split over the tp ranks, 1/tp over each GPU's own link, plus its latency: NVLink where
    both stages sit in one node, else InfiniBand (Megatron's scatter-gather p2p; vLLM's
    `send_tensor_dict(..., all_gather_group=tp_group)`: each rank sends 1/tp, the receiver
    all-gathers over NVLink, not priced)."""
    bw, lat = link(gpu, in_node)
    return nbytes / tp / bw + lat
