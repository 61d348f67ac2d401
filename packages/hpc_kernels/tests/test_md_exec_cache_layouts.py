"""A program loaded from MD's disk cache (`wse_hpc.md.exec_cache`) returns arrays that a
freshly traced program takes as its own type. Stop 73's Python 3.12 lane (JAX 0.12.1) failed
in `wse demo`: the loaded `init` program's outputs carried an unpickled copy of JAX's
`AutoLayout`, unequal to JAX's own, and the chunk's `while_loop` refused its carry ("the
layouts do not match"). Oracle: NumPy's value of the same arithmetic."""

import jax
import jax._src.compilation_cache
import jax.numpy as jnp
import numpy as np
import pytest
from wse_hpc.md import exec_cache


@pytest.mark.smoke  # the newest-JAX lane runs it
def test_a_loaded_programs_output_enters_a_traced_while_loop(monkeypatch, tmp_path):
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    monkeypatch.setattr(jax._src.compilation_cache, "is_cache_used", lambda backend: False)
    x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    key = ("layout-test", 1)
    exec_cache.compiled(jax.jit(lambda a: (a * 2.0, a.sum() > 0)), (x,), key)  # stored
    assert len(list((tmp_path / exec_cache.SUBDIR).glob("*.bin"))) == 1
    loads = []
    real_load = exec_cache._load
    monkeypatch.setattr(exec_cache, "_load", lambda p: (real_load(p), loads.append(p))[0])
    loaded = exec_cache.compiled(jax.jit(lambda a: (a * 2.0, a.sum() > 0)), (x,), key)
    assert loads  # the stored program, not a new trace
    y, flag = loaded(x)

    def run(state):  # the shape of `Runner.chunk`: a counter and a state with a flag
        def body(c):
            i, (a, f) = c
            return i + 1, (a + 1.0, f & (a.sum() > 0))

        return jax.lax.while_loop(lambda c: c[0] < 3, body, (jnp.int32(0), state))[1]

    out, still = jax.jit(run)((y, flag))
    np.testing.assert_array_equal(np.asarray(out), np.arange(6.0).reshape(2, 3) * 2 + 3)
    assert bool(still)
