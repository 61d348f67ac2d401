"""The PE kernels compiled by helper processes (`wse_hpc.md.pe_compile`): a helper leaves
the kernel in numba's on-disk cache (the oracle: numba's own cache files, found by the
kernel's module name), tracing under `deferred()` names a target without registering it,
and a registered target is never handed to a helper; one helper per kernel module."""

import subprocess

import pytest
from wse_hpc.md import pe_compile, pe_pairs
from wse_hpc.md.neighbours import build


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


def test_a_waited_target_is_never_started(monkeypatch):
    started = []
    monkeypatch.setattr(pe_compile, "_procs", {})
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    pe_compile.wait("wse_md_force")  # as a registration does
    pe_compile.start(["wse_md_force"])
    assert started == []


def test_one_helper_per_module_compiles_its_kernels_in_turn(monkeypatch):
    started = []
    monkeypatch.setattr(pe_compile, "_procs", {})
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **k: started.append(cmd[4:]) or cmd)
    pe_compile.start(["wse_md_force", "wse_md_density", "wse_md_build", "wse_md_force"])
    assert started == [["pe_pairs_numba", "force", "density"], ["pe_build_numba", "build"]]
    assert pe_compile._procs["wse_md_force"] is pe_compile._procs["wse_md_density"]
    pe_compile.start(["wse_md_density"])  # started before: no second process
    assert len(started) == 2


@pytest.mark.slow  # one numba compile of the build kernel in a child: ~5 s
def test_a_helper_leaves_the_kernel_in_numbas_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(pe_compile, "_procs", {})
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    pe_compile.start(["wse_md_build"])
    proc = pe_compile._procs["wse_md_build"]
    pe_compile.wait("wse_md_build")
    assert proc.returncode == 0
    assert list(tmp_path.rglob("pe_build_numba.build_ffi*.nbi"))  # numba's index of it
    assert pe_compile._procs["wse_md_build"] is None
