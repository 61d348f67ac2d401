"""The one pricer of a decode token and of a prompt block on a pipeline plan: a plan's
elements in order (the regions: layer stages and the head, and the passes between wafers),
each priced once by `wse_core.PerfModel` (the one calibration) from
`wse_systems.decoder.decode_phases`, split into streaming work and latency.

Contract. `price_pipeline(config, plan, kv_tokens=)` is a `Pipeline`. A block of k tokens of
one user (k = 1: a decode token) costs each element k times its streaming work (instructions,
SRAM, link words, off-wafer bytes) plus its latency (hops, fixed cycles, system passes)
once: `Pipeline.occupancy_s(k)`, the seconds each element is held (a pass between wafers
only while its bytes stream; its latency overlaps the next item). One token through every
element is T1 (`token_s`, the batch-1 prediction); n tokens in blocks of k pipeline through
the elements: the first block through every element, the rest one bottleneck time apart
(`blocks_s`); `pass_s` takes the block size that finishes soonest. Blocks are at most
`max_block_tokens(plan)`: 1 + the extra tokens' activations the regions' free SRAM holds.
Under the plan's gemv "meshgemv" (WaferLLM's programs) each matrix product of a block of
k > 1 tokens runs the cheaper of its two programs, as a runtime picks the faster per block
(WaferLLM runs its prefill as MeshGEMM where it wins): k MeshGEMVs one after another (the
one-token product's streaming work k times, its latency once, as every element) or one
MeshGEMM of the k tokens (`wse_systems.meshgemm`, its whole time: `decode_phases(...,
block_tokens=k)`), the MeshGEMM only where its buffers fit the element's region beside what
the region holds (`meshgemm_max_tokens`: `Pipeline.gemm_tokens`, per element; k MeshGEMVs
need no buffer beyond the block's activations). Hunt 68: every k > 1 was the MeshGEMM (gpt2
124M: a 2-token block held the head 1,858 us, a token the busiest region 5.67 us), so prompts
ran a token at a time and the faster decode program served less under load. A decode token
(k = 1) is the MeshGEMV's. A prompt needs the logits of its last token only (the first token's;
vLLM's `logits_indices`, `wse_systems.serving.gpu_step`): the head's product, the argmax and
the token's trip out (`Pipeline.logits_parts`, of the per-token element) run once a prompt, on
one token, in its last block; its other work (each prompt token's embedding row to the first
stage) every token (`prompt_occupancy_s`, `prompt_blocks_s`, `logits_s`), as the engine's
prompt pass runs it (`wse_inference.decoding.prefill`: the head on the last position alone,
the chunks before it without). Session 80: every prompt token's head was priced, as that
pass had unembedded every position (hunt 79's head once on the wafer was reverted for it);
prompt logprobs, which need every row (the engine computes them for such a request only), are
priced on neither system.
`wse_systems.serving.wafer` builds users, requests and their scheduling on these.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from wse_core.cost.perf import PerfModel, Phase, Phases, Work

from wse_systems import attention, decoder
from wse_systems.decoder import PER_TOKEN, decode_phases
from wse_systems.meshgemm import is_meshgemm, meshgemm_max_tokens
from wse_systems.pipeline import PipelinePlan
from wse_systems.serving.memo import Memo, frozen
from wse_systems.transformer import layer_products

__all__ = ["MAX_BLOCK_TOKENS", "Pipeline", "price_pipeline", "priced_by", "max_block_tokens",
           "block_caps", "pricers"]  # fmt: skip

MAX_BLOCK_TOKENS = 1 << 20  # the largest prompt block considered (tiny models fit millions)
_LATENCY_FIELDS = ("latency_hops", "fixed_cycles", "system_hops")
_LAYERS = Memo(512)  # layer trees by region shape (`_layer`)


@dataclasses.dataclass(frozen=True)
class _Priced:
    """A phase tree priced once: each leaf's streaming and latency seconds (per token)."""

    mode: str  # "leaf", "serial", "overlap" or "product" (a MeshGEMV, or a MeshGEMM per block)
    repeat: float
    stream_s: float = 0.0
    latency_s: float = 0.0
    children: tuple[_Priced, ...] = ()
    block_s: Callable[[int], float] | None = None  # "product": its MeshGEMM of a k > 1 block
    # (tokens, latency, MeshGEMM fits) -> seconds: a node shared by equal layers is summed
    # once (hunt 63)
    memo: dict[tuple[int, bool, bool], float] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    def seconds(self, tokens: int, *, latency: bool = True, gemm: bool = False) -> float:
        """A block of `tokens` tokens: streaming work `tokens` times, latency once (a
        "product" node: the cheaper of that and, where the block's MeshGEMMs fit (`gemm`),
        its MeshGEMM whole)."""
        key = (tokens, latency, gemm and tokens > 1)
        if key not in self.memo:
            self.memo[key] = self._seconds(*key)
        return self.memo[key]

    def _seconds(self, tokens: int, latency: bool, gemm: bool) -> float:
        if self.mode == "product":
            # k MeshGEMVs, one after another: the one-token product streamed k times
            gemvs = self.children[0].seconds(tokens, latency=latency)
            return min(gemvs, self.block_s(tokens)) if gemm and self.block_s else gemvs
        if self.mode == "leaf":
            inner = tokens * self.stream_s + (self.latency_s if latency else 0.0)
        else:
            kids = [c.seconds(tokens, latency=latency, gemm=gemm) for c in self.children]
            inner = sum(kids) if self.mode == "serial" else max(kids, default=0.0)
        return self.repeat * inner


