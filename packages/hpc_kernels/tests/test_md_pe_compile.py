"""The PE kernels compiled by helper processes (`wse_hpc.md.pe_compile` over
`wse_core.host.compile_ahead`): a helper leaves the kernel in numba's on-disk cache (the
oracle: numba's own cache files, found by the kernel's module name), tracing under
`deferred()` names a target without registering it, and a registered target is never handed
to a helper; one helper per kernel module."""

import dataclasses
import subprocess
import types

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.host import compile_ahead
from wse_core.hw.wafer import build_wafer
from wse_hpc.md import mapping, pe_compile, pe_pairs
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.lattice import crystal
from wse_hpc.md.neighbour_plan import active_per_block, list_caps
from wse_hpc.md.neighbours import build
from wse_hpc.md.zhou04 import zhou04


def test_deferred_tracing_names_targets_without_registering(monkeypatch):
    def registered(name):
        raise AssertionError(f"{name} registered while deferred")

    monkeypatch.setattr(pe_pairs, "_registered", registered)
    monkeypatch.setattr(build, "_build_registered", registered)
    with pe_compile.deferred():
        assert pe_pairs._target("density") == "wse_md_density"
        assert build._build_target("build") == "wse_md_build"
        assert pe_compile.deferring()
    assert not pe_compile.deferring()
    with pytest.raises(AssertionError, match="force registered"):
        pe_pairs._target("force")


def _no_processes(monkeypatch, cached=()):
    started = []

    def popen(cmd, **kwargs):
        started.append([cmd[3].rpartition(".")[2], *cmd[5:]])  # module, its kernels
        return types.SimpleNamespace(stdout=None)

    monkeypatch.setattr(compile_ahead, "_helpers", {})
    monkeypatch.setattr(compile_ahead, "stored", lambda module, name: name in cached)
    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


def test_a_waited_target_is_never_started(monkeypatch):
    started = _no_processes(monkeypatch)
    pe_compile.wait("wse_md_force")  # as a registration does
    pe_compile.start(["wse_md_force"])
    assert started == []


def test_one_helper_per_module_compiles_its_kernels_in_turn(monkeypatch):
    started = _no_processes(monkeypatch)
    pe_compile.start(["wse_md_force", "wse_md_density", "wse_md_build", "wse_md_force"])
    assert started == [["pe_pairs_numba", "force", "density"], ["pe_build_numba", "build"]]
    helpers = compile_ahead._helpers
    pairs = "wse_hpc.md.pe_pairs_numba"
    assert helpers[(pairs, "force")] is helpers[(pairs, "density")]
    pe_compile.start(["wse_md_density"])  # started before: no second process
    assert len(started) == 2


def test_a_kernel_in_numbas_cache_starts_no_helper(monkeypatch):
    started = _no_processes(monkeypatch, cached=("build",))
    pe_compile.start(["wse_md_force", "wse_md_build"])
    assert started == [["pe_pairs_numba", "force"]]
    pe_compile.wait("wse_md_build")  # nothing to wait for
    pe_compile.start(["wse_md_build"])
    assert len(started) == 1


def test_a_handler_is_stored_once_compiled_and_not_for_another_source(tmp_path):
    numba_ffi = pytest.importorskip("wse_core.host.numba_ffi")
    src = tmp_path / "kernels_for_cache_test.py"  # its own file: its own numba cache entry
    src.write_text("def body(frame_p):\n    return frame_p\n")
    namespace = {"__file__": str(src), "__name__": "kernels_for_cache_test"}
    exec(compile(src.read_text(), str(src), "exec"), namespace)
    handler = numba_ffi.handlers({"body": namespace["body"]})
    assert not handler.stored("body")
    handler("body")  # compiled and written to numba's cache
    assert handler.stored("body")


@pytest.mark.slow  # one numba compile of the build kernel in a child: ~5 s
def test_a_helper_leaves_the_kernel_in_numbas_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(compile_ahead, "_helpers", {})
    monkeypatch.setattr(compile_ahead, "stored", lambda module, name: False)  # this process's
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    pe_compile.start(["wse_md_build"])
    helper = compile_ahead._helpers[("wse_hpc.md.pe_build_numba", "build")]
    pe_compile.wait("wse_md_build")
    assert helper.proc.wait(timeout=30) == 0
    assert list(tmp_path.rglob("pe_build_numba.build_ffi*.nbi"))  # numba's index of it
    assert compile_ahead._helpers[("wse_hpc.md.pe_build_numba", "build")] is None


@pytest.mark.skipif(not pe_pairs.available(), reason="numba not installed")
@pytest.mark.parametrize("devices", [1, 2])
def test_the_kernels_named_before_the_lists_are_the_lists_kernels(devices):
    if len(jax.devices("cpu")) < devices:  # WSE_TEST_CPU_DEVICES=1 (the GPU lane's CPU mode)
        pytest.skip(f"needs {devices} CPU devices")
    pot, grid = zhou04(["Cu"], knots=200), (16, 16)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    wafer = build_wafer(preset("small"), grid=grid, devices=jax.devices("cpu")[:devices])
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A), s.positions_A, np.zeros(256, np.int32)
    )
    reach = pot.cutoff_A + 1.0
    kr, kc = mapping.window_needed(state, s.box_A, reach + 0.5)
    caps = tuple(list_caps(state, s.box_A, reach, kr, kc))
    plan = EamPlan(kr, kc, tuple(s.box_A), "float32", 1.0, caps, active_per_block(state, wafer))
    lists = build.pe_kernels(build.list_spec(wafer, pot, plan, 4096))
    assert build.pe_kernels_for(wafer, np.float32, plan) == lists
    assert build.pe_kernels_for(wafer, np.float32) == lists[:2]  # before the plan: the pairs
    assert len(lists) == 3 and ("half" in lists[0]) == (devices == 1)
    assert build.pe_kernels_for(wafer, np.float64, plan) == ()  # XLA's loops
    assert build.pe_kernels_for(wafer, np.float32, dataclasses.replace(plan, caps=())) == ()
