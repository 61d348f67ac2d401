"""Hunt 81, holes 3 and 4, at the command line.

3. `wse hpc stencil --kind jacobi --grid 1 4 4 --boundary periodic` suggested `--grid 2 4 4`,
   which the run then refused (a periodic axis of the sine test field needs 3 points). Now
   the suggestion is a grid the run takes: each suggested grid is run here (the oracle).
4. `wse hpc tlrmvm compress` on a matrix that does not compress (Gaussian noise) printed
   "compression 0.51x" and `run` priced it, with no word that the dense matrix is smaller.
   Now both print one note line. Oracle: the ranks of each tile's float64 NumPy SVD under
   ecrc/tlrmvm's rule, the bases' bytes counted from them by hand (rank x (rows + cols)
   words of 4 bytes per tile) against the dense matrix's m x n x 4.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_hpc.tlrmvm.testing import ecrc_ranks

ROOT = typer.main.get_command(app)
ENV = {"WSE_DEVICES": "8"}
STENCIL = ["hpc", "stencil", "--preset", "small", "--steps", "2"]
SUGGESTED = re.compile(r"e\.g\. --grid (\d+) (\d+) (\d+)$")


@pytest.mark.parametrize(
    ("kind", "grid", "boundary", "want"),
    [
        ("jacobi", "1 4 4", "periodic", "3 4 4"),  # before: 2 4 4, refused by the run
        ("heat", "4 1 1", "periodic", "4 3 3"),
        ("jacobi", "1 4 4", "dirichlet", "2 4 4"),  # 2 points hold a dirichlet sine field
        ("wave25", "1 8 8", "periodic", "5 8 8"),  # the 25-point reach: 4 + 1
    ],
)
def test_a_suggested_stencil_grid_is_one_the_run_takes(kind, grid, boundary, want):
    args = [*STENCIL, "--kind", kind, "--grid", *grid.split(), "--boundary", boundary]
    line = refused_in_one_line(ROOT, args, "points on every axis", env=ENV)
    found = SUGGESTED.search(line)
    assert found is not None, line
    assert " ".join(found.groups()) == want
    args = [*STENCIL, "--kind", kind, "--grid", *found.groups(), "--boundary", boundary]
    code, out = invoke(ROOT, [*args, "--json"], ENV)
    assert code == 0, out  # the suggestion runs


N, NB, THRESHOLD = 512, 128, 1e-3
NOTE = re.compile(r"^note: TLR gains nothing here: .* are (\d+\.\d\d)x the dense matrix", re.M)


def _matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((N, N))  # full-rank tiles: no compression
    low = rng.standard_normal((N, 4)) @ rng.standard_normal((4, N))  # rank 4: compresses
    return {"noise": noise.astype(np.float32), "low_rank": low.astype(np.float32)}


@pytest.mark.parametrize("name", ["noise", "low_rank"])
def test_an_operator_bigger_than_its_dense_matrix_is_noted(tmp_path, name):
    a = _matrices()[name]
    ranks = ecrc_ranks(a, NB, THRESHOLD)
    bases_bytes = int(ranks.sum()) * (NB + NB) * 4  # U (nb x r) and V (nb x r) per tile, fp32
    dense_bytes = N * N * 4
    src, op = tmp_path / "a.npy", tmp_path / "op.npz"
    np.save(src, a)
    args = ["hpc", "tlrmvm", "compress", "--matrix", src, "--nb", NB, "--out", op]
    code, out = invoke(ROOT, [*args, "--threshold", THRESHOLD], ENV)
    assert code == 0, out
    code, ran = invoke(ROOT, ["hpc", "tlrmvm", "run", "--operator", op], ENV)
    assert code == 0, ran
    noted = [NOTE.search(text) for text in (out, ran)]
    if bases_bytes >= dense_bytes:  # the noise: ~1.96x (before: no note on either line)
        for found in noted:
            assert found is not None, (out, ran)
            assert float(found.group(1)) == pytest.approx(bases_bytes / dense_bytes, abs=6e-3)
    else:
        assert noted == [None, None], (out, ran)
    code, text = invoke(ROOT, [*args, "--threshold", THRESHOLD, "--json"], ENV)
    assert code == 0, text
    d = json.loads(text)
    assert d["bases_bytes"] == bases_bytes and d["dense_bytes"] == dense_bytes
    assert ("compression_note" in d) == (bases_bytes >= dense_bytes)
