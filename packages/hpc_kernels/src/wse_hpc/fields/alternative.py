"""The same field step on a GPU, time and energy beside the wafer's (`wse plan`'s figures).

Contract. `gpu_step(grid, prog, cells=, gpu=, repeats=)` prices the recorded program that
`wse_hpc.fields.perf.recorded_phases` prices for the wafer (`grid.traced_program`), on one
GPU (`wse_systems.gpu.GpuSpec`, the figures `wse plan` uses) as unfused kernels over `cells`
cells:

- every recorded instruction is one kernel over the cells: it reads its two operands and
  writes its result in HBM (4 B each, fp32; a fabric operand is a shifted read there), so
  `hbm_bytes = cells x sum(count x length x 12 B) / nz` (each `Op` runs over a PE's Z column
  of `nz` cells), at the GPU's peak HBM rate (`hbm_bytes_per_s`: a bound that favours the
  GPU: no kernel reaches it, and a fused kernel would move fewer bytes - both stated);
- every kernel pays `KERNEL_OVERHEAD_S` (launch and tail), every wafer-wide reduction one
  kernel more (a dot's second pass);
- scopes run `repeats[scope]` times (the solver's measured iterations), as on the wafer.

That is the program as written, unfused (`seconds`). Beside it, the best a fused GPU code
could do (`fused_seconds`): one kernel per pass (the step outside any scope, and each
iteration of each scope), each reading and writing every one of the `fields` arrays once
(8 B a cell each), plus one kernel per reduction. The truth for a tuned GPU code lies
between the two; the fused figure is the one that favours the GPU.

`energy_j(seconds, watts)` is time at the system's peak power: the wafer's system
(`wse_systems.economics.system_power_w`, e.g. 23 kW for a CS-2) and the GPU's share of its
node (`GpuSpec.power_w_per_gpu`, 10.2 kW / 8 for an H100 in a DGX), as `wse plan` counts them.

ASSUMED: a kernel's fixed cost, `KERNEL_OVERHEAD_S` = 3 us unless `--assume
gpu.launched_kernel_s=S` (`LAUNCHED_KERNEL_KEY`, registered with `wse_core.cost.assumptions`
here: hunt 69, it moved the GPU rows 193..606x and no row listed it, while `clock_hz`,
which does not move a GPU's time, was listed beside them), swept over
`KERNEL_OVERHEAD_SWEEP_S`; the state fits one GPU's memory (checked: `fields x cells x 4 B`
against `memory_bytes`). It is a key of its own, not the serving step's `gpu.kernel_s`
(`wse_systems.serving.gpu_step.KERNEL`, 1 us): that one is a kernel of a decode step
replayed as a CUDA graph, as the TensorRT-LLM rows ran; a field step's kernels are launched
one by one from the host, the solver reading each reduction's result before it goes on, the
3.3 us a kernel CUDA.jl measured for kernels launched one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from wse_core.cost.assumptions import register_system_constant, system_constant
from wse_core.cost.mechanisms import Constant
from wse_systems.economics import system_power_w
from wse_systems.gpu import GpuSpec

from wse_hpc.fields.grid import FieldGrid, Program
from wse_hpc.fields.perf import WORD_BYTES

__all__ = [
    "KERNEL_OVERHEAD_S",
    "KERNEL_OVERHEAD_SWEEP_S",
    "LAUNCHED_KERNEL",
    "LAUNCHED_KERNEL_KEY",
    "GpuStep",
    "gpu_step",
    "wafer_energy_j",
]

KERNEL_OVERHEAD_S = 3e-6  # ASSUMED (module docstring): launch + tail of one kernel, s
KERNEL_OVERHEAD_SWEEP_S = (1e-6, 3e-6, 10e-6)
LAUNCHED_KERNEL = Constant(
    units="s/kernel",
    mechanism="a GPU kernel's fixed cost launched one by one from the host (no CUDA graph): "
    "launch, grid ramp and tail; a field step's unfused kernels and each reduction's pass",
    basis="assumed",
    source="no figure for an H100 running a field solver's kernels; CUDA.jl's 'Graphs' page "
    "(https://cuda.juliagpu.org/dev/usage/graphs/): 80 small kernels launched one by one in "
    "260 us, 3.3 us a kernel; a CPU launch takes about 4-6 us "
    "(https://susun-blog.com/blog/pegainfer-3-cuda-graph). 1 us: as fast as a graph's "
    "replay; 10 us: a host synchronisation after each kernel",
    sweep=KERNEL_OVERHEAD_SWEEP_S,
    limits=(0.0, 1e-3),
)
LAUNCHED_KERNEL_KEY = "gpu.launched_kernel_s"
register_system_constant(LAUNCHED_KERNEL_KEY, LAUNCHED_KERNEL, value=KERNEL_OVERHEAD_S)
OPERANDS = 3  # two read, one written, per element of an instruction


@dataclasses.dataclass(frozen=True)
class GpuStep:
    """One step of a field program on one GPU: seconds, joules and what set them."""

    gpu: str
    cells: int
    hbm_bytes: float
    kernels: float
    seconds: float
    joules: float
    fused_seconds: float
    fused_joules: float


def gpu_step(
    grid: FieldGrid,
    prog: Program,
    *,
    cells: int,
    gpu: GpuSpec,
    fields: int,
    repeats: Mapping[str, float] | None = None,
    kernel_overhead_s: float | None = None,
) -> GpuStep:
    """`prog` (recorded on `grid`) run on one `gpu` over `cells` cells holding `fields` fp32
    arrays (module contract); `kernel_overhead_s` default: the value in force
    (`gpu.launched_kernel_s`, noted as read: `wse_core.cost.reads`)."""
    if cells < 1 or fields < 1:
        raise ValueError(f"cells and fields must be >= 1, got {cells}, {fields}")
    if fields * cells * WORD_BYTES > gpu.memory_bytes:
        need = fields * cells * WORD_BYTES / 2**30
        raise ValueError(
            f"{fields} fields of {cells:,} fp32 cells need {need:.1f} GiB, more than the "
            f"{gpu.name}'s {gpu.memory_bytes / 2**30:.0f} GiB"
        )
    if kernel_overhead_s is None:
        kernel_overhead_s = system_constant(LAUNCHED_KERNEL_KEY)
    reps = dict(repeats or {})

    def rep(scope: str) -> float:
        return 1.0 if scope == "" else reps.get(scope, 1.0)

    nz = grid.shape[2]
    per_pe = sum(rep(s) * op.count * op.length * OPERANDS * WORD_BYTES for s, op in prog.ops)
    hbm = cells * per_pe / nz  # a PE's Z column holds nz cells
    kernels = sum(rep(s) * op.count for s, op in prog.ops) + sum(rep(s) for s, _ in prog.reductions)
    seconds = hbm / gpu.hbm_bytes_per_s + kernels * kernel_overhead_s
    scopes = {s for s, _ in prog.ops} - {""}
    passes = 1.0 + sum(rep(s) for s in scopes)
    fused = cells * fields * 2 * WORD_BYTES * passes / gpu.hbm_bytes_per_s
    fused += (passes + sum(rep(s) for s, _ in prog.reductions)) * kernel_overhead_s
    watts = gpu.power_w_per_gpu()[0]
    return GpuStep(gpu.name, cells, hbm, kernels, seconds, seconds * watts, fused, fused * watts)


def wafer_energy_j(spec, seconds: float) -> float:
    """Joules of the wafer's system busy `seconds` at its peak power."""
    return seconds * system_power_w(spec)[0]
