"""Hunt 77 in `wse hpc cfd` and `wse hpc stencil`, as a CFD engineer found them. Broken before:

- `--restart --steps 0 --dt X` said "wrote DIR/step_<n>.npz": it rewrote the step file it
  had read, recording X though its state was made at another dt, and the next `--restart`
  was refused ("was run with --dt X");
- `--output-every` counted from the restart (steps 20, 30, 50, 60 for 30 + 30 steps at 20),
  and the closing summary named only the last two files of those written;
- `wse hpc stencil --boundary neumann` was offered in the choices and help, every kind
  refused it, and the refusal pointed at `wse hpc cfd`, which has no boundary option.

Oracles: the files on disk (their names, bytes and recorded dt), OpenFOAM's writeInterval /
LAMMPS's `dump N` (the multiples of the absolute step, and the last), the `run_cfd` API's
ranges (`wse_hpc.fields.run_config.RANGES`) against the options as declared.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.commands.hpc_cfd import cfd
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--preset", "tiny"]
PIPED = {"COLUMNS": "80"}


def _lines(output: str, start: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(start)]


def _run(*args) -> str:
    code, output = invoke(ROOT, [*CFD, *args], PIPED)
    assert code == 0, output
    return output


def test_a_restart_of_no_step_writes_nothing_and_says_so(tmp_path):
    out = tmp_path / "rB"
    _run("--steps", "4", "--out", out)
    _run("--steps", "4", "--out", out, "--restart")
    step8 = out / "step_0000008.npz"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    dt = float(np.load(step8)["dt"])
    output = _run("--steps", "0", "--out", out, "--restart", "--dt", f"{dt / 2:.6g}")
    assert _lines(output, "wrote ") == [], output
    assert _lines(output, "no step run") == [
        f"no step run, so nothing written ({step8} is left as it was)"
    ]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert float(np.load(step8)["dt"]) == dt
    output = _run("--steps", "2", "--out", out, "--restart")  # was refused: "was run with --dt"
    assert _lines(output, "restarted from step 8 ")
    assert sorted(p.name for p in out.glob("*.npz"))[-1] == "step_0000010.npz"


def test_output_every_counts_the_absolute_step_and_the_summary_names_every_file(tmp_path):
    out = tmp_path / "rC"
    first = _run("--steps", "6", "--output-every", "4", "--out", out)
    assert _lines(first, "wrote ") == [f"wrote {out / f'step_{n:07d}.{x}'}"
                                       for n in (4, 6) for x in ("npz", "vtk")]  # fmt: skip
    again = _run("--steps", "6", "--output-every", "4", "--out", out, "--restart")
    written = [out / f"step_{n:07d}.{x}" for n in (8, 12) for x in ("npz", "vtk")]
    assert _lines(again, "wrote ") == [f"wrote {p}" for p in written]
    assert sorted(int(p.stem[5:]) for p in out.glob("*.npz")) == [4, 6, 8, 12]
    # more than three steps' files: one line, their count, the first and the last
    more = _run("--steps", "12", "--output-every", "2", "--out", out, "--restart")
    new = sorted(p for p in out.iterdir() if int(p.stem[5:]) > 12)
    assert len(new) == 12  # steps 14 .. 24, an .npz and a .vtk each
    assert _lines(more, "wrote ") == [
        f"wrote 12 files: {new[0]} .. {new[-1]} (an .npz and a .vtk at each of 6 steps)"
    ]


def test_the_cli_ranges_are_the_apis():
    """`run_cfd` refuses what `wse hpc cfd` refuses: the options' declared bounds are the
    API's `RANGES` and `DT_MIN` (two declarations of one range, held equal here: the CLI
    module may not import `wse_hpc.fields`, which imports JAX)."""
    from wse_hpc.fields.run_config import DT_MIN, RANGES

    params = inspect.signature(cfd).parameters
    spec = {name: getattr(params[name].default.callback, NUMBER_MARK) for name in (*RANGES, "dt")}
    assert {name: (spec[name].ge, spec[name].le) for name in RANGES} == RANGES
    assert (spec["dt"].ge, spec["dt"].le) == (DT_MIN, None)


def test_stencil_offers_no_neumann_and_points_a_user_at_the_python_api(tmp_path, monkeypatch):
    code, help_text = invoke(ROOT, ["hpc", "stencil", "--help"], {"COLUMNS": "200"})
    assert code == 0 and "neumann" not in help_text.lower()
    monkeypatch.chdir(tmp_path)
    for kind in ("heat", "bicgstab"):
        args = ["hpc", "stencil", "--kind", kind, "--grid", "8", "8", "8", "--boundary", "neumann"]
        line = refused_in_one_line(ROOT, args, "--boundary")
        assert "wse_hpc.fields" in line and "neumann()" in line, line
        assert "wse hpc cfd" not in line, line
    assert list(tmp_path.iterdir()) == []
