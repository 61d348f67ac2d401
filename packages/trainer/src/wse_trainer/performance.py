"""What one weight-streaming training step takes on `num_csx` wafers, priced from its placement.

Contract. `predict_step(model, spec, num_csx=, micro_batch=, seq_len=, plan=)` returns a
`wse_core.report.RunReport` (units "step", `systems=num_csx`) whose phases are counted from
the trainer's own memory plan (`wse_trainer.plan.memory_plan`; `plan.streaming` is the
`ActivationPlan` the `StreamedTrainer` runs), per instruction, on the busiest PE:

- **Placement of a layer and precision**: `wse_trainer.placement` (`place_step`: each
  layer on the whole wafer, tokens through its products in passes; `gemm_work`: one
  product's work there), whose names this module re-exports.
- **Backward** = the transposed product (dX) and the weight-gradient product (dW), each
  priced like the forward one; the elementwise work and the attention twice the forward's.
- **Streams.** Weights flow MemoryX -> SwarmX -> every wafer at min(memoryx, swarmx)
  bytes/s; gradients flow back, sum-reduced by SwarmX, at the same rate; a SwarmX tree of
  ceil(log2 num_csx) levels adds `system_latency_s` per level. MemoryX applies each group's
  update as its gradient arrives and keeps pace with that stream.
- **Overlap, as Cerebras describes weight streaming**: forward,
  `overlap(weights_in(l + 1), forward(l))`; backward,
  `overlap(weights_in(l - 1), backward(l), gradients_out(l + 1), memoryx_update(l + 1))`;
  the first weights in and the last gradients out and update are exposed. Recomputed layers
  stream their weights again, as the emulator does.
- **Resident** placement (`placement="resident"`, only when `plan.resident`): no weight
  streams; with num_csx > 1 the gradients are sum-reduced through SwarmX and come back,
  overlapped with the backward; the optimizer runs on the wafer (fp32 Adam) after it.

`PerfModel` applies the one calibration of `wse_core.calibration`; nothing here is fitted.
`step_trace(spec, report)` is the step per PE (`wse train --validate_only --trace FILE`):
every PE runs every layer's block and holds the plan's allocations.
`no_stall_batch(...)` is the smallest per-system batch whose streams hide under compute.

The GPU side of every comparison is `wse_core.gpu` (one GPU model for the stack).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import Op, Phase, Phases, RunReport, WaferSpec, Work, WseError, overlap, serial
from wse_core.decoder_cost import EXP_FMACS
from wse_core.sram import Region
from wse_core.trace import PeTrace, trace_uniform

from wse_trainer.placement import (
    PRECISIONS,
    Numerics,
    StepPlacement,
    StepWorkload,
    gemm_work,
    place_step,
    precision_of,
)
from wse_trainer.plan import MemoryPlan, memory_plan

__all__ = [
    "PRECISIONS",
    "Numerics",
    "StepPlacement",
    "StepWorkload",
    "precision_of",
    "place_step",
    "gemm_work",
    "layer_phases",
    "step_phases",
    "predict_step",
    "no_stall_batch",
    "step_trace",
]

ADAM_FP32_OPS = (("fmac", 4), ("mul", 1), ("sqrt", 1), ("div", 1))  # per parameter, on a PE


def _products(model: Any) -> tuple[tuple[str, int, int], ...]:
    """A layer's matrix products: (name, n_in, n_out)."""
    d, hd = model.d_model, model.hd
    q_kv = (model.n_heads + 2 * model.n_kv_heads) * hd
    up = (2 if model.arch == "llama" else 1) * model.d_ff
    return (
        ("qkv", d, q_kv),
        ("o_proj", model.n_heads * hd, d),
        ("mlp_up", d, up),
        ("mlp_down", model.d_ff, d),
    )


def _attention_work(model: Any, pl: StepPlacement) -> Work:
    """Causal attention of the pass's sequences spread over every PE: q.k and p.v FMACs of
    head_dim per score (mean context (s + 1) / 2), softmax in the partial-sum dtype."""
    p, num, b, s = pl.spec.num_pes, pl.num, pl.micro_batch, pl.seq_len
    pairs = s * (s + 1) / 2 if pl.attention_pairs_per_row is None else pl.attention_pairs_per_row
    scores = b * pairs * model.n_heads
    e = num.acc_dtype
    return Work(
        ops=(
            Op(num.kind, num.dtype, model.hd, count=2 * scores / p),
            Op("fmac", e, scores / p, count=EXP_FMACS),
            Op("max", e, scores / p),
            Op("sub", e, scores / p),
            Op("add", e, scores / p),
            Op("div", e, b * s * model.n_heads * model.hd / p),
        ),
        sram_read_bytes=2 * scores * model.hd * num.operand_bytes / p,
    )


