"""Hunt 75's `wse hpc` CLI holes.

- `wse hpc cfd --restart` with another --re / --ra / --pr / --time-scheme continued the run
  silently: now exit 2 and one line naming the setting, the step file's value and this
  run's (as another --case or --aspect already was); a --dt given that differs from the
  step file's is said on the "restarted from" line. Oracle: the values given.
- `wse hpc stencil --kind bicgstab --dtype fp16` ran the mixed scheme labelled fp16: now
  refused as `--kind jacobi --dtype mixed` is (exit 2, one line).
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
CAVITY = ["hpc", "cfd", "--case", "cavity", "--grid", "8", "8", "1", "--preset", "small",
          "--steps", "2"]  # fmt: skip


def test_cfd_restart_with_another_re_is_refused_in_one_line(tmp_path):
    out = tmp_path / "o"
    code, output = invoke(ROOT, [*CAVITY, "--out", out, "--json"])
    assert code == 0, output
    step = out / "step_0000002.npz"
    refused_in_one_line(ROOT, [*CAVITY, "--out", out, "--restart", "--re", "400"],
                        f"--restart: {step} was run with --re 100; this run's is 400 (restart "
                        "with --re 100, or give a new --out)")  # fmt: skip
    code, output = invoke(ROOT, [*CAVITY, "--out", out, "--restart", "--dt", "0.001"])
    assert code == 0, output
    default = json.loads(invoke(ROOT, [*CAVITY, "--json"])[1])["dt"]
    assert f"restarted from step 2 ({step}); dt {default:.6g} there, 0.001 now" in output


def test_stencil_bicgstab_fp16_is_refused_as_jacobi_mixed_is():
    base = ["hpc", "stencil", "--preset", "small", "--grid", "8", "8", "8"]
    fp16 = "--dtype fp16 is for jacobi/heat; bicgstab takes fp32 or mixed"
    refused_in_one_line(ROOT, [*base, "--kind", "bicgstab", "--dtype", "fp16"], fp16)
    mixed = "--dtype 'mixed' does not apply to jacobi"
    refused_in_one_line(ROOT, [*base, "--kind", "jacobi", "--dtype", "mixed"], mixed)


def test_swe_json_records_g_and_cfl_and_the_step_they_set():
    """`wse hpc swe --json` names its gravity and CFL (hunt 75: a report without them could
    not be rerun); oracle: the gravity-wave limit dt = cfl / n / sqrt(g (1 + amplitude))."""
    code, output = invoke(ROOT, ["hpc", "swe", "--n", "16", "--steps", "2", "--g", "2.5",
                                 "--cfl", "0.3", "--json"])  # fmt: skip
    assert code == 0, output
    d = json.loads(output)
    assert (d["g"], d["cfl"]) == (2.5, 0.3)
    assert d["dt"] == pytest.approx(0.3 / 16 / (2.5 * (1 + 0.1)) ** 0.5, rel=1e-12)  # hump 0.1
