"""The replicas a count of GPUs serves a model in: `tp_ok` (vLLM's rule for a tensor-parallel
group), `replica_sizes` (every replica of a count that the serving model prices), `tp_note`
(why a node's GPUs serve in smaller groups) and `gpu_counts` (the counts with a replica that
holds the model, which a refusal names: hunt 78). `wse_systems.serving.gpu_step` re-exports
them.

The serving model prices a replica as one tp group within a node (every tp vLLM's rule
allows, up to a node; past a node, groups that divide the count, the rest data parallel) or
as whole nodes at tp = a node, one pipeline stage a node (pp <= layers). vLLM also runs
pipeline stages of fewer GPUs across nodes (tp 2 x pp 8 on 16 GPUs): those are not priced,
and a refusal says so where they are all that would hold the model (hunt 78: 16 GPUs of a
model whose 6 KV heads forbid tp 8 were told to "use at least 3 GPUs ... then whole nodes").
"""

from __future__ import annotations

import math
from typing import NamedTuple

from wse_systems.gpu import GpuSpec
from wse_systems.transformer import DecoderShape

__all__ = ["GpuCounts", "gpu_counts", "replica_sizes", "tp_note", "tp_ok", "tp_rule"]


def tp_ok(model: DecoderShape, tp: int) -> bool:
    """Whether the engines shard `model`'s attention over `tp` GPUs (vLLM's check in
    `QKVParallelLinear`, TensorRT-LLM's likewise): tp divides the attention heads, and the KV
    heads, or is a multiple of them (each KV head then replicated on tp / KV heads GPUs)."""
    heads, kv = model.n_heads, model.n_kv_heads
    return heads % tp == 0 and (kv % tp == 0 if tp <= kv else tp % kv == 0)


def tp_rule(model: DecoderShape) -> str:
    """vLLM's rule in words, with the model's head counts."""
    return (
        f"tensor parallelism must divide the model's {model.n_heads} attention heads and its "
        f"{model.n_kv_heads} KV heads or be a multiple of them (vLLM's and TensorRT-LLM's rule)"
    )


def replica_sizes(num_gpus: int, gpu: GpuSpec, model: DecoderShape) -> list[int]:
    """Replica sizes of `num_gpus`: every tp up to a node that the model's heads allow
    (`tp_ok`, vLLM's rule; hunt 75: tp 3, 5, 6, 7 were priced for 32 heads and 8 KV heads,
    then only powers of two were tried, and GPT-2's 12 heads were refused the tp 3 vLLM
    runs), dividing `num_gpus` past a node (within one, a replica of the largest with the
    GPUs left idle), and whole nodes up to one stage per layer. At most node + n_layers sizes
    whatever `num_gpus` is (the closed form of the layouts)."""
    node = gpu.gpus_per_node
    small = {r for r in range(1, min(node, num_gpus) + 1) if tp_ok(model, r)
             and (num_gpus <= node or num_gpus % r == 0)}  # fmt: skip
    whole = {node * k for k in range(1, model.n_layers + 1) if num_gpus % (node * k) == 0}
    return sorted(small | (whole if tp_ok(model, node) else set()))


def tp_note(model: DecoderShape, gpu: GpuSpec, num_gpus: int, tp: int, pp: int) -> str | None:
    """Why `num_gpus` GPUs within a node serve as replicas of tp x pp: the engines run no
    tp group of them all, or they do and the load is served better with GPUs idle (None past
    a node, or where the replicas use every GPU and a group of them all runs)."""
    replicas, idle = divmod(num_gpus, tp * pp)
    whole = tp_ok(model, num_gpus)
    if num_gpus > gpu.gpus_per_node or (whole and not idle):
        return None
    served = f"served as {replicas} x tp {tp} x pp {pp}" + (f", {idle} GPU(s) idle" if idle else "")
    if whole:  # hunt 75d: tp 3 on 12 heads runs, and tp 2 with a GPU idle served more
        return f"{num_gpus} GPUs: tp {num_gpus} runs (vLLM's rule), but this load is {served}"
    return f"{num_gpus} GPUs: {tp_rule(model)}, up to a node of {gpu.gpus_per_node}: {served}"


class GpuCounts(NamedTuple):
    """The GPU counts whose replicas hold a model that takes `fit` GPUs' usable memory (the
    module docstring): `tps`, the tp groups within a node of `node` GPUs that hold it and
    vLLM's rule allows; `nodes`, the (fewest, most) nodes of a whole-node replica that holds
    it, None where tp = a node is forbidden or the layers are too few."""

    fit: int
    node: int
    tps: tuple[int, ...]
    nodes: tuple[int, int] | None

    @property
    def least(self) -> int | None:
        """The fewest GPUs that serve the model; None where no count does."""
        if self.tps:
            return self.tps[0]
        return None if self.nodes is None else self.node * self.nodes[0]

    def words(self) -> str:
        """The counts that run, as advice: "at least N GPUs (up to a node, then whole nodes)"
        where tp = a node runs (every whole node count from N then holds a replica, up to one
        stage a layer), else the counts within a node and the multiples of a tp group past it."""
        least, node = self.least, self.node
        if least is None:
            return "no count of these GPUs serves it; use GPUs with more memory or a smaller model"
        if self.nodes is not None:
            return f"use at least {least} GPUs (up to {node} per node, then whole nodes)"
        gens = [r for r in self.tps if not any(r % s == 0 for s in self.tps if s < r)]
        within = f"{least} to {node} GPUs" if least < node else f"{node} GPUs"
        return f"use {within}, or past a node a multiple of {' or '.join(map(str, gens))}"


def gpu_counts(model: DecoderShape, gpu: GpuSpec, fit: int) -> GpuCounts:
    """The counts of `gpu` that serve `model` where `fit` GPUs' usable memory holds it."""
    node, fit = gpu.gpus_per_node, max(1, fit)
    tps = tuple(r for r in range(fit, node + 1) if tp_ok(model, r))
    least_nodes = math.ceil(fit / node)
    whole = tp_ok(model, node) and least_nodes <= model.n_layers
    return GpuCounts(fit, node, tps, (least_nodes, model.n_layers) if whole else None)
