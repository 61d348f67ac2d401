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