_WORK_FIELDS = tuple(f.name for f in dataclasses.fields(Work))  # fields() per leaf was slow


def _fingerprint(work: Work) -> tuple:
    values = (getattr(work, f) for f in _WORK_FIELDS)
    return tuple(tuple(sorted(v.items())) if isinstance(v, Mapping) else v for v in values)


def _price(model: PerfModel, part: Phase | Phases, cache: dict, block=None) -> _Priced:
    """`part` priced per token; `block(k)`: the same node of the k-token block's tree (None
    when no product changes program with k). A node met again (`decode_phases(...,
    shared_layers=True)`: one layer tree for the stages of a region shape) is priced once:
    `cache` holds it by identity, the trees staying alive for the call (hunt 63)."""
    tree = isinstance(part, Phases) and block is not None  # a leaf never reads `block`
    node = ("node", id(part), id(block(2)) if tree else None)
    if node not in cache:
        cache[node] = _price_node(model, part, cache, block)
    return cache[node]


def _price_node(model: PerfModel, part: Phase | Phases, cache: dict, block=None) -> _Priced:
    if isinstance(part, Phases):
        if block is not None and is_meshgemm(block(2)):
            memo: dict[int, float] = {}

            def gemm_s(k: int) -> float:
                if k not in memo:
                    memo[k] = model.seconds(block(k))
                return memo[k]

            return _Priced("product", 1.0, children=(_price(model, part, cache),), block_s=gemm_s)
        kids = tuple(
            _price(model, p, cache, None if block is None else _child(block, i))
            for i, p in enumerate(part.parts)
        )
        return _Priced(part.mode, part.repeat, children=kids)
    key = _fingerprint(part.work)
    if key not in cache:
        w = part.work
        stream = dataclasses.replace(w, latency_hops=0.0, fixed_cycles=0.0, system_hops=0.0)
        latency = Work(**{f: getattr(w, f) for f in _LATENCY_FIELDS})
        cache[key] = (model.cost(stream).seconds, model.cost(latency).seconds)
    stream_s, latency_s = cache[key]
    return _Priced("leaf", part.repeat, stream_s, latency_s)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """One plan's elements in order: (name, is a region, priced tree); see the module."""

    elements: tuple[tuple[str, bool, _Priced], ...]
    max_block_tokens: int  # the largest prompt block whose activations fit every region
    # per element, the parts of its tree a prompt runs once, on its last token (the per-token
    # element's head product, argmax and trip out: `logits_parts`)
    logits_parts: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # per element (meshgemv): the largest block whose MeshGEMMs fit its region (none: 0)
    gemm_tokens: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # what a block of k tokens holds and the passes priced so far, by their arguments (hunt
    # 72: a load's speculative placements priced every block size; not copied by `replace`,
    # whose caps change them)
    _memo: dict = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)

    def _held_s(self, name: str, priced: _Priced, tokens: int, latency: bool = True) -> float:
        fits = tokens <= self.gemm_tokens.get(name, 0)
        return priced.seconds(tokens, latency=latency, gemm=fits)

    def _prompt_held_s(self, name: str, priced: _Priced, tokens: int) -> float:
        """A prompt block's hold of an element, less what a prompt runs once (`logits_s`)."""
        once = self.logits_parts.get(name)
        if not once:
            return self._held_s(name, priced, tokens)
        fits = tokens <= self.gemm_tokens.get(name, 0)
        kids = enumerate(priced.children)
        return priced.repeat * sum(
            c.seconds(tokens, gemm=fits) for i, c in kids if i not in once
        )  # a serial node (`decoder._per_token`)

    def logits_s(self) -> dict[str, float]:
        """Seconds each element is held by what a prompt runs once, on its last token: the
        head's product, the argmax and the token's trip out (`logits_parts`)."""
        named = {n: p for n, _, p in self.elements}
        return {n: named[n].repeat * sum(named[n].children[i].seconds(1) for i in idx)
                for n, idx in self.logits_parts.items()}  # fmt: skip

    def prompt_occupancy_s(self, tokens: int) -> dict[str, float]:
        """Seconds each element is held by a prompt block of `tokens` tokens, the work a
        prompt runs once left out (`logits_s`: the last block's, beside)."""
        key = ("prompt held", tokens)
        if key not in self._memo:
            self._memo[key] = {
                name: self._prompt_held_s(name, p, tokens) if region else
                self._held_s(name, p, tokens, latency=False) for name, region, p in self.elements
            }  # fmt: skip
        return dict(self._memo[key])

    def prompt_blocks_s(self, n_tokens: int, block: int) -> float:
        """Seconds of a prompt of `n_tokens` in blocks of `block` (at most `n_tokens`): the
        first block through every element, the rest one bottleneck time apart (`blocks_s`),
        and the last block's logits (`logits_s`)."""
        k = min(block, n_tokens)
        if ("prompt fill", k) not in self._memo:
            self._memo["prompt fill", k] = sum(
                self._prompt_held_s(name, p, k) for name, _, p in self.elements
            )  # fmt: skip
        occ = self.prompt_occupancy_s(k)
        return (self._memo["prompt fill", k] + (math.ceil(n_tokens / k) - 1) * max(occ.values())
                + sum(self.logits_s().values()))  # fmt: skip

    @property
    def token_s(self) -> float:
        """T1: one token through every element (the batch-1 seconds per token)."""
        return sum(p.seconds(1) for _, _, p in self.elements)

    def token_parts_s(self) -> dict[str, float]:
        """T1 in three parts (seconds): the regions' streaming work, the regions' latency
        (hops, fixed cycles) and the passes between wafers (hunt 66: more wafers per
        replica ran slower and the output did not say why)."""
        regions = [p for _, region, p in self.elements if region]
        work = sum(p.seconds(1, latency=False) for p in regions)
        between = sum(p.seconds(1) for _, region, p in self.elements if not region)
        return {"regions_work_s": work, "regions_latency_s": sum(p.seconds(1) for p in regions)
                - work, "between_wafers_s": between}  # fmt: skip

    def occupancy_s(self, tokens: int = 1) -> dict[str, float]:
        """Seconds each element is held by a block of `tokens` tokens."""
        key = ("held", tokens)
        if key not in self._memo:
            self._memo[key] = {
                name: self._held_s(name, p, tokens, latency=region)
                for name, region, p in self.elements
            }  # fmt: skip
        return dict(self._memo[key])

    def bottleneck(self, tokens: int = 1) -> tuple[str, float]:
        key = ("bottleneck", tokens)
        if key not in self._memo:
            occ = self.occupancy_s(tokens)
            name = max(occ, key=occ.__getitem__)
            self._memo[key] = name, occ[name]
        return self._memo[key]

    def block_sizes(self) -> list[int]:
        """The prompt block sizes tried: powers of two up to what fits, and that."""
        k_max = self.max_block_tokens
        return sorted({k_max} | {1 << i for i in range(k_max.bit_length()) if 1 << i <= k_max})

    def blocks_s(self, n_tokens: int, block: int) -> float:
        """Seconds of `n_tokens` of one user in blocks of `block` (at most `n_tokens`):
        the first block through every element, the rest one bottleneck time apart."""
        k = min(block, n_tokens)
        if ("fill", k) not in self._memo:
            self._memo["fill", k] = sum(self._held_s(name, p, k) for name, _, p in self.elements)
        return self._memo["fill", k] + (math.ceil(n_tokens / k) - 1) * self.bottleneck(k)[1]

    def pass_s(self, n_tokens: int) -> tuple[float, int, float]:
        """(seconds, block size, bottleneck seconds) of `n_tokens` of one user in the
        blocks that finish soonest."""
        if ("pass", n_tokens) not in self._memo:
            k = min(self.block_sizes(), key=lambda b: (self.blocks_s(n_tokens, b), b))
            k = min(k, n_tokens)
            slowest = math.ceil(n_tokens / k) * self.bottleneck(k)[1]
            self._memo["pass", n_tokens] = (self.blocks_s(n_tokens, k), k, slowest)
        return self._memo["pass", n_tokens]


