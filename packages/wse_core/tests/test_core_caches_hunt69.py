"""The compile caches under a full disk (`ulimit -f`, a quota) and after a cut entry, hunt 69
(`wse_core.host.compile_caches`). Before the fixes:
- numba's cache write that failed stopped the run: `wse hpc md` was `Error: cannot write:
  File too large`, naming no file, though its --out would have fit;
- JAX's cache write that failed printed JAX's 2-line warning and left the entry cut (at
  4,096 bytes under `ulimit -f 4`), and every later run warned that it could not read it,
  never writing it again.
Each case runs in a child (a file-size limit, a fresh cache folder, JAX or numba imported
after `configure`, as the `wse` command does).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

CHILD = """import resource, sys
from wse_core.host.runtime import configure
configure(1)
if sys.argv[1] != "unlimited":  # as `ulimit -f`: a write past it fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
{body}
"""

JAX_BODY = """import jax, jax.numpy as jnp
print(float(jax.jit(lambda x: jnp.sin(x) * 2 + 1)(jnp.float32(0.5))))
"""

NUMBA_BODY = """sys.path.insert(0, sys.argv[2])
import kernels
print(kernels.plus_one(41), kernels.twice(21))
"""

KERNELS = """from numba import njit

@njit(cache=True)
def plus_one(x):
    return x + 1

@njit(cache=True)
def twice(x):
    return 2 * x
"""


def _run(cache: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WSE_", "NUMBA_", "JAX_"))}
    env.update(WSE_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    code = CHILD.format(body=body)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=100)  # fmt: skip


def _sin(stdout: str) -> bool:
    """Whether the child printed sin(0.5) * 2 + 1 (float32: to a few units in the last place)."""
    return float(stdout) == pytest.approx(math.sin(0.5) * 2 + 1, rel=1e-6)


def _note(folder: Path) -> str:
    return (
        f"note: the compile cache {folder} cannot be written (File too large); the run goes "
        "on without it; set WSE_CACHE_DIR to a writable folder with room\n"
    )


def _entries(cache: Path) -> dict[str, bool]:
    """Every file of JAX's cache folder: whether it is a whole entry (decompresses)."""
    from jax._src.compilation_cache import decompress_executable

    def whole(p: Path) -> bool:
        try:
            decompress_executable(p.read_bytes())
        except Exception:  # noqa: BLE001 - any failure is a cut entry
            return False
        return p.name.endswith("-cache")

    return {p.name: whole(p) for p in cache.iterdir() if p.is_file()}


def test_a_jax_cache_that_takes_no_new_entry_is_one_note_and_leaves_nothing_cut(tmp_path):
    cache = tmp_path / "jax"
    full = _run(cache, JAX_BODY, "512")
    # before: JAX's "UserWarning: Error writing persistent compilation cache entry for
    # 'jit__lambda_': OSError: [Errno 27] File too large" and a 512-byte cut entry left
    assert (full.returncode, full.stderr) == (0, _note(cache)) and _sin(full.stdout)
    assert _entries(cache) == {}  # no cut entry, no temporary file
    fine = _run(cache, JAX_BODY, "unlimited")  # the disk fine again: stored whole
    assert (fine.returncode, fine.stderr) == (0, "") and _sin(fine.stdout)
    assert _entries(cache) and all(_entries(cache).values()), _entries(cache)


def test_a_cut_jax_cache_entry_is_compiled_and_stored_again_without_a_warning(tmp_path):
    cache = tmp_path / "jax"
    assert _run(cache, JAX_BODY, "unlimited").returncode == 0
    entry = max(cache.glob("jit__lambda*-cache"), key=lambda p: p.stat().st_size)
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])  # as a SIGKILL or an older run's full disk
    again = _run(cache, JAX_BODY, "unlimited")
    # before: "UserWarning: Error reading persistent compilation cache entry for 'jit__lambda':
    # error: Error -5 while decompressing data: incomplete or truncated stream", every run
    assert (again.returncode, again.stderr) == (0, "") and _sin(again.stdout)
    assert all(_entries(cache).values()) and len(entry.read_bytes()) >= len(whole) // 2 + 1


def test_a_numba_cache_that_takes_no_new_entry_is_one_note_and_the_kernels_run(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "kernels.py").write_text(KERNELS)
    cache = tmp_path / "cache"
    full = _run(cache, NUMBA_BODY, "64", str(tmp_path / "src"))
    # before: OSError: [Errno 27] File too large, a traceback (`wse hpc md`: "Error: cannot
    # write: File too large")
    assert (full.returncode, full.stdout, full.stderr) == (0, "42 42\n", _note(cache / "numba"))
    assert not [p for p in (cache / "numba").rglob("*") if p.is_file() and p.stat().st_size]
    fine = _run(cache, NUMBA_BODY, "unlimited", str(tmp_path / "src"))
    assert (fine.returncode, fine.stdout, fine.stderr) == (0, "42 42\n", "")
    assert len(list((cache / "numba").rglob("*.nbc"))) == 2  # stored once the disk has room
