"""Every dot of the TLR-MVM products asks for float32 products (HIGHEST precision).

With DEFAULT precision XLA runs float32 dots on NVIDIA GPUs in TF32 (a 10-bit mantissa): the
products would miss the NumPy oracle's 2e-5 by two orders of magnitude there. A CPU has no
TF32, so the check reads the compiled program's request instead: each `dot_general` in the
lowered StableHLO of A x and A^H y carries HIGHEST precision for both operands.
"""

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_hpc.tlrmvm import compress, tlrmvm_numpy
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel


def _dots(text: str) -> list[str]:
    return [line for line in text.splitlines() if "stablehlo.dot_general" in line]


@pytest.mark.parametrize("complex_op", [False, True])
@pytest.mark.parametrize("layout", ["banded", "packed", "grouped"])
def test_every_dot_asks_for_float32_products(layout, complex_op):
    op = compress(smooth_kernel(40, 30, complex_=complex_op), nb=10, threshold=1e-3)
    eng = TlrEngine.build(op, preset("small"), rank_chunk=2, batch=2, layout=layout, kernel="xla")
    x, y = random_vectors(30, 2, op.dtype), random_vectors(40, 2, op.dtype, seed=2)
    dots = _dots(jax.jit(eng.fns.matvec_fn).lower(eng.bases, x).as_text())
    dots += _dots(jax.jit(eng.fns.rmatvec_fn).lower(eng.bases, y).as_text())
    assert dots  # the products are dots (the check would pass vacuously otherwise)
    assert [d for d in dots if d.count("HIGHEST") != 2] == []  # lhs and rhs precision
    # and the products are still the NumPy TLR-MVM's
    for got, want in ((eng.matvec(x), tlrmvm_numpy(op, x)),
                      (eng.rmatvec(y), tlrmvm_numpy(op, y, adjoint=True))):  # fmt: skip
        assert np.linalg.norm(got - want) < 2e-5 * np.linalg.norm(want)
