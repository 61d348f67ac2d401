"""Hunt 64's `wse hpc tlrmvm`, `wse hpc stencil --kind bicgstab` and `wse hpc cfd --restart`
holes, through the CLI. Broken before:
- `tlrmvm compress` of a matrix of 1e-44 entries printed `||A - A_tlr||_F / ||A||_F =
  1.69e-01 (threshold 0.001)`, exit 0, and wrote the operator; the error it computes was
  never compared with --threshold;
- a timedelta64 matrix was a Traceback; a long double one printed NumPy's overflow warning
  and "NaN or infinite values";
- `tlrmvm run` of complex128 bases printed JAX's truncation warnings and priced complex128
  (5.00 µs against 1.62 µs for the same operator); bases of 1e300 ran and failed (exit 1);
- mixed BiCGSTAB on 256 x 256 x 64 warned of nothing and ended at a true residual of 3.8,
  worse than x = 0, "out of reach", without a word of --dtype fp32;
- `cfd --restart` from u = 1e30 ran and blamed --dt (even 1e-9, the smallest); a step file
  named 500 holding step 20 made every restart redo steps 20..30.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


def _smooth(n: int = 64) -> np.ndarray:
    x = np.linspace(0, 1, n)
    return 1.0 / (1.0 + 10 * np.abs(x[:, None] - x[None, :]))


def _compress(matrix: Path, out: Path) -> list:
    return ["hpc", "tlrmvm", "compress", "--matrix", matrix, "--nb", "16", "--threshold-rule",
            "tile", "--out", out]  # fmt: skip


# -- tlrmvm compress ----------------------------------------------------------------------
def test_compress_refuses_entries_below_fp32s_normal_range(tmp_path):
    np.save(tmp_path / "s.npy", _smooth() * 1e-44)
    message = "the operator's entries (largest 1e-44) lie below fp32's normal range (1.2e-38)"
    refused_in_one_line(ROOT, _compress(tmp_path / "s.npy", tmp_path / "op.npz"), message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npy"]


def test_compress_fails_when_its_dense_check_misses_the_threshold(tmp_path, monkeypatch):
    """A compression whose rebuilt operator misses --threshold is a fault (exit 1) and writes
    nothing; the printed error is NumPy's float64 figure of the same operator."""
    import wse_hpc.tlrmvm as tlrmvm

    real, made = tlrmvm.compress, []

    def off_by_a_percent(a, **kw):  # arithmetic gone wrong: the SVDs' figure says 1e-3 is met
        op = real(a, **kw)
        op.u_rows[0][:] *= np.float32(1.01)
        made.append(op)
        return op

    monkeypatch.setattr(tlrmvm, "compress", off_by_a_percent)
    a = _smooth().astype(np.float32)
    np.save(tmp_path / "m.npy", a)
    code, out = invoke(ROOT, _compress(tmp_path / "m.npy", tmp_path / "op.npz"))
    wide = a.astype(np.float64)
    frob = np.linalg.norm(made[0].dense().astype(np.float64) - wide) / np.linalg.norm(wide)
    assert code == 1 and out.strip().splitlines() == [
        f"Error: compression reached ||A - A_tlr||_F / ||A||_F = {frob:.3g}, above --threshold "
        "0.001, so no operator was written: fp32 arithmetic lost the matrix; scale it (entries "
        "within about 1e-30 .. 1e30) or loosen --threshold"
    ], out
    assert frob > 2e-3 and sorted(p.name for p in tmp_path.iterdir()) == ["m.npy"]


@pytest.mark.parametrize(
    ("make", "message"),
    [(lambda: np.ones((64, 64)).astype("m8[s]"),
      "the operator must hold real or complex numbers, got dtype timedelta64[s]"),
     (lambda: _smooth().astype(np.longdouble) * np.longdouble("1e4000"),
      "the operator holds 1e+4000, beyond fp32's range (+-3.4e38)")],
    ids=["timedelta64", "long double"],
)  # fmt: skip
def test_compress_names_a_matrix_fp32_cannot_hold_without_a_warning(tmp_path, make, message):
    if "4000" in message and np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 here")
    np.save(tmp_path / "m.npy", make())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy warning would be a Traceback, exit 1
        line = refused_in_one_line(ROOT, _compress(tmp_path / "m.npy", tmp_path / "o.npz"), message)
    assert line == f"Error: {message}"
    assert not (tmp_path / "o.npz").exists()


# -- tlrmvm run ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def operator(tmp_path_factory) -> Path:
    op = tmp_path_factory.mktemp("tlr") / "op.npz"
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", op])
    assert code == 0, out
    return op


