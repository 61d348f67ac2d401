"""The GPU's kernels: how many a decoder's forward pass launches and what one costs beyond its
reads and products, the one count and the one constant both GPU step models price.

`wse_systems.serving.gpu_step` prices a serving forward with them ((K L + K0) kernel_s a
step) and re-exports them; `wse_systems.gpu.train_step` prices a training step's floor in
the same units (its passes over the layers and the optimizer's kernels: `gpu.train_floor`).
Split out of `gpu_step` at hunt 76, which imports `wse_systems.gpu`: the training step read
none of them, so one GPU step model had two prices. This module imports neither.

The kernel cost is an assumption: `--assume gpu.kernel_s=S` (`KERNEL_KEY`, registered with
`wse_core.cost.assumptions` here, once) moves every GPU figure of the command;
`kernel_s_in_force()` reads it.
"""

from __future__ import annotations

from wse_core.cost.assumptions import register_system_constant, system_constant
from wse_core.cost.mechanisms import Constant

__all__ = [
    "KERNELS_PER_LAYER",
    "KERNELS_PER_STEP",
    "KERNEL_S",
    "KERNEL",
    "KERNEL_KEY",
    "kernel_s_in_force",
]

# A forward's kernels, counted from a decoder layer as TensorRT-LLM fuses it: two norms (the
# residual add fused in), the QKV product, attention (RoPE and the KV-cache write fused in),
# the output product, gate/up (GPT-2: fc), the activation, down.
KERNELS_PER_LAYER = 8
KERNELS_PER_STEP = 4  # around the layers: the embedding lookup, final norm, head, sampling
KERNEL_S = 1.0e-6  # s a kernel costs beyond its reads and products: `KERNEL`
KERNEL = Constant(
    units="s/kernel",
    mechanism="a kernel's fixed cost in a GPU forward pass, beyond its reads and products "
    "(launch, grid ramp and tail, the gap to the next), under CUDA graphs as the TensorRT-LLM "
    "rows ran; times K L + K0 kernels a step",
    basis="assumed",
    source="no figure for H100 and TensorRT-LLM's kernels; CUDA.jl's 'Graphs' page "
    "(https://cuda.juliagpu.org/dev/usage/graphs/): 80 broadcast kernels in 260 us launched one "
    "by one and 70 us as one graph, 3.3 and 0.9 us a kernel, their small work included; a CPU "
    "launch takes about 4-6 us (https://susun-blog.com/blog/pegainfer-3-cuda-graph). 1 us: a "
    "graph's replay; 5 us: kernels launched one by one. The TensorRT-LLM rows do not identify "
    "it (trtllm_h100.fit_over_floor)",
    sweep=(0.5e-6, 1.0e-6, 2.0e-6, 5.0e-6),
    limits=(0.0, 1e-3),
)
# `--assume gpu.kernel_s=S`: the GPU's constant named as `calibration.FIELD` names the
# calibration's wafer's (hunt 68: the kernel cost, assumed and swept, was no --assume key)
KERNEL_KEY = "gpu.kernel_s"
register_system_constant(KERNEL_KEY, KERNEL, value=KERNEL_S)


def kernel_s_in_force() -> float:
    """`KERNEL_S`, or the value `--assume gpu.kernel_s=S` gives (the active `assume` block)."""
    return system_constant(KERNEL_KEY)
