"""Upper bounds of what a plan or a run may ask for, read by the CLI's option declarations
and by the packages that check the same quantities in files (NumPy- and JAX-free, so
`wse --help` stays light).

- `MAX_SYSTEMS`: wafer systems (or wafers) of one plan or run, 10x the 2,048 CS-3 of
  Cerebras' largest cluster (`wse plan --systems`, a params file's `runconfig.num_csx`).
- `MAX_GAMMA`: drafted tokens per speculative round (vLLM's examples use 1-8; `wse plan infer
  --gamma`, `--speculative-config`'s num_speculative_tokens).
"""

from __future__ import annotations

__all__ = ["MAX_SYSTEMS", "MAX_GAMMA"]

MAX_SYSTEMS = 20_480
MAX_GAMMA = 64
