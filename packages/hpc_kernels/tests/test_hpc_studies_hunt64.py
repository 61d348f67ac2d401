"""Hunt 64 in wse_hpc's experiments. Broken before:

- `netl-rayleigh-benard` priced on `preset("wse2")`, not `assumed_spec`: under `--assume
  clock_hz=1.7e9` the calibration was refitted for the faster clock (more cycles a fitted
  constant) but the cycles were divided by the preset's 8.5e8 Hz; s_per_step came out 2.5x
  slower for a clock twice as fast, and every assumed spec field was half applied.
- `ltaief23-tlrmvm`'s cached operator, once damaged (a copy cut short), made every later run
  exit 2 ("cannot read TLR operator '.../green_9801_nb256_0.001_s0.npz': File is not a zip
  file") until the user found and deleted it; each `--seed` cached another 74 MB, unbounded.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from wse_core import preset
from wse_core.cost.assumptions import assume, assumed_spec
from wse_hpc.fields.alternative import wafer_energy_j
from wse_hpc.studies import ltaief23_tlrmvm as tlr
from wse_hpc.studies import netl_rayleigh_benard as netl
from wse_hpc.tlrmvm.compress import compress, load_operator
from wse_hpc.tlrmvm.seismic import GreenMatrix

# Every study whose predictions priced a spec from `preset(...)`, not `assumed_spec(...)`, and
# the spec it prices on (the others' measured parts use presets for physics alone, no time).
PRICED_ON_PRESETS = [pytest.param(netl, "wse2", id=netl.NAME)]


@pytest.mark.parametrize("clock_hz", [None, 1.7e9], ids=["preset clock", "assumed 1.7 GHz"])
@pytest.mark.parametrize(("study", "wafer"), PRICED_ON_PRESETS)
def test_an_assumed_clock_divides_the_cycles_its_mechanisms_give(monkeypatch, study, wafer,
                                                                  clock_hz):  # fmt: skip
    monkeypatch.setattr(study, "_measured_cg", lambda quick: (10.0, {}))  # physics: no time
    changes = {"clock_hz": clock_hz} if clock_hz else {}
    with assume(**changes):
        rows = study.run(quick=True, seed=0).predictions
        spec = assumed_spec(wafer)
    hz = clock_hz or preset(wafer).clock_hz
    steps = [r for r in rows if r.name == "s_per_step"]
    assert len(steps) == 4 and spec.clock_hz == hz
    for r in steps:  # seconds = the mechanisms' cycles over the clock assumed
        assert r.value == pytest.approx(sum(r.mechanisms.values()) / hz, rel=1e-9)
    energy = {r.params["nz"]: r.value for r in rows if r.name == "wafer_j_per_step"}
    for r in steps:  # the wafer's power is the assumed spec's too
        assert energy[r.params["nz"]] == pytest.approx(wafer_energy_j(spec, r.value), rel=1e-12)


SMALL = {"n": 512, "nb": 64, "threshold": 1e-3}  # the paper's 9801 takes ~40 s


@pytest.fixture
def small_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WSE_CACHE_DIR", str(tmp_path / "jax"))
    monkeypatch.setattr(tlr, "PAPER", SMALL)
    return tmp_path / "tlrmvm"


def _cached(folder, seed: int):
    return folder / f"green_512_nb64_0.001_s{seed}.npz"


def test_a_damaged_cached_operator_is_rebuilt_with_a_note(small_cache, capsys):
    tlr.paper_operator(0)
    path = _cached(small_cache, 0)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy cut short
    op = tlr.paper_operator(0)
    err = capsys.readouterr().err
    assert err == (f"note: rebuilding a damaged cache file (cannot read TLR operator "
                   f"'{path}': File is not a zip file)\n")  # fmt: skip
    fresh = compress(GreenMatrix(512), nb=64, threshold=1e-3, seed=0)  # the oracle
    assert np.array_equal(op.ranks, fresh.ranks)
    assert all(np.array_equal(a, b) for a, b in zip(op.u_rows, fresh.u_rows, strict=True))
    again = load_operator(path)  # the file on disk is whole again
    assert all(np.array_equal(a, b) for a, b in zip(again.v_cols, fresh.v_cols, strict=True))
    assert sorted(os.listdir(small_cache)) == [path.name]


def test_the_cache_keeps_the_latest_used_slices_only(small_cache):
    for seed in range(5):
        tlr.paper_operator(seed)
        os.utime(_cached(small_cache, seed), (1000 + seed, 1000 + seed))  # in build order
    kept = {_cached(small_cache, s).name for s in (2, 3, 4)}
    assert tlr.CACHE_KEEP == 3 and set(os.listdir(small_cache)) == kept
    tlr.paper_operator(2)  # used now: kept over seed 3, the oldest used
    tlr.paper_operator(5)
    assert set(os.listdir(small_cache)) == {_cached(small_cache, s).name for s in (2, 4, 5)}
