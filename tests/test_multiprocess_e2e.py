"""The same `wse` runs on 2 processes x 4 devices (jax.distributed on loopback) as on one
process with 8 devices: one global 8-device mesh either way."""

import subprocess

import numpy as np
import pytest
from wse_cli.testing import WSE, clean_env, launch_json, run_json

STENCIL = ["hpc", "stencil", "--grid", "16", "12", "8", "--preset", "small", "--json"]


@pytest.mark.timeout(300)
def test_heat_stencil_is_bit_identical_across_processes():
    args = STENCIL + ["--kind", "heat", "--steps", "30"]
    one, two = run_json(args), launch_json(args)
    assert one["wafer"]["mesh"] == two["wafer"]["mesh"]
    assert one["history"] == two["history"]  # only data movement: exact
    assert one["final"] == two["final"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bicgstab_converges_the_same_across_processes():
    args = STENCIL + ["--kind", "bicgstab", "--steps", "20", "--dtype", "fp32"]
    one, two = run_json(args), launch_json(args)
    a, b = np.array(one["history"])[:, 1], np.array(two["history"])[:, 1]
    # Dot products are psums whose order differs between 1 and 2 processes: fp32 round-off
    # only (~1e-7 per step), amplified by the Krylov recurrence: 1e-4 by iteration 7.
    np.testing.assert_allclose(a[:8], b[:8], rtol=1e-3)
    assert one["final"]["true_residual"] < 1e-5 and two["final"]["true_residual"] < 1e-5


@pytest.mark.timeout(400)
def test_md_run_is_bit_identical_across_processes(tmp_path):
    pot = tmp_path / "Cu.eam.alloy"
    subprocess.run(
        WSE + ["hpc", "md", "potential", "--elements", "Cu", "--out", str(pot)],
        check=True,
        capture_output=True,
        timeout=120,
        env=clean_env(WSE_DEVICES="1"),
    )
    args = [
        "hpc",
        "md",
        "--lattice",
        "fcc",
        "--element",
        "Cu",
        "--a",
        "3.615",
        "--cells",
        "4",
        "4",
        "4",
        "--potential",
        str(pot),
        "--steps",
        "20",
        "--thermo-every",
        "5",
        "--temperature-K",
        "300",
        "--preset",
        "small",
        "--json",
    ]
    one, two = run_json(args), launch_json(args)
    assert one["grid"] == two["grid"] and one["atoms"] == two["atoms"] == 256
    assert one["thermo"] == two["thermo"]  # energies, temperature, pressure: bit-identical
