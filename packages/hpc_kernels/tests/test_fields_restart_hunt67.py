"""Hunt 67: `run_cfd(restart=True)` (`wse hpc cfd --restart`) from step files it or a user
wrote. Broken before:
- a step file whose `p` is int64 or float16 (a hand-made start: `p = np.zeros(shape, int)`)
  was an 80-line JAX traceback: p went into the fp32 loop carry uncast, unlike u, v, w, T;
- a Rayleigh-Benard step holding `case` but not `theta_offset` had its T (the full
  temperature, as every RB step is written) read as theta, and the conduction profile was
  added a second time on the next write: T spanned 0.12..1.80 between plates at 1 and 0,
  rc 0, no word. Whether T is the full temperature is now decided by the case; a file that
  names no case is refused for an RB run (its T could be either), in one line.

Oracles: an uninterrupted run of the same steps (the restart's fields equal it bit for bit
since hunt 72: `ATOL`), and the same file with p cast to float32 by NumPy.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields import FieldError
from wse_hpc.fields.runs import CfdConfig, run_cfd

STEP2, STEP4 = "step_0000002.npz", "step_0000004.npz"
# A restart equals the uninterrupted run bit for bit: since hunt 72 T is written in float64
# and theta read back from it exactly (`convection.theta_from`); before that the fp32
# round-off of writing T = theta + 1 - z left T off by an ulp or two (1.2e-7), the
# velocities and p by 3e-9. Before hunt 67's fix T was off by up to 0.81, u by 1.1e-6.
ATOL = {"T": 0.0, "u": 0.0, "v": 0.0, "w": 0.0, "p": 0.0}


def _rb(out: Path, steps: int, **kw):
    cfg = CfdConfig(case="rayleigh-benard", grid=(16, 8, 1), spec=PRESETS["small"], steps=steps,
                    out_dir=out, **kw)  # fmt: skip
    return run_cfd(cfg)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """An uninterrupted run of 4 steps, writing steps 2 and 4."""
    out = tmp_path_factory.mktemp("straight")
    _rb(out, 4, output_every=2)
    return out


def _edited(straight: Path, where: Path, edit) -> Path:
    """`where` holding the straight run's step 2, its arrays changed by `edit(arrays)`."""
    where.mkdir()
    with np.load(straight / STEP2) as z:
        arrays = dict(z)
    edit(arrays)
    np.savez(where / STEP2, **arrays)
    return where


def _restarted(folder: Path) -> dict[str, np.ndarray]:
    run = _rb(folder, 2, restart=True)
    assert run.report.extra["restarted_from_step"] == 2
    with np.load(folder / STEP4) as z:
        return dict(z)


def _drop(*keys: str):
    def edit(arrays: dict) -> None:
        for key in keys:
            del arrays[key]

    return edit


@pytest.mark.parametrize(
    "edit",
    [_drop(), _drop("theta_offset"), _drop("case")],
    ids=["as-written", "no-theta_offset", "before-hunt-62"],  # the last: theta_offset, no case
)
def test_a_rayleigh_benard_restart_equals_the_uninterrupted_run(straight, tmp_path, edit):
    got = _restarted(_edited(straight, tmp_path / "r", edit))
    with np.load(straight / STEP4) as want:
        for name, atol in ATOL.items():  # T first: the temperatures are what went wrong
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol, err_msg=name)
    assert 0 <= got["T"].min() and got["T"].max() <= 1  # between the plates (was 0.12..1.80)


def test_a_rayleigh_benard_step_naming_no_case_is_refused(straight, tmp_path):
    folder = _edited(straight, tmp_path / "n", _drop("case", "theta_offset"))
    before = (folder / STEP2).read_bytes()
    message = (
        f"--restart: {folder / STEP2} names no case (no `case` string, nor an older step's "
        "`theta_offset`), so whether its T is the full temperature (what a rayleigh-benard "
        "run writes) or theta cannot be told; save it with case='rayleigh-benard' and T the "
        "full temperature"
    )
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        _rb(folder, 2, restart=True)
    assert [p.name for p in folder.iterdir()] == [STEP2]
    assert (folder / STEP2).read_bytes() == before


@pytest.mark.parametrize("dtype", [np.int64, np.float16])
def test_a_pressure_of_another_dtype_is_read_as_float32(straight, tmp_path, dtype):
    def as_dtype(arrays: dict) -> None:
        arrays["p"] = (arrays["p"] * 1000).astype(dtype)  # int: values that survive the cast

    got = _restarted(_edited(straight, tmp_path / "d", as_dtype))

    def as_float32(arrays: dict) -> None:  # the oracle: NumPy's cast, saved as fp32
        as_dtype(arrays)
        arrays["p"] = arrays["p"].astype(np.float32)

    want = _restarted(_edited(straight, tmp_path / "f", as_float32))
    assert got["p"].dtype == np.float32
    for name in "uvwpT":
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_cavity_restart_keeps_its_t_as_stored(tmp_path):
    """The cavity's T is its state (no conduction profile): unchanged by the case's rule."""
    spec = PRESETS["tiny"]
    cfg = dict(case="cavity", grid=(8, 8, 1), spec=spec, out_dir=tmp_path)
    run_cfd(CfdConfig(steps=2, **cfg))
    with np.load(tmp_path / STEP2) as z:
        arrays = {**z, "T": np.full((8, 8, 1), 0.25, np.float32)}
    np.savez(tmp_path / STEP2, **arrays)
    shutil.copy(tmp_path / STEP2, tmp_path / "kept.npz")
    run = run_cfd(CfdConfig(steps=0, restart=True, **cfg))
    assert run.report.extra["restarted_from_step"] == 2
    # the state read (since hunt 77 a restart of 0 steps leaves its step file as it was)
    np.testing.assert_array_equal(run.fields["T"], arrays["T"])
    with np.load(tmp_path / STEP2) as z:
        np.testing.assert_array_equal(z["T"], arrays["T"])
