"""Hunt 71, the CFD step files read back with the field's tools. Broken before:

- H1: the .vtk's cell-centre velocity took the face below cell 0 as a wall's zero on every
  axis, so on Rayleigh-Benard's periodic sides (x; y in 3D) the cells against x = 0 showed
  about half their velocity: the same flow rolled 4 cells along x gave a .vtk that was not
  the rolled .vtk (max |diff| 0.0049 where max |vx| was 0.0106). The .npz was right.
- H4: a cavity step file (.npz and .vtk) held a `T` of zeros, a field the cavity never
  solves; ParaView listed it as the temperature.

Oracles: the legacy VTK file parsed here by hand (its header and big-endian float32 blocks,
not `wse_hpc.fields.vtk.read_vtk`), a cell centre averaged by hand from the .npz faces, the
rolled state's file against the rolled file (a periodic axis has no place that is special),
and an uninterrupted run for the cavity restart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.cfd_steps import StepFileError, read_step
from wse_hpc.fields.runs import CfdConfig, run_cfd
from wse_hpc.fields.vtk import to_centres, write_vtk

SPEC = PRESETS["small"]
# the hunt's run reached t 3.3 in 40 steps of 0.0833; hunt 72's central-flux bound made the
# default step 0.01 (Ra 1e4, Pr 1), so the run takes 340 steps to the same flow
RB_STEPS = 340
STEP_RB, STEP5 = f"step_{RB_STEPS + 1:07d}", "step_0000005"  # the restarts' step (`rb_runs`)


def _parsed(path: Path) -> dict[str, np.ndarray]:
    """The cell arrays of a legacy VTK STRUCTURED_POINTS BINARY file, as (nx, ny, nz[, 3])
    float64, by the format's text (x fastest in each block, one newline after a block)."""
    data, pos, dims, out = path.read_bytes(), 0, None, {}
    while pos < len(data):
        end = data.index(b"\n", pos)
        words, pos = data[pos:end].decode("ascii").split(), end + 1
        if words and words[0] == "DIMENSIONS":
            dims = [int(w) - 1 for w in words[1:]]
        elif words and words[0] in ("VECTORS", "SCALARS"):
            k = 3 if words[0] == "VECTORS" else 1
            if k == 1:  # LOOKUP_TABLE default
                pos = data.index(b"\n", pos) + 1
            count = dims[0] * dims[1] * dims[2] * k
            block = np.frombuffer(data, ">f4", count, pos).astype(np.float64)
            block = block.reshape(dims[2], dims[1], dims[0], k).transpose(2, 1, 0, 3)
            out[words[1]] = block if k == 3 else block[..., 0]
            pos += 4 * count + 1
    return out


def test_a_centre_on_a_periodic_axis_averages_across_the_seam():
    face = np.array([1.0, 2.0, 3.0, 4.0]).reshape(4, 1, 1)
    # cell 0 lies between the face at x = 0 (the face n - 1 = 4, across the seam) and face 0
    assert to_centres(face, 0, periodic=True).ravel().tolist() == [2.5, 1.5, 2.5, 3.5]
    assert to_centres(face, 0).ravel().tolist() == [0.5, 1.5, 2.5, 3.5]  # a wall: zero below


