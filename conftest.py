"""Root pytest set-up: 8 virtual CPU devices before JAX starts, quiet caches in tmp.

Every test process sees 8 CPU devices, so meshes such as 2 x 4 and 4 x 2 are real meshes.
`WSE_TEST_CPU_DEVICES=N` gives N instead: with 1, a CPU run sees the one device a one-GPU
host gives its tests (tools/gpu_check.sh's CPU mode uses it to prove the GPU lane's split;
CLI tests that pin WSE_DEVICES=8 fail there, and only there: the CLI refuses to switch a
started CPU backend to another count, while on a GPU host the CPU devices are not the
default backend).

On a GPU host the GPUs are the default backend (the 8 CPU devices exist beside them):
- a test marked `cpu_devices` (the collection hook marks every test parametrized with a
  mesh of more than one device) needs the default backend to be those 8 CPU devices (a 2 x 4
  or 4 x 2 mesh from `jax.devices()`, or a CPU-only kernel such as TLR-MVM's numba FFI);
  where it is not, the test is skipped, and tools/gpu_check.sh runs these tests in a second
  pass with `JAX_PLATFORMS=cpu`;
- a test marked `gpu` runs only where the default backend is a GPU (`pytest -m gpu`);
- a test marked `fp32_matmul` runs under `jax.default_matmul_precision("highest")`: XLA runs
  DEFAULT-precision float32 dots on NVIDIA GPUs in TF32 (10-bit mantissa), so a test whose
  oracle check needs float32 products asks for them (a no-op on a CPU, which has no TF32).
"""

import os
import tempfile

import pytest

os.environ.setdefault("WSE_CACHE_DIR", os.path.join(tempfile.gettempdir(), "wse-test-jax-cache"))
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "wse-test-hf"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
CPU_DEVICES = int(os.environ.get("WSE_TEST_CPU_DEVICES", "8"))
# CLI tests run `wse` in this process: its root callback must keep the same devices.
os.environ["WSE_DEVICES"] = str(CPU_DEVICES)

from wse_core.host.runtime import configure  # noqa: E402

configure(CPU_DEVICES)

# Property-based (fuzz) tests: a fixed, derandomized seed in CI (CI=true) so a failure there
# reproduces; fresh random inputs elsewhere, so runs on laptops keep exploring. Each test
# sets its own max_examples, sized so all fuzz tests together take well under a minute.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")


@pytest.fixture(autouse=True)
def _devices_and_precision(request):
    """The `cpu_devices`, `gpu` and `fp32_matmul` markers (module doc)."""
    if request.node.get_closest_marker("cpu_devices") or request.node.get_closest_marker("gpu"):
        import jax

        backend, count = jax.default_backend(), len(jax.devices())
        if request.node.get_closest_marker("cpu_devices") and (backend != "cpu" or count < 8):
            pytest.skip(f"needs 8 CPU devices as the default backend; have {count} {backend}")
        if request.node.get_closest_marker("gpu") and backend != "gpu":
            pytest.skip(f"needs a GPU; the default backend is {backend}")
    if request.node.get_closest_marker("fp32_matmul"):
        import jax

        with jax.default_matmul_precision("highest"):
            yield
    else:
        yield


def pytest_collection_modifyitems(config, items):
    """A test parametrized with a mesh of more than one device (an argument named `*mesh*`:
    a shape such as (2, 4), or a device count such as `mesh_rows=2`) needs those devices: it
    is marked `cpu_devices`."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any("mesh" in name and _devices_in(v) > 1 for name, v in params.items()):
            item.add_marker(pytest.mark.cpu_devices)


def _devices_in(mesh) -> int:
    if isinstance(mesh, int) and not isinstance(mesh, bool):
        return mesh
    ok = isinstance(mesh, tuple) and len(mesh) == 2 and all(isinstance(n, int) for n in mesh)
    return mesh[0] * mesh[1] if ok else 0
