"""Hunt 65's ignored options in `wse hpc cfd|md|tlrmvm` and `wse wafer defects`, in process.
Broken before:
- `hpc cfd --output-every 2` without --out wrote nothing and said nothing (exit 0);
- `hpc cfd --restart --out DIR` with no step file in DIR started from step 0 without a word,
  and a real restart printed no line saying where it continued from;
- `hpc md --structure FILE` dropped --element / --a / --cells; `--thermostat langevin` (or
  nose-hoover) without --temperature-K ran a bath at 0 K; --damp-fs under `--thermostat
  none` changed nothing;
- `hpc tlrmvm compress --matrix FILE.npy` dropped --n and --freq-hz;
- `wafer defects --png` of a wafer its spares cannot repair wrote the picture, but the JSON
  had no "png" and the text line did not name it;
- piped (rich's 80 columns), the closing summaries of `hpc cfd` and `hpc stencil` broke
  mid-sentence ("compute-bound,\\n8.5 CG iterations per step)").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "4", "--preset", "tiny"]
PIPED = {"COLUMNS": "80"}  # what rich takes when stdout is no terminal


# --- hpc cfd -------------------------------------------------------------------------------
def test_cfd_output_every_without_out_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = refused_in_one_line(ROOT, [*CFD, "--output-every", "2"], "--output-every")
    assert line == "Error: --output-every needs --out (the folder for step_<n>.npz / .vtk)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("made", [False, True], ids=["no folder", "empty folder"])
def test_cfd_restart_from_a_folder_without_step_files_is_refused(tmp_path, made):
    out = tmp_path / "fresh"
    if made:
        out.mkdir()
        (out / "notes.txt").write_text("no step file here")
    line = refused_in_one_line(ROOT, [*CFD, "--restart", "--out", out], "--restart")
    assert line == (
        f"Error: --restart: --out {out} holds no step_<n>.npz to continue from; leave out "
        "--restart to start a run"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["fresh", "notes.txt"] if made else [])


def _lines(output: str, start: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(start)]


def test_cfd_restart_says_where_it_continued_and_summaries_stay_whole(tmp_path):
    out = tmp_path / "run"
    code, first = invoke(ROOT, [*CFD, "--out", out], PIPED)
    assert code == 0 and not _lines(first, "restarted"), first
    code, again = invoke(ROOT, [*CFD, "--out", out, "--restart"], PIPED)
    assert code == 0, again
    assert _lines(again, "restarted") == [f"restarted from step 4 ({out / 'step_0000004.npz'})"]
    assert (out / "step_0000008.npz").exists()
    # the closing summary: one line each, as grep finds them (the oracle: the step file's
    # own counts and the report's figures, by JSON below)
    (predicted,) = _lines(again, "predicted on tiny: ")
    assert predicted.endswith(" CG iterations per step)") and len(predicted) > 80, again
    assert _lines(again, "measured (emulated here): 4 steps in ")
    assert _lines(again, "wrote ") == [f"wrote {out / 'step_0000008.npz'}",
                                        f"wrote {out / 'step_0000008.vtk'}"]  # fmt: skip
    code, output = invoke(ROOT, [*CFD, "--out", out, "--restart", "--json"], PIPED)
    d = json.loads(output[output.index("{") :])  # the line is on stderr, before it
    assert code == 0 and d["steps"] == 4 and d["restarted_from_step"] == 8, output
    assert _lines(output, "restarted from step 8 (")
    assert d["restarted_from"] == str(out / "step_0000008.npz")
    assert int(np.load(out / "step_0000012.npz")["step"]) == 12


def test_stencil_summary_stays_whole_when_piped():
    args = ["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "8", "--steps", "4"]
    code, output = invoke(ROOT, [*args, "--preset", "tiny"], PIPED)
    assert code == 0, output
    (sram,) = _lines(output, "SRAM per PE: ")  # the calibration's settings close it
    assert len(sram) > 80 and "; settings: " in sram, output
    (predicted,) = _lines(output, "predicted on tiny: ")
    assert predicted.endswith(" TFLOP/s"), output


# --- hpc md --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def structure(tmp_path_factory) -> Path:
    from wse_hpc.md import crystal, write_xyz

    path = tmp_path_factory.mktemp("md") / "in.xyz"
    write_xyz(path, [crystal("fcc", "Cu", 3.615, (4, 4, 4))])
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--element", "Ni", "--a", "9.9", "--cells", "9", "9", "9"],
      "--element, --a and --cells build a --lattice crystal; leave them out with --structure"),
     (["--a", "9.9"], "--a builds a --lattice crystal; leave it out with --structure"),
     (["--element", "Ni", "--cells", "9", "9", "9"],
      "--element and --cells build a --lattice crystal; leave them out with --structure")],
    ids=["all three", "--a", "two"],
)  # fmt: skip
def test_md_structure_refuses_the_lattice_options(structure, cu, extra, message):
    args = ["hpc", "md", "--structure", structure, "--potential", cu, *extra]
    assert refused_in_one_line(ROOT, args, message) == f"Error: {message}"


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--thermostat", "langevin"], "--thermostat langevin needs --temperature-K (its target)"),
     (["--thermostat", "nose-hoover", "--damp-fs", "50"],
      "--thermostat nose-hoover needs --temperature-K (its target)"),
     (["--temperature-K", "300", "--thermostat", "none", "--damp-fs", "5"],
      "--damp-fs applies to --thermostat langevin or nose-hoover"),
     (["--damp-fs", "500"], "--damp-fs applies to --thermostat langevin or nose-hoover")],
    ids=["langevin at no target", "nose-hoover at no target", "damp under none", "damp alone"],
)  # fmt: skip
def test_md_thermostat_needs_its_target_and_damp_a_thermostat(tmp_path, structure, cu, extra,
                                                              message):  # fmt: skip
    out = tmp_path / "t.xyz"
    args = ["hpc", "md", "--structure", structure, "--potential", cu, "--steps", "20"]
    line = refused_in_one_line(ROOT, [*args, "--out", out, *extra], message)
    assert line == f"Error: {message}" and not out.exists()


# --- hpc tlrmvm compress -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--n", "4096", "--freq-hz", "999"],
      "--n and --freq-hz shape the synthetic-seismic operator; leave them out with --matrix "
      "FILE.npy"),
     (["--n=1024"], "--n shapes the synthetic-seismic operator; leave it out with --matrix "
      "FILE.npy"),
     (["--freq_hz", "15"], "--freq-hz shapes the synthetic-seismic operator; leave it out "
      "with --matrix FILE.npy")],
    ids=["both", "--n at its default", "--freq_hz spelling"],
)  # fmt: skip
def test_tlrmvm_compress_of_a_file_refuses_the_synthetic_options(tmp_path, extra, message):
    matrix, out = tmp_path / "m.npy", tmp_path / "o.npz"
    np.save(matrix, np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32))
    args = ["hpc", "tlrmvm", "compress", "--matrix", matrix, "--nb", "16", "--out", out]
    assert refused_in_one_line(ROOT, [*args, *extra], message) == f"Error: {message}"
    assert not out.exists()
    code, output = invoke(ROOT, args)  # the same file without them compresses
    assert code == 0 and out.exists(), output


# --- wafer defects -------------------------------------------------------------------------
def _reason() -> str:
    from wse_core import DefectError, defect_map, preset, remap

    spec = preset("tiny")
    with pytest.raises(DefectError) as e:
        remap(spec, defect_map(spec, 0, 0.5))
    return str(e.value)


def test_defects_names_the_picture_when_not_repairable(tmp_path):
    reason, args = _reason(), ["wafer", "defects", "-p", "tiny", "--defect-rate", "0.5"]
    png, png2 = tmp_path / "d.png", tmp_path / "d2.png"
    code, output = invoke(ROOT, [*args, "--json", "--png", png])
    d = json.loads(output)
    assert code == 1 and d["repairable"] is False and d["reason"] == reason, output
    assert d["png"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, output = invoke(ROOT, [*args, "--png", png2], PIPED)
    assert code == 1 and output.splitlines() == [f"{reason}; picture: {png2}"], output
    assert png2.read_bytes()[:4] == b"\x89PNG"
    code, output = invoke(ROOT, args)  # no --png: no picture named
    assert code == 1 and output.splitlines() == [reason], output