def _pointwise_work(model: Any, pl: StepPlacement) -> Work:
    """Two norms, the MLP activation (a polynomial exp, gated: one more mul) and two
    residual adds, per PE."""
    p, e, t = pl.spec.num_pes, pl.num.acc_dtype, pl.tokens
    d, ff = t * model.d_model / p, t * model.d_ff / p
    gated = (Op("mul", e, ff),) if model.arch == "llama" else ()
    return Work(
        ops=(
            Op("fmac", e, d, count=2),
            Op("mul", e, d, count=2),
            Op("fmac", e, ff, count=EXP_FMACS + 2),
            *gated,
            Op("add", e, d, count=2),
        )
    )


def _sparse_density(pl: StepPlacement, name: str) -> dict[str, float]:
    """Products whose sparse operand is the MLP hidden activation h (or its gradient, zero
    where h is, through the ReLU's derivative): the down projection forward (h in) and its
    weight gradient (h^T dY), the up projection's input gradient (dH in) and weight gradient
    (X^T dH). The down projection's input gradient (dY W^T) is dense."""
    if not pl.mlp_zero_fraction or not name.startswith("mlp_"):
        return {}
    dens = 1.0 - pl.mlp_zero_fraction
    return {"mlp_down": dens, "mlp_down_dw": dens, "mlp_up_dx": dens, "mlp_up_dw": dens}


def layer_phases(model: Any, pl: StepPlacement, *, backward: bool = False) -> Phases:
    """One layer's forward (or backward) on the whole wafer, product by product."""
    parts: list[Phase] = []
    for name, n_in, n_out in _products(model):
        sparse = _sparse_density(pl, name)
        if backward:
            dx = sparse.get(f"{name}_dx", 1.0)
            parts.append(Phase(f"{name}_dx", gemm_work(pl, n_out, n_in, density=dx)))
            dw = sparse.get(f"{name}_dw", 1.0)
            parts.append(Phase(f"{name}_dw", gemm_work(pl, n_in, n_out, density=dw)))
        else:
            parts.append(Phase(name, gemm_work(pl, n_in, n_out, density=sparse.get(name, 1.0))))
    k = 2.0 if backward else 1.0
    parts.append(Phase("attention", _attention_work(model, pl), repeat=k))
    parts.append(Phase("pointwise", _pointwise_work(model, pl), repeat=k))
    return serial(*parts, name="layer_backward" if backward else "layer_forward")


def _head_phases(model: Any, pl: StepPlacement) -> Phases:
    """The final norm, logits, softmax cross-entropy and their gradients."""
    p, e, t, v, d = pl.spec.num_pes, pl.num.acc_dtype, pl.tokens, model.vocab_size, model.d_model
    logits = t * v / p
    softmax = Work(
        ops=(
            Op("fmac", e, logits, count=EXP_FMACS),
            Op("max", e, logits),
            Op("sub", e, logits, count=2),  # shift; the gradient p - onehot
            Op("add", e, logits),
            Op("fmac", e, t * d / p, count=2),  # final norm
        )
    )
    return serial(
        Phase("logits", gemm_work(pl, d, v)),
        Phase("softmax_loss", softmax),
        Phase("logits_dx", gemm_work(pl, v, d)),
        Phase("logits_dw", gemm_work(pl, d, v)),
        name="head",
    )


def _embed_work(model: Any, pl: StepPlacement, *, backward: bool) -> Work:
    """The embedding's gather (moves) or its gradient's scatter-add."""
    n = pl.tokens * model.d_model / pl.spec.num_pes
    op = Op("add", pl.num.acc_dtype, n) if backward else Op("move", pl.num.dtype, n)
    return Work(ops=(op,))


def _groups(model: Any) -> dict[str, int]:
    """Parameters each stream carries: the embedding, one layer, the head (final norm and,
    untied, the output matrix; tied, it reads the embedding too)."""
    embed, layer = int(model.embed_params()), int(model.layer_params())
    final = int(model.num_params()) - embed - int(model.n_layers) * layer
    head_in = final + (embed if model.tie_embeddings else 0)
    return {"embed": embed, "layer": layer, "head": head_in, "head_grad": final}


def _tree_levels(num_csx: int) -> int:
    return math.ceil(math.log2(num_csx)) if num_csx > 1 else 0


