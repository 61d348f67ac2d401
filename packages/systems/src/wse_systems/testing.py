"""Test support of the systems package: `ROUND_DECODER`, a decoder shape whose GPU roofline
is easy on paper."""

from __future__ import annotations

from wse_systems.transformer import DecoderCounts

__all__ = ["ROUND_DECODER"]

# A tied Llama of 2 layers of width 256 (4 heads of 64, all KV heads) whose matmul weights are
# exactly 1e8: the head 376,289 x 256 and 2 x (4 x 256^2 + 3 x 256 x 2048).
ROUND_DECODER = DecoderCounts(
    name="round", arch="llama", vocab_size=376_289, d_model=256, n_layers=2, n_heads=4,
    n_kv_heads=4, d_ff=2048, max_seq_len=128, tie_embeddings=True,
)  # fmt: skip