def price_pipeline(config: Any, plan: PipelinePlan, *, kv_tokens: int, model=None) -> Pipeline:
    """The elements of one decode token of `config` on `plan`, priced: the phases of
    `wse_systems.token.price_token` (the one pricer of a token), each element's streaming
    and latency seconds apart (their sum is that report's seconds)."""
    model = model or PerfModel(plan.spec)
    # `price_token`'s phases, without its report: evaluating the whole tree there was
    # thrown away here (hunt 63: a third of a 1,024-layer plan's time)
    step = decode_phases(config, plan, kv_tokens=kv_tokens, shared_layers=True, build_layer=_layer)
    # the per-token group (head product, argmax, next embedding) holds the head region
    regions = {s.name for s in plan.stages} | {plan.head.name, PER_TOKEN}
    cache: dict = {}
    # blocks of k > 1 may run MeshGEMMs: their phase trees, priced where the buffers fit
    block = _block_trees(config, plan, kv_tokens) if plan.gemv == "meshgemv" else None
    elements = tuple(
        (p.name, p.name in regions, _price(model, p, cache, block and _child(block, i)))
        for i, p in enumerate(step.parts)
    )
    return Pipeline(elements, **block_caps(config, plan), logits_parts=_logits_parts(step))


_ONCE_A_PROMPT = ("norm_final", "lm_head", "argmax", "token_out")  # `decoder._per_token`'s, by name