def _run_json(op: Path) -> dict:
    args = ["hpc", "tlrmvm", "run", "--operator", op, "--preset", "small", "--json"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: JAX's "Explicitly requested dtype complex128"
        code, out = invoke(ROOT, args)
    assert code == 0, out
    return json.loads(out)


def test_run_prices_complex128_bases_as_the_complex64_it_runs(operator, tmp_path):
    data = dict(np.load(operator))
    wide = tmp_path / "c128.npz"
    np.savez(wide, **{**data, **{k: data[k].astype(np.complex128) for k in ("u", "v")}})
    plain, loaded = _run_json(operator), _run_json(wide)
    assert loaded["operator"] == plain["operator"]  # dtype complex64 in both
    assert loaded["operator"]["dtype"] == "complex64"
    assert loaded["predicted"]["predicted_s"] == plain["predicted"]["predicted_s"]  # was 3x


def test_run_refuses_bases_past_fp32_at_load(operator, tmp_path):
    data = dict(np.load(operator))
    u = data["u"].real.astype(np.float64)
    big = tmp_path / "big64.npz"
    np.savez(big, **dict(data, u=u * 1e300, v=data["v"].real.astype(np.float64)))
    held = f"{np.abs(u).max() * 1e300:.3g}"  # NumPy's largest |U|
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "run", "--operator", big, "--preset", "small"],
                        f"its U basis holds {held}, beyond fp32's range")  # fmt: skip


# -- stencil bicgstab ---------------------------------------------------------------------
@pytest.mark.cpu_devices  # the fp16 rounding measured on CPU devices (module doc of reach)
def test_mixed_bicgstab_past_its_reach_is_sent_to_fp32_and_never_ends_worse_than_x0():
    args = ["hpc", "stencil", "--kind", "bicgstab", "--grid", "256", "256", "64", "--json"]
    code, out = invoke(ROOT, args)
    lines = out.splitlines()
    warning = [line for line in lines if line.startswith("warning:")]
    assert len(warning) == 1 and warning[0].endswith("use --dtype fp32"), lines[:3]
    report = json.loads(next(line for line in lines if line.startswith("{")))
    assert report["final"]["true_residual"] <= 1.0  # x = 0's; was 3.79, worse than the start
    assert code == 1 and lines[-1] == f"not converged: {report['reason']}"
    assert report["reason"].endswith("use --dtype fp32") and "out of reach" not in lines[-1]


# -- cfd --restart ------------------------------------------------------------------------
def _step_file(path: Path, step: int, u: float = 0.0) -> Path:
    shape = (16, 8, 1)
    fields = {k: np.zeros(shape, np.float32) for k in ("v", "w", "p", "T")}
    fields["u"] = np.full(shape, u, np.float32)
    np.savez(path, step=step, time=0.5, lengths=np.array([2.0, 1.0, 1.0]),
             case=np.asarray("rayleigh-benard"), **fields)  # fmt: skip
    return path


def _restart(out: Path, *extra: str) -> list:
    return ["hpc", "cfd", "--grid", "16", "8", "1", "--steps", "10", "--preset", "small",
            "--out", out, "--restart", *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("u", "extra", "message"),
    [(1e30, ("--dt", "1e-9"), "'s u holds 1e+30; its square overflows fp32 (past 1.8e+19), so "
      "the run would blow up at any --dt: restart from a sound step file"),
     (1e6, (), "'s u reaches 1e+06: at the default step 0.01 that crosses 8e+04 cells of "
      "0.125 per step (the explicit step's CFL limit is 1); restart from a sound step file, "
      "or give --dt 6.2e-08 or less")],
    ids=["square past fp32", "CFL"],
)  # fmt: skip
def test_restart_refuses_absurd_velocities_naming_the_file(tmp_path, u, extra, message):
    # the oracle of the CFL line: u dt / h = 1e6 x 0.01 / (1 / 8); the default step is half
    # central fluxes' 2 nu / U^2 = 0.02 at Ra 1e4, Pr 1 (hunt 72; before it, half the
    # advective limit h / 1 = 0.125 on this 16 x 8 grid of aspect 2: 0.0625)
    path = _step_file(tmp_path / "step_0000021.npz", 21, u)
    refused_in_one_line(ROOT, _restart(tmp_path, *extra), f"--restart: {path}{message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0000021.npz"]


def test_restart_refuses_a_step_file_named_for_another_step(tmp_path):
    path = _step_file(tmp_path / "step_0000500.npz", 20)
    line = refused_in_one_line(ROOT, _restart(tmp_path), "holds step 20")
    assert line == f"Error: --restart: {path} holds step 20 (its name says 500); rename it " + (
        "step_0000020.npz"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0000500.npz"]  # no step 30
