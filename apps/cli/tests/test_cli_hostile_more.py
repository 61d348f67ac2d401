"""Hostile inputs found by stop 55's hunt (the options and files stop 54's left untried):
each exits 2 with one line naming the input and what is allowed, before any work, with
nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    return refused_in_one_line(ROOT, args, message, env)


@pytest.mark.parametrize("value", ["1e308", "2.5", "-0.1", "nan"])
def test_generate_temperature_outside_openai_range_is_refused(value):
    args = ["infer", "generate", "--model-dir", "x", "--prompt", "x", "--temperature", value]
    _refused(args, "--temperature must be a finite number in [0, 2]")  # 1e308 was sampled


@pytest.mark.parametrize(
    ("cmd", "text", "message"),
    [
        (["train", "{f}", "--validate-only"], "model:\n  1: 2\n", "key 1 at line 2 is not a name"),
        (["train", "{f}", "--validate-only"], "? [a, b]\n: 1\n", "key at line 1 is a sequence"),
        (["wafer", "info", "--spec", "{f}"], "base: wse3\n1: 2\n", "key 1 at line 2 is not a name"),
        (["wafer", "info", "--spec", "{f}"], "base: wse3\nclock_hz: 1e9\nclock_hz: 2e9\n",
         "duplicate key 'clock_hz' at line 3"),  # the last one silently won
        (["wafer", "info", "--spec", "{f}"], "base: wse3\nflops_per_cycle: 5\n",
         "flops_per_cycle must be a mapping"),
        (["wafer", "info", "--spec", "{f}"], "base: wse3\nsimd_widths: [1]\n",
         "simd_widths must be a mapping"),
        (["wafer", "info", "--spec", "{f}"], "base: wse3\nflops_per_cycle: {fp32: abc}\n",
         "flops_per_cycle needs positive finite values"),
    ],
)  # fmt: skip
def test_yaml_keys_and_spec_mappings_of_the_wrong_shape(tmp_path, cmd, text, message):
    # hunt 55: each was a TypeError traceback (difflib on an int key, spec_from(**{1: 2}),
    # dict(5), 0 < 'abc'), or a duplicate key silently kept the last value (spec files)
    f = tmp_path / "in.yaml"
    f.write_text(text)
    _refused([a.format(f=f) for a in cmd], message)


@pytest.mark.parametrize("field", ["flops_per_cycle", "simd_widths"])
def test_set_of_a_mapping_field_to_a_number_is_refused(field):
    # hunt 63: "must be a mapping", while the mapping form was "must be a number"
    _refused(["wafer", "info", "--set", f"{field}=5", "--json"],
             f"{field} is a mapping and --set takes one value a field; give the whole mapping in "
             "a --spec FILE")  # fmt: skip


def test_md_structure_whose_properties_do_not_start_with_species(tmp_path):
    # hunt 55: species read from column 0 whatever Properties said, then a numpy broadcast
    # ValueError traceback
    pot = tmp_path / "Cu.eam.alloy"
    code, output = invoke(ROOT, ["hpc", "md", "potential", "--elements", "Cu", "--out", pot])
    assert code == 0, output
    xyz = tmp_path / "in.xyz"
    xyz.write_text(
        '4\nLattice="3.615 0 0 0 3.615 0 0 0 3.615" Properties=pos:R:3:species:S:1\n'
        + "".join(f"{p} Cu\n" for p in ["0 0 0", "1.8 1.8 0", "1.8 0 1.8", "0 1.8 1.8"])
    )
    _refused(["hpc", "md", "--structure", xyz, "--potential", pot], "must start with species:S:1")


def test_outputs_in_folders_that_do_not_exist_yet_are_written(tmp_path):
    # hunt 55: the CLI accepts a path whose folders do not exist (the nearest existing one
    # is writable; "folders between are created by the writer"), but these writers did not
    # create them: a FileNotFoundError traceback after the work
    new = tmp_path / "a" / "b"
    pot = new / "1" / "Cu.eam.alloy"
    runs = [
        ["hpc", "md", "potential", "--elements", "Cu", "--out", pot],
        ["hpc", "tlrmvm", "compress", "--n", "256", "--nb", "64", "--out", new / "2" / "op.npz"],
        ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4",
         "4", "--potential", pot, "--out", new / "3" / "o.xyz"],
        ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
         "--steps", "1", "--png", new / "4" / "s.png"],
    ]  # fmt: skip
    for args in runs:
        code, output = invoke(ROOT, [str(a) for a in args])
        assert code == 0 and "Traceback" not in output, (args, output[-1500:])
        assert Path(args[-1]).is_file(), args


@pytest.mark.parametrize("value", ["1e400", "nan", "abc", "-1"])
def test_a_host_memory_cap_that_is_not_a_byte_count_is_one_error(monkeypatch, value):
    # hunt 55: 1e400 (float inf) was an OverflowError traceback from int(inf)
    from wse_core.errors import WseError
    from wse_core.host.memory import available_bytes

    monkeypatch.setenv("WSE_HOST_MEMORY_BYTES", value)
    with pytest.raises(WseError, match="WSE_HOST_MEMORY_BYTES must be"):
        available_bytes()


@pytest.mark.parametrize(
    ("sweep", "message"),
    [("clock_hz=" + ",".join(["1e9"] * 100_000), "--sweep's number of values is 100,000"),
     ("", "--sweep takes KEY=a,b,c or KEY, got ''"),  # was "--assume takes KEY=VALUE, got '=0'"
     ("=1,2", "--sweep takes KEY=a,b,c or KEY"),
     # hunt 58: an empty value was skipped, and a sweep of fewer values ran with exit 0
     ("clock_hz=1e9,,2e9", "--sweep's value 2 of 3 is empty in 'clock_hz=1e9,,2e9'"),
     ("clock_hz=1e9,2e9,", "commas (did you mean clock_hz=1e9,2e9?)")],
)  # fmt: skip
def test_experiment_sweeps_are_bounded_and_named(sweep, message):
    # hunt 55: 100,000 values ran for more than 15 minutes (each reruns every prediction)
    _refused(["experiments", "run", "wafer-yield", "--quick", "--sweep", sweep], message)


def test_serve_refuses_an_empty_served_model_name():
    # hunt 55: '' was dropped and the engine's own name served, silently
    args = ["infer", "serve", "--model-dir", "mock", "--port", "0", "--served-model-name", ""]
    _refused(args, "--served-model-name must not be empty")
