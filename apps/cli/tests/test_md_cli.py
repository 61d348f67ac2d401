"""`wse hpc md`: a potential written and read back, an evaluation checked against the NumPy
oracle through the extended XYZ it writes, and the errors users can cause."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.testing import NO_JAX_PROBE

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
        (["--steps", "1", "--dt-fs", "0"], "--dt-fs must be a finite number >= 0.001 (fs)"),
        (["--element", "Zr"], "no parameters for Zr"),
        (["--thermostat", "nose"], "unknown thermostat"),
        (["--thermostat", "nose-hoover"], "nose-hoover needs"),
        (["--mesh", "8", "8"], "mesh 8 x 8 needs 64 devices"),
    ],
)
def test_bad_input_exits_2_with_one_line(cu_file, args, message):
    # a case's own --element replaces the lattice's Cu (given twice is refused since hunt 67)
    lattice = (
        [a for a in LATTICE if a not in ("--element", "Cu")] if "--element" in args else LATTICE
    )
    r = runner.invoke(app, ["hpc", "md", *lattice, "--potential", str(cu_file), *args])
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


def test_a_timestep_past_the_limit_is_refused_before_jax_and_writes_nothing(cu_file, tmp_path):
    """`--dt-fs 1e6` (issue 43: 7.6e17 K with rc 0, then rc 1 after a 5.7 s run): refused at
    parsing, one line naming md_dt_fs's variable, no JAX, no --out file; the limit lifted,
    the same timestep is not refused for its size."""
    import subprocess
    import sys

    from wse_cli.testing import clean_env
    from wse_core.host.limits import limit

    out = tmp_path / "traj.xyz"
    args = ["hpc", "md", *LATTICE, "--potential", str(cu_file), "--steps", "20"]
    args += ["--out", str(out), "--dt-fs", "1000000"]
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *args], capture_output=True,
                       text=True, timeout=120, env=clean_env(WSE_DEVICES="8"))  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert lines[0].startswith("Error: --dt-fs is 1,000,000") and "WSE_LIMIT_MD_DT_FS" in lines[0]
    assert f"limit of {limit('md_dt_fs'):,} fs" in lines[0]
    assert lines[1:] == ["jax imported: False"], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_timestep_under_the_limit_that_blows_up_stops_with_exit_1(cu_file):
    """The mid-run check stays: 900 fs (under md_dt_fs) is far past Verlet's bound for Cu's
    ~7 THz vibrations; a 0 K crystal's rounding grows each step until the temperature passes
    1e5 K, and the run stops with exit 1 and one error line."""
    from wse_core.host.limits import limit

    assert 900 < limit("md_dt_fs")
    args = ["hpc", "md", *LATTICE, "--potential", str(cu_file), "--steps", "5"]
    r = runner.invoke(app, [*args, "--dt-fs", "900"])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 1, r.output
    assert len(errors) == 1 and "the run blew up at step" in errors[0], r.output


@pytest.mark.parametrize("bad", ["box", "potential"])
def test_a_bad_structure_box_or_potential_value_is_refused_before_jax(cu_file, tmp_path, bad):
    """A structure file's 1e300 A box and a setfl value past fp32 are refused from the files
    alone (NumPy), before JAX's import (hunt 57: they waited 2-6 s for JAX, the box until
    the run's own check); one line, exit 2."""
    import subprocess
    import sys

    from wse_cli.testing import clean_env

    xyz = tmp_path / "in.xyz"
    side = "1e300" if bad == "box" else "20"
    xyz.write_text(f'2\nLattice="{side} 0 0 0 {side} 0 0 0 {side}" '
                   "Properties=species:S:1:pos:R:3\nCu 0 0 0\nCu 2 2 2\n")  # fmt: skip
    pot = cu_file
    if bad == "potential":
        lines = cu_file.read_text().splitlines()
        lines[6] = "1e308 " + lines[6].split(None, 1)[1]  # F(rho)'s first value of Cu
        pot = tmp_path / "bad.eam.alloy"
        pot.write_text("\n".join(lines) + "\n")
    args = ["hpc", "md", "--structure", str(xyz), "--potential", str(pot), "--steps", "2"]
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *args], capture_output=True,
                       text=True, timeout=120, env=clean_env(WSE_DEVICES="8"))  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    want = "box sides must be positive" if bad == "box" else "is not a finite number"
    assert want in lines[0] and lines[1:] == ["jax imported: False"], r.stderr