def test_write_vtk_commutes_with_a_roll_along_its_periodic_axes(tmp_path):
    """3D, periodic in x and y (Rayleigh-Benard's sides), walls in z: random fields."""
    rng = np.random.default_rng(3)
    arrays = {n: rng.standard_normal((6, 5, 4)).astype(np.float32) for n in "uvwpT"}
    write_vtk(tmp_path / "a.vtk", arrays, (0.5, 0.5, 0.25), periodic=(True, True, False))
    rolled = {n: np.roll(a, (2, 3), axis=(0, 1)) for n, a in arrays.items()}
    write_vtk(tmp_path / "b.vtk", rolled, (0.5, 0.5, 0.25), periodic=(True, True, False))
    a, b = _parsed(tmp_path / "a.vtk"), _parsed(tmp_path / "b.vtk")
    for name in ("velocity", "p", "T"):
        np.testing.assert_array_equal(b[name], np.roll(a[name], (2, 3), axis=(0, 1)), name)
    u, v, w = (arrays[n].astype(np.float64) for n in "uvw")
    np.testing.assert_allclose(a["velocity"][0, 2, 1], [0.5 * (u[0, 2, 1] + u[5, 2, 1]),
                                                        0.5 * (v[0, 2, 1] + v[0, 1, 1]),
                                                        0.5 * (w[0, 2, 1] + w[0, 2, 0])],
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(a["velocity"][1, 0, 0, 2], 0.5 * w[1, 0, 0], rtol=1e-6)  # z wall


@pytest.fixture(scope="module")
def rb_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The hunt's run (Rayleigh-Benard 12 x 6 to t 3.4) and the same state rolled 4 cells
    along the periodic x, each restarted for one step (STEP_RB): since hunt 77 a --restart
    of 0 steps writes nothing, so the rolled state is written by a step of its own."""
    root = tmp_path_factory.mktemp("rb")
    cfg = dict(case="rayleigh-benard", grid=(12, 6, 1), spec=SPEC)
    run_cfd(CfdConfig(steps=RB_STEPS, out_dir=root / "r2", **cfg))
    (root / "r3").mkdir()
    with np.load(root / "r2" / f"step_{RB_STEPS:07d}.npz") as z:
        arrays = dict(z)
    for name in "uvwpT":
        arrays[name] = np.roll(arrays[name], 4, axis=0)
    np.savez(root / "r3" / f"step_{RB_STEPS:07d}.npz", **arrays)
    for run in ("r2", "r3"):
        run_cfd(CfdConfig(steps=1, out_dir=root / run, restart=True, **cfg))
    return root / "r2", root / "r3"


def test_a_rolled_rayleigh_benard_state_writes_the_rolled_vtk(rb_runs):
    r2, r3 = rb_runs
    a, b = _parsed(r2 / f"{STEP_RB}.vtk"), _parsed(r3 / f"{STEP_RB}.vtk")
    vx = a["velocity"][..., 0]
    assert np.abs(vx).max() > 5e-3  # rolls that move: the check has teeth
    # was 4.9e-3 off; now the fp32 round-off of a step from the rolled state (its sums in
    # another order: 5.8e-11 in the velocity, 4.7e-10 in p, measured at hunt 77)
    np.testing.assert_allclose(np.roll(b["velocity"], -4, axis=0), a["velocity"], atol=1e-7)
    np.testing.assert_allclose(np.roll(b["p"], -4, axis=0), a["p"], atol=1e-7)


def test_the_cells_against_x_0_average_the_face_across_the_seam(rb_runs):
    _, r3 = rb_runs
    with np.load(r3 / f"{STEP_RB}.npz") as z:
        u, v = z["u"].astype(np.float64), z["v"].astype(np.float64)
    vel = _parsed(r3 / f"{STEP_RB}.vtk")["velocity"]
    assert np.abs(u[-1]).max() > 5e-3  # the face at x = 0 (index 11) carries flow here
    for j in range(6):
        assert vel[0, j, 0, 0] == pytest.approx(0.5 * (u[0, j, 0] + u[11, j, 0]), abs=1e-9)
    for i in range(12):  # y is a wall (the plates): the face below cell 0 is zero
        assert vel[i, 0, 0, 1] == pytest.approx(0.5 * v[i, 0, 0], abs=1e-9)


CAVITY = dict(case="cavity", grid=(10, 10, 1), spec=SPEC)


def test_a_cavity_step_holds_no_temperature_and_restarts(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_cfd(CfdConfig(steps=5, out_dir=a, **CAVITY))
    with np.load(a / f"{STEP5}.npz") as z:
        assert "T" not in z.files and {"u", "v", "w", "p", "case"} <= set(z.files)  # was T = 0
    assert set(_parsed(a / f"{STEP5}.vtk")) == {"velocity", "p"}  # was velocity, p and T
    resumed = run_cfd(CfdConfig(steps=5, out_dir=a, restart=True, **CAVITY))
    assert resumed.report.extra["restarted_from_step"] == 5
    run_cfd(CfdConfig(steps=10, out_dir=b, **CAVITY))
    with np.load(a / "step_0000010.npz") as got, np.load(b / "step_0000010.npz") as want:
        assert "T" not in got.files and np.abs(want["u"]).max() > 1e-3
        for name in "uvwp":
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_an_older_cavity_step_with_a_t_of_zeros_still_restarts(tmp_path):
    run_cfd(CfdConfig(steps=5, out_dir=tmp_path / "new", **CAVITY))
    old = tmp_path / "old"
    old.mkdir()
    with np.load(tmp_path / "new" / f"{STEP5}.npz") as z:  # as every cavity step before
        np.savez(old / f"{STEP5}.npz", **{**z, "T": np.zeros((10, 10, 1), np.float32)})
    assert read_step(old / f"{STEP5}.npz", (10, 10, 1), case="cavity")["T"].shape == (10, 10, 1)
    # one step each (hunt 77: a restart of 0 steps writes nothing), the old and the new
    run = run_cfd(CfdConfig(steps=1, out_dir=old, restart=True, **CAVITY))
    assert run.report.extra["restarted_from_step"] == 5
    run_cfd(CfdConfig(steps=1, out_dir=tmp_path / "new", restart=True, **CAVITY))
    step6 = "step_0000006.npz"
    with np.load(old / step6) as z, np.load(tmp_path / "new" / step6) as w:
        assert "T" not in z.files
        np.testing.assert_array_equal(z["u"], w["u"])


def test_a_rayleigh_benard_step_without_t_is_still_refused(tmp_path):
    fields = {k: np.zeros((4, 2, 1), np.float32) for k in "uvwp"}
    path = tmp_path / "step_0000002.npz"
    np.savez(path, step=2, time=0.5, case=np.asarray("rayleigh-benard"), theta_offset=1, **fields)
    with pytest.raises(StepFileError, match=r"lacks the arrays T$"):
        read_step(path, (4, 2, 1))
    np.savez(path, step=2, time=0.5, **fields)  # no case: could be either, T is needed
    with pytest.raises(StepFileError, match=r"lacks the arrays T$"):
        read_step(path, (4, 2, 1), case="cavity")
