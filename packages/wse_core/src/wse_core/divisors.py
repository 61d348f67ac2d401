"""A positive integer's divisors, the one helper every package that splits a batch or a
grid over systems, GPUs or PEs reads (hunt 78 review: `wse plan train`'s GPU layouts listed
a global batch's divisors by trying every integer up to it, 21 billion at `--systems 20480
--batch 1048576`).

Contract: `divisors(n)` for an int n >= 1 is every d with n % d == 0, ascending, found in
O(sqrt n) steps: the divisors up to isqrt(n) and their cofactors.
"""

from __future__ import annotations

import math

__all__ = ["divisors"]


def divisors(n: int) -> list[int]:
    """Every divisor of `n` (an int >= 1), ascending, in O(sqrt n); ValueError below 1."""
    if n < 1:
        raise ValueError(f"divisors of {n}: n must be an integer >= 1")
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]
