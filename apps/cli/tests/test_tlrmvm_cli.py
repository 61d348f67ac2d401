"""`wse hpc tlrmvm`: compress then run, JSON checked against oracles; bad input exits 2."""

import json

import jax
import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core.host import pe_ffi
from wse_hpc.tlrmvm import load_operator
from wse_hpc.tlrmvm.seismic import green_operator

runner = CliRunner()


def _auto_kernel() -> str:
    """What `--kernel auto` runs here: the PEs' numba kernels (CPU-only FFI targets) where the
    default backend is the CPU and numba is installed, XLA dots elsewhere (a GPU)."""
    return "pe" if jax.default_backend() == "cpu" and pe_ffi.available() else "xla"


@pytest.fixture(autouse=True)
def _keep_test_devices(monkeypatch):
    # The `wse` root callback sets the device count (default: one per core); if it runs
    # before JAX starts it would switch the whole test process from 8 devices to 2.
    monkeypatch.setenv("WSE_DEVICES", "8")


def test_compress_then_run(tmp_path):
    out = tmp_path / "op.npz"
    r = runner.invoke(
        app,
        [
            "hpc",
            "tlrmvm",
            "compress",
            "--n",
            "200",
            "--nb",
            "32",
            "--threshold",
            "1e-3",
            "--threshold-rule",
            "tile",  # the whole operator within 1e-3
            "--out",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    op = load_operator(out)
    a = green_operator(n=200)
    achieved = np.linalg.norm(op.dense() - a) / np.linalg.norm(a)
    assert d["frobenius_rel_error"] == pytest.approx(achieved, rel=1e-4) and achieved <= 1e-3
    r = runner.invoke(
        app,
        [
            "hpc",
            "tlrmvm",
            "run",
            "--operator",
            str(out),
            "--preset",
            "small",
            "--batch",
            "2",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["rel_diff_vs_numpy_tlr"] < 2e-5  # fp32 rounding of length-32 GEMVs
    assert d["operator"]["compression_ratio"] == pytest.approx(op.compression_ratio)
    assert d["predicted"]["predicted_s"] > 0 and d["predicted_48_systems"]["systems"] == 48
    assert d["predicted"]["measured_wall_s"] == d["wafer_emulator_s"]
    # Cerebras's accounting covers the copies' tile-holding PEs, not the whole rectangles.
    cb = d["predicted_48_systems"]["cerebras"]
    assert cb["rectangle_pes"] == 48 * 750 * 994
    assert (
        cb["program_pes"]
        == 48 * d["predicted_48_systems"]["copies_per_system"] * cb["tile_pes_per_copy"]
    )
    assert d["dense_gemv_s"] > 0 and d["wafer_emulator_s"] > 0
    assert d["kernel"] == _auto_kernel()
    base = ["hpc", "tlrmvm", "run", "--operator", str(out), "--preset", "small", "--json"]
    if _auto_kernel() == "xla":  # asked for where they cannot run, the PE kernels are refused
        r = runner.invoke(app, [*base, "--kernel", "pe"])
        assert r.exit_code == 2 and "kernel 'pe' needs numba, a CPU mesh" in r.output
    r = runner.invoke(app, [*base, "--kernel", "xla"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kernel"] == "xla" and d["rel_diff_vs_numpy_tlr"] < 2e-5
    r = runner.invoke(app, [*base, "--kernel", "gpu"])
    assert r.exit_code == 2 and "unknown kernel 'gpu'" in r.output


def test_npy_matrix_and_text_output(tmp_path):
    np.save(tmp_path / "a.npy", np.eye(40, dtype=np.float32) + 0.01)
    out = tmp_path / "a_op.npz"
    r = runner.invoke(
        app,
        [
            "hpc",
            "tlrmvm",
            "compress",
            "--matrix",
            str(tmp_path / "a.npy"),
            "--nb",
            "8",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "compression" in r.stdout and out.exists()
    r = runner.invoke(app, ["hpc", "tlrmvm", "run", "--operator", str(out), "--preset", "tiny"])
    assert r.exit_code == 0, r.output
    assert "predicted on tiny" in r.stdout and "vs measured" in r.stdout
    ran = {"pe": "PE compute: numba kernels", "xla": "PE compute: XLA dots"}[_auto_kernel()]
    assert ran in r.stdout  # the text says which kernel ran
    assert "Cerebras matvec accounting" in r.stdout


@pytest.mark.parametrize(
    "args, match",
    [
        (["compress", "--nb", "0", "--n", "64"], "nb"),
        (["compress", "--nb", "65", "--n", "64"], "nb"),
        (["compress", "--threshold", "1.5", "--n", "64", "--nb", "16"], "threshold"),
        (["compress", "--matrix", "x.txt"], ".npy"),
        (["run", "--operator", "missing.npz"], "does not exist"),
    ],
)
def test_bad_input_exits_2(tmp_path, args, match):
    if args[0] == "compress":
        args = [*args, "--out", str(tmp_path / "o.npz")]
    r = runner.invoke(app, ["hpc", "tlrmvm", *args])
    assert r.exit_code == 2, r.output
    assert match in r.output


def test_nonfinite_and_vector_npy_rejected(tmp_path):
    bad = np.ones((8, 8), np.float32)
    bad[1, 2] = np.inf
    np.save(tmp_path / "bad.npy", bad)
    np.save(tmp_path / "vec.npy", np.ones(8))
    for name, match in (("bad.npy", "infinite"), ("vec.npy", "2-D")):
        r = runner.invoke(
            app,
            [
                "hpc",
                "tlrmvm",
                "compress",
                "--matrix",
                str(tmp_path / name),
                "--nb",
                "4",
                "--out",
                str(tmp_path / "o.npz"),
            ],
        )
        assert r.exit_code == 2 and match in r.output, r.output