def _stream(pl: StepPlacement, n_params: int) -> Work:
    """n_params in the compute dtype through MemoryX / SwarmX to (or from) every wafer.

    Work prices host I/O at the spec's host rate; the bytes are scaled so that the time is
    bytes / min(memoryx, swarmx) (equal on every preset: the scale is then 1)."""
    s = pl.spec
    rate = min(s.memoryx_bytes_per_s, s.swarmx_bytes_per_s)
    nbytes = n_params * pl.num.operand_bytes
    return Work(
        host_io_bytes=nbytes * s.host_io_bytes_per_s / rate,
        system_hops=_tree_levels(pl.num_csx),
    )


def _wafer_update(pl: StepPlacement, n_params: int) -> Work:
    """fp32 Adam on the wafer (resident placement): each PE updates its share."""
    n = n_params / pl.spec.num_pes
    return Work(ops=tuple(Op(k, "fp32", n, count=c) for k, c in ADAM_FP32_OPS))


@dataclasses.dataclass(frozen=True)
class _Streams:
    """The off-wafer phases of a placement (all empty: the compute-only step)."""

    pl: StepPlacement
    on: bool = True

    def weights_in(self, n: int) -> Phase:
        live = self.on and not self.pl.resident
        return Phase("weights_in", _stream(self.pl, n) if live else Work())

    def gradients_out(self, n: int) -> Phase:
        live = self.on and (not self.pl.resident or self.pl.num_csx > 1)
        return Phase("gradients_out", _stream(self.pl, n) if live else Work())

    def returned(self, n: int) -> Phase:
        """Streamed: the next layer's weights; resident: the reduced gradient coming back."""
        if self.pl.resident:
            live = self.on and self.pl.num_csx > 1
            return Phase("gradients_in", _stream(self.pl, n) if live else Work())
        return self.weights_in(n)

    def update(self, n: int) -> Phase:
        live = self.on and not self.pl.resident
        return Phase("memoryx_update", _stream(self.pl, n) if live else Work())


def _runs(nodes: list[Phase | Phases]) -> list[Phase | Phases]:
    """Equal neighbours folded into one node with a repeat."""
    out: list[Phase | Phases] = []
    for node in nodes:
        if out and out[-1] == dataclasses.replace(node, repeat=out[-1].repeat):
            out[-1] = dataclasses.replace(out[-1], repeat=out[-1].repeat + node.repeat)
        else:
            out.append(node)
    return out


def step_phases(model: Any, pl: StepPlacement, *, streams: bool = True) -> Phases:
    """One training step of one replica as the overlap rules of the module contract say."""
    g, st, L = _groups(model), _Streams(pl, streams), int(model.n_layers)
    fwd, bwd = layer_phases(model, pl), layer_phases(model, pl, backward=True)
    embed_f = Phase("embed_forward", _embed_work(model, pl, backward=False))
    embed_b = Phase("embed_backward", _embed_work(model, pl, backward=True))
    nodes: list[Phase | Phases] = [
        serial(st.weights_in(g["embed"]), name="first_weights_in"),
        overlap(st.weights_in(g["layer"]), embed_f, name="embedding"),
    ]
    for i in range(L):
        nxt = g["layer"] if i + 1 < L else g["head"]
        nodes.append(overlap(st.weights_in(nxt), fwd, name="forward"))
    nodes.append(overlap(st.weights_in(g["layer"]), _head_phases(model, pl), name="head"))
    kept = math.ceil(L / pl.stride)
    if L > kept:
        again = overlap(st.weights_in(g["layer"]), fwd, name="recompute", repeat=L - kept)
        nodes.append(again)
    for i in reversed(range(L)):
        nxt, done = (
            (g["layer"] if i else g["embed"]),
            (g["head_grad"] if i == L - 1 else g["layer"]),
        )
        parts = (st.returned(nxt), bwd, st.gradients_out(done), st.update(done))
        nodes.append(overlap(*parts, name="backward"))
    tail = (st.gradients_out(g["layer"]), st.update(g["layer"]))
    nodes.append(overlap(embed_b, *tail, name="embedding_backward"))
    nodes.append(serial(st.gradients_out(g["embed"]), st.update(g["embed"]), name="last_update"))
    if pl.resident:
        n = int(model.num_params())
        nodes.append(serial(Phase("adam_on_wafer", _wafer_update(pl, n)), name="optimizer"))
    return serial(*_runs(nodes), name="train_step")


