"""The CPU attention kernels compiled ahead (`sdpa_cpu.compile_early` over
`wse_core.host.compile_ahead`): a helper is started exactly where the kernels will be used
(`applies` agrees with `usable` on arrays of that head dim and dtype), for the forward alone
or both directions; a first use starts one where none was (never compiling in-process) and
waits for it before it loads the handler; a helper leaves both handlers in numba's on-disk
cache (the oracle: numba's own index, `numba_ffi.stored`); a cold run and a warm one give the
same bits."""

from __future__ import annotations

import subprocess
import types

import jax
import jax.numpy as jnp
import pytest
from wse_core.host import compile_ahead
from wse_models import _sdpa_numba, sdpa_cpu

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or not sdpa_cpu._numba(), reason="CPU and numba only"
)
KERNELS = "wse_models._sdpa_numba"


@pytest.fixture
def started(monkeypatch):
    """The handler names of each helper started (none really), numba's cache taken as empty."""
    out = []

    def popen(cmd, **kwargs):
        assert cmd[3] == KERNELS
        out.append(cmd[5:])
        return types.SimpleNamespace(stdout=None)

    monkeypatch.setattr(compile_ahead, "_helpers", {})
    monkeypatch.setattr(compile_ahead, "stored", lambda module, name: False)
    monkeypatch.setattr(subprocess, "Popen", popen)
    return out


@pytest.mark.parametrize(
    "dtype, hd, backward, want",
    [
        (jnp.float32, 32, True, [["sdpa_fwd", "sdpa_bwd"]]),
        (jnp.float32, 8, False, [["sdpa_fwd"]]),  # generation, eval: the forward only
        ("float32", 12, True, [["sdpa_fwd", "sdpa_bwd"]]),  # a ModelConfig's dtype name
        (jnp.bfloat16, 32, True, []),
        (jnp.float32, 6, True, []),
    ],
)
def test_a_helper_is_started_where_the_kernels_will_be_used(dtype, hd, backward, want, started):
    sdpa_cpu.compile_early(hd, dtype, backward=backward)
    assert started == want
    q = jnp.ones((1, 1, 1, 4, hd), dtype)
    kv = jnp.ones((1, 1, 4, hd), dtype)
    assert sdpa_cpu.applies(hd, dtype) == sdpa_cpu.usable(q, kv, kv, dtype) == bool(want)
    sdpa_cpu.compile_early(hd, dtype, backward=backward)  # started before: no second helper
    assert len(started) == len(want)


def test_a_first_use_starts_a_helper_waits_for_it_then_loads(monkeypatch):
    """Never compiled in-process: a helper (none where `compile_early`'s was started or the
    cache holds the handler, `start`) and the handler loaded from numba's cache."""
    calls = []
    monkeypatch.setattr(
        compile_ahead, "start", lambda module, names: calls.append(("start", *names))
    )
    monkeypatch.setattr(compile_ahead, "wait", lambda module, name: calls.append(("wait", name)))
    monkeypatch.setattr(_sdpa_numba, "handler", lambda name: calls.append(("load", name)))
    monkeypatch.setattr("wse_core.host.pe_ffi.register", lambda target, handler: target)
    assert sdpa_cpu._target.__wrapped__("sdpa_bwd") == "wse_models_sdpa_bwd"
    assert calls == [("start", "sdpa_bwd"), ("wait", "sdpa_bwd"), ("load", "sdpa_bwd")]


@pytest.mark.slow  # numba compiles both kernels in a child: ~7 s
def test_a_helper_leaves_both_kernels_in_numbas_cache(tmp_path, monkeypatch):
    import numba.core.config

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the child's
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", str(tmp_path))  # this process's
    monkeypatch.setattr(compile_ahead, "_helpers", {})
    sdpa_cpu.compile_early(32, jnp.float32, backward=True)
    helper = compile_ahead._helpers[(KERNELS, "sdpa_fwd")]
    assert helper is not None and helper is compile_ahead._helpers[(KERNELS, "sdpa_bwd")]
    for name in ("sdpa_fwd", "sdpa_bwd"):
        compile_ahead.wait(KERNELS, name)
        assert compile_ahead.stored(KERNELS, name)
    assert helper.proc.wait(timeout=30) == 0


# fixed inputs through both handlers, written to argv[1]: one run of a fresh process
_RUN = """
import sys
import jax, jax.numpy as jnp, numpy as np
from wse_models import sdpa_cpu
rng = np.random.default_rng(0)
q = jnp.asarray(rng.standard_normal((2, 2, 2, 64, 32)), jnp.float32)
k, v = (jnp.asarray(rng.standard_normal((2, 2, 64, 32)), jnp.float32) for _ in range(2))
mask = jnp.tril(jnp.ones((64, 64), bool))[None]
out, probs = jax.jit(sdpa_cpu.forward)(q, k, v, mask)
d_out = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)
grads = jax.jit(sdpa_cpu.backward)(q, k, v, mask, probs, out, d_out)
np.savez(sys.argv[1], out, probs, *grads)
"""


@pytest.mark.slow  # a fresh process compiles both kernels (~7 s of CPU), then one loads them
def test_a_cold_run_rounds_as_a_warm_one(tmp_path):
    """The first run on an empty numba cache (its handlers compiled by helpers) and the next
    (loaded from the cache) give the same bits; compiled in-process, 3-33% of each output
    came out a few ulps apart (`compile_ahead`'s module doc)."""
    import os
    import sys

    import numpy as np

    env = os.environ | {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    runs = []
    for run in ("cold", "warm"):
        path = tmp_path / f"{run}.npz"
        subprocess.run([sys.executable, "-c", _RUN, str(path)], env=env, check=True)
        runs.append(np.load(path))
    cold, warm = runs
    assert len(cold.files) == 5
    for name in cold.files:
        np.testing.assert_array_equal(cold[name], warm[name], err_msg=name)
