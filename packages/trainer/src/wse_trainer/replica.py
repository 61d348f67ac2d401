"""A wafer replica's work, as pure functions over one weight group at a time.

`layer_fns(config, loss_scale)` closes over the model config and returns `LayerFns`:

- `embed_fwd(embed_w, tokens, positions) -> h`                      [b, s] -> [b, s, d]
- `layer_fwd(layer_w, h, positions, segment_ids) -> h`              one layer (`apply_layer`)
- `layer_fwd_zeros(...)` -> (h, zeros)   the same, with the MLP's zero count (ReLU-like only)
- `layer_bwd(layer_w, h_in, positions, segment_ids, g_out) -> (g_w, g_in)`  `jax.vjp`
- `layer_fwd_vjp(...) -> (h, vjp)` (`layer_fwd_vjp_zeros`: (h, vjp, zeros)) and
  `layer_bwd_saved(vjp, g_out) -> (g_w, g_in)`: the same layer with its VJP residuals kept
  from the forward (`wse_trainer.layout.Layout.keep_residuals`), so the backward does not
  run the layer's forward again
- `head(head_w, h, targets) -> (loss, g_head_w, g_h)`               final norm, logits, loss
  (`wse_trainer.head`: the logits and their gradient in row chunks, never whole)
- `embed_bwd(embed_w, tokens, positions, g_h) -> g_embed_w`

`stage_fns(config)` returns `StageFns`, the same layer cut at its matrix products
(`wse_models.layer`) for weight streaming below the layer (`wse_trainer.chunked`): each stage
and its VJP (the stage recomputed inside), and one column chunk's product and its VJP:

- `attn_in(vec, h) -> x`; `mix(vec, q, k, v, positions, segment_ids) -> a`;
  `mlp_in(vec, h, o) -> (h2, x2)`; `hidden(vec, up, gate) -> hidden` (`hidden_zeros` also
  counts its exact zeros over valid positions); `out(vec, h2, down) -> h`;
- `<stage>_vjp(same arguments..., cotangent) -> cotangents of (vec, activations...)`;
- `chunk(x, w_c) -> x @ w_c`; `chunk_vjp(x, w_c, g_c) -> (dx share, dw_c)`.

`vec` is the layer's vectors (its params without the matrices); gate is None for gpt2.

`segment_ids` is None (rows attend across documents) or int32 [b, s] for packed documents
(`data.segments`, with their positions). `head_w` is `{"embed": ..., "final": ...}` (tied
embeddings read the embedding). The loss is the token-summed cross-entropy times
`loss_scale` (1 / global tokens), so replica losses and gradients add up to the full-batch
mean. The shell jits each function once: every layer shares one compilation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
import wse_models

from wse_trainer.head import head_loss

__all__ = ["LayerFns", "layer_fns", "StageFns", "stage_fns", "token_loss"]


class LayerFns(NamedTuple):
    embed_fwd: Callable[..., jax.Array]
    layer_fwd: Callable[..., jax.Array]
    layer_fwd_zeros: Callable[..., tuple[jax.Array, jax.Array]]
    layer_bwd: Callable[..., tuple[Any, jax.Array]]
    head: Callable[..., tuple[jax.Array, Any, jax.Array]]
    embed_bwd: Callable[..., Any]
    layer_fwd_vjp: Callable[..., tuple[jax.Array, Any]]
    layer_fwd_vjp_zeros: Callable[..., tuple[jax.Array, Any, jax.Array]]
    layer_bwd_saved: Callable[..., tuple[Any, jax.Array]]


def token_loss(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Summed next-token cross-entropy in fp32."""
    logits = logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).sum()


