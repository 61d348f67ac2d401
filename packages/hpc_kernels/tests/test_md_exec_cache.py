"""MD's compiled programs on disk (`wse_hpc.md.exec_cache`): a run that loads them gives the
same result bit for bit as a run that traces and compiles them (the oracle: the run without
the disk cache), and anything that changes the program changes where it is stored."""

import dataclasses

import jax
import jax._src.compilation_cache
import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md import exec_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.lattice import crystal
from wse_hpc.md.simulate import run_md
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=500)


def _final(res):
    s = res.structure
    return s.positions_A, s.velocities_A_ps, s.forces_eV_A, [r.etotal for r in res.thermo]


def _same(a, b):
    for x, y in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[3] == b[3]


@pytest.mark.slow  # three compiles and one load: ~1.5 min idle
def test_loaded_programs_match_the_traced_ones_bit_for_bit(monkeypatch, tmp_path):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, 900.0, seed=3)
    cfg = MdConfig(steps=6, thermo_every=3, spec=preset("wse3"))
    monkeypatch.setattr(exec_cache, "_root", lambda: None)
    fresh = _final(run_md(s, POT, cfg))  # traced and compiled, nothing stored
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    # a fresh compile (only those are stored): JAX's compile cache off for this test
    monkeypatch.setattr(jax._src.compilation_cache, "is_cache_used", lambda backend: False)
    loads = []
    real_load = exec_cache._load
    # a load counts once it succeeded: `compiled` falls back to tracing when one fails, which
    # would give the same numbers (a stale FFI registration did, after the build kernel's
    # name took an argument)
    monkeypatch.setattr(exec_cache, "_load", lambda p: (real_load(p), loads.append(p))[0])
    stored = _final(run_md(s, POT, cfg))  # compiled and stored
    files = sorted((tmp_path / exec_cache.SUBDIR).glob("*.bin"))
    assert len(files) == 3 and not loads  # init, drift, one chunk length
    loaded = _final(run_md(s, POT, cfg))  # each program loaded, none traced
    assert sorted(loads) == files
    _same(stored, fresh)
    _same(loaded, fresh)
    other = dataclasses.replace(cfg, dt_fs=0.5 * cfg.dt_fs)  # a new timestep: new programs
    run_md(s, POT, other)
    assert len(list((tmp_path / exec_cache.SUBDIR).glob("*.bin"))) == 6


def test_every_program_input_changes_the_path(monkeypatch, tmp_path):
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    x = jnp.zeros((4, 3), jnp.float32)
    key = ("chunk", 3, ("static",))
    base = exec_cache.cache_path(key, (x,))
    assert base is not None and base.parent == tmp_path / exec_cache.SUBDIR
    assert exec_cache.cache_path(key, (jnp.zeros((4, 3), jnp.float32),)) == base
    changed = [
        exec_cache.cache_path(("chunk", 4, ("static",)), (x,)),  # steps per chunk
        exec_cache.cache_path(("chunk", 3, ("other",)), (x,)),  # a static choice
        exec_cache.cache_path(key, (jnp.zeros((4, 4), jnp.float32),)),  # a shape
        exec_cache.cache_path(key, (jnp.zeros((4, 3), jnp.int32),)),  # a dtype
        exec_cache.cache_path(key, ((x, x),)),  # the argument tree
        exec_cache.cache_path(key, (jax.random.key(0),)),  # a key array hashes too
    ]
    monkeypatch.setattr(exec_cache, "_code_hash", lambda: "edited source")
    changed.append(exec_cache.cache_path(key, (x,)))  # the stack's code
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_some_other_flag")
    changed.append(exec_cache.cache_path(key, (x,)))  # XLA's flags
    assert len({base, *changed}) == len(changed) + 1
    monkeypatch.setattr(exec_cache, "_root", lambda: None)
    assert exec_cache.cache_path(key, (x,)) is None  # no compile cache: nothing stored


def test_runner_key_follows_the_potential_and_the_settings():
    from wse_core.hw.wafer import build_wafer
    from wse_hpc.md.eam import EamPlan

    wafer = build_wafer(preset("wse3"), grid=(8, 8), devices=jax.devices()[:1])
    plan = EamPlan(k_rows=2, k_cols=2, box_A=(10.0, 10.0, 10.0))
    cfg = MdConfig(spec=preset("wse3"))
    base = exec_cache.runner_key(wafer, POT, plan, cfg, [63.546], 64)
    assert exec_cache.runner_key(wafer, zhou04(["Cu"], knots=500), plan, cfg, [63.546], 64) == base
    assert exec_cache.runner_key(wafer, zhou04(["Cu"], knots=400), plan, cfg, [63.546], 64) != base
    wider = dataclasses.replace(plan, k_cols=3)
    assert exec_cache.runner_key(wafer, POT, wider, cfg, [63.546], 64) != base
    half = dataclasses.replace(cfg, dt_fs=0.5)
    assert exec_cache.runner_key(wafer, POT, plan, half, [63.546], 64) != base
    assert exec_cache.runner_key(wafer, POT, plan, cfg, [63.546], 63) != base


def test_a_program_jax_cache_holds_is_compiled_afresh_and_stored(tmp_path):
    """After a change to the stack's code (a new source hash, the same HLO) JAX's compile
    cache holds the program but this cache does not: `compiled` must compile it afresh and
    store it (a compile-cache hit serialises without its kernels), so the next run loads it."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")  # fmt: skip
    saved = {n: getattr(jax.config, n) for n in names}
    fn = lambda: jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)  # noqa: E731 - new objects: no jit cache
    x = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    hits = []
    listen = lambda event, **_: hits.append(event)  # noqa: E731
    try:
        for n, v in zip(names, (str(tmp_path), 0.0, -1), strict=True):
            jax.config.update(n, v)
        cc.reset_cache()
        fn().lower(x).compile()  # JAX's compile cache now holds the program
        jax.monitoring.register_event_listener(listen)
        try:
            fn().lower(x).compile()
        finally:
            jax.monitoring.unregister_event_listener(listen)
        assert "/jax/compilation_cache/cache_hits" in hits  # the case this test is about
        exe = exec_cache.compiled(fn(), (x,), ("edited stack",))
        path = exec_cache.cache_path(("edited stack",), (x,))
        assert path is not None and path.exists()
        want = np.sin(x) * np.float32(3.0) + np.float32(1.0)
        np.testing.assert_allclose(exec_cache._load(path)(x), want, rtol=1e-6)
        np.testing.assert_array_equal(exe(x), exec_cache._load(path)(x))
        assert jax.config.jax_enable_compilation_cache  # left as it was
    finally:
        for n, v in saved.items():
            jax.config.update(n, v)
        cc.reset_cache()
