"""Hunt 77, defect-map files. Broken before: a map whose `seed` was a uint64 past 2**63 - 1
loaded, then `save_defect_map` crashed (OverflowError at `np.int64(dm.seed)`), and
`DefectMap(dead, seed=2**63, rate=0)` was built; an .npz whose member is named `dead`
(no `.npy`; np.load reads it) was refused with "There is no item named 'dead.npy' in the
archive is missing"; a stated `rate` was never held against the map (rate 1.0 beside 167
dead of 761,542).

Oracles: NumPy's int64 range (`np.iinfo`), `np.load`'s reading of the same file, and the
draw's own arithmetic: `defect_map` marks a PE dead where `rng.random() < rate`, and
`random()` lies in [0, 1), so rate 0 marks none and rate 1 marks every PE.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from wse_core import remap
from wse_core.errors import DefectError, numpy_file_problem
from wse_core.hw.defect_files import load_defect_map, save_defect_map
from wse_core.hw.defects import DefectMap, defect_map
from wse_core.hw.spec import preset

INT64_MAX = int(np.iinfo(np.int64).max)  # 2**63 - 1, what an .npz's int64 seed holds
BOUND = "must be an integer in [0, 2**63 - 1]"


def _grid(spec, *dead_at):
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    for at in dead_at:
        dead[at] = True
    return dead


def _one_line(e: pytest.ExceptionInfo) -> str:
    line = str(e.value)
    assert "\n" not in line and "Traceback" not in line
    return line


# hole 1: a seed past int64 ------------------------------------------------------------------
@pytest.mark.parametrize("seed", [INT64_MAX + 1, 2**64 - 1, np.uint64(2**64 - 1), -1])
def test_a_map_refuses_a_seed_outside_int64(seed):
    with pytest.raises(DefectError) as e:
        DefectMap(dead=_grid(preset("tiny")), seed=seed, rate=0.0)
    assert BOUND in _one_line(e)


def test_the_largest_int64_seed_saves_and_reads_back(tmp_path):
    dm = DefectMap(dead=_grid(preset("tiny"), (2, 3)), seed=INT64_MAX, rate=0.25)
    path = save_defect_map(tmp_path / "m.npz", dm)
    assert int(np.load(path)["seed"]) == INT64_MAX  # NumPy's reading of the file
    assert load_defect_map(path, preset("tiny")) == dm


def test_a_files_uint64_seed_is_refused_at_load_naming_the_file(tmp_path):
    spec = preset("tiny")
    np.savez(tmp_path / "big.npz", dead=_grid(spec), seed=np.uint64(2**64 - 1))
    with pytest.raises(DefectError) as e:
        load_defect_map(tmp_path / "big.npz", spec)
    line = _one_line(e)
    assert line.startswith(f"{tmp_path / 'big.npz'}: ") and BOUND in line


def test_drawing_from_a_seed_past_int64_is_refused_before_the_draw():
    with pytest.raises(DefectError) as e:
        defect_map(preset("tiny"), INT64_MAX + 1)
    assert "defect seed " + BOUND in _one_line(e)
    assert defect_map(preset("tiny"), INT64_MAX).seed == INT64_MAX


# hole 2: members read as np.load reads them ---------------------------------------------
def _zip(path, **arrays):
    """An .npz whose members are named as given (np.savez adds `.npy`; other tools may not)."""
    with zipfile.ZipFile(path, "w") as z:
        for name, a in arrays.items():
            buf = io.BytesIO()
            np.save(buf, a)
            z.writestr(name, buf.getvalue())
    return path


def test_a_member_without_the_npy_suffix_is_read(tmp_path):
    spec = preset("small")
    dead = defect_map(spec, 3, 0.02).dead
    path = _zip(tmp_path / "bare.npz", dead=dead, seed=np.int64(3), rate=np.float64(0.02))
    oracle = np.load(path)  # NumPy reads `dead` and `seed` from the bare names
    got = load_defect_map(path, spec)
    assert np.array_equal(got.dead, oracle["dead"]) and got.seed == int(oracle["seed"])
    np.savez(tmp_path / "suffixed.npz", dead=dead, seed=3, rate=0.02)
    assert got == load_defect_map(tmp_path / "suffixed.npz", spec)
    assert remap(spec, got) == remap(spec, load_defect_map(tmp_path / "suffixed.npz", spec))


def test_one_name_given_both_ways_is_refused(tmp_path):
    spec = preset("tiny")
    path = _zip(tmp_path / "twice.npz", **{"dead": _grid(spec), "dead.npy": _grid(spec, (1, 1))})
    with pytest.raises(DefectError) as e:
        load_defect_map(path, spec)
    assert "`dead` twice, as 'dead' and 'dead.npy'" in _one_line(e)


def test_zipfiles_missing_member_is_one_sentence(tmp_path):
    path = _zip(tmp_path / "x.npz", other=np.zeros(2))
    with zipfile.ZipFile(path) as z, pytest.raises(KeyError) as e:
        z.getinfo("dead.npy")  # zipfile's own words: "There is no item named ... archive"
    said = numpy_file_problem(e.value)
    assert said == "member 'dead.npy' is missing"
    assert numpy_file_problem(KeyError("x is not a file in the archive")) == "array 'x' is missing"


# hole 3: a stated rate held against the map ----------------------------------------------
@pytest.mark.parametrize(("rate", "dead_at"), [(0.0, [(4, 4)]), (1.0, [(4, 4)])])
def test_a_rate_that_cannot_draw_the_map_is_refused(tmp_path, rate, dead_at):
    spec = preset("tiny")
    dead = _grid(spec, *dead_at)
    draws = np.random.default_rng(0).random((1000, *dead.shape)) < rate  # the draw's rule
    assert not any(np.array_equal(d, dead) for d in draws)  # ... never gives this map
    np.savez(tmp_path / "m.npz", dead=dead, rate=rate)
    with pytest.raises(DefectError) as e:
        load_defect_map(tmp_path / "m.npz", spec)
    line = _one_line(e)
    assert f"`rate` {rate:g} cannot draw {int(dead.sum())} dead PE of {dead.size}" in line
    assert "leave `rate` out" in line
    with pytest.raises(DefectError) as e:  # and never written: --load would refuse it
        save_defect_map(tmp_path / "out.npz", DefectMap(dead=dead, seed=None, rate=rate))
    assert "cannot save" in _one_line(e) and not (tmp_path / "out.npz").exists()


def test_any_other_rate_is_kept_beside_its_map(tmp_path):
    """0.5 can draw one dead PE of 81 (with probability 81 / 2**81): kept, not refused; the
    CLI shows the measured fraction beside it."""
    spec = preset("tiny")
    np.savez(tmp_path / "m.npz", dead=_grid(spec, (4, 4)), rate=0.5)
    assert load_defect_map(tmp_path / "m.npz", spec).rate == 0.5
    np.savez(tmp_path / "all.npz", dead=~_grid(spec), rate=1.0)  # rate 1: every PE dead
    assert (
        load_defect_map(tmp_path / "all.npz", spec).num_dead
        == spec.physical_rows * spec.physical_cols
    )
    np.savez(tmp_path / "none.npz", dead=_grid(spec), rate=0.0)
    assert load_defect_map(tmp_path / "none.npz", spec).num_dead == 0


def test_a_wafer_name_the_reader_refuses_is_not_written(tmp_path) -> None:
    """hunt 77 (jaxapi): a 300-character wafer name was saved, then refused on reading as
    "must be a single value (a short text)"; now refused before writing, naming the limit."""
    import numpy as np
    from wse_core.errors import DefectError
    from wse_core.hw.defect_files import MAX_NAME, save_defect_map
    from wse_core.hw.defects import DefectMap

    dm = DefectMap(dead=np.zeros((3, 4), dtype=bool), seed=1, rate=0.0)
    target = tmp_path / "long.npz"
    try:
        save_defect_map(target, dm, wafer="w" * (MAX_NAME + 1))
    except DefectError as e:
        assert f"at most {MAX_NAME}" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("a name past MAX_NAME was written")
    assert not target.exists()
    save_defect_map(target, dm, wafer="w" * MAX_NAME)  # the longest the reader takes
    assert str(np.load(target)["wafer"]) == "w" * MAX_NAME
