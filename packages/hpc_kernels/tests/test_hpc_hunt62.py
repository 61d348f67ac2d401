"""Hunt 62 in wse_hpc: shallow water under JAX_ENABLE_X64 (a float64 dt made the float32 loop
carry float64: fori_loop refused it); TLR compression of entries whose fp32 squares overflow
(rank 1 at error 0.47, written as if within the threshold); velocities past the blow-up
temperature read as a start; a CFD restart from a step of another case or domain; a program
rectangle larger than a grid shrunk under a preset."""

from __future__ import annotations

import importlib
import types

import jax
import numpy as np
import pytest
from wse_core.hw.spec import preset
from wse_hpc.cfd_steps import StepFileError, read_step
from wse_hpc.tlrmvm import TlrError, compress

# the module (the package's `compress` names the function)
compress_module = importlib.import_module("wse_hpc.tlrmvm.compress")

pytestmark = pytest.mark.timeout(300)


def test_shallow_water_keeps_its_float32_carry_under_x64():
    from wse_hpc.fields.swe import SweConfig, run_swe

    cfg = SweConfig(n=8, steps=2)
    plain = run_swe(preset("tiny"), cfg)
    with jax.enable_x64(True):
        wide = run_swe(preset("tiny"), cfg)
    assert wide.h.dtype == plain.h.dtype == np.float32
    np.testing.assert_array_equal(wide.h, plain.h)  # the same float32 arithmetic


def _matrix(n: int = 64) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, n)
    smooth = 1.0 / (1.0 + 10 * np.abs(x[:, None] - x[None, :]))  # low-rank off the diagonal
    return (smooth + 1e-4 * rng.standard_normal((n, n))).astype(np.float32)


@pytest.mark.parametrize("scale", [2.0**66, 2.0**100, 2.0**-100], ids=["7e19", "1e30", "8e-31"])
@pytest.mark.parametrize("nb", [16, 128])  # 128: the randomized range finder's tiles
def test_compression_is_scale_invariant_where_fp32_squares_overflow(scale, nb):
    a = _matrix(256 if nb == 128 else 64)
    unit = compress(a, nb=nb, threshold=1e-3, rule="tile")  # the whole within 1e-3
    big = compress(a * np.float32(scale), nb=nb, threshold=1e-3, rule="tile")
    np.testing.assert_array_equal(big.ranks, unit.ranks)  # a power of 2: the same tiles
    assert big.error_fro == pytest.approx(unit.error_fro, rel=1e-6)
    # the oracle: the operator rebuilt densely, in float64, against the matrix
    dense = big.dense().astype(np.float64)
    want = (a * np.float32(scale)).astype(np.float64)
    assert np.linalg.norm(dense - want) / np.linalg.norm(want) <= 1e-3


def test_a_tile_whose_norm_overflows_fp32_is_refused():
    a = np.full((32, 32), 3e38, np.float32)
    with pytest.raises(TlrError, match=r"tile \(0, 0\) has norm 4.8e\+39, past fp32's largest"):
        compress(a, nb=16, threshold=1e-3)


def test_an_operator_that_misses_its_threshold_is_refused(monkeypatch):
    def rank_zero(t, eps, rng, norm):  # broken arithmetic: the whole tile dropped
        return t[:, :0], t[:0].T, norm**2

    monkeypatch.setattr(compress_module, "_compress_tile", rank_zero)
    with pytest.raises(TlrError, match=r"= 1, above the threshold 0.001"):
        compress(_matrix(), nb=16, threshold=1e-3, rule="tile")


def test_copies_per_system_stay_within_a_grid_shrunk_under_the_preset():
    from wse_hpc.tlrmvm.bandwidth import copies_per_system

    plan = types.SimpleNamespace(grid=(10, 10))
    assert copies_per_system(plan, preset("wse2")) == (750 // 10) * (994 // 10)
    shrunk = preset("wse2").replace(pe_rows=100)  # the preset's rectangle of 750 rows kept
    assert copies_per_system(plan, shrunk) == (100 // 10) * (994 // 10)


@pytest.mark.parametrize(("temp_K", "refused"), [(0.99e5, False), (1.01e5, True)])
def test_velocities_past_the_blow_up_temperature_are_refused(temp_K, refused):
    from wse_core.errors import WseError
    from wse_hpc.md.run_setup import refuse_hot_start
    from wse_hpc.md.thermo import thermo_row

    masses = np.full(32, 63.546)
    v = np.random.default_rng(1).standard_normal((32, 3))
    v *= np.sqrt(temp_K / thermo_row(0, masses, v, np.zeros(32), 0.0, 1.0).temp)
    assert thermo_row(0, masses, v, np.zeros(32), 0.0, 1.0).temp == pytest.approx(temp_K)
    if refused:
        with pytest.raises(WseError, match="initial temperature of 1.01e\\+05 K, past 1e\\+05 K"):
            refuse_hot_start(masses, v)
    else:
        refuse_hot_start(masses, v)
    v[0, 0] = 1e300  # its square overflows: inf, refused without a warning
    with pytest.raises(WseError, match="initial temperature of inf K"):
        refuse_hot_start(masses, v)


def _step_file(path, **extra):
    fields = {k: np.zeros((4, 2, 1), np.float32) for k in ("u", "v", "w", "p", "T")}
    np.savez(path, step=2, time=0.5, lengths=np.array([2.0, 1.0, 1.0]), **fields, **extra)
    return path


@pytest.mark.parametrize(
    ("extra", "written"),
    [({"theta_offset": 1}, "rayleigh-benard"),  # a file from before hunt 62
     ({"case": np.asarray("cavity")}, "cavity"),
     ({"case": np.asarray("rayleigh-benard"), "theta_offset": 1}, "rayleigh-benard")],
    ids=["theta_offset", "cavity", "rayleigh-benard"],
)  # fmt: skip
def test_a_step_file_of_another_case_is_refused(tmp_path, extra, written):
    path = _step_file(tmp_path / "step_0000002.npz", **extra)
    assert read_step(path, (4, 2, 1), case=written, lengths=(2.0, 1.0, 1.0))["step"] == 2
    other = next(c for c in ("rayleigh-benard", "cavity") if c != written)
    message = f"is a step of case '{written}'; this run's case is '{other}' \\(restart with"
    with pytest.raises(StepFileError, match=f"{message} --case {written}"):
        read_step(path, (4, 2, 1), case=other, lengths=(2.0, 1.0, 1.0))


@pytest.mark.parametrize("case", ["rayleigh-benard", "cavity"])
def test_a_step_file_of_no_known_case_restarts_either(tmp_path, case):
    # a cavity's step from before hunt 62 (no `case`, no `theta_offset`), or one made by hand
    path = _step_file(tmp_path / "step_0000002.npz")
    assert read_step(path, (4, 2, 1), case=case, lengths=(2.0, 1.0, 1.0))["step"] == 2


@pytest.mark.parametrize("lengths", [np.array([3.0, 1.0, 1.0]), np.array([2.0, 1.0])])
def test_a_step_file_of_another_domain_is_refused(tmp_path, lengths):
    path = _step_file(tmp_path / "step_0000002.npz", theta_offset=1)
    with np.load(path) as z:
        data = {**z, "lengths": lengths}
    np.savez(path, **data)
    with pytest.raises(
        StepFileError,
        match=r"holds a domain of sides \[.*\]; this run's is "
        r"\[2.0, 1.0, 1.0\] \(restart with the --aspect",
    ):
        read_step(path, (4, 2, 1), case="rayleigh-benard", lengths=(2.0, 1.0, 1.0))
