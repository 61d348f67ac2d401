"""A minimal PyTorch KV-cache decoder of the same model: the baseline of bench_infer.

Contract. `TorchDecoder(config, params)` copies a Llama-arch `wse_models` parameter pytree
(RMSNorm, RoPE without scaling, SwiGLU, grouped-query attention) into torch tensors and
decodes greedily with a preallocated KV cache: prompt in one pass, then one token per step,
as a hand-written PyTorch decoder would, on the CPU or on `device` ("cuda": bench_device
runs it on the GPU beside the JAX decoder). Importing this module does not import torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["TorchDecoder"]


class TorchDecoder:
    """Greedy KV-cache decoding of a Llama-arch model in PyTorch (float32, on `device`)."""

    def __init__(self, config: Any, params: Any, max_len: int = 512, device: str = "cpu"):
        import torch

        if config.arch != "llama" or config.rope_scaling is not None:
            raise ValueError("the torch baseline covers Llama without RoPE scaling")
        self.torch, self.c, self.max_len, self.device = torch, config, max_len, device
        t = lambda x: torch.from_numpy(np.asarray(x, np.float32).copy()).to(device)  # noqa: E731
        lay = params["layers"]
        self.layers = [
            {name: t(lay[group][name][i]) for group in ("attn", "mlp") for name in lay[group]}
            | {"n1": t(lay["attn_norm"]["scale"][i]), "n2": t(lay["mlp_norm"]["scale"][i])}
            for i in range(config.n_layers)
        ]
        self.tok = t(params["embed"]["tok"])
        self.norm = t(params["final"]["norm"]["scale"])
        self.head = self.tok.T if config.tie_embeddings else t(params["final"]["head"])
        hd = config.hd
        exponents = torch.arange(0, hd, 2, device=device).float() / hd
        self.inv_freq = 1.0 / (config.rope_theta**exponents)

    def _rms(self, x, w):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.norm_eps) * w

    def _rope(self, x, pos):
        ang = pos[:, None].float() * self.inv_freq  # [t, hd/2]
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]
        x1, x2 = x.chunk(2, dim=-1)
        return self.torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def _layer(self, p, x, pos, k_cache, v_cache):
        torch, c = self.torch, self.c
        t = x.shape[0]
        h = self._rms(x, p["n1"])
        q = self._rope((h @ p["wq"]).view(t, c.n_heads, c.hd), pos)
        k = self._rope((h @ p["wk"]).view(t, c.n_kv_heads, c.hd), pos)
        k_cache[pos] = k
        v_cache[pos] = (h @ p["wv"]).view(t, c.n_kv_heads, c.hd)
        end = int(pos[-1]) + 1
        rep = c.n_heads // c.n_kv_heads
        keys = k_cache[:end].repeat_interleave(rep, dim=1).transpose(0, 1)  # [H, s, hd]
        vals = v_cache[:end].repeat_interleave(rep, dim=1).transpose(0, 1)
        scores = q.transpose(0, 1) @ keys.transpose(1, 2) / c.hd**0.5  # [H, t, s]
        mask = torch.arange(end, device=self.device)[None, :] > pos[:, None]
        att = scores.masked_fill(mask, float("-inf")).softmax(-1) @ vals  # [H, t, hd]
        x = x + att.transpose(0, 1).reshape(t, -1) @ p["wo"]
        h = self._rms(x, p["n2"])
        return x + (torch.nn.functional.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]

    def _forward(self, tokens, start, caches):
        pos = self.torch.arange(start, start + len(tokens), device=self.device)
        x = self.tok[self.torch.as_tensor(tokens, device=self.device)]
        for p, (kc, vc) in zip(self.layers, caches, strict=True):
            x = self._layer(p, x, pos, kc, vc)
        return self._rms(x[-1], self.norm) @ self.head

    def generate(self, prompt_ids: Sequence[int], max_tokens: int) -> tuple[list[int], float]:
        """Greedy tokens (first included) and the decode seconds after the first token."""
        torch, c = self.torch, self.c
        with torch.inference_mode():
            caches = [
                (
                    torch.zeros(self.max_len, c.n_kv_heads, c.hd, device=self.device),
                    torch.zeros(self.max_len, c.n_kv_heads, c.hd, device=self.device),
                )
                for _ in self.layers
            ]
            out = [int(self._forward(list(prompt_ids), 0, caches).argmax())]
            t0 = time.perf_counter()
            pos = len(prompt_ids)
            while len(out) < max_tokens:
                out.append(int(self._forward([out[-1]], pos, caches).argmax()))
                pos += 1
            return out, time.perf_counter() - t0
