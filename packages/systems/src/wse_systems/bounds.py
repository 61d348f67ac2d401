"""Upper bounds of what a plan or a run may ask for, read by the CLI's option declarations
and by the packages that check the same quantities in files (NumPy- and JAX-free, so
`wse --help` stays light).

- `MAX_SYSTEMS`: wafer systems (or wafers) of one plan or run, 10x the 2,048 CS-3 of
  Cerebras' largest cluster (`wse plan --systems`, a params file's `runconfig.num_csx`).
"""

from __future__ import annotations

__all__ = ["MAX_SYSTEMS"]

MAX_SYSTEMS = 20_480
