"""Hostile `wse hpc`, `wse experiments` and `wse wafer` inputs of hunt 63: each refused input
exits 2 with one line naming it and what would be right, and leaves nothing new on disk; a
run whose starting energies are not finite stops with exit 1 and writes nothing. Before the
fixes: a potential of dr 1e-300 printed `"press": -Infinity` and wrote NaN forces (exit 0),
one of dr 1e-3 (an r table of 1 A, cutoff 5.7 A) ran to PE -0.02 eV; `hpc swe --g 1e-300`
printed NaN drifts; `--damp-fs 1e300` was an OverflowError traceback; `--dt-fs 1e-300` ran
with nothing moving; `hpc cfd --ra 1e-100` printed three lines naming a --dt never given; a
sweep printed `nan%`; a refit past a constant's limit named only the constant; `wafer
defects --defect-rate` silently won over `--set defect_rate`; `--set flops_per_cycle` was
refused both as a number and as a mapping."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import NO_JAX_PROBE, clean_env, invoke, refused_in_one_line, setfl_with_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]
CUTOFF = "5.7157519935018186e+00"  # zhou04 Cu's, on line 5 of the `cu` fixture


def _md(pot: Path, *extra) -> list:
    return ["hpc", "md", *LATTICE, "--potential", pot, *extra]


# -- 1. potential grids fp32 cannot use ------------------------------------------------------
@pytest.mark.parametrize(
    ("grid", "message"),
    [(f"1000 1.001e-01 1000 1e-300 {CUTOFF}", "line 5: dr = 1e-300 is below fp32's smallest "
      "normal number 1.18e-38: the fp32 tables take 1 / dr, which overflows"),
     (f"1000 1e-300 1000 5.72e-03 {CUTOFF}", "line 5: drho = 1e-300 is below fp32's smallest"),
     (f"1000 1.001e-01 1000 1e-3 {CUTOFF}", "line 5: the r table ends at (Nr - 1) * dr = 0.999 "
      "A, short of the cutoff 5.716 A: every pair between would take the table's last value; "
      "give Nr and dr with Nr * dr >= cutoff")],
    ids=["dr", "drho", "short r table"],
)  # fmt: skip
def test_md_refuses_a_potential_grid_fp32_cannot_use(tmp_path, cu, grid, message):
    pot = setfl_with_line(cu, tmp_path, 4, grid)
    refused_in_one_line(ROOT, _md(pot, "--steps", "0", "--json", "--out", tmp_path / "rt.xyz"),
                        message)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == [pot.name]


def test_md_refuses_a_tiny_spacing_before_jax(tmp_path, cu):
    pot = setfl_with_line(cu, tmp_path, 4, f"1000 1.001e-01 1000 1e-300 {CUTOFF}")
    args = [str(a) for a in _md(pot, "--steps", "2")]
    done = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *args], capture_output=True,
                          text=True, timeout=120, env=clean_env())  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "jax imported: False", done.stderr


def test_md_reads_a_table_one_spacing_short_as_published_files_are(tmp_path, cu):
    # Mishin's Cu01, Mendelev's Fe_mm: Nr * dr = cutoff, the table's end one spacing short
    dr = float(CUTOFF) / 1000
    pot = setfl_with_line(cu, tmp_path, 4, f"1000 1.0010010010010011e-01 1000 {dr!r} {CUTOFF}")
    code, output = invoke(ROOT, _md(pot, "--steps", "0", "--json", "--preset", "small"))
    assert code == 0, output
    row = json.loads(output[output.index("{") :])["thermo"][0]
    assert -3.6 < row["pe"] / 256 < -3.4  # Cu's cohesive energy (3.54 eV), the grid barely moved


def _huge_tables(cu: Path, folder: Path) -> Path:
    """`cu` with every table value 3e38: finite, within fp32, and sums past it."""
    lines = cu.read_text().splitlines()
    big = [" ".join(["3e38"] * len(line.split())) for line in lines[6:]]
    path = folder / "big.eam.alloy"
    path.write_text("\n".join([*lines[:6], *big]) + "\n")
    return path


@pytest.mark.parametrize("steps", ["0", "3"])
def test_md_stops_on_starting_energies_that_are_not_finite(tmp_path, cu, steps):
    pot = _huge_tables(cu, tmp_path)
    out = tmp_path / "rt.xyz"
    out.write_text("an earlier trajectory\n")
    code, output = invoke(ROOT, _md(pot, "--steps", steps, "--json", "--out", out))
    lines = output.strip().splitlines()
    assert code == 1 and len(lines) == 1, output  # a RunFault: the input read, the run failed
    assert lines[0].startswith("Error: the starting structure's potential energy nan eV")
    assert "not the time step; nothing was written" in lines[0] and "dt-fs" not in lines[0]
    assert out.read_text() == "an earlier trajectory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.eam.alloy", "rt.xyz"]


# -- 3, 4. MD damping and time step bounds ------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--thermostat", "nose-hoover", "--temperature-K", "300", "--damp-fs", "1e300"],
      "--damp-fs must be a finite number in (0, 10000000000] (fs), got 1e300"),
     (["--thermostat", "langevin", "--temperature-K", "300", "--dt-fs", "1e-300"],
      "--dt-fs must be a finite number >= 0.001 (fs), got 1e-300"),
     (["--dt-fs", "1e-300"], "--dt-fs must be a finite number >= 0.001 (fs), got 1e-300")],
    ids=["damp", "dt langevin", "dt nve"],
)  # fmt: skip
def test_md_bounds_damping_and_time_step_at_parsing(tmp_path, cu, extra, message):
    refused_in_one_line(ROOT, _md(cu, "--steps", "4", *extra, "--out", tmp_path / "t.xyz"),
                        message)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_md_runs_at_the_damping_bound(cu):
    bath = ["--temperature-K", "300", "--thermostat", "nose-hoover", "--damp-fs", "1e10"]
    args = _md(cu, "--steps", "2", "--thermo-every", "1", *bath, "--json", "--preset", "small")
    code, output = invoke(ROOT, args)
    assert code == 0, output
    thermo = json.loads(output[output.index("{") :])["thermo"]
    assert all(math.isfinite(r["temp"]) for r in thermo) and thermo[-1]["step"] == 2


# -- 2. shallow water's gravity -------------------------------------------------------------
@pytest.mark.parametrize("g", ["1e-300", "1e-80", "1e-31"])
def test_swe_refuses_a_gravity_fp32_cannot_resolve(g):
    refused_in_one_line(ROOT, ["hpc", "swe", "--n", "8", "--steps", "2", "--g", g, "--json"],
                        f"--g must be a finite number in [1e-30, 1e+30], got {g}")  # fmt: skip


def test_swe_runs_at_the_gravity_floor():
    code, output = invoke(ROOT, ["hpc", "swe", "--n", "8", "--steps", "2", "--g", "1e-30",
                                 "--json", "--preset", "small"])  # fmt: skip
    assert code == 0, output
    d = json.loads(output[output.index("{") :])
    # hunt 72: the drift is signed (the scheme damps the wave: < 0), no longer its magnitude;
    # as at g 9.81: -1.24e-2
    assert d["mass_drift"] < 1e-5 and -0.1 < d["energy_drift"] < 0


# -- 5. the Rayleigh number's floor ---------------------------------------------------------
@pytest.mark.parametrize("ra", ["1e-100", "1e-40", "0.5"])
def test_cfd_refuses_a_rayleigh_number_below_one_in_one_line(tmp_path, ra):
    args = ["hpc", "cfd", "--ra", ra, "--steps", "2", "--grid", "8", "8", "1", "--preset",
            "small", "--out", tmp_path / "o"]  # fmt: skip
    refused_in_one_line(ROOT, args, f"--ra must be a finite number in [1, 1e+17], got {ra}")
    assert list(tmp_path.iterdir()) == []


def test_cfd_runs_at_the_rayleigh_floor():
    code, output = invoke(ROOT, ["hpc", "cfd", "--ra", "1", "--steps", "2", "--grid", "8", "8",
                                 "1", "--preset", "small", "--json"])  # fmt: skip
    assert code == 0, output
    assert json.loads(output[output.index("{") :])["name"] == "cfd-rayleigh-benard"


# -- 6, 7. sweeps ----------------------------------------------------------------------------
def _zeros(*, quick: bool, seed: int):
    """A stand-in that reads clock_hz and predicts 0 (wafer-yield reads no assumption, so its
    sweep is refused since hunt 76)."""
    from wse_core.cost.reads import read
    from wse_core.studies.experiment import ExperimentResult, PredictionRow

    read("clock_hz", 1e9)
    return ExperimentResult("wafer-yield", seed, {}, [], [PredictionRow("z", 0.0, "", {})])


def test_a_sweep_prints_no_nan_for_predictions_of_zero(tmp_path, monkeypatch):
    from wse_cli.commands import experiments

    monkeypatch.setattr(experiments, "load", lambda name: _zeros)
    code, output = invoke(ROOT, ["experiments", "run", "wafer-yield", "--sweep", "clock_hz",
                                 "--out", tmp_path / "o"])  # fmt: skip
    assert code == 0, output
    table = (tmp_path / "o" / "wafer-yield" / "sweep_clock_hz.md").read_text()
    zeros = [r for r in table.splitlines() if r.startswith("| ") and "| 0 | 0 | 0 |" in r]
    assert zeros and all(r.endswith("| 0.0% |") for r in zeros)  # 0 at every setting: no move
    assert "nan%" not in table and "nan%" not in output


def test_a_swept_value_that_breaks_the_refit_is_named(tmp_path):
    # hunt 66: the calibration's WSE-2 clock is `calibration.clock_hz` (`clock_hz`, the
    # priced wafers', refits nothing)
    args = ["experiments", "run", "tco-training", "--sweep", "calibration.clock_hz=1e6,1e11",
            "--out", tmp_path / "o"]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "calibration.clock_hz=1e+11 takes the refit of ")
    assert "past its limit [0, " in line and "nearer its plausible 8.5e+08, 1e+09" in line
    assert list(tmp_path.iterdir()) == []


# -- 8. wafer defects and --set -------------------------------------------------------------
def test_defects_refuses_two_defect_rates():
    refused_in_one_line(ROOT, ["wafer", "defects", "--defect-rate", "0.5", "--set",
                               "defect_rate=0.1"],
                        "--defect-rate 0.5 and --set defect_rate=0.1 both give the dead-PE "
                        "rate; give one of them")  # fmt: skip


@pytest.mark.parametrize("value", ["5", "{fp32: 2}"])
def test_set_of_a_mapping_field_says_to_use_a_spec_file(tmp_path, value):
    message = ("--set flops_per_cycle: flops_per_cycle is a mapping and --set takes one value "
               "a field; give the whole mapping in a --spec FILE ('base: wse3' and "
               "'flops_per_cycle: {fp16: 16, bf16: 16, fp32: 2}')")  # fmt: skip
    refused_in_one_line(ROOT, ["wafer", "defects", "--set", f"flops_per_cycle={value}"], message)
    spec = tmp_path / "s.yaml"  # the advice, followed
    spec.write_text("base: wse3\nflops_per_cycle: {fp16: 16, bf16: 16, fp32: 4}\n")
    code, output = invoke(ROOT, ["wafer", "info", "--spec", spec, "--json"])
    assert code == 0, output
    assert json.loads(output)["peak_flops"]["fp32"] == pytest.approx(
        2 * json.loads(invoke(ROOT, ["wafer", "info", "--json"])[1])["peak_flops"]["fp32"]
    )