def layer_fns(config: Any, loss_scale: float) -> LayerFns:
    def embed_fwd(embed_w, tokens, positions):
        return wse_models.embed(config, {"embed": embed_w}, tokens, positions)

    def layer_fwd(layer_w, h, positions, segment_ids):
        return wse_models.apply_layer(config, layer_w, h, positions, segment_ids=segment_ids)[0]

    def layer_fwd_zeros(layer_w, h, positions, segment_ids):
        out = wse_models.apply_layer(
            config, layer_w, h, positions, segment_ids=segment_ids, count_zeros=True
        )
        return out[0], out[2]

    def layer_bwd(layer_w, h, positions, segment_ids, g_out):
        _, vjp = jax.vjp(lambda w, x: layer_fwd(w, x, positions, segment_ids), layer_w, h)
        return vjp(g_out.astype(h.dtype))

    head = head_loss(config, loss_scale)

    def embed_bwd(embed_w, tokens, positions, g_h):
        _, vjp = jax.vjp(lambda w: embed_fwd(w, tokens, positions), embed_w)
        return vjp(g_h)[0]

    def layer_fwd_vjp(layer_w, h, positions, segment_ids):
        return jax.vjp(lambda w, x: layer_fwd(w, x, positions, segment_ids), layer_w, h)

    def layer_fwd_vjp_zeros(layer_w, h, positions, segment_ids):
        f = lambda w, x: layer_fwd_zeros(w, x, positions, segment_ids)  # noqa: E731
        return jax.vjp(f, layer_w, h, has_aux=True)

    def layer_bwd_saved(vjp, g_out):
        return vjp(g_out.astype(jnp.dtype(config.dtype)))

    return LayerFns(
        embed_fwd, layer_fwd, layer_fwd_zeros, layer_bwd, head, embed_bwd,
        layer_fwd_vjp, layer_fwd_vjp_zeros, layer_bwd_saved,
    )  # fmt: skip


class StageFns(NamedTuple):
    attn_in: Callable[..., Any]
    attn_in_vjp: Callable[..., Any]
    mix: Callable[..., Any]
    mix_vjp: Callable[..., Any]
    mlp_in: Callable[..., Any]
    mlp_in_vjp: Callable[..., Any]
    hidden: Callable[..., Any]
    hidden_zeros: Callable[..., Any]
    hidden_vjp: Callable[..., Any]
    out: Callable[..., Any]
    out_vjp: Callable[..., Any]
    chunk: Callable[..., Any]
    chunk_vjp: Callable[..., Any]


def _vjp(f: Callable[..., Any]) -> Callable[..., Any]:
    """(*primals, cotangent) -> the cotangents of every primal (f recomputed)."""

    def f_vjp(*args):
        return jax.vjp(f, *args[:-1])[1](args[-1])

    return f_vjp


def stage_fns(config: Any) -> StageFns:
    from wse_models import layer as wl

    def mix(vec, q, k, v, positions, segment_ids):
        return wl.attention_mix(config, vec, (q, k, v), positions, None, segment_ids)[0]

    def mix_vjp(vec, q, k, v, positions, segment_ids, g):
        f = lambda vec, q, k, v: mix(vec, q, k, v, positions, segment_ids)  # noqa: E731
        return jax.vjp(f, vec, q, k, v)[1](g.astype(q.dtype))

    attn_in = lambda vec, h: wl.attention_input(config, vec, h)  # noqa: E731
    mlp_in = lambda vec, h, o: wl.mlp_input(config, vec, h, o)  # noqa: E731
    hidden = lambda vec, up, gate: wl.mlp_hidden(config, vec, up, gate, None)[0]  # noqa: E731
    out = lambda vec, h2, down: wl.layer_output(config, vec, h2, down)  # noqa: E731
    chunk = lambda x, w: wl.product(config, x, w)  # noqa: E731

    def hidden_zeros(vec, up, gate, positions):
        return wl.mlp_hidden(config, vec, up, gate, positions >= 0)

    return StageFns(
        attn_in, _vjp(attn_in), mix, mix_vjp, mlp_in, _vjp(mlp_in), hidden, hidden_zeros,
        _vjp(hidden), out, _vjp(out), chunk, _vjp(chunk),
    )  # fmt: skip
