"""NVIDIA's published TensorRT-LLM serving throughput on H100 (FP8), as data with its inputs.

Contract. `ROWS` holds every H100 row of the TensorRT-LLM v0.19.0 performance overview
(`docs/source/performance/perf-overview.md`, published as
`0.19.0/_sources/performance/perf-overview.md.txt` on the NVIDIA/TensorRT-LLM gh-pages branch,
commit 85a2a656c25e374a0d4cb9a7d0f15a3e82855937): model, GPUs, tensor and pipeline parallel
sizes, input and output lengths and "Total Output Throughput (tokens/sec)". The benchmark
(`trtllm-bench throughput`, PyTorch backend) feeds requests "at an infinite rate" with every
request exactly ISL prompt and OSL output tokens, on DGX H100 (H100 SXM 80GB), with ModelOpt
FP8 checkpoints (`nvidia/Llama-3.1-{8B,70B,405B}-Instruct-FP8`) and
`kv_cache_free_gpu_mem_fraction` 0.95 "in majority of cases". Blank cells of the table are
absent here. `SHAPES` are the three models' published shapes (Meta's model cards), counted by
`wse_systems`'s decoder formula. `fitted(row)`: whether a row may be fitted on
(input length <= output length, shared/REFERENCES.md); every other row is a check.
`predict(row, mfu=, hbm_fraction=, kernel_s=)` is `wse_systems.serving.gpus`' output tokens/s
for the row's layout at the most users it holds, in fp8; `fit()` the two fractions minimising
the squared log ratios over the fitted rows at the assumed kernel cost (`kernel_s` left out:
the one in force, `wse_systems.serving.gpu_step.kernel_s_in_force()`: `KERNEL_S`, what
`wse_systems.serving.gpu_step.FITTED_*` hold, unless `--assume gpu.kernel_s` moves it);
`fit_over_floor()` that fit at each value of the kernel cost's sweep, with the checks' rms
(the rows do not identify the kernel cost: the rms falls as it grows until the HBM share
reaches 1); `fit_over_latency()` the same over the NVLink latency's sweep
(`gpu.nvlink_latency_s`, `wse_systems.gpu_links`: the rms falls as it grows too, so it is
assumed, not fitted; hunt jobs17 B).
Notes: docs/references/trtllm-h100.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType

from wse_core.cost.assumptions import assume
from wse_core.cost.reads import recording

from wse_systems.gpu_links import NVLINK_LATENCY, NVLINK_LATENCY_KEY
from wse_systems.serving.gpu_step import KERNEL, kernel_s_in_force
from wse_systems.transformer import LLAMA31_8B, DecoderCounts

__all__ = ["SOURCE", "TrtllmRow", "SHAPES", "ROWS", "fitted", "predict", "fit", "fit_over_floor",
           "fit_over_latency"]  # fmt: skip

SOURCE = (
    "NVIDIA TensorRT-LLM v0.19.0 performance overview (docs/source/performance/"
    "perf-overview.md; gh-pages 0.19.0/_sources, commit 85a2a656), H100 SXM 80GB, FP8"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrtllmRow:
    """One published measurement: `gpus` = tp x pp H100s serving `model` (a `SHAPES` key)."""

    model: str
    tp: int
    pp: int
    input_tokens: int
    output_tokens: int
    output_tokens_per_s: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def _llama31(name: str, d: int, layers: int, heads: int, ff: int) -> DecoderCounts:
    return DecoderCounts(
        name=name, arch="llama", vocab_size=128256, d_model=d, n_layers=layers,
        n_heads=heads, n_kv_heads=8, d_ff=ff, max_seq_len=131072,
    )  # fmt: skip


SHAPES: Mapping[str, DecoderCounts] = MappingProxyType(
    {
        "llama3.1-8b": LLAMA31_8B,
        "llama3.1-70b": _llama31("llama3.1-70b", 8192, 80, 64, 28672),
        "llama3.1-405b": _llama31("llama3.1-405b", 16384, 126, 128, 53248),
    }
)

_LENGTHS = (
    (128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000),
    (1024, 2048), (2048, 128), (2048, 2048), (5000, 500), (20000, 2000),
)  # fmt: skip
# Output tokens/s per (input, output) row of the table, one column per tensor-parallel size
# (None: a blank cell). Copied from the source's "H100 80GB HBM3" columns.
_TABLE: dict[tuple[str, int], tuple[float | None, ...]] = {
    ("llama3.1-8b", 1): (
        27568.68, 22003.62, 13640.35, 17794.39, 15270.02, 13850.22,
        13374.15, 3495.05, 9653.67, 3371.16, 1340.92,
    ),
    ("llama3.1-70b", 1): (
        3191.27, 745.19, None, None, 734.67, 526.31, 525.43, 315.90, 357.98, 203.27, None,
    ),
    ("llama3.1-70b", 2): (
        6183.41, 5822.02, 3714.87, 4704.31, 4191.26, 3920.44,
        3896.14, 747.51, 2732.86, 866.77, 408.43,
    ),
    ("llama3.1-70b", 4): (
        10260.68, 11442.01, 8209.91, 10278.02, 7427.35, 7590.35,
        7557.32, 1240.12, 5640.31, 1571.92, 910.77,
    ),
    ("llama3.1-70b", 8): (
        14686.01, 17463.99, 12598.55, 14630.41, 11082.48, 11108.11,
        11028.32, 1840.12, 8772.88, 2399.78, 1568.84,
    ),
    ("llama3.1-405b", 8): (
        3732.40, 4572.23, 2911.42, 3661.85, 2963.36, 3253.17,
        3089.16, 448.89, 2139.94, 579.14, 370.26,
    ),
}  # fmt: skip

ROWS: tuple[TrtllmRow, ...] = tuple(
    TrtllmRow(
        model=model, tp=tp, pp=1, input_tokens=isl, output_tokens=osl, output_tokens_per_s=value
    )  # fmt: skip
    for (model, tp), column in _TABLE.items()
    for (isl, osl), value in zip(_LENGTHS, column, strict=True)
    if value is not None
)


def fitted(row: TrtllmRow) -> bool:
    """A row the GPU model may be fitted on: input length at most output length."""
    return row.input_tokens <= row.output_tokens


def predict(
    row: TrtllmRow, *, mfu: float, hbm_fraction: float, kernel_s: float | None = None
) -> float:
    """The GPU serving model's output tokens/s for `row`: its tp x pp layout as one replica in
    fp8, at the most users it holds decoding at once (the benchmark's "maximum load"),
    `kernel_s` a kernel (default: in force)."""
    from wse_systems.gpu import H100
    from wse_systems.serving.frontier import Workload
    from wse_systems.serving.gpu_step import GpuFractions, GpuLayout
    from wse_systems.serving.gpus import GpuServing

    work = Workload(prompt_tokens=row.input_tokens, output_tokens=row.output_tokens)
    serve = GpuServing(SHAPES[row.model], H100, num_gpus=row.gpus, workload=work,
                       precision="fp8",
                       fractions=GpuFractions(hbm_fraction, mfu, kernel_s))  # fmt: skip
    layout = GpuLayout(row.tp, row.pp)
    # the benchmark's queue is never empty: its steady batch is the users decoding at once
    # in a full system (hunt 69: the budget no longer caps users; past it prompts queue)
    users = min(serve.layouts[layout], layout.pp * serve.unqueued_users)
    return serve.layout_point(layout, users).aggregate_tokens_per_s


def _loss(x, rows, kernel_s: float | None = None) -> float:
    mfu, hbm = (float(v) for v in x)
    if not (0.01 <= mfu <= 1 and 0.01 <= hbm <= 1):
        return math.inf
    logs = [math.log(predict(r, mfu=mfu, hbm_fraction=hbm, kernel_s=kernel_s)
                     / r.output_tokens_per_s) for r in rows]  # fmt: skip
    return sum(v * v for v in logs)


def fit(kernel_s: float | None = None) -> tuple[float, float, float]:
    """(mfu, hbm_fraction, rms of log(model / published)) minimising the squared log ratios
    over the rows `fitted` admits at `kernel_s` a kernel (default: in force): a 0.05 grid
    over (0, 1]^2, then Nelder-Mead from its best."""
    from scipy.optimize import minimize

    kernel_s = kernel_s_in_force() if kernel_s is None else kernel_s
    rows = [r for r in ROWS if fitted(r)]
    grid = [0.05 * i for i in range(1, 21)]
    start = min(((m, h) for m in grid for h in grid), key=lambda x: _loss(x, rows, kernel_s))
    best = minimize(_loss, start, args=(rows, kernel_s), method="Nelder-Mead",
                    options={"xatol": 1e-4, "fatol": 1e-9})  # fmt: skip
    mfu, hbm = (float(v) for v in best.x)
    return mfu, hbm, math.sqrt(best.fun / len(rows))


def fit_over_floor(values: tuple[float, ...] = KERNEL.sweep) -> list[dict[str, float]]:
    """The fit at each `kernel_s` of `values` (default the assumed constant's sweep): the two
    fractions, the rms log ratio on the fitted rows and on the checks. What the assumed kernel
    cost moves, shown beside the fit (about 4 s a value)."""
    return [{"kernel_s": kernel_s, **_fit_and_checks(kernel_s)} for kernel_s in values]


def fit_over_latency(values: tuple[float, ...] = NVLINK_LATENCY.sweep) -> list[dict[str, float]]:
    """The fit at each NVLink latency of `values` (default the assumed constant's sweep,
    `gpu.nvlink_latency_s`), as `fit_over_floor` (the reads at the sweep's values are not
    recorded: a listing beside the run names the value in force), at the kernel cost in
    force."""
    kernel_s, out = kernel_s_in_force(), []
    for value in values:
        with assume(**{NVLINK_LATENCY_KEY: value}), recording(isolated=True):
            out.append({"nvlink_latency_s": value, **_fit_and_checks(kernel_s)})
    return out


def _fit_and_checks(kernel_s: float) -> dict[str, float]:
    """The fit at `kernel_s` and the rms log ratio of the checks at it."""
    checks = [r for r in ROWS if not fitted(r)]
    mfu, hbm, rms = fit(kernel_s)
    logs = [math.log(predict(r, mfu=mfu, hbm_fraction=hbm, kernel_s=kernel_s)
                     / r.output_tokens_per_s) for r in checks]  # fmt: skip
    return {"mfu": mfu, "hbm_fraction": hbm, "rms_fitted": rms,
            "rms_checks": math.sqrt(sum(v * v for v in logs) / len(logs))}  # fmt: skip
