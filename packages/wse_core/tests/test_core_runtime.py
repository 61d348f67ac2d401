"""The runtime's allocator setting: freed large blocks stay mapped, so reusing them costs no
page faults (the oracle is the kernel's minor-fault count, in a fresh process each time);
and the default device count follows the CPUs the process may use."""

import os
import platform
import subprocess
import sys

import pytest
from wse_core import WseError
from wse_core.host.runtime import keep_freed_memory

_BLOCK = 80 << 20  # above glibc's largest mmap threshold (32 MiB) and a thread arena (64 MiB)
_PROBE = f"""
import ctypes, resource, sys
from wse_core.host.runtime import keep_freed_memory
if sys.argv[1].startswith("keep"):
    assert keep_freed_memory(arenas=int(sys.argv[1][4:] or 1))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

def touch():  # what XLA does with an execution's temporaries: allocate, write, free
    p = libc.malloc({_BLOCK})
    ctypes.memset(p, 1, {_BLOCK})
    libc.free(p)

touch()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    touch()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 4)
"""


def _faults_per_reuse(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc malloc setting")
def test_freed_blocks_are_reused_without_page_faults():
    pages = _BLOCK // 4096
    # glibc's default: the block is unmapped on free and faulted in again on every reuse
    # (huge pages would fault 512x less; glibc does not ask for them by default)
    assert _faults_per_reuse("default") > pages / 2
    assert _faults_per_reuse("keep") < pages / 100
    assert _faults_per_reuse("keep0") < pages / 100  # glibc's arenas (`wse train`'s setting)


_ARENAS = """
import ctypes, os, sys, tempfile, threading
from wse_core.host.runtime import keep_freed_memory
assert keep_freed_memory(arenas=int(sys.argv[1]))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = libc.fdopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
go = threading.Barrier(4)

def hold():  # four threads, each holding a block while the others allocate theirs
    go.wait()
    libc.malloc(1 << 16)
    go.wait()

threads = [threading.Thread(target=hold) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with tempfile.TemporaryFile() as f:  # malloc_info writes one <heap nr=...> per arena
    libc.malloc_info(0, libc.fdopen(os.dup(f.fileno()), b"w+"))
    libc.fflush(None)
    f.seek(0)
    print(f.read().decode().count("<heap nr="))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc malloc setting")
def test_arenas_zero_gives_threads_their_own_malloc_arenas():
    # The oracle: glibc's own report of its arenas after four threads allocated at once.
    def heaps(arenas: int) -> int:
        cmd = [sys.executable, "-c", _ARENAS, str(arenas)]
        return int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    assert heaps(1) == 1
    assert heaps(0) > 1


_THREAD_HEAPS = """
import ctypes, resource, threading
from wse_core.host.runtime import keep_freed_memory
assert keep_freed_memory(arenas=0)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
out = []

def work():  # a thread's arena: 96 MiB of blocks outgrow its first heap (64 MiB at most)
    def touch():
        blocks = [libc.malloc(16 << 20) for _ in range(6)]
        for p in blocks:
            ctypes.memset(p, 1, 16 << 20)
        for p in blocks:
            libc.free(p)

    touch()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        touch()
    out.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 4)

t = threading.Thread(target=work)
t.start()
t.join()
print(out[0])
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="a glibc malloc setting")
def test_thread_arena_heaps_stay_mapped_when_emptied():
    # glibc unmaps a thread arena's extra heap once all its blocks are free, whatever the
    # trim threshold: without the pad each reuse faulted its 48 MiB in again (12,289 faults)
    cmd = [sys.executable, "-c", _THREAD_HEAPS]
    faults = float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert faults < (48 << 20) // 4096 / 100


def test_keep_freed_memory_refuses_bad_sizes():
    for bad in (0, -1, 1 << 31):
        with pytest.raises(WseError, match="keep_bytes"):
            keep_freed_memory(bad)
    with pytest.raises(WseError, match="arenas must be >= 0"):
        keep_freed_memory(arenas=-1)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_default_devices_follow_the_process_cpu_affinity():
    probe = (
        "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); "
        "from wse_core.host.runtime import default_devices; print(default_devices())"
    )
    env = {k: v for k, v in os.environ.items() if k != "WSE_DEVICES"}
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-c", probe, str(cpu)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 1  # pinned to one CPU: one device, whatever os.cpu_count() says


def test_numba_cache_lives_under_the_wse_cache_unless_set(tmp_path):
    """A fresh process: `configure` points numba's cache (NUMBA_CACHE_DIR) into the compile
    cache's folder, and numba reads it; a NUMBA_CACHE_DIR already set is kept."""
    probe = (
        "from wse_core.host.runtime import configure; configure(1); "
        "from numba.core import config; print(config.CACHE_DIR)"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["WSE_CACHE_DIR"] = str(tmp_path / "c")

    def run(extra: dict[str, str]) -> str:
        out = subprocess.run(
            [sys.executable, "-c", probe], env={**env, **extra}, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run({}) == str(tmp_path / "c" / "numba")
    assert run({"NUMBA_CACHE_DIR": str(tmp_path / "own")}) == str(tmp_path / "own")


def test_train_arenas_follow_the_cores_this_process_may_run_on():
    # One core: no two threads allocate at once, one arena. More: glibc's own (0).
    code = (
        "import os; os.sched_setaffinity(0, {0}); "
        "from wse_core.host.runtime import train_arenas; print(train_arenas())"
    )
    one = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert one.stdout.strip() == "1"
    from wse_core.host.runtime import train_arenas, usable_cores

    assert train_arenas() == (0 if usable_cores() > 1 else 1)
