"""Hostile spec files and `wse hpc` inputs of hunt 62: each refused input exits 2 with one line
naming it and what would be right, and leaves nothing new on disk; each valid one runs. Before
the fixes: a list or mapping in a spec's number field (`defect_rate: [0.1]`) was a 72-line
TypeError traceback, or "lacks the fields :" in a spec without `base:`; a program rectangle of
100,000 x 100,000 PEs was priced; YAML merge keys were "not valid YAML"; `wse hpc swe` under
JAX_ENABLE_X64=1 was a traceback; `tlrmvm compress` of 1e20 entries wrote a rank-1 operator
at error 0.47; XYZ velocities of 1e300 A/ps printed `"ke": Infinity` (invalid JSON), exit 0;
`hpc cfd --restart` continued a Rayleigh-Benard series as a cavity or at another aspect;
`md potential --knots 2` was allowed by the help and refused as "at least 100"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
TINY_YAML = Path(__file__).parents[3] / "packages/trainer/src/wse_trainer/configs/tiny.yaml"


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# -- spec files ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("defect_rate", "[0.1]", "defect_rate must be a number (int or float), got [0.1] (list)"),
     ("fp32_mul_width", "[1]", "fp32_mul_width must be a number (int or float), got [1] (list)"),
     ("swarmx_fanout", "{a: 1}", "swarmx_fanout must be a number (int or float), got {'a': 1}"),
     ("dsd_issue_cycles", "[3]", "dsd_issue_cycles must be a number (int or float), got [3]"),
     ("system_latency_s", "[]", "system_latency_s must be a number (int or float), got []"),
     ("hop_latency_cycles", "{a: 1}", "hop_latency_cycles must be a number (int or float)"),
     ("pe_rows", "[8]", "pe_rows must be an integer, got [8] (list)")],
)  # fmt: skip
@pytest.mark.parametrize(
    "command",
    [["wafer", "info"], ["plan", "train", "--model", "llama3-8b", "--tokens", "1e9"],
     ["train", TINY_YAML, "--validate-only"]],
    ids=["wafer info", "plan train", "train"],
)  # fmt: skip
def test_a_spec_field_that_is_no_number_is_named(tmp_path, field, value, message, command):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"base: wse3\n{field}: {value}\n")
    refused_in_one_line(ROOT, [*command, "--spec", spec], message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_whole_spec_with_a_list_names_the_field_not_missing_ones(tmp_path):
    from wse_core.hw.spec import preset

    spec = tmp_path / "whole.yaml"
    spec.write_text(yaml.safe_dump({**preset("wse3").to_dict(), "defect_rate": [0.1]}))
    line = refused_in_one_line(ROOT, ["wafer", "info", "--spec", spec], "defect_rate must be")
    assert "lacks the fields" not in line


def _operator(path: Path) -> Path:
    from wse_hpc.tlrmvm import compress, save_operator

    a = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    return save_operator(compress(a, nb=16, threshold=1e-3), path)


@pytest.mark.parametrize("field", ["program_rows", "program_cols"])
def test_a_program_rectangle_past_the_grid_is_refused(tmp_path, field):
    side, grid = ("pe_rows", 757) if field == "program_rows" else ("pe_cols", 996)
    message = f"{field} must be at most {side} ({grid}), got 100,000"
    spec = tmp_path / "s.yaml"
    spec.write_text(f"base: wse2\n{field}: 100000\n")
    op = _operator(tmp_path / "op.npz")
    refused_in_one_line(ROOT, ["hpc", "tlrmvm", "run", "--operator", op, "--spec", spec], message)
    refused_in_one_line(ROOT, ["wafer", "info", "-p", "wse2", "--set", f"{field}=100000"],
                        message)  # fmt: skip
    code, output = invoke(ROOT, ["wafer", "info", "-p", "wse2", "--set", f"{field}={grid}"])
    assert code == 0, output  # the whole grid is a program rectangle


def test_yaml_merge_keys_read_as_pyyaml_reads_them(tmp_path):
    text = TINY_YAML.read_text().replace("train_input:\n", "train_input: &inp\n")
    eval_part = text[text.index("eval_input:\n") : text.index("model:\n")]
    merged = text.replace(eval_part, "eval_input:\n  <<: *inp\n  eval_steps: 4\n")
    (tmp_path / "merge.yaml").write_text(merged)
    assert yaml.safe_load(merged)["eval_input"]["eval_steps"] == 4  # the oracle reads it
    code, output = invoke(ROOT, ["train", tmp_path / "merge.yaml", "--validate-only"])
    assert code == 0 and "config is valid" in output, output
    (tmp_path / "twice.yaml").write_text(merged.replace("eval_steps: 4\n", "eval_steps: 4\n"
                                                        "  eval_steps: 5\n"))  # fmt: skip
    refused_in_one_line(ROOT, ["train", tmp_path / "twice.yaml", "--validate-only"],
                        "duplicate key 'eval_steps'")  # fmt: skip


# -- wse hpc -------------------------------------------------------------------------------
def test_swe_runs_under_jax_enable_x64():
    args = ["hpc", "swe", "--n", "8", "--steps", "1", "--preset", "tiny"]
    done = subprocess.run([*WSE, *args], capture_output=True, text=True, timeout=240,
                          env=clean_env(JAX_ENABLE_X64="1"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shallow water 8 x 8, 1 steps: mass drift" in done.stdout


def test_compress_of_entries_whose_fp32_squares_overflow_keeps_its_threshold(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.random((64, 64)) * 1e20  # |a|^2 ~ 1e40: past fp32's 3.4e38
    np.save(tmp_path / "m.npy", a)
    out = tmp_path / "op.npz"
    args = ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "m.npy", "--nb", "16"]
    code, output = invoke(ROOT, [*args, "--threshold-rule", "tile", "--out", out])
    assert code == 0, output
    from wse_hpc.tlrmvm import load_operator

    dense = load_operator(out).dense().astype(np.float64)  # the oracle: float64 NumPy
    assert np.linalg.norm(dense - a) / np.linalg.norm(a) <= 1e-3  # was 0.47


def test_compress_refuses_a_tile_whose_norm_overflows_fp32(tmp_path):
    np.save(tmp_path / "m.npy", np.full((32, 32), 3e38, np.float32))
    args = ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "m.npy", "--nb", "16"]
    refused_in_one_line(ROOT, [*args, "--out", tmp_path / "op.npz"],
                        "tile (0, 0) has norm 4.8e+39, past fp32's largest value")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npy"]


def _moving_crystal(path: Path, vx: float) -> Path:
    from wse_hpc.md import crystal, write_xyz

    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    v = np.random.default_rng(0).standard_normal(s.positions_A.shape) * 0.5  # A/ps: ~19 K
    v[0, 0] = vx
    s = type(s)(s.symbols, s.positions_A, s.box_A, velocities_A_ps=v)
    return write_xyz(path, [s])


@pytest.mark.parametrize(
    ("vx", "steps", "message"),
    [(1e300, "0", "initial temperature of inf K, past 1e+05 K"),  # was exit 0, "ke": Infinity
     # 2 x (MVV2E / 2 x 63.546 amu x vx^2) / (765 dof x kB), plus ~19 K of the other atoms
     (1e30, "5", "initial temperature of 9.991e+58 K"),  # was exit 1, "blew up"
     (3000.0, "0", "velocities give an initial temperature of 8.992e+05 K, past 1e+05 K (where "
      "a run stops as blown up); check their unit (velocities:R:3 and a LAMMPS dump "
      "extxyz's vel:R:3 are read in A/ps")],
)  # fmt: skip
def test_md_refuses_velocities_past_the_blow_up_temperature(tmp_path, cu, vx, steps, message):
    xyz = _moving_crystal(tmp_path / "in.xyz", vx)
    args = ["hpc", "md", "--structure", xyz, "--potential", cu, "--steps", steps, "--json",
            "--preset", "small", "--out", tmp_path / "traj.xyz"]  # fmt: skip
    refused_in_one_line(ROOT, args, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.xyz"]


def test_md_runs_from_ordinary_velocities(tmp_path, cu):
    import json

    xyz = _moving_crystal(tmp_path / "in.xyz", 1.0)
    args = ["hpc", "md", "--structure", xyz, "--potential", cu, "--steps", "0", "--json",
            "--preset", "small"]  # fmt: skip
    code, output = invoke(ROOT, args)
    assert code == 0, output
    from wse_hpc.md import read_xyz
    from wse_hpc.md.thermo import thermo_row

    s = read_xyz(xyz)[-1]
    want = thermo_row(0, np.full(s.num_atoms, 63.546), s.velocities_A_ps, np.zeros(1), 0.0, 1.0)
    got = json.loads(output[output.index("{") :])["thermo"][0]
    assert got["temp"] == pytest.approx(want.temp, rel=1e-4)  # Cu's mass: 63.546 amu


def test_md_fp64_prices_its_words_as_fp64(tmp_path, cu):
    # hunt 62: the prediction was built outside x64, so an fp64 run's fabric words were
    # counted as fp32's (1,196 a step against 2,392 with JAX_ENABLE_X64=1), with three JAX
    # "truncated to float32" warnings
    import json
    import warnings

    xyz = _moving_crystal(tmp_path / "in.xyz", 1.0)
    words = {}
    for precision in ("fp32", "fp64"):
        args = ["hpc", "md", "--structure", xyz, "--potential", cu, "--steps", "0", "--json",
                "--preset", "small", "--precision", precision]  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # JAX's truncation warning
            code, output = invoke(ROOT, args)
        assert code == 0, output
        summary = json.loads(output[output.index("{") :])
        words[precision] = summary["words_per_step"]
    assert words["fp64"] == 2 * words["fp32"] > 0  # 8-byte values: two 32-bit words each


CFD = ["hpc", "cfd", "--preset", "small", "--grid", "16", "8", "1", "--steps", "2"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--case", "cavity"], "is a step of case 'rayleigh-benard'; this run's case is 'cavity' "
      "(restart with --case rayleigh-benard, or give a new --out)"),
     (["--aspect", "3"], "holds a domain of sides [2.0, 1.0, 1.0]; this run's is [3.0, 1.0, "
      "1.0] (restart with the --aspect it was written with")],
    ids=["case", "aspect"],
)  # fmt: skip
def test_cfd_restart_refuses_a_series_of_another_case_or_domain(tmp_path, extra, message):
    run = tmp_path / "o"
    code, output = invoke(ROOT, [*CFD, "--out", run])
    assert code == 0, output
    before = _tree(run)
    refused_in_one_line(ROOT, [*CFD, *extra, "--out", run, "--restart"], message)
    assert _tree(run) == before
    code, output = invoke(ROOT, [*CFD, "--out", run, "--restart"])  # the same case continues
    assert code == 0 and (run / "step_0000004.npz").exists(), output


def test_md_potential_knots_bound_agrees_with_its_help(tmp_path):
    code, output = invoke(ROOT, ["hpc", "md", "potential", "--help"])
    assert "(an integer in [100, 100000])" in " ".join(output.split()), output
    refused_in_one_line(ROOT, ["hpc", "md", "potential", "--elements", "Cu", "--knots", "99",
                               "--out", tmp_path / "p.eam.alloy"],
                        "--knots must be an integer in [100, 100000], got 99")  # fmt: skip
    assert list(tmp_path.iterdir()) == []
