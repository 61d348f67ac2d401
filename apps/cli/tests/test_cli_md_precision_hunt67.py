"""Hunt 67: `wse hpc md --precision fp64` printed "predicted on wse2: 7.622e+04 timesteps/s",
the fp32 program's figure (the PE has no fp64 datapath; the published program is fp32), as
if it were an fp64 wafer figure, with no word of it. Now the printed prediction says whose
figure it is, as the report's `md.precision` does.

Oracle: the printed line, and the fp32 run's figure (the same number, without the note).
"""

from __future__ import annotations

import re

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
NOTE = "as the fp32 program (the PE has no fp64 datapath; fp64 ran on the host emulator only)"


def _predicted_line(cu, precision: str) -> str:
    args = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells",
            "4", "4", "4", "--potential", cu, "--steps", "0", "--preset", "small",
            "--precision", precision]  # fmt: skip
    code, output = invoke(ROOT, args)
    assert code == 0, output
    (line,) = [ln for ln in output.splitlines() if "predicted on small" in ln]
    return line


def test_fp64_prediction_says_it_is_the_fp32_programs(cu):
    single, double = _predicted_line(cu, "fp32"), _predicted_line(cu, "fp64")
    assert f"predicted on small {NOTE}: " in double
    assert "predicted on small: " in single and "fp64" not in single
    rate = r"predicted on small[^:]*: ([0-9.e+]+) timesteps/s"
    assert re.search(rate, double).group(1) == re.search(rate, single).group(1)


def test_a_frame_that_is_not_finite_is_refused():
    # moved out of hpc_md beside the trajectory it keeps clean (hunt 63's check)
    from types import SimpleNamespace

    import numpy as np
    from wse_cli.commands.hpc_md_trajectory import refuse_nonfinite
    from wse_core.errors import RunFault

    forces = np.zeros((3, 3))
    forces[1, 2] = np.nan
    frame = SimpleNamespace(forces_eV_A=forces, energies_eV=np.zeros(3), num_atoms=3)
    with pytest.raises(RunFault) as e:
        refuse_nonfinite(5, frame)
    assert str(e.value) == (
        "step 5: 1 of 3 atoms have forces that are not finite; the frame was not written "
        "(check the potential file's tables)"
    )
    refuse_nonfinite(5, SimpleNamespace(forces_eV_A=np.zeros((3, 3)), energies_eV=None,
                                        num_atoms=3))  # fmt: skip