def _logits_parts(step: Phases) -> dict[str, tuple[int, ...]]:
    """The per-token element's parts a prompt runs once (`Pipeline.logits_parts`)."""
    per_token = next(p for p in step.parts if p.name == PER_TOKEN)
    assert isinstance(per_token, Phases) and per_token.mode == "serial"
    return {PER_TOKEN: tuple(i for i, p in enumerate(per_token.parts) if p.name in _ONCE_A_PROMPT)}


def priced_by(plan: PipelinePlan) -> tuple:
    """What `price_pipeline` reads of `plan` (beside the config and the KV read): each
    region's rectangle, layers and per-user bytes (a token's work does not depend on the
    users in flight), the wafer's rows (a speculative search plans each model on some of
    them) and where they lie on it (the rows above and below: a trip to its edge) and
    count, the bytes per parameter."""
    per_user = tuple(
        (s.name, s.wafer, s.layers, s.region, s.weight_bytes, s.kv_bytes / plan.slots,
         s.user_act_bytes / plan.slots, s.item_act_bytes) for s in (plan.head, *plan.stages)
    )  # fmt: skip
    return (plan.spec.pe_rows, plan.rows_above, plan.rows_below, plan.num_wafers,
            plan.bytes_per_param, per_user)  # fmt: skip


