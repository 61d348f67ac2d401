"""`wse hpc tlrmvm compress --threshold` means ecrc/tlrmvm's acc, and says so (hunt 71).

Before: `--threshold 1e-3` held each tile to 1e-3 of its own norm (1940 ranks on the n 1024,
nb 64 slice where ecrc/tlrmvm's acc, each tile within acc x ||A||_F, keeps 1128), the help
said only "Relative accuracy", and neither the compress line nor `run` said which rule.
Now `--threshold-rule matrix` (ecrc's, the default) or `tile` (the old rule), named on both
lines. Oracle: each tile's float64 NumPy SVD under ecrc's `saveUV` rule, written out here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_hpc.tlrmvm import load_operator
from wse_hpc.tlrmvm.seismic import green_operator
from wse_hpc.tlrmvm.testing import ecrc_ranks

ROOT = typer.main.get_command(app)
TLR = ["hpc", "tlrmvm"]
N, NB = 512, 64


@pytest.fixture(scope="module")
def slice_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tlr71") / "g.npy"
    np.save(path, green_operator(n=N))
    return path


def _compress(slice_file, out, *extra) -> str:
    args = [*TLR, "compress", "--matrix", slice_file, "--nb", NB, "--out", out, *extra]
    code, text = invoke(ROOT, args)
    assert code == 0, text
    return text


def test_the_default_is_ecrcs_acc_and_both_lines_say_so(slice_file, tmp_path):
    out = tmp_path / "m.npz"
    line = _compress(slice_file, out).strip()
    op = load_operator(out)
    np.testing.assert_array_equal(op.ranks, ecrc_ranks(np.load(slice_file), NB, 1e-3))
    assert op.rule == "matrix"
    assert (
        f"||A - A_tlr||_F / ||A||_F = {op.error_fro:.2e} (threshold 0.001, matrix rule: each "
        "tile within threshold x ||A||_F, as ecrc/tlrmvm's acc); " in line
    )
    code, text = invoke(ROOT, [*TLR, "run", "--operator", out, "--preset", "tiny"])
    assert code == 0, text
    assert text.splitlines()[0].endswith(
        "; matrix rule: each tile within threshold x ||A||_F, as ecrc/tlrmvm's acc; threshold "
        f"0.001, ||A - A_tlr||_F / ||A||_F {op.error_fro:.2e} (achieved, from compress)"
    )


def test_the_tile_rule_keeps_more_ranks_and_says_so(slice_file, tmp_path):
    out, tile = tmp_path / "m.npz", tmp_path / "t.npz"
    _compress(slice_file, out, "--json")
    text = _compress(slice_file, tile, "--threshold-rule", "tile")
    assert "(threshold 0.001, tile rule: each tile within threshold x its own norm)" in text
    d = json.loads(_compress(slice_file, tmp_path / "t2.npz", "--threshold-rule", "tile",
                             "--json"))  # fmt: skip
    assert d["threshold_rule"] == "tile" and d["frobenius_rel_error"] <= 1e-3
    assert load_operator(tile).ranks.sum() > load_operator(out).ranks.sum()


def test_the_help_names_both_rules():
    code, out = invoke(ROOT, [*TLR, "compress", "--help"])
    text = "".join(out.split())
    assert code == 0
    for words in ("each tile's error <= threshold x ||A||_F (ecrc/tlrmvm's acc;",
                  "tile: <= threshold x the tile's own norm", "[default: matrix]"):  # fmt: skip
        assert "".join(words.split()) in text


def test_an_unknown_rule_is_refused_and_nothing_written(tmp_path):
    args = [*TLR, "compress", "--n", 64, "--nb", 16, "--threshold-rule", "ecrc",
            "--out", tmp_path / "o.npz"]  # fmt: skip
    refused_in_one_line(ROOT, args, "unknown --threshold-rule 'ecrc'; use one of matrix, tile")
    assert list(tmp_path.iterdir()) == []
