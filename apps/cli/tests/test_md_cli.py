"""`wse hpc md`: a potential written and read back, an evaluation checked against the NumPy
oracle through the extended XYZ it writes, and the errors users can cause."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner(env={"WSE_DEVICES": "8"})  # the root conftest runs JAX with 8 devices
LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]


@pytest.fixture(scope="module")
def cu_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("md") / "Cu.eam.alloy"
    r = runner.invoke(
        app,
        [
            "hpc",
            "md",
            "potential",
            "--table",
            "zhou04",
            "--elements",
            "Cu",
            "--out",
            str(path),
            "--knots",
            "500",
        ],
    )
    assert r.exit_code == 0, r.output
    return path


def test_potential_command_writes_a_readable_setfl(tmp_path):
    from wse_hpc.md import read_potential

    out = tmp_path / "CuNi.eam.alloy"
    r = runner.invoke(
        app,
        ["hpc", "md", "potential", "--elements", "Cu", "Ni", "--out", str(out), "--knots", "300"],
    )
    assert r.exit_code == 0, r.output
    pot = read_potential(out)
    assert pot.elements == ("Cu", "Ni") and pot.nr == 300


def test_steps_zero_writes_energies_and_forces_equal_to_the_oracle(cu_file, tmp_path):
    from wse_hpc.md import read_potential, read_xyz
    from wse_hpc.md.reference import eam_reference

    out = tmp_path / "e.xyz"
    r = runner.invoke(
        app,
        [
            "hpc",
            "md",
            *LATTICE,
            "--potential",
            str(cu_file),
            "--steps",
            "0",
            "--out",
            str(out),
            "--json",
            "--preset",
            "small",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    frames = read_xyz(out)
    assert len(frames) == 1
    frame = frames[0]
    pot = read_potential(cu_file)
    ref = eam_reference(pot, frame.positions_A, frame.species(pot.elements), frame.box_A)
    # fp32 kernel: per-atom energies to ~1e-6 eV, the perfect crystal's forces vanish
    np.testing.assert_allclose(frame.energies_eV, ref.energy_eV, atol=2e-5)
    assert np.abs(frame.forces_eV_A).max() < 1e-3
    assert d["thermo"][0]["pe"] == pytest.approx(ref.total_eV, rel=1e-6)
    assert d["predicted_timesteps_per_s"] > 0
    # the window and candidates it used: M covers the most neighbours any atom has within
    # cutoff + skin (all pairs, minimum image), with list_caps' 10% headroom + 2
    dist = frame.positions_A[:, None] - frame.positions_A[None]
    dist -= frame.box_A * np.round(dist / frame.box_A)
    within = (np.sqrt((dist**2).sum(-1)) <= pot.cutoff_A + d["skin_A"]).sum(1) - 1
    assert within.max() <= d["candidates"] <= np.ceil(1.1 * within.max()) + 2
    kr, kc = d["window"]
    assert d["window_pes"] == (2 * kr + 1) * (2 * kc + 1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "1", "--dt-fs", "0"], "timestep must be positive"),
        (["--element", "Zr"], "no parameters for Zr"),
        (["--thermostat", "nose"], "unknown thermostat"),
        (["--thermostat", "nose-hoover"], "nose-hoover needs"),
        (["--mesh", "8", "8"], "mesh 8 x 8 needs 64 devices"),
    ],
)
def test_bad_input_exits_2_with_one_line(cu_file, args, message):
    r = runner.invoke(app, ["hpc", "md", *LATTICE, "--potential", str(cu_file), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_malformed_potential_names_the_line(tmp_path):
    bad = tmp_path / "bad.eam.alloy"
    bad.write_text("c\nc\nc\n1 Cu\n100 0.1 100 0.05 4.0\n29 63.5 3.6 fcc\n1.0 x\n")
    r = runner.invoke(app, ["hpc", "md", *LATTICE, "--potential", str(bad)])
    assert r.exit_code == 2 and "line 7 field 2" in r.output


@pytest.mark.slow
def test_a_run_writes_one_frame_per_thermo_row(cu_file, tmp_path):
    from wse_hpc.md import read_xyz

    out = tmp_path / "traj.xyz"
    r = runner.invoke(
        app,
        [
            "hpc",
            "md",
            *LATTICE,
            "--potential",
            str(cu_file),
            "--steps",
            "4",
            "--thermo-every",
            "2",
            "--temperature-K",
            "300",
            "--out",
            str(out),
            "--preset",
            "small",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "Performance:" in r.output and "timesteps/s" in r.output
    assert "candidates per PE (cutoff + 1 A skin)" in r.output and "window +-" in r.output
    frames = read_xyz(out)
    assert len(frames) == 3 and frames[2].velocities_A_ps is not None


def test_nose_hoover_prints_ecouple_and_a_conserved_econserve(cu_file):
    # LAMMPS's `thermo_style custom ... ecouple econserve`: the bath's energy moves TotEng,
    # Econserve = TotEng + Ecouple stays put (to the integrator's drift)
    args = ["hpc", "md", *LATTICE, "--potential", str(cu_file), "--steps", "40"]
    args += ["--thermo-every", "10", "--temperature-K", "600", "--preset", "small"]
    r = runner.invoke(app, [*args, "--thermostat", "nose-hoover", "--damp-fs", "20"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["Step"])
    assert lines[head].split()[-2:] == ["Ecouple", "Econserve"]
    rows = np.array([[float(v) for v in line.split()] for line in lines[head + 1 : head + 6]])
    tot, ecouple, econserve = rows[:, 3], rows[:, 6], rows[:, 7]
    np.testing.assert_allclose(econserve, tot + ecouple, atol=2e-8)  # printed with 8 digits
    assert np.ptp(tot) > 20 * np.ptp(econserve)  # the bath really exchanged energy
