"""numba handlers compiled ahead by helper processes (`wse_core.host.compile_ahead`): a helper
leaves each handler in numba's on-disk cache (the oracle: numba's own index of it, read by
`numba_ffi.stored`) and a wait returns once its handler is there, before the helper's later
ones; a helper that fails or hangs is given up without an error; a handler in the cache, or
waited for before, starts no helper; one helper per `start`, whose names run in turn."""

from __future__ import annotations

import subprocess
import time
import types

import pytest

pytest.importorskip("numba")
from wse_core.host import compile_ahead  # noqa: E402

# a kernel module: `slow`'s compile waits for a file the test writes, so a test can see
# `fast`'s wait return while the helper is still busy
KERNELS = """
import os, time
from wse_core.host.numba_ffi import handlers

def fast(frame_p):
    return frame_p

def slow(frame_p):
    return frame_p

def broken(frame_p):
    return undefined_name(frame_p)

_bodies = {"fast": fast, "slow": slow, "broken": broken}
_handler = handlers(_bodies)

def handler(name):
    if name == "slow" and os.environ.get("AHEAD_GATE"):
        while not os.path.exists(os.environ["AHEAD_GATE"]):
            time.sleep(0.05)
    return _handler(name)

handler.stored = _handler.stored
"""


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A package of its own (its own numba cache entries) holding KERNELS; numba's cache in
    tmp_path for this process and its helpers."""
    import numba.core.config

    name = f"ahead_{tmp_path.name.replace('-', '_')}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("raise ImportError('a helper imports no package')")
    (tmp_path / name / "kernels.py").write_text(KERNELS)
    cache = tmp_path / "numba_cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", str(cache))
    monkeypatch.setattr(compile_ahead, "_helpers", {})
    monkeypatch.syspath_prepend(str(tmp_path))
    package = types.ModuleType(name)  # the package's __init__ would refuse: a stand-in here
    package.__path__ = [str(tmp_path / name)]
    monkeypatch.setitem(__import__("sys").modules, name, package)
    return f"{name}.kernels"


def _helper(module, name):
    return compile_ahead._helpers[(module, name)]


def test_a_wait_returns_once_its_handler_is_cached_before_the_helpers_next(
    kernels, tmp_path, monkeypatch
):
    gate = tmp_path / "gate"
    monkeypatch.setenv("AHEAD_GATE", str(gate))
    assert not compile_ahead.stored(kernels, "fast")
    compile_ahead.start(kernels, ["fast", "slow"])
    helper = _helper(kernels, "fast")
    assert helper is _helper(kernels, "slow")  # one process, the names in turn
    compile_ahead.wait(kernels, "fast")
    assert compile_ahead.stored(kernels, "fast")
    assert helper.proc.poll() is None  # still held at `slow`
    assert not compile_ahead.stored(kernels, "slow")
    gate.write_text("")
    compile_ahead.wait(kernels, "slow")
    assert compile_ahead.stored(kernels, "slow")
    assert helper.proc.wait(timeout=30) == 0
    assert _helper(kernels, "fast") is None and _helper(kernels, "slow") is None


def test_a_failing_helper_is_given_up(kernels):
    compile_ahead.start(kernels, ["broken", "fast"])
    helper = _helper(kernels, "broken")
    compile_ahead.wait(kernels, "fast")  # the output ended without it: compiled here instead
    assert helper.proc.returncode not in (None, 0)
    assert not compile_ahead.stored(kernels, "fast")


def test_a_hung_helper_is_killed_after_wait_s(kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("AHEAD_GATE", str(tmp_path / "never"))
    monkeypatch.setattr(compile_ahead, "WAIT_S", 0.5)
    compile_ahead.start(kernels, ["slow"])
    helper = _helper(kernels, "slow")
    t0 = time.monotonic()
    compile_ahead.wait(kernels, "slow")
    assert time.monotonic() - t0 < 10
    assert helper.proc.returncode is not None  # killed, and waited for


def _no_processes(monkeypatch):
    started = []

    def popen(cmd, **kwargs):
        started.append([cmd[3], *cmd[5:]])  # module, then its handler names
        return types.SimpleNamespace(stdout=None)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


def test_a_waited_or_cached_handler_is_never_started(kernels, monkeypatch):
    started = _no_processes(monkeypatch)
    monkeypatch.setattr(compile_ahead, "stored", lambda module, name: name == "slow")
    compile_ahead.wait(kernels, "fast")  # as a registration does
    compile_ahead.start(kernels, ["fast", "slow"])
    assert started == []
    compile_ahead.start(kernels, ["broken", "fast", "broken"])
    compile_ahead.start(kernels, ["broken"])  # started before: no second process
    assert started == [[kernels, "broken"]]
