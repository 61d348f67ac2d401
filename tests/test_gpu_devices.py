"""On a GPU host the GPUs are the devices (the README's promise), and they compute right.

Marked `gpu`: `pytest -m gpu` runs them where JAX's default backend is a GPU; elsewhere the
root conftest skips them (and the default suite deselects them). tools/gpu_check.sh runs
them. Oracles: NumPy (shifts, the TLR-MVM product), float64 products, a subprocess's view of
`wse_core.host.runtime.configure`.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.hw.wafer import build_wafer
from wse_core.testing import np_shift

pytestmark = pytest.mark.gpu


def test_configure_keeps_the_gpus_as_the_devices():
    # `wse --devices 8` on a GPU host: 8 virtual CPU devices exist, the GPUs stay the default
    code = (
        "from wse_core.host.runtime import configure; configure(8); import jax; "
        "print(jax.default_backend(), len(jax.devices('cpu')), "
        "{d.platform for d in jax.devices()})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[:2] == ["gpu", "8"] and "'gpu'" in out.stdout


def test_the_wafer_lies_on_the_gpus_and_shifts_like_numpy():
    w = build_wafer(preset("small"), grid=(7, 10))
    assert {d.platform for d in w.mesh.devices.flat} == {"gpu"}
    x = np.random.default_rng(0).normal(size=(7, 10, 3)).astype(np.float32)
    xs = w.place(x)
    assert {s.device.platform for s in xs.addressable_shards} == {"gpu"}
    for d in "NSEW":
        got = w.gather(jax.jit(lambda a, d=d: fabric.shift(w, a, d))(xs))
        np.testing.assert_array_equal(got, np_shift(x, d))


@pytest.mark.fp32_matmul
def test_fp32_matmul_marker_gives_float32_products():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    got = np.asarray(jax.jit(jnp.dot)(a, b), np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # float32 accumulation over 512 terms: ~1e-6 relative; TF32 products would give ~1e-3
    assert np.linalg.norm(got - want) < 1e-5 * np.linalg.norm(want)


def test_tlrmvm_on_the_gpu_is_float32_accurate_without_asking():
    from wse_hpc.tlrmvm import compress, tlrmvm_numpy
    from wse_hpc.tlrmvm.engine import TlrEngine
    from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel

    op = compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)
    eng = TlrEngine.build(op, preset("small"), rank_chunk=3, batch=2)
    assert eng.kernel == "xla"  # the numba PE kernels run on CPU meshes only
    assert {d.platform for d in eng.wafer.mesh.devices.flat} == {"gpu"}
    x = random_vectors(53, 2, op.dtype)
    want = tlrmvm_numpy(op, x)
    # the NumPy oracle's RTOL of test_tlrmvm_wafer, under the session's default precision
    assert np.linalg.norm(eng.matvec(x) - want) < 2e-5 * np.linalg.norm(want)
