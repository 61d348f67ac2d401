"""Hunt 77, `wse wafer defects --load`. Broken before: `--load` of a map whose `seed` is a
uint64 2**64 - 1 then `--save` crashed with an OverflowError traceback (exit 1); a member
named `dead` without `.npy` was refused as "There is no item named 'dead.npy' in the archive
is missing"; `--json` showed a file's rate 1.0 beside 167 dead of 761,542.

Oracles: the hunt's commands, NumPy's reading of each file (`np.load`), the dead fraction
counted with NumPy."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "250"}


def _run(*args, code: int = 0) -> str:
    got, out = invoke(ROOT, [str(a) for a in args], env=WIDE)
    assert got == code, out[-2000:]
    return out


@pytest.fixture(scope="module")
def wse2_map(tmp_path_factory):
    """`wse wafer defects -p wse2 --save a.npz`: the hunt's map (167 dead)."""
    path = tmp_path_factory.mktemp("maps") / "a.npz"
    _run("wafer", "defects", "-p", "wse2", "--save", path)
    return np.load(path)["dead"]


def _refused(tmp_path, path, said: str) -> str:
    out = _run("wafer", "defects", "-p", "wse2", "--load", path, "--save", tmp_path / "b2.npz",
               code=2)  # fmt: skip
    assert said in out and len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
    assert not (tmp_path / "b2.npz").exists()
    return out


def test_a_uint64_seed_is_refused_at_load(tmp_path, wse2_map):
    np.savez(tmp_path / "bigseed.npz", dead=wse2_map, seed=np.uint64(2**64 - 1))
    _refused(tmp_path, tmp_path / "bigseed.npz", "seed must be an integer in [0, 2**63 - 1]")


def test_a_bare_dead_member_is_read_as_numpy_reads_it(tmp_path, wse2_map):
    buf = io.BytesIO()
    np.save(buf, wse2_map)
    with zipfile.ZipFile(tmp_path / "bare.npz", "w") as z:
        z.writestr("dead", buf.getvalue())
    oracle = np.load(tmp_path / "bare.npz")["dead"]
    out = json.loads(_run("wafer", "defects", "-p", "wse2", "--load", tmp_path / "bare.npz",
                          "--json"))  # fmt: skip
    assert out["dead"] == np.argwhere(oracle).tolist() and out["dead_pes"] == oracle.sum()


def test_a_rate_that_cannot_draw_the_map_is_refused(tmp_path, wse2_map):
    np.savez(tmp_path / "rate1.npz", dead=wse2_map, rate=1.0)
    n, pes = int(wse2_map.sum()), wse2_map.size
    _refused(tmp_path, tmp_path / "rate1.npz", f"`rate` 1 cannot draw {n:,} dead PEs of {pes:,}")


def test_the_measured_fraction_is_shown_beside_a_stated_rate(tmp_path, wse2_map):
    np.savez(tmp_path / "half.npz", dead=wse2_map, rate=0.5)
    out = json.loads(_run("wafer", "defects", "-p", "wse2", "--load", tmp_path / "half.npz",
                          "--json"))  # fmt: skip
    assert out["rate"] == 0.5 and out["dead_fraction"] == pytest.approx(wse2_map.mean())
    line = _run("wafer", "defects", "-p", "wse2", "--load", tmp_path / "half.npz")
    assert f"PEs, a dead fraction of {wse2_map.mean():.3g} (map " in line and ", rate 0.5)" in line
