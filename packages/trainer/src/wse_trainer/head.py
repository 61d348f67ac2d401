"""The replica's head: final norm, logits and token cross-entropy, with its gradient, in row
chunks.

`head_loss(config, loss_scale)` returns `head(head_w, h, targets) -> (loss, g_head_w, g_h)`
(`replica.LayerFns.head`): the loss is the token-summed cross-entropy of
`wse_models.unembed(config, head_w, h)` times `loss_scale`, and the gradients are those of
that loss with respect to `head_w` (`{"embed": ..., "final": ...}`, tied embeddings read the
embedding) and `h` [b, s, d].

The logits are never formed whole. The final norm runs on every token at once (its VJP kept);
then `lax.scan` walks the tokens in chunks of `chunk_rows(n, vocab)` rows, and each chunk
computes its fp32 logits (`wse_models.layer.product`, whose backward is the CPU-friendly
one), the shifted log-sum-exp and the target's logit in one pass, the logits' gradient
`(softmax - onehot) * loss_scale` written in the same pass, then its share of the norm
output's gradient and of the head matrix's gradient (accumulated in fp32 over the chunks).
A chunk's logits stay in cache instead of making five round trips through memory, and
the head's memory no longer grows with tokens x vocabulary (GPT-2's 50,257 words: 400 MB of
fp32 logits for 2,048 tokens, and as much again for their gradient). Its time is the three
products' (bench_train's quick case, 1 core: 3.2 GFLOP, ~41 ms at the fp32 peak of the AVX2
host it was first measured on; autodiff's head 50.2 ms, this one 50.2, the least of 25
interleaved calls each; 54.8 against 52.4 ms by the median, load 8. On the AVX-512 host of
2026-12-04: the products ~23 ms at its 1-core peak, the whole head ~33-36 ms, the log-sum-exp
and its gradient ~7.5 of it). The arithmetic is
`optax.softmax_cross_entropy_with_integer_labels`' and its autodiff's, summed chunk by chunk:
the same values to fp32 round-off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from wse_models import layer as wl

__all__ = ["CHUNK_LOGIT_BYTES", "MIN_CHUNK_ROWS", "chunk_rows", "head_loss", "xent_rows"]

# fp32 logits of one chunk: 4 MiB sits in this machine's L3 (32 MiB, shared) with the
# chunk's gradient beside it, and gives products of 512 rows at V 2048 (a 1-core sweep of
# 64 / 128 / 256 / 512 / 2,048 rows: 53.9 / 52.1 / 49.0 / 50.2 / 54.7 ms a head, the least
# of 25 calls; thinner chunks make thinner products, one chunk makes memory round trips).
CHUNK_LOGIT_BYTES = 4 << 20
MIN_CHUNK_ROWS = 16  # below this the products get too thin to pay; one chunk instead
_F32_BYTES = 4


def chunk_rows(n: int, vocab: int) -> int:
    """Rows per chunk for `n` tokens: the largest divisor of n whose fp32 logits fit
    `CHUNK_LOGIT_BYTES` (n itself when that is under `MIN_CHUNK_ROWS`)."""
    cap = max(1, CHUNK_LOGIT_BYTES // (_F32_BYTES * vocab))
    if n <= cap:
        return n
    best = max(r for r in range(1, cap + 1) if n % r == 0)
    return best if best >= MIN_CHUNK_ROWS else n


def xent_rows(logits: jax.Array, targets: jax.Array, scale: float) -> tuple[jax.Array, Any]:
    """fp32 logits [n, V], int targets [n] -> (summed cross-entropy * scale, its gradient
    with respect to the logits): optax's shifted log-sum-exp and its autodiff, one pass.

    The target's shifted logit is gathered (`logits[t] - max`, the float op the shifted
    row holds), not summed out of a masked row: the same loss and gradient to the bit, and
    XLA:CPU ran the masked sum's fusion at ~1 ns an element more (a 512 x 2,048 chunk 2.04
    -> 0.96 ms, one core of the 2-core Xeon VM, 2026-12-04)."""
    m = lax.stop_gradient(logits.max(-1, keepdims=True))
    e = jnp.exp(logits - m)
    s = e.sum(-1, keepdims=True)
    picked = jnp.take_along_axis(logits, targets[:, None], -1)[:, 0] - m[:, 0]
    loss = jnp.sum(jnp.log(s[:, 0]) - picked) * scale
    hit = lax.broadcasted_iota(jnp.int32, logits.shape, 1) == targets[:, None]
    return loss, e * (scale / s) - jnp.where(hit, scale, 0.0)


def head_loss(config: Any, loss_scale: float) -> Callable[..., tuple[jax.Array, Any, jax.Array]]:
    """`head(head_w, h, targets) -> (loss, g_head_w, g_h)` (module contract)."""

    def chunk(w: jax.Array, x: jax.Array, t: jax.Array):
        logits, vjp = jax.vjp(lambda a, b: wl.product(config, a, b, jnp.float32), x, w)
        loss, g_logits = xent_rows(logits, t, loss_scale)
        g_x, g_w = vjp(g_logits)
        return loss, g_x, g_w.astype(jnp.float32)

    def head(head_w, h, targets):
        final = head_w["final"]
        x, norm_vjp = jax.vjp(lambda p, a: wl.norm(config, p, a), final["norm"], h)
        w = head_w["embed"]["tok"].T if config.tie_embeddings else final["head"]
        n, d = x.shape[0] * x.shape[1], x.shape[-1]
        rows = chunk_rows(n, w.shape[1])

        def body(carry, xt):
            loss, g_x, g_w = chunk(w, *xt)
            return (carry[0] + loss, carry[1] + g_w), g_x

        zero = (jnp.zeros((), jnp.float32), jnp.zeros(w.shape, jnp.float32))
        xs = (x.reshape(n // rows, rows, d), targets.reshape(n // rows, rows))
        (loss, g_w), g_x = lax.scan(body, zero, xs)
        g_norm, g_h = norm_vjp(g_x.reshape(x.shape))
        g_head = jax.tree.map(jnp.zeros_like, head_w)
        g_head["final"]["norm"] = g_norm
        if config.tie_embeddings:
            g_head["embed"]["tok"] = g_w.T.astype(head_w["embed"]["tok"].dtype)
        else:
            g_head["final"]["head"] = g_w.astype(final["head"].dtype)
        return loss, g_head, g_h

    return head