def block_caps(config: Any, plan: PipelinePlan) -> dict[str, Any]:
    """`plan`'s limits on a block, as `Pipeline`'s fields: `max_block_tokens` (the
    activations') and `gemm_tokens` (meshgemv: each element's MeshGEMM buffers'). They
    depend on what the regions hold, so on the users in flight, where the priced elements
    do not (`wse_systems.serving.wafer` prices a layout once and sets these per plan)."""
    gemm = _gemm_tokens(config, plan) if plan.gemv == "meshgemv" else {}
    return {"max_block_tokens": max_block_tokens(plan), "gemm_tokens": gemm}


def _gemm_tokens(config: Any, plan: PipelinePlan) -> dict[str, int]:
    """Per element, the largest block whose MeshGEMMs fit its region
    (`meshgemm_max_tokens`; the head's products are the per-token element's)."""
    layer = tuple(layer_products(config).values())
    regions = [(PER_TOKEN, plan.head, ((config.d_model, config.vocab_size),))]
    regions += [(s.name, s, layer) for s in plan.stages]
    sram, b = plan.spec.data_bytes_per_pe, plan.bytes_per_param
    return {
        name: meshgemm_max_tokens(
            s.region, p, held_bytes_per_pe=s.bytes_per_pe, sram_bytes_per_pe=sram, bytes_per_value=b
        )
        for name, s, p in regions
    }


def _layer(shape: Any, region: Any, *, spec: Any, **kw: Any) -> Phases:
    """`decoder.layer_phases`, kept across plans (`wse_systems.serving.memo`): a placement
    search prices many plans whose regions share shapes (hunt 70: a 96-layer model and its
    draft built 648 layer trees for 177 shapes). The trees depend on the region's rows and
    columns only (`decode_phases` shares them so)."""
    key = (frozen(shape), region.rows, region.cols, frozen(spec), tuple(sorted(kw.items())),
           pricers())  # fmt: skip
    return _LAYERS.get(key, lambda: decoder.layer_phases(shape, region, spec=spec, **kw))


def pricers() -> tuple:
    """The functions a pipeline's phases are built with, by identity: a key of every cache of
    priced results (`wse_systems.serving.memo`), as a test swaps one in for its oracle (the
    unshared layer trees, the exponential at another cost)."""
    return (decode_phases, decoder.layer_phases, decoder.exp_fmacs, attention.exp_fmacs)


def _child(block: Callable[[int], Phases], i: int) -> Callable[[int], Phase | Phases]:
    return lambda k: block(k).parts[i]


def _block_trees(config: Any, plan: PipelinePlan, kv_tokens: int) -> Callable[[int], Phases]:
    """k -> the phase tree of a k-token block (`decode_phases(..., block_tokens=k)`), built
    once per k."""
    trees: dict[int, Phases] = {}

    def tree(k: int) -> Phases:
        if k not in trees:
            trees[k] = decode_phases(
                config, plan, kv_tokens=kv_tokens, block_tokens=k, shared_layers=True,
                build_layer=_layer,
            )  # fmt: skip
        return trees[k]

    return tree


def max_block_tokens(plan: PipelinePlan) -> int:
    """1 + the extra tokens' activations (each one token's, as the item a region works on:
    `StagePlan.item_act_bytes`) that fit the free SRAM of every region."""
    extra = []
    for s in (plan.head, *plan.stages):
        per_token = s.item_act_bytes / s.region.num_pes
        free = plan.spec.data_bytes_per_pe - s.bytes_per_pe
        extra.append(math.inf if per_token == 0 else max(0, free) // per_token)
    return int(min(1 + min(extra), MAX_BLOCK_TOKENS))
