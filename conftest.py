"""Root pytest set-up: 8 virtual CPU devices before JAX starts, quiet caches in tmp.

Every test process sees 8 CPU devices, so meshes such as 2 x 4 and 4 x 2 are real meshes.
"""

import os
import tempfile

os.environ.setdefault("WSE_CACHE_DIR", os.path.join(tempfile.gettempdir(), "wse-test-jax-cache"))
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "wse-test-hf"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# CLI tests run `wse` in this process: its root callback must keep the 8 devices.
os.environ["WSE_DEVICES"] = "8"

from wse_core.runtime import configure  # noqa: E402

configure(8)

# Property-based (fuzz) tests: a fixed, derandomized seed in CI (CI=true) so a failure there
# reproduces; fresh random inputs elsewhere, so runs on laptops keep exploring. Each test
# sets its own max_examples, sized so all fuzz tests together take well under a minute.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