ASSUMPTIONS = {
    "layer placement": "each layer on the whole wafer; its weights spread over every PE "
    "(a ceil(n_out/rows) x ceil(n_in/cols) block per product), inputs multicast down the "
    "columns, partial sums added along the rows (decoder_cost.matvec_work's layout)",
    "token passes": "activations resident; tokens flow through a product in passes sized by "
    "the SRAM the plan leaves free plus its working set; one FMAC per held weight per pass",
    "attention": "q.k and p.v over the mean causal context (s + 1) / 2 spread over every PE; "
    "its K/V exchange is not counted (assumed hidden under the FMACs)",
    "backward": "dX and dW products priced like the forward one; attention and pointwise "
    "work twice the forward's",
    "streams": "weights in and gradients out in the compute dtype at min(memoryx, swarmx) "
    "bytes/s; SwarmX a tree of ceil(log2 num_csx) levels, system_latency_s each",
    "weight-streaming overlap": "next layer's weights prefetched during this layer's "
    "compute; gradients out and the MemoryX update overlap the previous layer's backward",
    "MemoryX update": "applied per group as its gradient arrives, keeping pace with the stream",
    "exp": f"{EXP_FMACS:g} FMACs per element (wse_core.decoder_cost)",
    "zero skipping": "with mlp_zero_fraction s, an FMAC fires only on a nonzero operand: the "
    "down projection (forward, dW) and the up projection (dX, dW) run (1 - s) of their "
    "FMACs; zeros still cross the fabric",
}


def predict_step(
    model: Any,
    spec: WaferSpec,
    *,
    num_csx: int,
    micro_batch: int,
    seq_len: int,
    plan: MemoryPlan | None = None,
    placement: str = "streamed",
    precision: str | None = None,
    stride: int = 0,
    mlp_zero_fraction: float = 0.0,
    attention_pairs_per_row: float | None = None,
) -> RunReport:
    """One training step of `num_csx` wafers, each with `micro_batch` sequences of `seq_len`
    tokens, placed as `plan` says (default: `memory_plan(model, spec, micro_batch, seq_len,
    stride=stride)`, the plan `wse train` builds). `extra`: tokens_per_s (all systems),
    stall_fraction (the share of the step the streams add), placement, precision, stride."""
    if plan is None:
        plan = memory_plan(model, spec, micro_batch, seq_len, stride=stride)
    work = StepWorkload(
        micro_batch=micro_batch,
        seq_len=seq_len,
        mlp_zero_fraction=mlp_zero_fraction,
        attention_pairs_per_row=attention_pairs_per_row,
    )
    pl = place_step(
        model, spec, plan, work, num_csx=num_csx, placement=placement, precision=precision
    )
    report = RunReport.build(
        "train_step",
        spec,
        step_phases(model, pl),
        sram=plan.streaming.sram if plan.streaming is not None else {},
        assumptions=ASSUMPTIONS,
        units="step",
        systems=num_csx,
    )
    compute_s = RunReport.build("compute", spec, step_phases(model, pl, streams=False)).predicted_s
    step_s = report.predicted_s
    report.extra.update(
        tokens_per_s=num_csx * pl.tokens / step_s,
        compute_s=compute_s,
        stall_fraction=1.0 - compute_s / step_s if step_s else 0.0,
        placement=placement,
        precision=pl.num.precision,
        stride=pl.stride,
        micro_batch=micro_batch,
        seq_len=seq_len,
        mlp_zero_fraction=mlp_zero_fraction,
    )
    return report


def no_stall_batch(
    model: Any, spec: WaferSpec, *, num_csx: int, seq_len: int, stall: float = 0.01
) -> int | None:
    """Smallest per-system batch whose streams add at most `stall` of the step (None when
    no batch that the SRAM plan can place gets there)."""

    def ok(b: int) -> bool | None:
        try:
            r = predict_step(model, spec, num_csx=num_csx, micro_batch=b, seq_len=seq_len)
        except WseError:
            return None
        return r.extra["stall_fraction"] <= stall

    hi = 1
    while (got := ok(hi)) is False:
        hi *= 2
    if got is None:
        return None
    lo = hi // 2  # ok(lo) is False (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def step_trace(spec: WaferSpec, report: RunReport) -> PeTrace:
    """The per-PE trace of a `predict_step` report: each layer computes on the whole wafer
    (every PE its block of every product), so every PE does the busiest PE's work of every
    phase and holds each of the memory plan's allocations (`report.sram`)."""
    rows, cols = spec.pe_rows, spec.pe_cols
    region = Region(f"every layer's block on every PE ({rows} x {cols})", 0, 0, rows, cols)
    return trace_uniform(spec, report, region=region)
