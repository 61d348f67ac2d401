"""MD's host-side plans on disk (`wse_hpc.md.plan_cache`): a stored value comes back equal to
what its maker returns, each input (array bytes, plain values) selects its own entry, and
without a cache directory nothing is stored; the plan a run uses is the same from disk."""

import numpy as np
from wse_core import preset
from wse_hpc.md import exec_cache, plan_cache
from wse_hpc.md.config import MdConfig
from wse_hpc.md.lattice import crystal
from wse_hpc.md.simulate import run_md
from wse_hpc.md.zhou04 import zhou04


def _counting(value):
    calls = []

    def make():
        calls.append(1)
        return value

    return make, calls


def test_a_stored_value_is_loaded_and_keys_by_every_input(monkeypatch, tmp_path):
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    a = np.arange(12.0).reshape(3, 4)
    make, calls = _counting((np.array([1, 2, 3]), 7))
    first = plan_cache.cached("k", (a, 1.5), make)
    again = plan_cache.cached("k", (a.copy(), 1.5), make)
    assert len(calls) == 1
    np.testing.assert_array_equal(again[0], first[0])
    assert again[1] == 7
    b = a.copy()
    b[0, 0] = np.nextafter(b[0, 0], 1.0)  # one ulp: another entry
    for key in ((b, 1.5), (a, 1.25), (a.astype(np.float32), 1.5)):
        plan_cache.cached("k", key, make)
    plan_cache.cached("other", (a, 1.5), make)
    assert len(calls) == 5
    assert len(list((tmp_path / plan_cache.SUBDIR).glob("*.pkl"))) == 5


def test_no_cache_directory_makes_every_time(monkeypatch):
    monkeypatch.setattr(exec_cache, "_root", lambda: None)
    make, calls = _counting(3)
    assert plan_cache.plan_path("k", (1,)) is None
    assert plan_cache.cached("k", (1,), make) == 3 == plan_cache.cached("k", (1,), make)
    assert len(calls) == 2


def test_an_unreadable_entry_is_made_again(monkeypatch, tmp_path):
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    make, calls = _counting("x")
    plan_cache.cached("k", (2,), make)
    plan_cache.plan_path("k", (2,)).write_bytes(b"truncated")
    assert plan_cache.cached("k", (2,), make) == "x"
    assert len(calls) == 2


def test_a_run_plans_the_same_from_disk(monkeypatch, tmp_path):
    pot = zhou04(["Cu"], knots=500)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(steps=0, temperature_K=600.0, spec=preset("wse3"))
    monkeypatch.setattr(exec_cache, "_root", lambda: None)
    fresh = run_md(s, pot, cfg)
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    stored, loaded = run_md(s, pot, cfg), run_md(s, pot, cfg)
    assert len(list((tmp_path / plan_cache.SUBDIR).glob("*.pkl"))) == 4
    for res in (stored, loaded):
        assert (res.plan, res.tile) == (fresh.plan, fresh.tile)
        np.testing.assert_array_equal(res.structure.forces_eV_A, fresh.structure.forces_eV_A)
