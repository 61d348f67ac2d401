"""The `wse` command's core: help, version, wafer info/defects, experiments, bad input."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()


@pytest.mark.smoke
def test_wafer_info_json_matches_the_spec():
    r = runner.invoke(app, ["wafer", "info", "--preset", "wse3", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["grid"] == [762, 1176] and d["pes"] == 762 * 1176
    assert d["sram_total_bytes"] == 762 * 1176 * 48 * 1024
    assert d["peak_flops"]["fp16"] == pytest.approx(762 * 1176 * 16 * 1.1e9)


def test_wafer_info_from_a_yaml_spec(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("base: wse2\npe_rows: 10\npe_cols: 20\n")
    r = runner.invoke(app, ["wafer", "info", "--spec", str(f), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["pes"] == 200


def test_wafer_info_with_field_overrides():
    r = runner.invoke(
        app,
        ["wafer", "info", "-p", "wse2", "--set", "clock_hz=1e9", "--set", "pe_rows=100", "--json"],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["clock_hz"] == 1e9 and d["grid"] == [100, 996]


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wafer", "info", "--preset", "wse4"], "did you mean 'wse3'"),
        (["wafer", "info", "--set", "pe_rows=0"], "pe_rows must be an integer in [1, 100,000]"),
        (["wafer", "info", "--set", "clockhz=1"], "did you mean 'clock_hz'"),
        (["wafer", "info", "--set", "nonsense"], "FIELD=VALUE"),
        (["wafer", "info", "--spec", "/nonexistent.yaml"], "cannot read spec file"),
        (
            ["wafer", "defects", "--defect-rate", "1.5"],
            "--defect-rate must be a finite number in [0, 1)",
        ),
        (["experiments", "run", "wafer-yeild"], "did you mean 'wafer-yield'"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_defects_repairable_and_png(tmp_path):
    png = tmp_path / "d.png"
    r = runner.invoke(
        app, ["wafer", "defects", "-p", "small", "--seed", "1", "--json", "--png", str(png)]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["repairable"] is True and d["dead_pes"] >= 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_defects_unrepairable_is_exit_1_with_reason():
    r = runner.invoke(
        app, ["wafer", "defects", "-p", "tiny", "--seed", "3", "--defect-rate", "0.3"]
    )
    assert r.exit_code == 1
    assert r.output.startswith("not repairable: physical row")


def test_experiments_list_and_run(tmp_path):
    r = runner.invoke(app, ["experiments", "list"])
    assert r.exit_code == 0 and "wafer-yield" in r.output and "fabric-collectives" in r.output
    r = runner.invoke(app, ["experiments", "run", "wafer-yield", "--quick", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    first = (tmp_path / "wafer-yield" / "results.json").read_text()
    runner.invoke(app, ["experiments", "run", "wafer-yield", "--quick", "--out", str(tmp_path)])
    assert (tmp_path / "wafer-yield" / "results.json").read_text() == first


def _installed_wse() -> str:
    """The `wse` command on PATH (a pip install's console script, or on the GPU lane the
    launcher that tools/gpu_check.py puts in /tmp/site/bin)."""
    wse = shutil.which("wse")
    assert wse, "no `wse` command on PATH: `pip install -e .` (tools/gpu_check.py makes one)"
    return wse


def test_installed_wse_is_fast_and_imports_no_jax():
    env = dict(os.environ)
    wse = _installed_wse()
    t0 = time.perf_counter()
    r = subprocess.run([wse, "--version"], capture_output=True, text=True, env=env, timeout=60)
    wall = time.perf_counter() - t0
    assert r.returncode == 0 and r.stdout.startswith("wse ")
    assert wall < 5  # "well under a second" unloaded; generous for a busy CI machine
    code = "import sys; from wse_cli.app import app; print('jax' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False"
    r = subprocess.run(
        [wse, "wafer", "info", "-p", "nope"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stderr.strip().startswith("Error: unknown wafer preset")


def test_second_run_reuses_the_compile_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_FLAGS"))}
    env.update(WSE_CACHE_DIR=str(tmp_path / "cache"), WSE_DEVICES="2")
    cmd = [_installed_wse(), "wafer", "check", "--grid", "6", "10"]
    assert subprocess.run(cmd, capture_output=True, env=env, timeout=120).returncode == 0
    first = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(first) >= 6  # one entry per compiled fabric program
    assert subprocess.run(cmd, capture_output=True, env=env, timeout=120).returncode == 0
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == first  # all cache hits


def test_experiments_sweep_of_a_key_alone_runs_its_plausible_range(tmp_path):
    """`--sweep KEY` (no values) sweeps the constant's own range (it crashed on len(None))."""
    from wse_core.cost.mechanisms import CONSTANTS

    args = ["experiments", "run", "sc22-stencil25", "--sweep", "hop_latency_cycles"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if line.startswith("| "))
    for v in CONSTANTS["hop_latency_cycles"].sweep:  # one column per value of the range
        assert f"hop_latency_cycles={v:g}" in header, header


def test_the_root_help_comes_from_its_cache_and_equals_the_apps(tmp_path, monkeypatch, capsys):
    """`wse --help` (the console script, `wse_cli.entry`): the first call renders it through
    the app and stores it, the second prints the stored text without typer; a changed CLI
    module is another key (a miss)."""
    from wse_cli import entry

    monkeypatch.setenv("WSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["wse", "--help"])
    with pytest.raises(SystemExit) as done:
        entry.main()
    assert done.value.code in (0, None)
    first = capsys.readouterr().out
    assert first.startswith("Usage: wse [OPTIONS] COMMAND")  # the app's own help (its width)
    for name in ("wafer", "train", "infer", "plan", "hpc", "experiments", "demo", "launch"):
        assert f"  {name} " in first
    (stored,) = (tmp_path / "help").iterdir()
    assert stored == entry.help_cache_path("wse") and stored.read_text() == first
    entry.main()  # a hit: returns, no SystemExit from click
    assert capsys.readouterr().out == first
    module = Path(entry.__file__)
    st = module.stat()
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    try:
        assert entry.help_cache_path("wse") != stored
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
