"""One layer on every local replica with its matrices streamed in column chunks.

Contract. `ChunkedLayer(fns, chunks, take, send)` runs layer `name` through the stages of
`wse_models.layer` (`replica.StageFns`), each matrix column chunk by column chunk as
`wse_systems.training.chunks.WeightChunks` cuts it. Weights arrive through `take(item)` (the
trainer's stream: SwarmX broadcasts, prefetched one item ahead; a list with one entry per
local replica), in the order `forward_items(name)` / `backward_items(name)` list:

- forward: the layer's vectors, then every chunk of every matrix in the forward's order;
  a chunk's product is its output columns, joined into the stage's input;
- backward: the vectors, every chunk again to recompute the layer's inner activations from
  its kept (or recomputed) input, then the matrices in reverse: each chunk gives its share
  of the input gradient (summed over the chunks) and its whole weight gradient, which
  `send(name, key, start, grads, parts)` reduces through SwarmX to MemoryX at once. The
  layer's vector gradient goes last. No replica ever holds a whole layer's weights or
  gradient.

Items are (name, None) for the vectors and (name, (group, matrix), start, n) for a chunk.
The arithmetic is the whole layer's (`apply_layer` and its VJP): the same stages, products
by columns, input gradients summed over chunks in another order (float round-off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from wse_systems.training.chunks import WeightChunks

from wse_trainer.replica import StageFns

__all__ = ["ChunkedLayer"]


def _add(a: Any, b: Any) -> Any:
    return jax.tree.map(jnp.add, a, b)


class ChunkedLayer:
    """The chunked forward and backward of one layer (module contract)."""

    def __init__(
        self, fns: StageFns, chunks: WeightChunks, take: Callable[..., list], send: Callable
    ):
        self.fns, self.ck, self.take, self.send = fns, chunks, take, send
        self.keys = [(m.group, m.name) for m in chunks.matrices]
        self.parts = sum(chunks.counts) + 1  # every chunk's gradient and the vectors'

    def _chunk_items(self, name: str, *, reverse: bool = False) -> list[tuple]:
        order = range(len(self.keys))
        return [
            (name, self.keys[i], c0, c1 - c0)
            for i in (reversed(order) if reverse else order)
            for c0, c1 in (reversed(self.ck.bounds(i)) if reverse else self.ck.bounds(i))
        ]

    def forward_items(self, name: str) -> list[tuple]:
        return [(name, None), *self._chunk_items(name)]

    def backward_items(self, name: str) -> list[tuple]:
        return [*self.forward_items(name), *self._chunk_items(name, reverse=True)]

    # Products ---------------------------------------------------------------------------
    def _product(self, key: tuple[str, str], x: list) -> list:
        """x @ W for every replica, W's column chunks taken from the stream in order."""
        i = self.keys.index(key)
        cols: list[list] = [[] for _ in x]
        for _ in range(self.ck.counts[i]):
            w = self.take()
            for r, xr in enumerate(x):
                cols[r].append(self.fns.chunk(xr, w[r]))
        return [c[0] if len(c) == 1 else jnp.concatenate(c, axis=-1) for c in cols]

    def _product_vjp(self, name: str, key: tuple[str, str], x: list, g: list) -> list:
        """The input gradient of x @ W (summed over W's chunks, taken in reverse order); each
        chunk's weight gradient is sent to MemoryX as soon as it is computed."""
        i = self.keys.index(key)
        dx: list = [None] * len(x)
        for c0, c1 in reversed(self.ck.bounds(i)):
            w = self.take()
            outs = [self.fns.chunk_vjp(xr, w[r], g[r][..., c0:c1]) for r, xr in enumerate(x)]
            dx = [o[0] if d is None else d + o[0] for d, o in zip(dx, outs, strict=True)]
            self.send(name, key, c0, [o[1] for o in outs], self.parts)
        return dx

    # The layer --------------------------------------------------------------------------
    def _inner(self, vec: list, h: list, pos_seg: list, zeros: bool) -> dict[str, Any]:
        """Every activation inside the layer (the forward), per replica."""
        f, a = self.fns, {"h": h}
        a["x"] = [f.attn_in(v, hr) for v, hr in zip(vec, h, strict=True)]
        for m in ("wq", "wk", "wv"):
            a[m] = self._product(("attn", m), a["x"])
        a["a"] = [
            f.mix(v, q, k, vv, *ps)
            for v, q, k, vv, ps in zip(vec, a["wq"], a["wk"], a["wv"], pos_seg, strict=True)
        ]
        a["o"] = self._product(("attn", "wo"), a["a"])
        mid = [f.mlp_in(v, hr, o) for v, hr, o in zip(vec, h, a["o"], strict=True)]
        a["h2"], a["x2"] = [m[0] for m in mid], [m[1] for m in mid]
        a["up"] = self._product(("mlp", "w_up"), a["x2"])
        gated = ("mlp", "w_gate") in self.keys
        a["gate"] = self._product(("mlp", "w_gate"), a["x2"]) if gated else [None] * len(h)
        if zeros:
            hz = [f.hidden_zeros(v, u, g, ps[0]) for v, u, g, ps in
                  zip(vec, a["up"], a["gate"], pos_seg, strict=True)]  # fmt: skip
            a["hidden"], a["zeros"] = [x[0] for x in hz], [x[1] for x in hz]
        else:
            a["hidden"] = [f.hidden(v, u, g) for v, u, g in
                           zip(vec, a["up"], a["gate"], strict=True)]  # fmt: skip
        a["down"] = self._product(("mlp", "w_down"), a["hidden"])
        return a

    def forward(self, h: list, pos_seg: list, zeros: bool = False) -> tuple[list, Any]:
        """The layer's output per replica (and its MLP zero counts when `zeros`)."""
        vec = self.take()
        a = self._inner(vec, h, pos_seg, zeros)
        out = [self.fns.out(v, h2, d) for v, h2, d in zip(vec, a["h2"], a["down"], strict=True)]
        return out, a.get("zeros")

    def backward(self, name: str, h: list, pos_seg: list, g_out: list) -> list:
        """The input gradient per replica; the weight gradients go to MemoryX on the way."""
        f, vec = self.fns, self.take()
        a = self._inner(vec, h, pos_seg, False)
        g_out = [g.astype(hr.dtype) for g, hr in zip(g_out, h, strict=True)]
        o = [
            f.out_vjp(v, h2, d, g)
            for v, h2, d, g in zip(vec, a["h2"], a["down"], g_out, strict=True)
        ]
        g_vec, g_h2 = [x[0] for x in o], [x[1] for x in o]
        d_hidden = self._product_vjp(name, ("mlp", "w_down"), a["hidden"], [x[2] for x in o])
        hv = [f.hidden_vjp(v, u, g, dh) for v, u, g, dh in
              zip(vec, a["up"], a["gate"], d_hidden, strict=True)]  # fmt: skip
        g_vec = [_add(gv, x[0]) for gv, x in zip(g_vec, hv, strict=True)]
        d_x2 = None
        if ("mlp", "w_gate") in self.keys:
            d_x2 = self._product_vjp(name, ("mlp", "w_gate"), a["x2"], [x[2] for x in hv])
        d_up = self._product_vjp(name, ("mlp", "w_up"), a["x2"], [x[1] for x in hv])
        d_x2 = d_up if d_x2 is None else [p + q for p, q in zip(d_x2, d_up, strict=True)]
        mi = [f.mlp_in_vjp(v, hr, o_, (g2, dx2)) for v, hr, o_, g2, dx2 in
              zip(vec, h, a["o"], g_h2, d_x2, strict=True)]  # fmt: skip
        g_vec = [_add(gv, x[0]) for gv, x in zip(g_vec, mi, strict=True)]
        d_a = self._product_vjp(name, ("attn", "wo"), a["a"], [x[2] for x in mi])
        mx = [f.mix_vjp(v, q, k, vv, *ps, da) for v, q, k, vv, ps, da in
              zip(vec, a["wq"], a["wk"], a["wv"], pos_seg, d_a, strict=True)]  # fmt: skip
        g_vec = [_add(gv, x[0]) for gv, x in zip(g_vec, mx, strict=True)]
        d_x = None
        for j, m in reversed(list(enumerate(("wq", "wk", "wv")))):
            part = self._product_vjp(name, ("attn", m), a["x"], [x[1 + j] for x in mx])
            d_x = part if d_x is None else [p + q for p, q in zip(d_x, part, strict=True)]
        ai = [f.attn_in_vjp(v, hr, dx) for v, hr, dx in zip(vec, h, d_x, strict=True)]
        g_vec = [_add(gv, x[0]) for gv, x in zip(g_vec, ai, strict=True)]
        self.send(name, None, 0, g_vec, self.parts)
        return [x[1] + y[1] for x, y in zip(mi, ai, strict=True)]
